#!/usr/bin/env python3
"""Renders a driftgate report.html in headless Chromium and checks what a person would see.

    render_report.py REPORT.html SCREENSHOT.png

Checks: the screenshot is not blank (a share of non-white pixels and many distinct colours), the
rendered DOM holds the report's sections and its plots (a drift plot with one line per series, a
forest plot with one interval per timed case), and Chromium reported no page error. Prints one
line per finding; exit 0 when every check holds, 1 when one fails, 77 when Chromium or Pillow is
missing (the caller skips).
"""
import os
import re
import shutil
import subprocess
import sys


def main():
    html, png = sys.argv[1], sys.argv[2]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from PIL import Image
    except ImportError:
        print("skip: Pillow (python3-pil) is not installed")
        return 77
    if not chromium:
        print("skip: chromium is not installed (scripts/setup.sh installs it)")
        return 77
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,2400"]
    url = "file://" + os.path.abspath(html)
    shot = subprocess.run([chromium, *flags, "--screenshot=" + png, url], capture_output=True, text=True, timeout=120)
    if shot.returncode != 0 or not os.path.exists(png):
        print("fail: chromium wrote no screenshot: " + shot.stderr[-800:])
        return 1
    dom = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    failures = []
    img = Image.open(png).convert("RGB")
    w, h = img.size
    small = img.resize((w // 4, h // 4))
    pixels = list(small.getdata())
    ink = sum(1 for p in pixels if min(p) < 235) / len(pixels)
    colours = len(set(pixels))
    print(f"screenshot {w}x{h}: {100 * ink:.1f}% of pixels not white, {colours} colours")
    if ink < 0.03:
        failures.append(f"the screenshot is nearly blank ({100 * ink:.2f}% ink)")
    if colours < 20:
        failures.append(f"the screenshot has {colours} colours: no plot rendered")
    for section in ("summary", "speed", "drift", "precision", "provenance"):
        if f'id="{section}"' not in dom:
            failures.append(f"no section {section} in the rendered page")
    lines = len(re.findall(r'<svg[^>]*class="plot line"', dom))
    forests = len(re.findall(r'<svg[^>]*class="plot forest"', dom))
    series = len(re.findall(r'<polyline class="series"', dom))
    intervals = len(re.findall(r'class="interval"', dom))
    print(f"rendered: {lines} drift plots ({series} series), {forests} forest plots ({intervals} intervals)")
    if lines < 1 or series < 2:
        failures.append("no drift plot with base and patch")
    if forests < 1 or intervals < 1:
        failures.append("no forest plot with an interval")
    for f in failures:
        print("fail: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

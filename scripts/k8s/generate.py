#!/usr/bin/env python3
"""Writes the Kubernetes manifests of a sharded driftgate sweep (README "Sweeps on Kubernetes").

    scripts/k8s/generate.py --name rel-1-4 --image registry.example/driftgate:1.4 --claim driftgate-results \\
        --shards 8 --out-dir k8s-out gate --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --suite kda-gate

writes k8s-out/sweep.yaml (an Indexed Job: completions = parallelism = 8, one index per shard,
DRIFTGATE_SHARD_COUNT=8, results on the claim under /results/rel-1-4/shard<i>) and
k8s-out/merge.yaml (the Job that merges them into /results/rel-1-4/merged/verdict.json), filled
in from sweep-job.yaml.in and merge-job.yaml.in beside this file. Everything after the options is
the driftgate command of every shard: gate, verify or bench with its arguments (no --out, --json
or --shard: the manifests set those). Bad values exit 2 with a message naming them.
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
CPU = re.compile(r"[0-9]+(\.[0-9]+)?m?")
MEMORY = re.compile(r"[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?")
SHARDABLE = ("gate", "verify", "bench")
SET_BY_MANIFEST = ("--out", "--json", "--shard")


class BadValue(Exception):
    pass


def check(ok, message):
    if not ok:
        raise BadValue(message)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--name", required=True, help="the run's name: the Jobs are NAME-sweep and NAME-merge (a DNS label, at most 57 characters)")
    p.add_argument("--image", required=True, help="the container image holding driftgate and /bin/sh")
    p.add_argument("--claim", required=True, help="the PersistentVolumeClaim (ReadWriteMany) that receives the results")
    p.add_argument("--shards", type=int, required=True, help="how many shards (the Job's completions)")
    p.add_argument("--parallelism", type=int, help="pods at once (default: --shards)")
    p.add_argument("--cpus", default="1", help="CPUs each shard's pod requests (pass driftgate --threads to use them; default 1)")
    p.add_argument("--memory", default="4Gi", help="memory each shard's pod requests and is limited to (default 4Gi)")
    p.add_argument("--mount", default="/results", help="where the claim is mounted (default /results); results go to MOUNT/NAME")
    p.add_argument("--driftgate", default="driftgate", help="the driftgate executable in the image (default: driftgate on PATH)")
    p.add_argument("--backoff-limit", type=int, default=3, help="retries of crashed or evicted shard pods, all shards together (default 3)")
    p.add_argument("--out-dir", required=True, help="where sweep.yaml and merge.yaml are written")
    p.add_argument("command", nargs=argparse.REMAINDER, help="gate|verify|bench ARGS...")
    return p.parse_args(argv)


def fields(a):
    """The template fields, each checked and quoted for YAML (JSON strings are YAML scalars)."""
    check(DNS_LABEL.fullmatch(a.name) and len(a.name) <= 57, f"--name '{a.name}': a DNS label (a-z, 0-9, '-') of at most 57 characters")
    check(DNS_SUBDOMAIN.fullmatch(a.claim) and len(a.claim) <= 253, f"--claim '{a.claim}': not a Kubernetes object name")
    check(a.image.strip() == a.image and a.image, f"--image '{a.image}': empty or with spaces")
    check(1 <= a.shards <= 100000, f"--shards {a.shards}: must be 1 to 100000")
    parallelism = a.shards if a.parallelism is None else a.parallelism
    check(1 <= parallelism <= a.shards, f"--parallelism {parallelism}: must be 1 to --shards ({a.shards})")
    check(CPU.fullmatch(a.cpus), f"--cpus '{a.cpus}': not a CPU quantity (4, 0.5, 500m)")
    check(MEMORY.fullmatch(a.memory), f"--memory '{a.memory}': not a memory quantity (4Gi, 512Mi)")
    check(a.mount.startswith("/") and ":" not in a.mount, f"--mount '{a.mount}': an absolute path")
    check(a.backoff_limit >= 0, f"--backoff-limit {a.backoff_limit}: must be >= 0")
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    check(cmd and cmd[0] in SHARDABLE, f"the driftgate command must be gate, verify or bench, not {' '.join(cmd) or 'nothing'}")
    for arg in cmd:
        check(arg.split("=")[0] not in SET_BY_MANIFEST, f"'{arg}': the manifests set --out, --json and --shard themselves")
    q = json.dumps
    return {"name": a.name, "image": q(a.image), "claim": a.claim, "shards": str(a.shards), "parallelism": str(parallelism),
            "backoff_limit": str(a.backoff_limit), "cpus": a.cpus, "memory": a.memory, "mount": q(a.mount),
            "results": q(a.mount.rstrip("/") + "/" + a.name), "driftgate": q(a.driftgate),
            "args": q([a.driftgate] + cmd)}


def fill(template, values):
    with open(os.path.join(HERE, template)) as f:
        text = f.read()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    left = re.findall(r"\{\{[a-z_]+\}\}", text)
    if left:
        raise RuntimeError(f"{template}: fields not filled: {left}")
    return text


def main(argv):
    a = parse(argv)
    try:
        values = fields(a)
    except BadValue as e:
        print(f"generate.py: {e}", file=sys.stderr)
        return 2
    os.makedirs(a.out_dir, exist_ok=True)
    for template, out in (("sweep-job.yaml.in", "sweep.yaml"), ("merge-job.yaml.in", "merge.yaml")):
        path = os.path.join(a.out_dir, out)
        with open(path + ".tmp", "w") as f:
            f.write(fill(template, values))
        os.replace(path + ".tmp", path)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env bash
# Installs every build and test dependency of driftgate from Debian packages.
# Idempotent: packages already present are skipped, so a second run is a no-op.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libeigen3-dev libmpfr-dev libgmp-dev libboost-dev libboost-context-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libtomlplusplus-dev
  python3 python3-numpy python3-jsonschema python3-pil python3-scipy chromium libbenchmark-tools
  libssl-dev libxml2-utils
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"

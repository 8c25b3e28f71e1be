#!/usr/bin/env bash
# Set up (if needed) and run the whole pipeline on the embedded synthetic default.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source .venv/bin/activate
vrsflow check  # params first: one line naming a wrong key, before DVC deletes any output
# `vrsflow repro` is `dvc repro` with one Prefect API for all stages (PREFECT_API_URL when set, else one
# local server started for the run); arguments go to dvc repro (e.g. ./scripts/run.sh -f sft)
exec vrsflow repro -- "$@"

#!/usr/bin/env bash
# Set up (if needed) and run the whole pipeline on the embedded synthetic default.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source .venv/bin/activate
vrsflow check  # params first: one line naming a wrong key, before DVC deletes any output
dvc repro "$@"

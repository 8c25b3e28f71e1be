#!/usr/bin/env bash
# Set up (if needed) and run the default test suite (slow and gpu tests excluded; see pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
ruff check .
# -rs lists every skip with its reason; a skip whose named dependency is installed fails instead
# (tests/skip_guard.py: no silent skips); --durations names the slowest tests, so that a run near its budget (8
# minutes on 2 cores) says where its time went. Tests run in VRSFLOW_TEST_WORKERS processes (default 2, one per
# core; 0 = in this process), whole files per worker (--dist loadfile): a module's fixtures are built once, in one
# worker.
workers=${VRSFLOW_TEST_WORKERS:-2}
# one OpenMP thread per test process when the workers already fill the cores: torch's default of one thread per core
# would put two workers' threads on each core (a test or a stage that sets its own thread count still does)
if [ "$workers" -ge 2 ]; then export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}; fi
python -m pytest -n "$workers" --dist loadfile -rs --durations=15 "$@"

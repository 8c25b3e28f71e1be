"""Prefect 3 flows: one per DVC stage (`dvc-<stage>`), the pipeline flow for UI runs, serve/deploy.

Flows only compose stage functions and publish their reports; they hold no data logic.
"""

import os

# Stage code logs through stdlib `logging` under the "stages" logger; let Prefect capture it so a
# stage's logs show in the UI. Must be set before prefect is imported.
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "stages")
# The temporary local API a stage starts without PREFECT_API_URL would try to send telemetry, which
# fails (and logs an error) on machines without internet; users can still opt in explicitly.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

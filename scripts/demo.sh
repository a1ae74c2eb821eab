#!/usr/bin/env bash
# Install the plugin into ./.venv, write fresh demo logs and start TensorBoard on them
# (loopback only). Open the printed URL and pick the "Footprint" tab.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check .
.venv/bin/tb-footprint demo demo_logs/generated --overwrite
PORT="${PORT:-6006}"
echo "Footprint: open http://127.0.0.1:${PORT}/#footprint"
exec .venv/bin/tensorboard --logdir demo_logs/generated --host 127.0.0.1 --port "$PORT"

#!/usr/bin/env bash
# The main job: set up (idempotent), then quantize realistic weight shapes and print the table (python -m bnb demo).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
exec .venv/bin/python -m bnb demo "$@"

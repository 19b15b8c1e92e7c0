#!/usr/bin/env bash
# The main job: run the embedded demo in its own virtual environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
EXTRAS="" APT_PACKAGES="" bash scripts/bootstrap.sh
exec .venv/bin/sandbox demo "$@"

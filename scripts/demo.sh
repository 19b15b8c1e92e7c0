#!/usr/bin/env bash
# The main job: run the embedded demo in its own virtual environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
EXTRAS="" APT_PACKAGES="" bash scripts/bootstrap.sh
.venv/bin/sandbox demo "$@"
echo
echo "== the sandbox command is .venv/bin/sandbox; to type just 'sandbox', run: . .venv/bin/activate"

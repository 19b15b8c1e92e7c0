#!/usr/bin/env bash
# Create .venv and install the project into it, plus any Debian packages named in
# $APT_PACKAGES that are missing. Sourced by demo.sh and test.sh; safe to re-run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
EXTRAS=${EXTRAS:-}
APT_PACKAGES=${APT_PACKAGES:-}

missing=()
for pkg in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing Debian packages: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "sandbox needs Python 3.11 or newer; $PYTHON is $("$PYTHON" --version 2>&1 || echo missing)." >&2
    echo "Install one (e.g. apt-get install python3.11, or pyenv install 3.12) and run again with PYTHON=python3.11." >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
echo "== installing sandbox${EXTRAS:+[$EXTRAS]} into .venv"
log=.venv/pip-install.log
if ! { .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip &&
       .venv/bin/python -m pip install -q --disable-pip-version-check -e ".${EXTRAS:+[$EXTRAS]}"; } \
       >"$log" 2>&1; then
    grep -v '^WARNING: Location' "$log" >&2
    echo "pip could not install sandbox${EXTRAS:+[$EXTRAS]} (full log: $log)" >&2
    exit 1
fi
.venv/bin/python -c "import sandbox" || { echo "sandbox does not import; see $log" >&2; exit 1; }

#!/usr/bin/env bash
# The whole test suite, in its own virtual environment, with every system package the
# tests use: strace (policy oracle), chromium (approval page), tmux (terminal prompts),
# tree, ripgrep and file (the shipped readonly policy is proven by running every program it
# allows, and every spec is checked against its program), gawk (the awk analyzer is fuzzed
# under mawk, Debian's awk, and gawk), postgresql (the PostgreSQL store is tested against a
# throwaway cluster of the real server).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
EXTRAS="dev,web,adk,mcp,postgres,pydantic-ai,openai-agents,langgraph" APT_PACKAGES="strace chromium tmux tree ripgrep file gawk postgresql" bash scripts/bootstrap.sh
set +e
.venv/bin/python -m pytest -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: treating as a failure" >&2
    exit 1
fi
exit "$status"

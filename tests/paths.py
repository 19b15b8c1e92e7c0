"""Where the tests find the repository and their own data, wherever a test file sits."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"

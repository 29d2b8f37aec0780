"""Where things are, for tests in any folder under tests/: the repository's root and the tests' data."""

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
TEST_DATA = REPOSITORY / "tests" / "data"

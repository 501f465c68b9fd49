"""Where the repository's files are, for a test at any depth of tests/ (they mirror the package's folders)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

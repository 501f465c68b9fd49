"""Where the repository's shipped files live (scenarios, prompts, recordings, model configs, pages)."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO / "assets"

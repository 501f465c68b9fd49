"""The package list pyproject.toml cannot say: the shipped files (scenarios, prompts, recordings, the live
views' code) go in as inflight.assets, so the engine finds them from an install too (engine/paths.py)."""
from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["engine*", "inflight*"]), "inflight.assets"],
      package_dir={"inflight.assets": "assets"})

"""Inflight as an installed project: the `inflight` command (inflight/cli.py) over the engine's tools."""

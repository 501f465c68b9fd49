"""Narration computed from the engine's events: plain sentences about notable iterations, per lane and
comparing lanes, at a readable pace. Pure Python over the hub's items (no Streamlit, no threads)."""
from .narrator import Narrator, Sentence

__all__ = ["Narrator", "Sentence"]

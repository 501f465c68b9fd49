"""Remote lanes: an OpenAI-compatible server elsewhere, served as a lane (its config, the worker that
streams from it, its own /metrics, the request body it gets)."""

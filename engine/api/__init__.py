"""The network face of the service: websocket protocol and OpenAI-compatible routes."""

"""A hostile OpenAI-compatible server: what a remote lane must survive (the tests and the soak use it).

Each way of misbehaving is a mode, served under /<mode>/v1/completions (and chat) and /<mode>/metrics,
and counts the bytes it sent, so a test can tell how much the client let through before it hung up:

  endless      a stream of one-token chunks that never finishes; /metrics: a body that never ends
  flood        one 30 MB chunk as the answer; /metrics: a line with a 20 MB label value
  no-newline   bytes without a newline, forever (both)
  error-flood  HTTP 500 with an error body that never ends (both)
  drip         one byte every DRIP_S, forever (both)
  bad-gauges   a polite answer; /metrics: NaN, +Inf, -5 and 1e308 gauges, a KV usage of 12345
  mixed        each request and each /metrics poll the next of the modes above, in turn (the soak's lane)

    python -m engine.harness.hostile_remote --port 8001     # then a lane {"remote": "http://127.0.0.1:8001/endless/v1", ...}
"""
from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter

from starlette.applications import Starlette
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

MODES = ("endless", "flood", "no-newline", "error-flood", "drip", "bad-gauges")
MIXED = "mixed"
LANE = "hostile"  # the soak's remote lane on the mixed mode (soak_server --hostile-lane)
DRIP_S = 0.2
_MB = 1 << 20
_PIECE = 64 << 10  # bytes a streaming mode sends at a time


def _event(text: str, finish: str | None = None) -> bytes:
    chunk = {"choices": [{"index": 0, "text": text, "delta": {"content": text}, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class HostileRemote:
    """The app (Starlette) and what each mode sent."""

    def __init__(self):
        self.sent: Counter[str] = Counter()  # mode -> bytes handed to the server to send
        self.hits: Counter[str] = Counter()  # (mode, route) -> requests
        routes = [Route(f"/{{mode:str}}/v1/{p}", self._complete, methods=["POST"])
                  for p in ("completions", "chat/completions")]
        self.app = Starlette(routes=routes + [Route("/{mode:str}/metrics", self._metrics)])

    def _mode(self, request, route: str) -> str:
        """The request's mode (mixed: the next one in turn), counted."""
        mode = request.path_params["mode"]
        self.hits[mode, route] += 1
        return MODES[self.hits[mode, route] % len(MODES)] if mode == MIXED else mode

    async def _complete(self, request):
        mode = self._mode(request, "v1")
        if mode == "bad-gauges":
            return self._stream(mode, [_event("fine"), _event("", "stop"), b"data: [DONE]\n\n"])
        if mode == "error-flood":
            return self._stream(mode, self._forever(b'{"error": {"message": "' + b"x" * _PIECE), status=500)
        return self._stream(mode, {"endless": self._forever(_event("tok")),
                                   "flood": [_event("y" * 30 * _MB)],
                                   "no-newline": self._forever(b"z" * _PIECE),
                                   "drip": self._forever(b"d")}[mode])

    async def _metrics(self, request):
        mode = self._mode(request, "metrics")
        if mode == "bad-gauges":
            return Response("vllm:num_requests_running NaN\nvllm:num_requests_waiting -5\n"
                            "vllm:kv_cache_usage_perc 12345\nsglang:num_running_reqs +Inf\n"
                            "sglang:num_queue_reqs 1e308\n", media_type="text/plain")
        if mode == "flood":
            return self._stream(mode, [b'vllm:num_requests_running{model_name="' + b"m" * 20 * _MB + b'"} 1\n'])
        line = b'vllm:num_requests_running{model_name="m"} 1\n'
        return self._stream(mode, {"endless": self._forever(line * (_PIECE // len(line))),
                                   "no-newline": self._forever(b"z" * _PIECE),
                                   "error-flood": self._forever(b"x" * _PIECE),
                                   "drip": self._forever(b"d")}[mode], status=500 if mode == "error-flood" else 200)

    def _stream(self, mode: str, pieces, status: int = 200) -> StreamingResponse:
        every_s = DRIP_S if mode == "drip" else 0.0

        async def counted():
            for piece in pieces:
                self.sent[mode] += len(piece)
                yield piece
                await asyncio.sleep(every_s)
        return StreamingResponse(counted(), status_code=status, media_type="text/event-stream")

    @staticmethod
    def _forever(piece: bytes):
        while True:
            yield piece


def main(argv=None) -> None:
    import uvicorn
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=8001)
    args = ap.parse_args(argv)
    uvicorn.run(HostileRemote().app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

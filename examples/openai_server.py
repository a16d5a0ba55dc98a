"""A small OpenAI-compatible chat completions server that replays a scripted generation.

No model: the "generation" is a fixed text, cut into token-sized chunks and run through an rtcompile
parser and `OpenAIStream`, exactly as a real server would run a model's output. It shows the whole
path a server author needs (parser per request, deltas, server-sent events, the non-streaming
response) and lets any OpenAI client be pointed at it:

    python examples/openai_server.py --template qwen3 --port 8000
    python examples/openai_server.py --script my_turn.json     # {"template", "prefix", "generation"}

    from openai import OpenAI
    client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
    for chunk in client.chat.completions.create(model="replay", messages=[...], stream=True):
        print(chunk.choices[0].delta)

Endpoints: `POST /v1/chat/completions` (`stream`, `tools`, `max_tokens` / `max_completion_tokens`:
the replay stops after that many chunks with finish_reason "length"), `GET /v1/models`.
Standard library only (plus rtcompile). Binds to 127.0.0.1 by default.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import rtcompile
from rtcompile.api import read_template
from rtcompile.integrations.openai_stream import OpenAIStream, accumulate_deltas, completion_chunk

DEFAULT_PREFIX = (
    "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"
)
DEFAULT_GENERATION = (
    "The user asks about the weather in Paris; I should call the tool.\n</think>\n\n"
    "Let me check the weather for you.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", '
    '"days": 3, "options": {"hourly": true, "fields": ["temp", "wind"]}}}\n</tool_call><|im_end|>'
)


@dataclass
class Script:
    """What the fake model "generates": `generation` after the prompt `prefix`, in chunks."""

    template: Any  # a template dict or the name of a bundled template
    prefix: str
    generation: str
    chunk_size: int = 4
    model: str = "rtcompile-replay"

    def chunks(self) -> list[str]:
        text, size = self.generation, max(1, self.chunk_size)
        return [text[i : i + size] for i in range(0, len(text), size)]


def _template_dict(template: Any) -> dict:
    if isinstance(template, dict):
        return template
    from rtcompile.library import template_for

    return template_for(template)


class ChatHandler(BaseHTTPRequestHandler):
    server: "ReplayServer"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        if self.server.verbose:
            super().log_message(format, *args)

    def _send_json(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send_json(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") == "/v1/models":
            model = self.server.script.model
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [{"id": model, "object": "model", "owned_by": "rtcompile"}],
                },
            )
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, f"no route {self.path}")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(request, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as e:
            self._error(400, f"bad request body: {e}")
            return
        self.server.requests.append(request)
        script = self.server.script
        chunks = script.chunks()
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        cut_off = isinstance(limit, int) and 0 <= limit < len(chunks)
        if cut_off:
            chunks = chunks[:limit]
        template = self.server.template
        # One parser per request; errors="keep" so a broken tool call cannot end the stream.
        parser = rtcompile.ResponseParser(
            template, script.prefix, tools=request.get("tools"), errors="keep"
        )
        stream = OpenAIStream(parser, template)
        completion_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())
        if request.get("stream"):
            self._stream(stream, chunks, cut_off, completion_id, created, script.model)
        else:
            deltas = list(stream.initial_deltas)
            for chunk in chunks:
                deltas += stream.feed(chunk)
            deltas += stream.finish(length=cut_off)
            message = accumulate_deltas(deltas)
            message.setdefault("content", None)
            self._send_json(
                200,
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": script.model,
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "logprobs": None,
                            "finish_reason": stream.finish_reason,
                        }
                    ],
                    "usage": {
                        "prompt_tokens": 0,
                        "completion_tokens": len(chunks),
                        "total_tokens": len(chunks),
                    },
                },
            )

    def _stream(
        self,
        stream: OpenAIStream,
        chunks: list[str],
        cut_off: bool,
        completion_id: str,
        created: int,
        model: str,
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

        def send(delta: dict, finish_reason: str | None = None) -> None:
            chunk = completion_chunk(
                delta,
                completion_id=completion_id,
                model=model,
                created=created,
                finish_reason=finish_reason,
            )
            self.wfile.write(b"data: " + json.dumps(chunk).encode("utf-8") + b"\n\n")

        for delta in stream.initial_deltas:
            send(delta)
        for text in chunks:
            for delta in stream.feed(text):
                send(delta)
            self.wfile.flush()
        for delta in stream.finish(length=cut_off):
            send(delta)
        send({}, stream.finish_reason)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class ReplayServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, script: Script, host: str = "127.0.0.1", port: int = 0, verbose: bool = False
    ):
        super().__init__((host, port), ChatHandler)
        self.script = script
        self.template = _template_dict(script.template)
        self.verbose = verbose
        self.requests: list[dict] = []  # what clients sent, for inspection

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> threading.Thread:
        """Serve in a background thread (stop with `shutdown()` then `server_close()`)."""
        thread = threading.Thread(target=self.serve_forever, name="openai-replay", daemon=True)
        thread.start()
        return thread


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument(
        "--template", default="qwen3", help="a bundled template's name or a template JSON file"
    )
    options.add_argument(
        "--script", help='JSON file: {"template", "prefix", "generation", "chunk_size"}'
    )
    options.add_argument("--host", default="127.0.0.1")
    options.add_argument("--port", type=int, default=8000)
    options.add_argument("--chunk-size", type=int, default=4)
    args = options.parse_args()
    if args.script:
        with open(args.script, encoding="utf-8") as f:
            data = json.load(f)
        script = Script(
            template=data.get("template", args.template),
            prefix=data.get("prefix", ""),
            generation=data["generation"],
            chunk_size=data.get("chunk_size", args.chunk_size),
        )
    else:
        template = (
            read_template(args.template) if args.template.endswith(".json") else args.template
        )
        script = Script(template, DEFAULT_PREFIX, DEFAULT_GENERATION, args.chunk_size)
    server = ReplayServer(script, args.host, args.port, verbose=True)
    print(f"replaying on {server.base_url} (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()

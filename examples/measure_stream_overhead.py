"""Per-chunk cost of a qwen3 stream: the compiled parser alone, and parser + OpenAIStream.

    python examples/measure_stream_overhead.py [--chunk 4] [--repeat 5]

The generation is synthetic but shaped like a real turn: reasoning, an answer, and tool calls with
nested arguments; it is cut into chunks of about one token (4 characters by default).
"""

from __future__ import annotations

import argparse
import json
import time

import rtcompile
from rtcompile.library import template_for
from rtcompile.integrations.openai_stream import OpenAIStream

PREFIX = "<|im_start|>user\nWeather and docs, please.<|im_end|>\n<|im_start|>assistant\n"


def generation() -> str:
    reasoning = "The user wants the weather in Paris and a documentation search. " * 30
    answer = "I will look both up. First the weather, then the documentation on rate limits. " * 12
    calls = [
        {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 3}},
        {
            "name": "search_docs",
            "arguments": {
                "query": {
                    "text": "rate limits",
                    "filters": [{"field": "year", "op": ">=", "value": 2020}],
                },
                "limit": 5,
                "tags": ["api", "limits"],
                "note": 'Ünïcödé ✓ and a "quoted" word, ' * 20,
            },
        },
        {"name": "write_note", "arguments": {"title": "todo", "body": "line\n" * 200}},
    ]
    text = f"<think>\n{reasoning}\n</think>\n\n{answer}"
    for call in calls:
        text += f"\n<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>"
    return text + "<|im_end|>"


def run(template: dict, chunks: list[str], with_adapter: bool) -> float:
    start = time.perf_counter()
    parser = rtcompile.ResponseParser(template, PREFIX)
    if with_adapter:
        stream = OpenAIStream(parser, seed=0)
        for chunk in chunks:
            stream.feed(chunk)
        stream.finish()
    else:
        for chunk in chunks:
            parser.feed(chunk)
        parser.finalize()
    return time.perf_counter() - start


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--chunk", type=int, default=4)
    options.add_argument("--repeat", type=int, default=7)
    args = options.parse_args()
    template = template_for("qwen3")
    text = generation()
    chunks = [text[i : i + args.chunk] for i in range(0, len(text), args.chunk)]
    run(template, chunks, True)  # warm up: compile, caches
    for label, with_adapter in (("parser alone", False), ("parser + OpenAIStream", True)):
        best = min(run(template, chunks, with_adapter) for _ in range(args.repeat))
        print(
            f"{label:24s} {best * 1e3:8.2f} ms  {best / len(chunks) * 1e6:6.2f} us/chunk  ({len(chunks)} chunks, {len(text)} chars)"
        )


if __name__ == "__main__":
    main()

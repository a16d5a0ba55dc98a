"""Serving benchmark for SGLang: the per-chunk cost of `parse_streaming_increment`, in the SGLang
environment.

    PYTHONPATH=<rtcompile target>:. /var/cache/rtcompile-ci/sglang-0.5.23/bin/python -m bench.serving_sglang [--quick]
        [--templates qwen3 qwen3_5] [--sizes 1K 16K 128K] [--json FILE]
    # (rtcompile installed with pip install --no-deps --target <rtcompile target> ., as .ci/sglang.sh does)

For each workload (bench/workloads.py: long reasoning, some content, one to three tool calls,
rendered in the model's own format) three pairs of SGLang detectors are fed the same token-like
chunks as SGLang's chat serving feeds them: the reasoning parser's `parse_stream_chunk` per chunk,
then the tool-call parser's on the normal text it returned, and both parsers' `parse_stream_end`
at the end:

- `sglang-template`: SGLang's `ResponseTemplateReasoningDetector` + `ResponseTemplateToolDetector`
  (`--reasoning-parser response_template --tool-call-parser response_template`) on the bundled
  template with its reasoning field named `thinking` (the only name it serves);
- `rtcompile`: `--reasoning-parser rtcompile --tool-call-parser rtcompile` on the bundled template;
- `sglang-handwritten`: SGLang's own detectors for the format (qwen3: `qwen3` + `hermes`;
  qwen3_5: `qwen3` + `qwen3_coder`).

Chunks are 1-6 characters (fixed-seed sizes), except that each special token (`<think>`,
`<tool_call>`, ...) is a chunk of its own, as the engine delivers it.

Method: one process, implementations interleaved (each repetition runs every implementation once,
in a rotated order); the figure is the median over repetitions of process CPU time per chunk (wall
time beside it). Building the pair (SGLang builds it once per request) is timed apart, after a
`gc.collect()`: the lines below the table give each request's cost, building and stream.
The heap set up before timing is frozen (`gc.freeze()`) and each chunk's results are dropped once
returned, as a server sends them on: kept, the collector's passes over them were most of every
implementation's per-chunk figure at 128K.
Before timing, each implementation's accumulated output (reasoning, normal text, calls with
`json.loads` arguments) is compared with the generation that was rendered: `sglang-template` and
`rtcompile` must give it back (the run stops otherwise); a hand-written pair that does not is
marked in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any

from . import workloads
from .serving import render_table, run_cases, thinking_copy, timed_request, token_chunks, write_results

TEMPLATES = ("qwen3", "qwen3_5")
SIZES = ("1K", "16K", "128K")
HANDWRITTEN = {"qwen3": ("qwen3", "hermes"), "qwen3_5": ("qwen3", "qwen3_coder")}
SPECIAL_TOKENS = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<|im_end|>",
    "<|im_start|>",
)
IMPLEMENTATIONS = ("sglang-template", "rtcompile", "sglang-handwritten")
END_OF_TURN = "<|im_end|>"  # the engine's stop token: servers cut it before the client sees it


class Tokenizer:
    """What the detectors read of a tokenizer: the template metadata (no vocabulary needed)."""

    def __init__(self, response_template: dict | None):
        self.response_template = response_template
        self.init_kwargs: dict = {}
        self.name_or_path = ""


class Case:
    """One workload, and how to build each implementation's pair of parsers for it."""

    def __init__(self, name: str, size: str):
        from sglang.srt.entrypoints.openai.protocol import Tool

        from rtcompile.library import template_for

        self.name, self.size = name, size
        self.workload = workloads.build_workload(name, size)
        self.chunks = token_chunks(self.workload.text, SPECIAL_TOKENS, workloads.stable_seed("serving", name, size))
        assert "".join(self.chunks) == self.workload.text
        self.tools = [Tool.model_validate(tool) for tool in self.workload.tools]
        template = template_for(name)
        reasoning, tool = HANDWRITTEN[name]
        # (reasoning parser name, tool parser name, tokenizer, extra ReasoningParser arguments)
        self.setups: dict[str, tuple[str, str, Tokenizer, dict]] = {
            "sglang-template": (
                "response_template",
                "response_template",
                Tokenizer(thinking_copy(template)),
                {},
            ),
            "rtcompile": ("rtcompile", "rtcompile", Tokenizer(template), {}),
            # the prompt opened the reasoning block where it ends with <think>: as SGLang's serving
            # tells the hand-written detector (force_reasoning)
            "sglang-handwritten": (
                reasoning,
                tool,
                Tokenizer(None),
                {"force_reasoning": self.workload.prefix.rstrip().endswith("<think>")},
            ),
        }

    def new_parsers(self, impl: str):
        from sglang.srt.function_call.function_call_parser import FunctionCallParser
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        reasoning, tool, tokenizer, extra = self.setups[impl]
        prefix = self.workload.prefix
        return (
            ReasoningParser(
                reasoning, tokenizer=tokenizer, prefix=prefix, tool_call_parser_active=True, **extra
            ),
            FunctionCallParser(self.tools, tool, tokenizer=tokenizer, prefix=prefix),
        )

    def stream(self, parsers, keep: bool = True) -> list:
        """SGLang's chat-serving loop, reduced to the parsing: what each chunk gives. Timed with
        keep=False, as a server runs it: each chunk's results are sent on and dropped (kept, the
        collector's passes over 36,000 of them would be part of every implementation's figure)."""
        reasoning_parser, tool_parser = parsers
        reasoning_chunk, tool_chunk = (
            reasoning_parser.parse_stream_chunk,
            tool_parser.parse_stream_chunk,
        )
        out: list = []
        add = out.append if keep else _drop
        for chunk in self.chunks:
            reasoning, normal = reasoning_chunk(chunk)
            if normal:
                add((reasoning, *tool_chunk(normal)))
            elif reasoning:
                add((reasoning, "", ()))
        reasoning, normal = reasoning_parser.parse_stream_end()
        text, calls = tool_parser.parse_stream_chunk(normal) if normal else ("", [])
        end_text, end_calls = tool_parser.parse_stream_end()
        out.append((reasoning, text + end_text, [*calls, *end_calls]))
        return out

    def expected(self) -> dict:
        generation = self.workload.generation
        return {
            "reasoning": generation.reasoning.strip(),
            "content": generation.content.strip(),
            "calls": [[name, arguments] for name, arguments in generation.calls],
        }


def _drop(result: Any) -> None:
    pass


def accumulate(out: list) -> dict:
    reasoning, content, calls = [], [], {}
    for reasoning_text, normal_text, items in out:
        reasoning.append(reasoning_text or "")
        content.append(normal_text or "")
        for item in items:
            call = calls.setdefault(item.tool_index, ["", ""])
            call[0] += item.name or ""
            call[1] += item.parameters or ""
    loaded = []
    for index in sorted(calls):
        name, arguments = calls[index]
        try:
            loaded.append([name, json.loads(arguments)])
        except ValueError:
            loaded.append([name, arguments])
    content_text = "".join(content).strip()
    if content_text.endswith(END_OF_TURN):
        content_text = content_text[: -len(END_OF_TURN)].rstrip()
    return {"reasoning": "".join(reasoning).strip(), "content": content_text, "calls": loaded}


def check(case: Case) -> dict[str, bool]:
    expected = case.expected()
    matches = {}
    for impl in IMPLEMENTATIONS:
        view = accumulate(case.stream(case.new_parsers(impl)))
        matches[impl] = view == expected
        if not matches[impl] and impl != "sglang-handwritten":
            raise SystemExit(
                f"{case.name} {case.size}: {impl} does not give back the generation:\n"
                f"{json.dumps(view)[:2000]}\nexpected\n{json.dumps(expected)[:2000]}"
            )
    return matches


def sample(case: Case, impl: str) -> tuple[float, float, float]:
    return timed_request(lambda: case.new_parsers(impl), lambda parsers: case.stream(parsers, keep=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.serving_sglang", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument(
        "--reps", type=int, metavar="N", help="repetitions of every size (default: 15 at 1K, 9, 5)"
    )
    parser.add_argument("--templates", nargs="+", choices=TEMPLATES, default=list(TEMPLATES))
    parser.add_argument("--sizes", nargs="+", choices=SIZES, default=list(SIZES))
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    arguments = parser.parse_args(argv)
    try:
        import sglang.srt.function_call.function_call_parser  # noqa: F401
        from sglang.srt.plugins import load_plugins
        from sglang.version import __version__ as sglang_version
    except ImportError:
        print(
            "python -m bench.serving_sglang needs sglang beside rtcompile: run it with the Python "
            "of the SGLang environment .ci/sglang.sh builds (see the README's SGLang section)",
            file=sys.stderr,
        )
        return 2

    import rtcompile

    load_plugins()  # as sglang serve does: registers rtcompile's detectors
    environment = {
        "python": platform.python_version(),
        "sglang": sglang_version,
        "rtcompile": rtcompile.__version__,
        "cpus": os.cpu_count(),
    }
    # The configuration `sglang serve` publishes in its serving process: rtcompile's tool detector
    # reads `--reasoning-parser` there, as SGLang's serving does, to know it gets that parser's
    # normal text (the setting these pairs are run in).
    from sglang.srt.runtime_context import get_context

    server = get_context().override_server_args(
        reasoning_parser="rtcompile", tool_call_parser="rtcompile"
    )
    with server:
        results = run_cases(arguments, environment, Case, check, sample, IMPLEMENTATIONS)
    write_results(results, render(results), arguments.json)
    return 0


def render(results: dict) -> str:
    env = results["environment"]
    return render_table(
        results,
        title="SGLang's streaming parsers (reasoning, then tool calls on the normal text): microseconds "
        "of CPU per chunk (median; wall in brackets)",
        columns=("SGLang response template", "rtcompile", "SGLang hand-written"),
        implementations=IMPLEMENTATIONS,
        mismatch="* the hand-written pair's accumulated output differs from the generation",
        versions=f"python {env['python']}, sglang {env['sglang']}, rtcompile {env['rtcompile']}",
    )


if __name__ == "__main__":
    sys.exit(main())

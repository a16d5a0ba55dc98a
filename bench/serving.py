"""Serving benchmark: the per-chunk cost of vLLM's `parse_delta`, run in the vLLM environment.

    python -m bench serving [--quick] [--templates qwen3 ...] [--sizes 1K 16K 128K] [--json FILE]
        [--tool-choice none] [--token-ids] [--profile]
    # with vllm installed beside rtcompile (the environment .ci/run builds:
    #   PYTHONPATH=<rtcompile site> /var/cache/rtcompile-ci/vllm-<key>/bin/python -m bench serving)

For each workload (bench/workloads.py: long reasoning, some content, one to three tool calls,
rendered in the model's own format) three of vLLM's unified parsers are fed the same token-like
chunks through `parse_delta`, exactly as vLLM's chat serving calls it (ChatStreamProcessor.step: one
call per engine step, the parser's `parse_delta` looked up and called with keyword arguments,
`finished=True` on the last):

- `vllm-template`: vLLM's `ResponseTemplateParser` (`--reasoning-parser hf --tool-call-parser hf`)
  on the bundled template with its reasoning field named `thinking` (the only name it serves);
- `rtcompile`: `RtcompileParser` (`--reasoning-parser rtcompile --tool-call-parser rtcompile`) on
  the bundled template (reading text: the chunks' "tokens" are texts, with no tokenizer to decode);
- `vllm-handwritten`: vLLM's own parsers for the format (qwen3: `--reasoning-parser qwen3
  --tool-call-parser hermes`; qwen3_5: `qwen3` + `qwen3_xml`; gemma4: `gemma4` + `gemma4`).

Chunks are 1-6 characters (fixed-seed sizes), except that each special token of the model's
tokenizer (`<think>`, `<tool_call>`, `<|channel>` ...) is one chunk of its own, with its own token
id, as vLLM's engine delivers it (its hand-written parsers read special tokens by id).

Method: one process, implementations interleaved (each repetition runs every implementation once,
in a rotated order); the figure is the median over repetitions of process CPU time per chunk (wall
time beside it). Building the parser (vLLM builds one per request) is timed apart, after a
`gc.collect()`: the lines below the table give each request's cost, building and stream. As in
vLLM's API server, the heap is frozen once set up (`gc.freeze()`, vLLM's `freeze_gc_heap`) and
each delta is dropped once returned (a server serializes and sends it): keeping every delta of a
128K stream alive made the collector's passes over them most of every implementation's per-chunk
figure. Before timing, each implementation's accumulated deltas (reasoning, content, calls with
`json.loads` arguments) are compared with the generation that was rendered; `vllm-template` and
`rtcompile` must match it (the run stops otherwise), a hand-written parser that does not is
reported in the table.

`--tool-choice none`: the requests ask for no tool calls, so the parsers pass calls through as
content; `rtcompile` must then give what `vllm-template` gives (no calls, the rendered reasoning).

`--token-ids`: the engine steps of a real tokenizer. Per template, bench/token_ids.py's byte-level
BPE tokenizer, trained locally on the family's generations, with the family's delimiter tokens as
control tokens; the workload is encoded with it (every delimiter its id) and each step is one id
with its text as vLLM's detokenizer gives it (`DecodeStream`, skip_special_tokens off). Every
implementation reads that tokenizer; `rtcompile` parses the ids (its default), `rtcompile-text`
the same steps' text (`token_ids=False`).

`--profile`: where rtcompile's per-chunk time goes, instead of the comparison (µs of CPU per chunk,
medians, same method): `call`, vLLM's loop calling a `parse_delta` that returns at once (what any
parser's figure includes); `read`, the compiled parser reading the chunks as the serving core's fast
path has it read them (`feed_text`, the general feed for what it declines; for ids, their decoding);
`delta`, building the `DeltaMessage`s (`total` less a run whose text chunks make none); `total`,
`parse_delta`; `rest`, what remains: the serving core's own work per chunk, and the chunks that
take the operations' way (tool calls, delimiters).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

from . import workloads

TEMPLATES = ("qwen3", "qwen3_5", "gemma4")
SIZES = ("1K", "16K", "128K")
HANDWRITTEN = {  # (reasoning parser, tool parser) of vLLM's own for the format
    "qwen3": ("qwen3", "hermes"),
    "qwen3_5": ("qwen3", "qwen3_xml"),
    "gemma4": ("gemma4", "gemma4"),
}
SPECIAL_TOKENS = {  # added tokens of the models' tokenizers that occur in the outputs
    "qwen3": ("<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>", "<|im_start|>"),
    "qwen3_5": ("<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>", "<|im_start|>"),
    "gemma4": (
        "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
        "<|tool_response>", "<tool_response|>", '<|"|>', "<|think|>",
    ),
}
IMPLEMENTATIONS = ("vllm-template", "rtcompile", "vllm-handwritten")
TOKEN_IMPLEMENTATIONS = ("vllm-template", "rtcompile", "rtcompile-text", "vllm-handwritten")


class ChunkTokenizer:
    """A tokenizer for the chunks: each special token has an id of its own, any other chunk text is
    one token. What vLLM's parsers read of a tokenizer: vocab, encode, decode, the template."""

    def __init__(self, specials: tuple[str, ...], response_template: dict | None):
        self.response_template = response_template
        self.init_kwargs: dict = {}
        self.name_or_path = ""
        self.texts: list[str] = list(specials)
        self.vocab: dict[str, int] = {text: index for index, text in enumerate(specials)}
        self.all_special_tokens = list(specials)
        self.all_special_ids = list(range(len(specials)))

    def id_of(self, text: str) -> int:
        token = self.vocab.get(text)
        if token is None:
            token = self.vocab[text] = len(self.texts)
            self.texts.append(text)
        return token

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def encode(self, text: str, add_special_tokens: bool = False, **_: Any) -> list[int]:
        return [self.id_of(text)] if text else []

    def decode(self, ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        return "".join(self.texts[i] for i in ids)

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str):
            return self.vocab.get(tokens)
        return [self.vocab.get(token) for token in tokens]

    def convert_ids_to_tokens(self, ids: Any, skip_special_tokens: bool = False) -> Any:
        if isinstance(ids, int):
            return self.texts[ids]
        return [self.texts[i] for i in ids]

    def __len__(self) -> int:
        return len(self.texts)


def token_chunks(text: str, specials: tuple[str, ...], seed: int) -> list[str]:
    """bench's token-like chunks (1-6 characters), with every special token a chunk of its own."""
    import re

    pieces = re.split("(" + "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)) + ")", text)
    chunks: list[str] = []
    for index, piece in enumerate(pieces):
        if not piece:
            continue
        if index % 2:  # a special token
            chunks.append(piece)
        else:
            chunks.extend(workloads.chunk_text(piece, seed + index))
    return chunks


def thinking_copy(template: dict) -> dict:
    copy = json.loads(json.dumps(template))
    if "reasoning_content" in copy["fields"]:
        copy["fields"]["thinking"] = copy["fields"].pop("reasoning_content")
    return copy


def detokenized(tokenizer: Any, steps: list[list[int]]) -> list[str]:
    """Each engine step's text as vLLM's detokenizer gives it (skip_special_tokens off): tokenizers'
    DecodeStream, id by id (the bytes of an incomplete character wait for the ids that complete it)."""
    from tokenizers.decoders import DecodeStream

    backend = tokenizer.backend_tokenizer
    stream = DecodeStream(skip_special_tokens=False)
    return ["".join(stream.step(backend, token_id) or "" for token_id in step) for step in steps]


def compose_parser(reasoning: str, tool: str, tokenizer: Any) -> type:
    """The parser class vLLM's parser manager composes from a reasoning and a tool parser name."""
    from vllm.parser.parser_manager import ParserManager

    return ParserManager.get_parser(
        tool_parser_name=tool,
        reasoning_parser_name=reasoning,
        enable_auto_tools=True,
        model_name="bench",
        tokenizer=tokenizer,
    )


class Case:
    """One workload and the parser classes, composed by vLLM's parser manager (`token_ids`: the
    steps of a real tokenizer, see the module docstring)."""

    def __init__(self, name: str, size: str, tool_choice: str = "auto", token_ids: bool = False):
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        from rtcompile.library import template_for

        self.name, self.size, self.tool_choice = name, size, tool_choice
        self.reads_ids = token_ids
        workload = workloads.build_workload(name, size)
        self.workload = workload
        template = template_for(name)
        self.request = ChatCompletionRequest(
            messages=[{"role": "user", "content": workloads.USER_QUERY}],
            model="bench",
            tools=workload.tools,
            tool_choice=tool_choice,
        )
        # implementation -> (the parser class, its tokenizer, constructor options)
        self.parsers: dict[str, tuple[type, Any, dict]] = {}
        if token_ids:
            self._compose_for_token_ids(template)
        else:
            self._compose_for_chunks(template)

    def _compose_for_token_ids(self, template: dict) -> None:
        """Engine steps of one id of the model's tokenizer, read as ids by `rtcompile` and as their
        text by `rtcompile-text`."""
        import copy

        from .token_ids import tokenizer_for

        workload = self.workload
        reasoning, tool = HANDWRITTEN[self.name]
        base = tokenizer_for(self.name)
        ids = base.encode(workload.text, add_special_tokens=False)
        steps = [[token_id] for token_id in ids]
        self.chunks = detokenized(base, steps)
        assert "".join(self.chunks) == workload.text

        def tokenizer_with(response_template: dict | None) -> Any:
            tokenizer = copy.copy(base)
            tokenizer.response_template = response_template
            return tokenizer

        tokenizer = tokenizer_with(thinking_copy(template))
        self.parsers["vllm-template"] = (compose_parser("hf", "hf", tokenizer), tokenizer, {})
        tokenizer = tokenizer_with(template)
        ours = compose_parser("rtcompile", "rtcompile", tokenizer)
        self.parsers["rtcompile"] = (ours, tokenizer, {})
        self.parsers["rtcompile-text"] = (ours, tokenizer, {"token_ids": False})
        tokenizer = tokenizer_with(None)
        self.parsers["vllm-handwritten"] = (compose_parser(reasoning, tool, tokenizer), tokenizer, {})
        self.token_ids = dict.fromkeys(self.parsers, steps)
        prompt = base.encode(workload.prefix, add_special_tokens=False)
        self.prompt_ids = dict.fromkeys(self.parsers, prompt)

    def _compose_for_chunks(self, template: dict) -> None:
        """Token-like chunks, each special token a chunk with its own id (a ChunkTokenizer)."""
        workload = self.workload
        reasoning, tool = HANDWRITTEN[self.name]
        specials = SPECIAL_TOKENS[self.name]
        self.chunks = token_chunks(workload.text, specials, workloads.stable_seed("serving", self.name, self.size))
        assert "".join(self.chunks) == workload.text
        tokenizer = ChunkTokenizer(specials, thinking_copy(template))
        self.parsers["vllm-template"] = (compose_parser("hf", "hf", tokenizer), tokenizer, {})
        tokenizer = ChunkTokenizer(specials, template)
        # (a ChunkTokenizer's ids are its chunks: there is nothing to decode, rtcompile reads text)
        ours = compose_parser("rtcompile", "rtcompile", tokenizer)
        self.parsers["rtcompile"] = (ours, tokenizer, {"token_ids": False})
        tokenizer = ChunkTokenizer(specials, None)
        self.parsers["vllm-handwritten"] = (compose_parser(reasoning, tool, tokenizer), tokenizer, {})
        self.token_ids = {
            impl: [[tok.id_of(chunk)] for chunk in self.chunks] for impl, (_, tok, _) in self.parsers.items()
        }
        self.prompt_ids = {impl: tok.encode(workload.prefix) for impl, (_, tok, _) in self.parsers.items()}

    def new_parser(self, impl: str):
        cls, tokenizer, options = self.parsers[impl]
        parser = cls(tokenizer, self.request.tools, chat_template_kwargs={}, **options)
        request = parser.adjust_request(self.request.model_copy())
        parser.set_prompt_token_ids(self.prompt_ids[impl])
        return parser, request

    def stream(self, impl: str, parser, request) -> list:
        """Every step's delta, as vLLM's chat serving asks for them (ChatStreamProcessor.step: the
        parser's `parse_delta` looked up and called with keywords, one step at a time)."""
        chunks, ids, prompt = self.chunks, self.token_ids[impl], self.prompt_ids[impl]
        last = len(chunks) - 1
        return [
            parser.parse_delta(
                delta_text=chunk,
                delta_token_ids=ids[k],
                request=request,
                prompt_token_ids=prompt,
                finished=k == last,
            )
            for k, chunk in enumerate(chunks)
        ]

    def serve(self, impl: str, parser, request) -> int:
        """stream() as a server runs it: each delta is sent on and dropped, not kept (36,000 kept
        deltas would make the collector's passes part of every implementation's figure)."""
        chunks, ids, prompt = self.chunks, self.token_ids[impl], self.prompt_ids[impl]
        last = len(chunks) - 1
        sent = 0
        for k, chunk in enumerate(chunks):
            delta = parser.parse_delta(
                delta_text=chunk,
                delta_token_ids=ids[k],
                request=request,
                prompt_token_ids=prompt,
                finished=k == last,
            )
            if delta is not None:
                sent += 1
        return sent

    def expected(self) -> dict:
        generation = self.workload.generation
        return {
            "reasoning": generation.reasoning.strip(),
            "content": generation.content.strip(),
            "calls": [[name, arguments] for name, arguments in generation.calls],
        }


def accumulate(deltas: list) -> dict:
    reasoning, content, calls = [], [], {}
    for delta in deltas:
        if delta is None:
            continue
        reasoning.append(delta.reasoning or "")
        content.append(delta.content or "")
        for entry in delta.tool_calls or ():
            call = calls.setdefault(entry.index, ["", ""])
            if entry.function is not None:
                call[0] += entry.function.name or ""
                call[1] += entry.function.arguments or ""
    loaded = []
    for index in sorted(calls):
        name, arguments = calls[index]
        try:
            loaded.append([name, json.loads(arguments)])
        except ValueError:
            loaded.append([name, arguments])
    return {"reasoning": "".join(reasoning).strip(), "content": "".join(content).strip(), "calls": loaded}


def check(case: Case, implementations: tuple[str, ...] = IMPLEMENTATIONS) -> dict[str, bool]:
    expected = case.expected()
    if case.tool_choice == "none":  # calls pass through as content: vLLM's own class is the reference
        parser, request = case.new_parser("vllm-template")
        expected = accumulate(case.stream("vllm-template", parser, request))
        if expected["calls"] or expected["reasoning"] != case.expected()["reasoning"]:
            raise SystemExit(f"{case.name} {case.size}: vllm-template does not pass the calls through")
    matches = {}
    for impl in implementations:
        parser, request = case.new_parser(impl)
        reads_ids = getattr(parser, "reads_token_ids", False)  # (False: an rtcompile that reads text only)
        if impl.startswith("rtcompile") and reads_ids != (impl == "rtcompile" and case.reads_ids):
            raise SystemExit(f"{case.name} {case.size}: {impl} reads the wrong input")
        view = accumulate(case.stream(impl, parser, request))
        matches[impl] = view == expected
        if not matches[impl] and impl != "vllm-handwritten":
            raise SystemExit(
                f"{case.name} {case.size}: {impl} does not give back the generation:\n"
                f"{json.dumps(view)[:2000]}\nexpected\n{json.dumps(expected)[:2000]}"
            )
    return matches


def timed_request(build: Any, stream: Any) -> tuple[float, float, float]:
    """One request as a server runs it, each step after a `gc.collect()`: `build()` the parsers
    (servers build them per request), then `stream(built)`. Returns the stream's (CPU, wall)
    seconds and the build's CPU seconds."""
    gc.collect()
    start = time.process_time()
    built = build()
    build_cpu = time.process_time() - start
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    stream(built)
    return time.process_time() - cpu, time.perf_counter() - wall, build_cpu


def sample(case: Case, impl: str) -> tuple[float, float, float]:
    return timed_request(lambda: case.new_parser(impl), lambda built: case.serve(impl, *built))


def measure(case: Any, reps: int, implementations: tuple[str, ...], sample: Any) -> dict[str, dict[str, float]]:
    """Per implementation, the medians over `reps` repetitions of `sample(case, impl)`'s (CPU, wall)
    seconds per chunk, in µs; each repetition runs every implementation once, in a rotated order.
    `paired`: the median over repetitions of the implementation's CPU time over rtcompile's in the
    same repetition (less moved by the machine's drift than the ratio of the two medians).
    `build`, `request`: CPU µs per request of building the parsers, and of building them and
    parsing the stream; `paired_request`: `paired` for the latter."""
    samples: dict[str, list[tuple[float, float, float]]] = {impl: [] for impl in implementations}
    order = list(implementations)
    for rep in range(reps):
        for impl in order[rep % len(order) :] + order[: rep % len(order)]:
            samples[impl].append(sample(case, impl))
    per_chunk = 1e6 / len(case.chunks)
    ours = samples.get("rtcompile")
    return {
        impl: {
            "cpu": statistics.median(s[0] for s in values) * per_chunk,
            "wall": statistics.median(s[1] for s in values) * per_chunk,
            "build": statistics.median(s[2] for s in values) * 1e6,
            "request": statistics.median(s[0] + s[2] for s in values) * 1e6,
            **(
                {
                    "paired": statistics.median(s[0] / o[0] for s, o in zip(values, ours)),
                    "paired_request": statistics.median(
                        (s[0] + s[2]) / (o[0] + o[2]) for s, o in zip(values, ours)
                    ),
                }
                if ours
                else {}
            ),
        }
        for impl, values in samples.items()
    }


def profile(case: Case, reps: int) -> dict[str, float]:
    """The `--profile` figures of rtcompile on one case (see the module docstring)."""
    last = len(case.chunks) - 1
    parts = _profile_parts(case)
    samples: dict[str, list[float]] = {name: [] for name in parts}
    order = list(parts)
    for rep in range(reps):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            gc.collect()
            samples[name].append(parts[name]())
    per_chunk = 1e6 / (last - 1)
    f = {name: statistics.median(values) * per_chunk for name, values in samples.items()}
    return {
        "call": f["call"],
        "read": f["read"],
        "delta": f["total"] - f["without delta"],
        "rest": f["without delta"] - f["call"] - f["read"],
        "total": f["total"],
    }


def _profile_parts(case: Case) -> dict[str, Any]:
    """The parts `profile` times, in its order: each returns the CPU seconds of the steps between
    the first and the last, on a parser that has read the first."""
    chunks, ids, prompt = case.chunks, case.token_ids["rtcompile"], case.prompt_ids["rtcompile"]
    last = len(chunks) - 1

    def started():
        parser, request = case.new_parser("rtcompile")
        parser.parse_delta(chunks[0], ids[0], request, prompt, finished=False)
        return parser, request, parser._generation

    def steps(parser, request) -> float:
        start = time.process_time()
        for k in range(1, last):
            parser.parse_delta(
                delta_text=chunks[k], delta_token_ids=ids[k], request=request, prompt_token_ids=prompt, finished=False
            )
        return time.process_time() - start

    def call() -> float:
        parser, request = case.new_parser("rtcompile")

        def parse_delta(delta_text, delta_token_ids, request, prompt_token_ids=None, *, finished):
            return None

        parser.parse_delta = parse_delta
        return steps(parser, request)

    def without_delta() -> float:
        parser, request, generation = started()
        makers = generation._makers
        for field, maker in makers.items():
            if getattr(maker, "__name__", "") in ("content_delta", "reasoning_delta"):
                makers[field] = _no_delta
        return steps(parser, request)

    def total() -> float:
        return steps(*started()[:2])

    read = _fast_path_read(chunks, ids, last, started)
    return {"call": call, "read": read, "without delta": without_delta, "total": total}


def _fast_path_read(chunks: list[str], ids: list[list[int]], last: int, started: Any) -> Any:
    """The `read` part of `profile`, a closure over the case's steps like the other parts."""

    def read() -> float:
        """The compiled parser reading the steps as the core's fast path has it read them: the
        text (`feed_text`), or one id's known text (`_read_text`) or the ids (`feed_text`), and the
        parser's general feed for what it declines."""
        _, _, generation = started()
        feed_text, feed_declined = generation._feed_text, generation._feed_declined
        if not getattr(generation, "reads_ids", False):
            start = time.process_time()
            for k in range(1, last):
                if feed_text(chunks[k]) is None:
                    feed_declined(chunks[k])
            return time.process_time() - start
        if not hasattr(generation, "_clean"):  # (a core whose fast path has the parser decode every id)
            start = time.process_time()
            for k in range(1, last):
                if feed_text(ids[k]) is None:
                    feed_declined(ids[k])
            return time.process_time() - start
        decoder, clean, read_text = generation._decoder, generation._clean, generation._read_text
        start = time.process_time()
        for k in range(1, last):
            step = ids[k]
            if len(step) == 1 and decoder._idle and not decoder.marked and (text := clean.get(step[0])) is not None:
                taken = read_text(text)
            else:
                taken = feed_text(step)
            if taken is None:
                feed_declined(step)
        return time.process_time() - start

    return read


def _no_delta(text: str) -> None:
    return None


def run_profiles(arguments: Any, environment: dict, new_case: Any) -> str:
    reps = 5 if arguments.quick else 11
    lines = [
        "Where rtcompile's per-chunk time goes in parse_delta: microseconds of CPU per chunk (median)"
        + (", engine steps of one token id" if arguments.token_ids else ""),
        "",
        "| template | size | call | read | delta | rest | total |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    for name in arguments.templates:
        for size in arguments.sizes:
            case = new_case(name, size)
            gc.collect()
            gc.freeze()
            try:
                f = profile(case, reps)
            finally:
                gc.unfreeze()
            lines.append(
                f"| {name} | {size} | {f['call']:.2f} | {f['read']:.2f} | {f['delta']:.2f} | "
                f"{f['rest']:.2f} | {f['total']:.2f} |"
            )
            print(f"  {name} {size}: profiled", file=sys.stderr, flush=True)
    load_after = " ".join(f"{v:.2f}" for v in os.getloadavg())
    lines.append("")
    lines.append(
        f"vllm {environment['vllm']}, rtcompile {environment['rtcompile']}, Python {environment['python']}, "
        f"{environment['cpus']} CPUs, load {load_before} -> {load_after}"
    )
    return "\n".join(lines)


def run_cases(
    arguments: Any, environment: dict, new_case: Any, check: Any, sample: Any, implementations: tuple[str, ...]
) -> dict:
    """Every template and size asked for: checked, then measured with the heap set up so far frozen,
    as vLLM's API server does once it has started (`freeze_gc_heap`): modules, workloads and the
    parsers' templates are out of the collector's sight. The last implementation is the
    hand-written one, whose check result is kept."""
    reps = {"1K": 5, "16K": 5, "128K": 3} if arguments.quick else {"1K": 15, "16K": 9, "128K": 5}
    if getattr(arguments, "reps", None):
        reps = dict.fromkeys(reps, arguments.reps)
    results: dict[str, Any] = {
        "environment": {**environment, "load_before": " ".join(f"{v:.2f}" for v in os.getloadavg())},
        "cases": {},
    }
    for name in arguments.templates:
        for size in arguments.sizes:
            case = new_case(name, size)
            matches = check(case)
            gc.collect()
            gc.freeze()
            try:
                figures = measure(case, reps[size], implementations, sample)
            finally:
                gc.unfreeze()
            results["cases"][f"{name}:{size}"] = {
                "chunks": len(case.chunks),
                "chars": len(case.workload.text),
                "figures": figures,
                "handwritten_matches": matches[implementations[-1]],
            }
            print(f"  {name} {size}: {len(case.chunks)} chunks measured", file=sys.stderr, flush=True)
    results["environment"]["load_after"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return results


def write_results(results: dict, table: str, path: str | None) -> None:
    print(table)
    if path:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(results, file, indent=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench serving", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument(
        "--reps", type=int, metavar="N", help="repetitions of every size (default: 15 at 1K, 9, 5)"
    )
    parser.add_argument("--templates", nargs="+", choices=TEMPLATES, default=list(TEMPLATES))
    parser.add_argument("--sizes", nargs="+", choices=SIZES, default=list(SIZES))
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument(
        "--tool-choice", choices=("auto", "none"), default="auto",
        help="the requests' tool_choice (none: calls pass through as content)",
    )
    parser.add_argument(
        "--token-ids", action="store_true",
        help="engine steps of a real tokenizer: rtcompile reads the ids, rtcompile-text their text",
    )
    parser.add_argument(
        "--profile", action="store_true", help="where rtcompile's per-chunk time goes (no comparison)"
    )
    arguments = parser.parse_args(argv)
    try:
        import vllm
        import vllm.plugins
    except ImportError:
        print(
            "python -m bench serving needs vllm beside rtcompile: run it with the Python of the "
            "vLLM environment .ci/run builds (see the README's vLLM section)",
            file=sys.stderr,
        )
        return 2

    import rtcompile

    vllm.plugins.load_general_plugins()  # as vllm serve does: registers rtcompile's parsers
    environment = {
        "python": platform.python_version(),
        "vllm": vllm.__version__,
        "rtcompile": rtcompile.__version__,
        "cpus": os.cpu_count(),
        "tool_choice": arguments.tool_choice,
        "token_ids": arguments.token_ids,
    }
    implementations = TOKEN_IMPLEMENTATIONS if arguments.token_ids else IMPLEMENTATIONS

    def new_case(name: str, size: str) -> Case:
        return Case(name, size, arguments.tool_choice, arguments.token_ids)

    def check_case(case: Case) -> dict[str, bool]:
        return check(case, implementations)

    if arguments.profile:
        print(run_profiles(arguments, environment, new_case))
        return 0

    results = run_cases(arguments, environment, new_case, check_case, sample, implementations)
    write_results(results, render(results), arguments.json)
    return 0


def render(results: dict) -> str:
    env = results["environment"]
    token_ids = env.get("token_ids")
    return render_table(
        results,
        title="parse_delta in vLLM's chat-serving loop: microseconds of CPU per chunk (median; wall in brackets)"
        + (", tool_choice=none" if env.get("tool_choice") == "none" else "")
        + (", engine steps of one token id" if token_ids else ""),
        columns=("vLLM response template", "rtcompile (token ids)", "rtcompile (text)", "vLLM hand-written")
        if token_ids
        else ("vLLM response template", "rtcompile", "vLLM hand-written"),
        implementations=TOKEN_IMPLEMENTATIONS if token_ids else IMPLEMENTATIONS,
        mismatch="* the hand-written parser's accumulated deltas differ from the generation",
        versions=f"\nvllm {env['vllm']}, rtcompile {env['rtcompile']}, Python {env['python']}",
    )


def render_table(
    results: dict, *, title: str, columns: tuple[str, ...], implementations: tuple[str, ...], mismatch: str, versions: str
) -> str:
    """The table of `results` (implementations: the server's template parser, rtcompile's (one or
    more: the first is `rtcompile`), the hand-written one), the growth from 16K to 128K, and the
    environment."""
    cases = results["cases"]
    lines = [title, "", *_per_chunk_table(cases, columns, implementations), ""]
    lines += _growth_lines(cases, implementations)
    lines += _paired_lines(cases, implementations)
    lines.append("")
    lines += _request_lines(cases, implementations)
    if any(not case["handwritten_matches"] for case in cases.values()):
        lines.append(mismatch)
    env = results["environment"]
    lines.append(f"{versions}, {env['cpus']} CPUs, load {env['load_before']} -> {env['load_after']}")
    return "\n".join(lines)


def _per_chunk_table(cases: dict, columns: tuple[str, ...], implementations: tuple[str, ...]) -> list[str]:
    """A row per case: each implementation's µs per chunk, then each of rtcompile's over the
    template parser's and the hand-written one's."""
    template_impl, *ours_list, handwritten = implementations
    labels = dict(zip(implementations, columns))
    ratio_heads = [
        head
        for impl in ours_list
        for head in (f"{labels[impl]} vs template", f"{labels[impl]} vs hand-written")
    ]
    lines = [
        f"| template | size | chunks | {' | '.join(columns)} | {' | '.join(ratio_heads)} |",
        "| --- | --- | --- | " + "--- | " * (len(columns) + len(ratio_heads)),
    ]
    for key, case in cases.items():
        name, size = key.split(":")
        f = case["figures"]
        cells = [f"{f[impl]['cpu']:.2f} ({f[impl]['wall']:.2f})" for impl in implementations]
        if not case["handwritten_matches"]:
            cells[-1] += " *"
        ratios = [
            f"{f[other]['cpu'] / f[impl]['cpu']:.1f}x"
            for impl in ours_list
            for other in (template_impl, handwritten)
        ]
        lines.append(f"| {name} | {size} | {case['chunks']} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    return lines


def _growth_lines(cases: dict, implementations: tuple[str, ...]) -> list[str]:
    lines = []
    for name in dict.fromkeys(key.split(":")[0] for key in cases):
        small, large = cases.get(f"{name}:16K"), cases.get(f"{name}:128K")
        if small and large:
            growth = {
                impl: large["figures"][impl]["cpu"] / small["figures"][impl]["cpu"]
                for impl in implementations
            }
            lines.append(
                f"{name}: growth 16K->128K per chunk: "
                + ", ".join(f"{impl} {value:.2f}" for impl, value in growth.items())
            )
    return lines


def _paired_lines(cases: dict, implementations: tuple[str, ...]) -> list[str]:
    template_impl, ours, *_, handwritten = implementations
    lines = []
    for key, case in cases.items():
        f = case["figures"]
        if "paired" in f[template_impl]:
            lines.append(
                f"{key.replace(':', ' ')}: paired (per repetition, median): {ours} vs template "
                f"{f[template_impl]['paired']:.2f}x, vs hand-written {f[handwritten]['paired']:.2f}x"
            )
    return lines


def _request_lines(cases: dict, implementations: tuple[str, ...]) -> list[str]:
    template_impl, ours, *_, handwritten = implementations
    lines = [
        "Per request, the parsers built (not in the table: a server builds them for every request) "
        "and the stream parsed: CPU µs (median), building them in brackets; paired ratios as above"
    ]
    for key, case in cases.items():
        f = case["figures"]
        if "request" in f[ours]:
            figures = ", ".join(
                f"{impl} {f[impl]['request']:.0f} ({f[impl]['build']:.0f})" for impl in implementations
            )
            lines.append(
                f"{key.replace(':', ' ')}: {figures}; {ours} vs template "
                f"{f[template_impl]['paired_request']:.2f}x, vs hand-written "
                f"{f[handwritten]['paired_request']:.2f}x"
            )
    return lines


if __name__ == "__main__":
    sys.exit(main())

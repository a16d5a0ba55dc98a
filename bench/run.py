"""The benchmark harness: rtcompile's generated parsers side by side with the interpreter.

    python -m bench                  # full run: 1K, 16K, 128K, 1M; batch of 10,000
    python -m bench --quick          # under a minute on 2 cores: 1K, 16K, 128K (windowed)
    python -m bench --json out.json  # also write every sample
    python -m bench --profile        # cProfile of one stream per implementation
    python -m bench --grammar        # only the grammar backend's section (bench/grammar.py)

Method (see bench/README.md for the reasoning):

* One process, implementations interleaved: each repetition runs every implementation once,
  in a rotated order, so a neighbour taking a core hits all of them alike. Figures are medians
  over the repetitions, of process CPU time (the headline: these machines are shared) and of
  wall time (in brackets).
* Before anything is timed, every implementation's output is checked against the interpreter:
  the whole-message result, and for streaming the events of every `feed` call (chunk
  boundaries included), `initial_events`, `finalize`'s events and the message. Any difference
  stops the run with exit status 2.
* Streaming: construct with the prompt as prefix, feed every chunk, finalize; the figure is
  time per chunk. The interpreter copies its whole buffer on each chunk, so at the large sizes
  (1M in the full run, 128K in quick mode) it is timed on windows of consecutive chunks
  instead of whole streams: for each window, a parser is fed everything before the window in
  2K pieces (not timed), then the window's chunks one by one (timed). Windows sit at the
  middles of equal slices of the stream, so their mean cost is the mean cost over the stream.
  The same windowed feeding is what gets verified against rtcompile at those sizes (every
  event of every window), and the full chunked streams of the other implementations are
  checked for the interpreter's final message. `--full-verify` checks complete interpreter
  streams there as well (about 15 s per template at 1M).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import itertools
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from . import batch_throughput, startup, workloads
from .impls import adapters_for, streams

IMPLEMENTATIONS = ("interpreter", "rtcompile", "handwritten")


@dataclass
class Config:
    sizes: tuple[str, ...]
    reps: dict[str, int]  # timed samples per implementation and size
    interpreter_reps: dict[str, int]
    min_sample_s: float  # a sample repeats its stream / parse until it lasts about this long
    interpreter_windows: dict[str, tuple[int, int]]  # size -> (windows, chunks per window)
    batch_count: int
    batch_reps: int
    import_runs: int
    startup_all_templates: bool  # quick mode probes start-up costs for the first template only
    full_verify: bool = False
    throughput_rows: int = 100_000  # bench/batch_throughput.py: rows of mixed sizes
    throughput_reps: int = 3


FULL = Config(
    sizes=("1K", "16K", "128K", "1M"),
    reps={"1K": 7, "16K": 7, "128K": 5, "1M": 5},
    interpreter_reps={"1K": 7, "16K": 7, "128K": 3, "1M": 3},
    min_sample_s=0.05,
    interpreter_windows={"1M": (4, 1_000)},
    batch_count=10_000,
    batch_reps=3,
    import_runs=7,
    startup_all_templates=True,
)

QUICK = Config(
    sizes=("1K", "16K", "128K"),
    reps={"1K": 3, "16K": 3, "128K": 2},
    interpreter_reps={"1K": 3, "16K": 3, "128K": 2},
    min_sample_s=0.01,
    interpreter_windows={"128K": (4, 250)},
    batch_count=1_000,
    batch_reps=2,
    import_runs=2,
    startup_all_templates=False,
    throughput_rows=1_000,
    throughput_reps=1,
)

TARGETS = {
    "stream_ratio_1K": 4.0,  # (short answers: the fixed and per-delimiter costs of a stream)
    "stream_ratio_16K": 7.0,
    "stream_ratio_1M": 100.0,
    "growth": 1.3,
    # Whole messages (the one-shot reader), at 1K and 16K on every template: at least this many
    # times the interpreter's speed, and at most this many times the hand-written parser's time.
    "whole_ratio": 5.0,
    "whole_vs_handwritten": 1.3,
    "vs_handwritten": 1.5,  # (streaming)
    "import_ms": 15.0,
    "cold_compile_ms": 300.0,
    "cache_hit_ms": 2.0,
}


class MismatchError(AssertionError):
    """An implementation's output differs from the interpreter's: the benchmark must not run."""


# ---- timing --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _frozen_heap():
    """Move everything alive now (modules, workloads, parsers' templates) out of the collector's
    sight while measuring: each sample then starts from the same empty young heap, and the
    `gc.collect()` before it costs microseconds instead of a scan of the whole process."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _timed(action: Callable[[], Any]) -> tuple[float, float]:
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    action()
    return time.process_time() - cpu, time.perf_counter() - wall


def _rotations(names: list[str], reps: int):
    """Each repetition's running order: every implementation once, starting point rotated."""
    for rep in range(reps):
        shift = rep % len(names)
        yield rep, names[shift:] + names[:shift]


def _summary(samples: list[tuple[float, float]], scale: float, **extra: Any) -> dict:
    return {
        "cpu": statistics.median(cpu for cpu, _ in samples) * scale,
        "wall": statistics.median(wall for _, wall in samples) * scale,
        "samples_cpu": [cpu * scale for cpu, _ in samples],
        "samples_wall": [wall * scale for _, wall in samples],
        **extra,
    }


def window_plan(chunk_count: int, windows: int, per_window: int) -> list[tuple[int, int]]:
    """(first chunk, chunk count) of windows at the middles of `windows` equal slices."""
    per_window = min(per_window, chunk_count // windows)
    return [
        (int((index + 0.5) * chunk_count / windows) - per_window // 2, per_window)
        for index in range(windows)
    ]


def _chunk_offsets(chunks: list[str]) -> list[int]:
    return [0, *itertools.accumulate(len(chunk) for chunk in chunks)]


# Text around a timed window is fed in pieces of this size, never in one call: the interpreter's
# partial search of a pattern that starts with `\s*` (qwen3's `\s*<tool_call>`) is quadratic in
# the length of the text it searches when nothing matches, so one 900K feed takes minutes.
CATCH_UP_PIECE = 2_048


def catch_up_pieces(text: str, start: int, end: int) -> list[str]:
    return [
        text[position : min(position + CATCH_UP_PIECE, end)]
        for position in range(start, end, CATCH_UP_PIECE)
    ]


def stream_sample(adapter, workload: workloads.Workload, inner: int) -> tuple[float, float]:
    prefix, tools, chunks = workload.prefix, workload.tools, workload.chunks

    def run() -> None:
        for _ in range(inner):
            parser = adapter.make_parser(prefix, tools)
            feed = parser.feed
            for chunk in chunks:
                feed(chunk)
            parser.finalize()

    cpu, wall = _timed(run)
    count = inner * len(chunks)
    return cpu / count, wall / count


def windowed_stream_sample(
    adapter, workload: workloads.Workload, plan, offsets
) -> tuple[float, float]:
    cpu_total = wall_total = 0.0
    fed = 0
    for start, count in plan:
        parser = adapter.make_parser(workload.prefix, workload.tools)
        feed = parser.feed
        for piece in catch_up_pieces(workload.text, 0, offsets[start]):
            feed(piece)
        window = workload.chunks[start : start + count]

        def run() -> None:
            for chunk in window:
                feed(chunk)

        cpu, wall = _timed(run)
        cpu_total += cpu
        wall_total += wall
        fed += count
    return cpu_total / fed, wall_total / fed


def whole_sample(adapter, workload: workloads.Workload, inner: int) -> tuple[float, float]:
    text, prefix, tools = workload.text, workload.prefix, workload.tools

    def run() -> None:
        for _ in range(inner):
            adapter.parse(text, prefix, tools)

    cpu, wall = _timed(run)
    return cpu / inner, wall / inner


def batch_sample(adapter, texts: list[str], prefix: str, tools: list) -> tuple[float, float]:
    parse = adapter.parse

    def run() -> None:
        for text in texts:
            parse(text, prefix, tools)

    return _timed(run)


# ---- verification --------------------------------------------------------------------------------


class Verification:
    """Counts what was checked, per implementation, so a run can prove its checks happened."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}

    def add(self, implementation: str, kind: str, amount: int = 1) -> None:
        per_kind = self.counts.setdefault(implementation, {})
        per_kind[kind] = per_kind.get(kind, 0) + amount


def _outcome(action: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", action()
    except Exception as error:  # the comparison is of outcomes, exceptions included
        return "raised", type(error).__name__


def recorded_stream(
    adapter, prefix: str, tools: list, pieces: list[str]
) -> tuple[dict, list[list[dict]]]:
    parser = adapter.make_parser(prefix, tools)
    events = [list(parser.initial_events)]
    for piece in pieces:
        events.append(parser.feed(piece))
    message, final_events = parser.finalize()
    events.append(final_events)
    return message, events


def _describe_event_difference(
    expected: list[list[dict]], actual: list[list[dict]], pieces: list[str]
) -> str:
    if len(expected) != len(actual):
        return f"{len(actual)} event lists instead of {len(expected)}"
    for index, (want, got) in enumerate(zip(expected, actual)):
        if want != got:
            where = (
                "initial_events"
                if index == 0
                else (
                    "finalize()"
                    if index == len(expected) - 1
                    else (f"feed #{index - 1} ({pieces[index - 1][:40]!r})")
                )
            )
            return f"first difference at {where}:\n  interpreter: {want!r}\n  got:         {got!r}"
    return "no difference"


def _check_equal(
    what: str, implementation: str, expected: Any, actual: Any, detail: str = ""
) -> None:
    if expected != actual:
        raise MismatchError(
            f"{what}: {implementation} differs from the interpreter.\n"
            f"  interpreter: {str(expected)[:600]}\n  {implementation}: {str(actual)[:600]}\n{detail}"
        )


def verify_workload(
    adapters: dict, workload: workloads.Workload, config: Config, verification: Verification
) -> None:
    """Compare every implementation with the interpreter on this workload; raise MismatchError."""
    label = f"{workload.template_name} {workload.size_label}"
    expected_message = _verify_whole_messages(adapters, workload, label, verification)
    others = {
        name: adapter
        for name, adapter in adapters.items()
        if name != "interpreter" and streams(adapter)
    }
    windows = config.interpreter_windows.get(workload.size_label)
    if windows is None or config.full_verify:
        _verify_full_streams(
            adapters["interpreter"], others, workload, expected_message, label, verification
        )
        return
    _verify_windowed_streams(
        adapters["interpreter"], others, workload, windows, expected_message, label, verification
    )
    _verify_streams_among_others(others, workload, expected_message, label, verification)


def _verify_whole_messages(
    adapters: dict, workload: workloads.Workload, label: str, verification: Verification
) -> dict:
    """The interpreter's whole message (checked against the generation), which every other
    implementation's parse_response must give; returns that message."""
    prefix, tools = workload.prefix, workload.tools
    expected_message = adapters["interpreter"].parse(workload.text, prefix, tools)
    if expected_message != workload.generation.expected_message():
        raise MismatchError(
            f"{label}: the workload does not parse back into the message it was generated from; "
            f"fix bench/workloads.py.\n  parsed:    {str(expected_message)[:600]}\n"
            f"  generated: {str(workload.generation.expected_message())[:600]}"
        )
    for name, adapter in adapters.items():
        if name == "interpreter":
            continue
        _check_equal(
            f"{label} parse_response",
            name,
            ("ok", expected_message),
            _outcome(lambda: adapter.parse(workload.text, prefix, tools)),
        )
        verification.add(name, "whole_message")
    return expected_message


def _verify_full_streams(
    reference,
    others: dict,
    workload: workloads.Workload,
    expected_message: dict,
    label: str,
    verification: Verification,
) -> None:
    """Whole chunked streams, event by event, against the interpreter's."""
    prefix, tools = workload.prefix, workload.tools
    reference_message, reference_events = recorded_stream(reference, prefix, tools, workload.chunks)
    _check_equal(
        f"{label} streamed message",
        "interpreter (stream vs whole)",
        expected_message,
        reference_message,
    )
    for name, adapter in others.items():
        message, events = recorded_stream(adapter, prefix, tools, workload.chunks)
        _check_equal(
            f"{label} streaming events",
            name,
            reference_events,
            events,
            _describe_event_difference(reference_events, events, workload.chunks),
        )
        _check_equal(f"{label} streamed message", name, reference_message, message)
        verification.add(name, "streams_full")
        verification.add(name, "feed_calls_compared", len(workload.chunks))


def _verify_windowed_streams(
    reference,
    others: dict,
    workload: workloads.Workload,
    windows: tuple[int, int],
    expected_message: dict,
    label: str,
    verification: Verification,
) -> None:
    """The timed windows' chunks one by one (the text around them in catch-up pieces), event by
    event, against the interpreter fed the same pieces."""
    prefix, tools = workload.prefix, workload.tools
    offsets = _chunk_offsets(workload.chunks)
    for start, count in window_plan(len(workload.chunks), *windows):
        pieces = [
            *catch_up_pieces(workload.text, 0, offsets[start]),
            *workload.chunks[start : start + count],
            *catch_up_pieces(workload.text, offsets[start + count], len(workload.text)),
        ]
        reference_message, reference_events = recorded_stream(reference, prefix, tools, pieces)
        _check_equal(
            f"{label} windowed stream",
            "interpreter (stream vs whole)",
            expected_message,
            reference_message,
        )
        for name, adapter in others.items():
            message, events = recorded_stream(adapter, prefix, tools, pieces)
            _check_equal(
                f"{label} windowed streaming events",
                name,
                reference_events,
                events,
                _describe_event_difference(reference_events, events, pieces),
            )
            _check_equal(f"{label} windowed streamed message", name, reference_message, message)
            verification.add(name, "streams_windowed")
            verification.add(name, "feed_calls_compared", len(pieces))


def _verify_streams_among_others(
    others: dict,
    workload: workloads.Workload,
    expected_message: dict,
    label: str,
    verification: Verification,
) -> None:
    """Where the interpreter is too slow for a full stream: each other implementation's full
    stream gives the interpreter's message, and they agree with each other event by event."""
    full_streams = {}
    for name, adapter in others.items():
        message, events = recorded_stream(adapter, workload.prefix, workload.tools, workload.chunks)
        _check_equal(f"{label} full streamed message", name, expected_message, message)
        full_streams[name] = events
        verification.add(name, "streams_full_message_only")
    names = sorted(full_streams)
    for first, second in zip(names, names[1:]):
        _check_equal(
            f"{label} full streaming events",
            f"{second} vs {first}",
            full_streams[first],
            full_streams[second],
        )


def verify_batch(
    adapters: dict,
    texts: list[str],
    generations,
    prefix: str,
    tools: list,
    label: str,
    verification: Verification,
) -> None:
    reference = adapters["interpreter"]
    expected = [reference.parse(text, prefix, tools) for text in texts]
    for index, (message, generation) in enumerate(zip(expected, generations)):
        if message != generation.expected_message():
            raise MismatchError(
                f"{label} batch item {index}: the workload does not parse back into its message"
            )
    for name, adapter in adapters.items():
        if name == "interpreter":
            continue
        for index, text in enumerate(texts):
            _check_equal(
                f"{label} batch item {index}",
                name,
                ("ok", expected[index]),
                _outcome(lambda: adapter.parse(text, prefix, tools)),
            )
        verification.add(name, "batch_messages", len(texts))


# ---- measurement ---------------------------------------------------------------------------------


# A run (one stream, one parse) slower than this is timed in at most SLOW_RUN_REPS samples, one
# run each, with a single warm-up: slow cases (a parser that grows with its input) then cost
# seconds, not minutes, and the figure is still a median of several runs.
SLOW_RUN_S = 0.5
SLOW_RUN_REPS = 3


def _calibrate(
    sample: Callable[[int], tuple[float, float]], min_seconds: float
) -> tuple[int, float]:
    """(runs per sample so one sample lasts `min_seconds`, CPU seconds of one run): an untimed
    warm-up run, then a second one whose CPU time decides (wall time follows the neighbours)."""
    cpu, _ = sample(1)
    if cpu < SLOW_RUN_S:
        cpu, _ = sample(1)
    single = max(cpu, 1e-7)
    return max(1, min(100_000, round(min_seconds / single + 0.5))), single


@dataclass
class SizeCalibration:
    """Per implementation: runs per sample (`*_repeats`; an implementation streamed on windows has
    no stream entry) and samples to take (`*_reps`; 0 streamed samples for a whole-message parser).
    """

    stream_repeats: dict[str, int]
    whole_repeats: dict[str, int]
    stream_reps: dict[str, int]
    whole_reps: dict[str, int]


def measure_size(adapters: dict, workload: workloads.Workload, config: Config) -> tuple[dict, dict]:
    windows = config.interpreter_windows.get(workload.size_label)
    offsets = _chunk_offsets(workload.chunks) if windows else None
    plan = window_plan(len(workload.chunks), *windows) if windows else None
    calibration = _calibrate_size(adapters, workload, config, plan)
    stream_samples, whole_samples = _sample_size(adapters, workload, calibration, plan, offsets)
    streaming = {}
    for name in adapters:
        if not stream_samples[name]:
            continue
        if name in calibration.stream_repeats:
            method = f"{calibration.stream_repeats[name]} whole stream(s) per sample"
        else:
            method = f"{len(plan)} windows x {plan[0][1]} chunks"
        streaming[name] = _summary(stream_samples[name], 1e6, unit="us/chunk", method=method)
    whole = {
        name: _summary(
            whole_samples[name],
            1e6,
            unit="us/message",
            method=f"{calibration.whole_repeats[name]} parse(s) per sample",
        )
        for name in adapters
    }
    return streaming, whole


def _calibrate_size(
    adapters: dict, workload: workloads.Workload, config: Config, plan: list | None
) -> SizeCalibration:
    """Each implementation's stream (unless the interpreter is windowed here), then its whole
    message, calibrated in turn; slow runs get at most SLOW_RUN_REPS samples."""
    size = workload.size_label
    chunk_count = len(workload.chunks)
    calibration = SizeCalibration({}, {}, {}, {})
    for name, adapter in adapters.items():
        reps = config.interpreter_reps[size] if name == "interpreter" else config.reps[size]
        calibration.stream_reps[name] = calibration.whole_reps[name] = reps
        if not streams(adapter):
            calibration.stream_reps[name] = (
                0  # a whole-message parser: timed on parse_response only
            )
        elif not (name == "interpreter" and plan is not None):
            calibration.stream_repeats[name], single = _calibrate(
                lambda inner: tuple(
                    t * chunk_count for t in stream_sample(adapter, workload, inner)
                ),
                config.min_sample_s,
            )
            if single >= SLOW_RUN_S:
                calibration.stream_reps[name] = min(reps, SLOW_RUN_REPS)
        calibration.whole_repeats[name], single = _calibrate(
            lambda inner: whole_sample(adapter, workload, inner), config.min_sample_s
        )
        if single >= SLOW_RUN_S:
            calibration.whole_reps[name] = min(reps, SLOW_RUN_REPS)
    return calibration


def _sample_size(
    adapters: dict,
    workload: workloads.Workload,
    calibration: SizeCalibration,
    plan: list | None,
    offsets: list | None,
) -> tuple[dict[str, list], dict[str, list]]:
    """The timed samples, streamed and whole, implementations interleaved in rotated order."""
    names = list(adapters)
    stream_samples: dict[str, list] = {name: [] for name in names}
    whole_samples: dict[str, list] = {name: [] for name in names}
    rounds = max(*calibration.stream_reps.values(), *calibration.whole_reps.values())
    for rep, order in _rotations(names, rounds):
        for name in order:
            adapter = adapters[name]
            if rep < calibration.stream_reps[name]:
                if name in calibration.stream_repeats:
                    sample = stream_sample(adapter, workload, calibration.stream_repeats[name])
                else:
                    sample = windowed_stream_sample(adapter, workload, plan, offsets)
                stream_samples[name].append(sample)
            if rep < calibration.whole_reps[name]:
                whole_samples[name].append(
                    whole_sample(adapter, workload, calibration.whole_repeats[name])
                )
    return stream_samples, whole_samples


def measure_batch(
    adapters: dict, texts: list[str], prefix: str, tools: list, config: Config
) -> dict:
    samples: dict[str, list] = {name: [] for name in adapters}
    for _, order in _rotations(list(adapters), config.batch_reps):
        for name in order:
            samples[name].append(batch_sample(adapters[name], texts, prefix, tools))
    result = {}
    for name, runs in samples.items():
        cpu = statistics.median(run[0] for run in runs)
        wall = statistics.median(run[1] for run in runs)
        result[name] = {
            "messages": len(texts),
            "cpu": len(texts) / cpu,
            "wall": len(texts) / wall,
            "unit": "messages/s",
            "samples_cpu_s": [run[0] for run in runs],
            "samples_wall_s": [run[1] for run in runs],
        }
    return result


def measure_openai_adapter(adapter, workload: workloads.Workload, reps: int) -> dict:
    """Per-chunk cost of rtcompile's parser alone and with the OpenAI delta adapter on top
    (compiler/integrations/openai_stream.py), interleaved; checks the adapter's deltas rebuild the message."""
    from rtcompile.integrations.openai_stream import OpenAIStream, accumulate_deltas

    prefix, tools, chunks = workload.prefix, workload.tools, workload.chunks
    template = adapter.module.TEMPLATE

    def parser_alone() -> None:
        parser = adapter.make_parser(prefix, tools)
        feed = parser.feed
        for chunk in chunks:
            feed(chunk)
        parser.finalize()

    def with_adapter() -> list:
        stream = OpenAIStream(adapter.make_parser(prefix, tools), template, tools=tools)
        deltas = list(stream.initial_deltas)
        feed = stream.feed
        for chunk in chunks:
            deltas += feed(chunk)
        return deltas + stream.finish()

    rebuilt = accumulate_deltas(with_adapter())
    expected = adapter.parse(workload.text, prefix, tools)
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in rebuilt.get("tool_calls") or []]
    wanted = [(c["function"]["name"], c["function"]["arguments"]) for c in expected.get("tool_calls") or []]
    if (rebuilt.get("content") or None) != (expected.get("content") or None) or calls != wanted:
        raise MismatchError(f"OpenAI adapter: the deltas do not rebuild the {workload.template_name} {workload.size_label} message")
    runs = {"parser": parser_alone, "parser+adapter": with_adapter}
    samples: dict[str, list] = {name: [] for name in runs}
    for _, order in _rotations(list(runs), reps):
        for name in order:
            cpu, wall = _timed(runs[name])
            samples[name].append((cpu / len(chunks), wall / len(chunks)))
    return {name: _summary(values, 1e6) for name, values in samples.items()}


def profile_stream(adapter, workload: workloads.Workload, top: int = 14) -> str:
    profiler = cProfile.Profile()
    parser = adapter.make_parser(workload.prefix, workload.tools)
    profiler.enable()
    for chunk in workload.chunks:
        parser.feed(chunk)
    parser.finalize()
    profiler.disable()
    return _top_of(profiler, top)


def profile_whole(adapter, workload: workloads.Workload, runs: int = 100, top: int = 14) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        adapter.parse(workload.text, workload.prefix, workload.tools)
    profiler.disable()
    return _top_of(profiler, top)


def _top_of(profiler: cProfile.Profile, top: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


# ---- report --------------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * width for width in widths))
    lines.extend(
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in rows
    )
    return "\n".join(lines)


def _figure(entry: dict | None, digits: int = 2) -> str:
    if entry is None:
        return "-"
    return f"{entry['cpu']:.{digits}f} ({entry['wall']:.{digits}f})"


def _ratio(numerator: dict | None, denominator: dict | None) -> float | None:
    if numerator is None or denominator is None or denominator["cpu"] <= 0:
        return None
    return numerator["cpu"] / denominator["cpu"]


def _verdict(value: float | None, target: float, at_least: bool) -> str:
    if value is None:
        return ""
    met = value >= target if at_least else value <= target
    return "ok" if met else "MISS"


class TargetBook:
    """Every target comparison made in the report, for the JSON output and the summary."""

    def __init__(self) -> None:
        self.entries: list[dict] = []

    def check(self, name: str, value: float | None, target: float, at_least: bool) -> str:
        if value is None:
            return ""
        verdict = _verdict(value, target, at_least)
        self.entries.append(
            {
                "target": name,
                "value": value,
                "goal": f"{'>=' if at_least else '<='} {target:g}",
                "met": verdict == "ok",
            }
        )
        return f"{'>=' if at_least else '<='}{target:g} {verdict}"


def render_report(results: dict, config: Config, book: TargetBook) -> str:
    """The report's sections in order; each adds its target comparisons to `book` as it renders,
    so the footer, rendered last, counts them all."""
    sections = [
        _header_section(results),
        _streaming_section(results, book),
        _growth_section(results, config, book),
        _whole_message_section(results, book),
        _batch_section(results, config),
        _import_section(results, book),
        _compile_section(results, book),
        _footer_section(results, book),
    ]
    return "\n".join(line for section in sections for line in section)


def _header_section(results: dict) -> list[str]:
    env = results["environment"]
    out = [
        f"rtcompile benchmark ({'quick' if results['quick'] else 'full'}) - Python {env['python']}, "
        f"transformers {env['transformers']}, {env['cpus']} CPUs, load average {env['load_before']} -> "
        f"{env.get('load_after')}",
        "Times are medians of process CPU time, wall time in brackets; ratios use CPU time.",
        "Generations are "
        + (
            "ASCII only."
            if results["ascii_only"]
            else "mostly ASCII with a few characters like '—' and '°' (2 bytes per character in CPython)."
        )
        + "\n",
    ]
    for name, info in results["templates"].items():
        missing = ", ".join(f"{impl}: {why}" for impl, why in info["missing"].items())
        out.append(
            f"  {name}: template {info['source']}, prompt from {info['prefix_source']}"
            + (f"; not run: {missing}" if missing else "")
        )
    out.append("")
    return out


STREAMING_HEADERS = [
    "template",
    "size",
    "chunks",
    "interpreter",
    "rtcompile",
    "handwritten",
    "interp/rtc",
    "target",
    "rtc/hand",
]


def _streaming_section(results: dict, book: TargetBook) -> list[str]:
    rows = [
        _streaming_row(name, size, per_impl, results["workloads"][name][size]["chunks"], book)
        for name, per_size in results["streaming"].items()
        for size, per_impl in per_size.items()
    ]
    out = [
        "Streaming in token-like chunks of 1-6 characters: microseconds per chunk",
        _table(STREAMING_HEADERS, rows),
    ]
    windowed = sorted(
        f"{size} ({entry['interpreter']['method']})"
        for sizes in results["streaming"].values()
        for size, entry in sizes.items()
        if "interpreter" in entry and "windows" in entry["interpreter"]["method"]
    )
    if windowed:
        out.append(
            "  interpreter streamed on windows of consecutive chunks at "
            + ", ".join(dict.fromkeys(windowed))
            + "; everything else on whole streams"
        )
    out.append("")
    return out


def _streaming_row(
    name: str, size: str, per_impl: dict, chunks: int, book: TargetBook
) -> list[str]:
    interp, rtc, hand = (per_impl.get(impl) for impl in IMPLEMENTATIONS)
    ratio = _ratio(interp, rtc)
    vs_hand = _ratio(rtc, hand)
    target = ""
    if size in ("1K", "16K", "1M"):
        target = book.check(
            f"streaming ratio {name} {size}", ratio, TARGETS[f"stream_ratio_{size}"], True
        )
    hand_target = (
        book.check(
            f"streaming rtcompile/handwritten {name} {size}",
            vs_hand,
            TARGETS["vs_handwritten"],
            False,
        )
        if vs_hand is not None
        else ""
    )
    return [
        name,
        size,
        str(chunks),
        _figure(interp),
        _figure(rtc, 3),
        _figure(hand, 3),
        f"{ratio:.1f}x" if ratio else "-",
        target,
        f"{vs_hand:.2f}x {hand_target}" if vs_hand else "-",
    ]


def _growth_section(results: dict, config: Config, book: TargetBook) -> list[str]:
    largest = config.sizes[-1]
    if "16K" not in config.sizes or largest == "16K":
        return []
    rows = []
    for name, per_size in results["streaming"].items():
        for impl in IMPLEMENTATIONS:
            small, big = per_size["16K"].get(impl), per_size[largest].get(impl)
            if small is None or big is None:
                continue
            growth = big["cpu"] / small["cpu"]
            target = (
                book.check(f"growth {impl} {name} {largest}/16K", growth, TARGETS["growth"], False)
                if impl == "rtcompile" and largest == "1M"
                else ""
            )
            rows.append(
                [name, impl, f"{small['cpu']:.3f}", f"{big['cpu']:.3f}", f"{growth:.2f}", target]
            )
    return [
        f"Growth: per-chunk CPU cost at {largest} / at 16K"
        + ("" if largest == "1M" else " (quick mode: 1M not run, no target)"),
        _table(["template", "implementation", "16K us", f"{largest} us", "growth", "target"], rows),
        "",
    ]


def _whole_message_section(results: dict, book: TargetBook) -> list[str]:
    rows = [
        _whole_message_row(name, size, per_impl, book)
        for name, per_size in results["whole_message"].items()
        for size, per_impl in per_size.items()
    ]
    headers = [header for header in STREAMING_HEADERS if header != "chunks"]
    return ["Whole message (parse_response): microseconds per message", _table(headers, rows), ""]


def _whole_message_row(name: str, size: str, per_impl: dict, book: TargetBook) -> list[str]:
    interp, rtc, hand = (per_impl.get(impl) for impl in IMPLEMENTATIONS)
    ratio = _ratio(interp, rtc)
    vs_hand = _ratio(rtc, hand)
    target = hand_target = ""
    if size in ("1K", "16K"):
        target = book.check(
            f"whole-message ratio {name} {size}", ratio, TARGETS["whole_ratio"], True
        )
        if vs_hand is not None:
            hand_target = book.check(
                f"whole-message rtcompile/handwritten {name} {size}",
                vs_hand,
                TARGETS["whole_vs_handwritten"],
                False,
            )
    return [
        name,
        size,
        _figure(interp, 1),
        _figure(rtc, 1),
        _figure(hand, 1),
        f"{ratio:.1f}x" if ratio else "-",
        target,
        f"{vs_hand:.2f}x {hand_target}" if vs_hand else "-",
    ]


def _batch_section(results: dict, config: Config) -> list[str]:
    rows = []
    for name, per_impl in results["batch"].items():
        interp, rtc, hand = (per_impl.get(impl) for impl in IMPLEMENTATIONS)
        ratio = rtc["cpu"] / interp["cpu"] if rtc and interp else None
        rows.append(
            [
                name,
                str(interp["messages"]),
                _figure(interp, 0),
                _figure(rtc, 0),
                _figure(hand, 0),
                f"{ratio:.1f}x" if ratio else "-",
            ]
        )
    headers = ["template", "messages", "interpreter", "rtcompile", "handwritten", "rtc/interp"]
    return [
        f"Batch: {config.batch_count:,} finished ~1K generations parsed one after another: messages/s",
        _table(headers, rows),
        "",
    ]


def _import_section(results: dict, book: TargetBook) -> list[str]:
    if not results.get("import"):
        return []
    rows = []
    for name, entry in results["import"].items():
        module_ms = entry["module_cpu_s"] * 1e3
        heavy = ", ".join(entry["heavy_imports"]) or "none"
        target = book.check(f"import ms {name}", module_ms, TARGETS["import_ms"], False)
        heavy_target = book.check(
            f"heavy imports {name}", float(len(entry["heavy_imports"])), 0.0, False
        )
        rows.append(
            [
                name,
                f"{module_ms:.1f} ({entry['module_wall_s'] * 1e3:.1f})",
                f"{entry['regex_cpu_s'] * 1e3:.1f} ({entry['regex_wall_s'] * 1e3:.1f})",
                target,
                f"{heavy} {heavy_target}",
            ]
        )
    headers = ["template", "module import", "import regex", "target", "jinja2/black/transformers"]
    return [
        "Import of a generated module in a fresh interpreter, above a bare `import regex` (ms)",
        _table(headers, rows),
        "",
    ]


COMPILE_HEADERS = [
    "template",
    "cold compile",
    "target",
    "warm",
    "first load",
    "memo",
    "new process",
    "hit",
    "target",
    "then parse 1K",
    "cache files",
]

# What each column of the compile table measures, printed above it.
COMPILE_LEGEND = [
    "  cold = first compile_template in a fresh process; warm = second one; first load = load()"
    " with an empty cache dir;",
    "  memo = load() again in-process (same dict / equal copy); new process = load() in a new"
    " process sharing the cache dir, first use (importing the loader and the runtime, regex"
    " included);",
    "  hit = the same in a process that has imported them already (median of 3 processes);"
    " then = parsing a 1K message right after the hit, first / second time (the first"
    " compiles the regex patterns it needs)",
]


def _compile_section(results: dict, book: TargetBook) -> list[str]:
    if not results.get("compile"):
        return []
    rows = [_compile_row(name, entry, book) for name, entry in results["compile"].items()]
    return [
        "Compile and load (ms, CPU; wall in brackets)",
        *COMPILE_LEGEND,
        _table(COMPILE_HEADERS, rows),
        "",
    ]


def _compile_row(name: str, entry: dict, book: TargetBook) -> list[str]:
    cold = entry["compile_cold_cpu"] * 1e3
    memo = entry["load_memo_same_object_cpu"] * 1e3
    fresh = entry["load_new_process_warm_cache_cpu"] * 1e3
    fresh_hit = entry["cache_hit_cpu"] * 1e3
    return [
        name,
        f"{cold:.0f} ({entry['compile_cold_wall'] * 1e3:.0f})",
        book.check(f"cold compile ms {name}", cold, TARGETS["cold_compile_ms"], False),
        f"{entry['compile_warm_cpu'] * 1e3:.0f}",
        f"{entry['load_first_cpu'] * 1e3:.0f}",
        f"{memo:.3f} / {entry['load_memo_equal_copy_cpu'] * 1e3:.2f}",
        f"{fresh:.1f} ({entry['load_new_process_warm_cache_wall'] * 1e3:.1f})",
        f"{fresh_hit:.2f} ({entry['cache_hit_wall'] * 1e3:.2f})",
        book.check(f"cache hit ms {name}", fresh_hit, TARGETS["cache_hit_ms"], False),
        f"{entry['first_parse_after_hit_cpu'] * 1e3:.2f} / {entry['next_parse_after_hit_cpu'] * 1e3:.2f}",
        str(len(entry["cache_dir_files_after_first_load"])),
    ]


def _footer_section(results: dict, book: TargetBook) -> list[str]:
    """The equality checks that ran and the target tally (of every check the sections made)."""
    counts = results["verification"]
    missed = [entry["target"] for entry in book.entries if not entry["met"]]
    return [
        "Equality checks passed before timing (per implementation): "
        + "; ".join(
            f"{impl}: " + ", ".join(f"{kind} {amount}" for kind, amount in sorted(kinds.items()))
            for impl, kinds in counts.items()
        ),
        f"Targets: {len(book.entries) - len(missed)} of {len(book.entries)} met"
        + (f"; missed: {', '.join(missed)}" if missed else ""),
    ]


# ---- main ----------------------------------------------------------------------------------------


def _environment() -> dict:
    import transformers

    try:
        import rtcompile

        rtcompile_version = getattr(rtcompile, "__version__", "unknown")
    except ImportError:
        rtcompile_version = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "transformers": transformers.__version__,
        "rtcompile": rtcompile_version,
        "load_before": " ".join(f"{value:.2f}" for value in os.getloadavg()),
    }


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and few repetitions (< 1 minute)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write all figures and samples as JSON")
    parser.add_argument(
        "--templates",
        nargs="+",
        choices=workloads.TEMPLATE_NAMES,
        default=list(workloads.TEMPLATE_NAMES),
    )
    parser.add_argument(
        "--sizes", nargs="+", choices=list(workloads.SIZES), help="override the sizes of the mode"
    )
    parser.add_argument(
        "--implementations", nargs="+", choices=IMPLEMENTATIONS, default=list(IMPLEMENTATIONS)
    )
    parser.add_argument(
        "--full-verify",
        action="store_true",
        help="verify whole interpreter streams at every size (slow at 1M)",
    )
    parser.add_argument(
        "--ascii",
        action="store_true",
        help="ASCII-only generations (1 byte per character in CPython; default has a few non-ASCII)",
    )
    parser.add_argument(
        "--no-startup", action="store_true", help="skip the import and compile probes"
    )
    parser.add_argument(
        "--batch-only", action="store_true", help="only the batch throughput (bench/batch_throughput.py)"
    )
    parser.add_argument(
        "--no-batch-throughput", action="store_true", help="skip the batch throughput"
    )
    parser.add_argument(
        "--token-ids", action="store_true", help="only the token-id section (bench/token_ids.py)"
    )
    parser.add_argument("--no-token-ids", action="store_true", help="skip the token-id section")
    parser.add_argument(
        "--grammar", action="store_true", help="only the grammar backend's section (bench/grammar.py)"
    )
    parser.add_argument(
        "--batch-template", choices=workloads.TEMPLATE_NAMES, default="qwen3_5",
        help="the template of the batch throughput rows (default qwen3_5)",
    )
    parser.add_argument("--batch-rows", type=int, help="override the mode's batch throughput rows")
    parser.add_argument(
        "--profile",
        nargs="?",
        const="qwen3:16K",
        metavar="TEMPLATE:SIZE",
        help="print a cProfile of one stream per implementation (default qwen3:16K)",
    )
    return parser.parse_args(argv)


def run(arguments: argparse.Namespace) -> tuple[dict, str, int]:
    if arguments.token_ids:
        return _run_token_ids_only(arguments)
    if arguments.grammar:
        return _run_grammar_only(arguments)
    config = _config_for(arguments)
    wanted = tuple(dict.fromkeys(["interpreter", *arguments.implementations]))
    verification = Verification()
    results = _empty_results(arguments, config)
    for name in [] if arguments.batch_only else arguments.templates:
        _measure_template(name, arguments, config, wanted, verification, results)
    if not arguments.no_batch_throughput:
        _measure_batch_throughput(arguments, config, results)
    token_report = None
    if not arguments.no_token_ids and not arguments.batch_only:
        token_report = _measure_token_ids(arguments, results)
    results["environment"]["load_after"] = " ".join(f"{value:.2f}" for value in os.getloadavg())
    results["verification"] = verification.counts
    book = TargetBook()
    if arguments.batch_only:
        report = batch_throughput.render(results["batch_throughput"], _table)
        results["targets"] = []
        return results, report, 0
    report = _full_report(results, config, book, token_report)
    results["targets"] = book.entries
    return results, report, 0


def _run_token_ids_only(arguments: argparse.Namespace) -> tuple[dict, str, int]:
    from . import token_ids

    rows, report = token_ids.main(arguments.quick, _table)
    return {"token_ids": rows, "environment": _environment(), "targets": []}, report, 0


def _run_grammar_only(arguments: argparse.Namespace) -> tuple[dict, str, int]:
    from . import grammar

    book = TargetBook()
    figures, report = grammar.main(arguments.quick, _table, book)
    results = {
        "grammar": figures,
        "quick": arguments.quick,
        "environment": _environment(),
        "targets": book.entries,
    }
    return results, report, 0


def _config_for(arguments: argparse.Namespace) -> Config:
    """The mode's settings, with the sizes asked for (sizes outside the mode get the full run's
    settings)."""
    config = QUICK if arguments.quick else FULL
    if arguments.sizes:
        ordered = [size for size in workloads.SIZES if size in arguments.sizes]
        config = Config(**{**asdict(config), "sizes": tuple(ordered)})
        for size in ordered:
            for table_name in ("reps", "interpreter_reps"):
                getattr(config, table_name).setdefault(size, getattr(FULL, table_name)[size])
            if size in FULL.interpreter_windows:
                config.interpreter_windows.setdefault(size, FULL.interpreter_windows[size])
    config.full_verify = arguments.full_verify
    return config


def _empty_results(arguments: argparse.Namespace, config: Config) -> dict[str, Any]:
    return {
        "quick": arguments.quick,
        "ascii_only": arguments.ascii,
        "config": asdict(config),
        "environment": _environment(),
        "templates": {},
        "workloads": {},
        "streaming": {},
        "whole_message": {},
        "batch": {},
        "import": {},
        "compile": {},
        "profiles": {},
    }


def _progress(what: str, phase_started: float) -> None:
    print(
        f"  measured {what} ({time.perf_counter() - phase_started:.1f} s)",
        file=sys.stderr,
        flush=True,
    )


def _measure_template(
    name: str,
    arguments: argparse.Namespace,
    config: Config,
    wanted: tuple[str, ...],
    verification: Verification,
    results: dict,
) -> None:
    """One template's phases in order: every size, the batch, the profile asked for, start-up,
    the OpenAI adapter."""
    template, source = workloads.load_template(name)
    adapters, missing = adapters_for(name, template, wanted)
    results["templates"][name] = {
        "source": source,
        "prefix_source": workloads.prompt_prefix(name)[1],
        "missing": missing,
    }
    results["workloads"][name] = {}
    results["streaming"][name] = {}
    results["whole_message"][name] = {}
    for size in config.sizes:
        _measure_template_size(name, size, adapters, arguments, config, verification, results)
    _measure_template_batch(name, adapters, arguments, config, verification, results)
    phase_started = time.perf_counter()
    if arguments.profile and arguments.profile.split(":")[0] == name:
        _profile_template(name, adapters, arguments, results)
    probe_startup = config.startup_all_templates or name == arguments.templates[0]
    if "rtcompile" in adapters and probe_startup and not arguments.no_startup:
        _measure_startup(name, template, arguments, config, results)
        _progress(f"start-up of {name}", phase_started)
    if "rtcompile" in adapters and "16K" in config.sizes:
        workload = workloads.build_workload(name, "16K", ascii_only=arguments.ascii)
        with _frozen_heap():
            results.setdefault("openai_adapter", {})[name] = measure_openai_adapter(
                adapters["rtcompile"], workload, config.reps["16K"]
            )


def _measure_template_size(
    name: str,
    size: str,
    adapters: dict,
    arguments: argparse.Namespace,
    config: Config,
    verification: Verification,
    results: dict,
) -> None:
    phase_started = time.perf_counter()
    workload = workloads.build_workload(name, size, ascii_only=arguments.ascii)
    results["workloads"][name][size] = {
        "chars": len(workload.text),
        "chunks": len(workload.chunks),
        "prefix_chars": len(workload.prefix),
        "tool_calls": len(workload.generation.calls),
    }
    verify_workload(adapters, workload, config, verification)
    with _frozen_heap():
        streaming, whole = measure_size(adapters, workload, config)
    results["streaming"][name][size] = streaming
    results["whole_message"][name][size] = whole
    _progress(f"{name} {size}", phase_started)


def _measure_template_batch(
    name: str,
    adapters: dict,
    arguments: argparse.Namespace,
    config: Config,
    verification: Verification,
    results: dict,
) -> None:
    phase_started = time.perf_counter()
    texts, generations = workloads.batch_texts(name, config.batch_count, ascii_only=arguments.ascii)
    prefix = workloads.prompt_prefix(name)[0]
    verify_batch(adapters, texts, generations, prefix, workloads.TOOLS, name, verification)
    with _frozen_heap():
        results["batch"][name] = measure_batch(adapters, texts, prefix, workloads.TOOLS, config)
    _progress(f"{name} batch", phase_started)


def _profile_template(
    name: str, adapters: dict, arguments: argparse.Namespace, results: dict
) -> None:
    size = arguments.profile.split(":")[1] if ":" in arguments.profile else "16K"
    workload = workloads.build_workload(name, size, ascii_only=arguments.ascii)
    with _frozen_heap():
        results["profiles"][f"{name}:{size}"] = {
            f"one stream, {impl}": profile_stream(adapter, workload)
            for impl, adapter in adapters.items()
            if streams(adapter)
        }
        results["profiles"][f"{name}:{size}"].update(
            {
                f"100 whole messages, {impl}": profile_whole(adapter, workload)
                for impl, adapter in adapters.items()
            }
        )


def _measure_startup(
    name: str, template: dict, arguments: argparse.Namespace, config: Config, results: dict
) -> None:
    import rtcompile

    with tempfile.TemporaryDirectory(prefix="rtcompile-bench-") as work_dir:
        source_text = rtcompile.compile_template(template)
        results["import"][name] = startup.measure_import(
            source_text, f"bench_generated_{name}", config.import_runs, work_dir
        )
        sample = workloads.build_workload(name, "1K", ascii_only=arguments.ascii)
        results["compile"][name] = startup.measure_compile(
            template,
            work_dir,
            {"text": sample.text, "prefix": sample.prefix, "tools": sample.tools},
        )


def _measure_batch_throughput(arguments: argparse.Namespace, config: Config, results: dict) -> None:
    phase_started = time.perf_counter()
    results["batch_throughput"] = batch_throughput.measure(
        arguments.batch_template,
        arguments.batch_rows or config.throughput_rows,
        config.throughput_reps,
    )
    _progress("batch throughput", phase_started)


def _measure_token_ids(arguments: argparse.Namespace, results: dict) -> str:
    from . import token_ids

    phase_started = time.perf_counter()
    results["token_ids"], token_report = token_ids.main(arguments.quick, _table)
    _progress("token ids", phase_started)
    return token_report


def _full_report(results: dict, config: Config, book: TargetBook, token_report: str | None) -> str:
    """The main report, then the token-id, batch throughput, profile and OpenAI adapter
    sections that ran."""
    report = render_report(results, config, book)
    if results.get("token_ids"):
        report += "\n\n" + token_report
    if results.get("batch_throughput"):
        report += "\n\n" + batch_throughput.render(results["batch_throughput"], _table)
    for key, profiles in results["profiles"].items():
        for impl, text in profiles.items():
            report += f"\n\ncProfile of {impl}, {key} (sorted by own time):\n{text.strip()}"
    if results.get("openai_adapter"):
        rows = [
            [
                name,
                f"{r['parser']['cpu']:.3f}",
                f"{r['parser+adapter']['cpu']:.3f}",
                f"{r['parser+adapter']['cpu'] / r['parser']['cpu']:.2f}x",
            ]
            for name, r in results["openai_adapter"].items()
        ]
        report += (
            "\n\nOpenAI delta adapter on top of the parser, streaming at 16K: microseconds per"
            " chunk (CPU)\n"
        )
        report += _table(["template", "parser", "parser+adapter", "cost ratio"], rows)
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serving"]:  # vLLM's parse_delta, in the vLLM environment (bench/serving.py)
        from . import serving

        return serving.main(argv[1:])
    arguments = parse_arguments(argv)
    started = time.perf_counter()
    try:
        results, report, status = run(arguments)
    except MismatchError as error:
        print(
            f"\nBENCHMARK STOPPED: output mismatch, nothing was timed for this case.\n{error}",
            file=sys.stderr,
        )
        return 2
    results["elapsed_s"] = time.perf_counter() - started
    print(report)
    print(f"\n(elapsed {results['elapsed_s']:.1f} s)")
    if arguments.json:
        with open(arguments.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1, default=str)
    return status

"""Enormous outputs: streaming costs time linear in the output's length and memory proportional to it.

Nothing here reads a clock. Generations are made of one fixed block of realistic text (prose,
markdown, code with `<` and indentation, non-ASCII) repeated, so that windows of the stream at
different positions hold exactly the same text, and the cost of feeding a window in 1-character
chunks is measured three deterministic ways:

* bytecodes executed (`sys.settrace` with opcode events), over the window's first chunks: catches
  Python loops over held or accumulated text;
* calls, Python-level and builtin (`cProfile`, which is implemented in C), over the whole window;
* copying (`tracemalloc`): for every chunk, the memory allocated while it is fed beyond what was
  live before it (peak minus current). A parser that copies its buffer or its region text on each
  chunk allocates, per chunk, memory proportional to the stream so far. The rare chunk that grows a
  list's over-allocation (amortized O(1)) is left out: the largest few chunks of a window are dropped.

Linear streaming means a window costs the same wherever it is: early or late in a region, in a
1 MB, 4 MB or 10 MB run. On top of that, whole 1 MB and 4 MB runs must have tracemalloc peaks in
ratio close to 4 (not 16), whole-run call totals grow 4x for 4x the text, and the copy measure is
shown to catch the quadratic buffer of the transformers interpreter (whose bytecode and call
counts per chunk are flat: counting calls alone would prove nothing).

Not measured: work inside C functions. A regex search or `str.find` that rescans held text is one
call and allocates nothing, however long the text; only a Python loop or a copy over it shows.
"""

from __future__ import annotations

import cProfile
import gc
import json
import pstats
import sys
import tracemalloc
from dataclasses import dataclass

import pytest
from transformers.utils import chat_parsing as interpreter

import rtcompile

MB = 1 << 20

# ~7 KB of text that a reasoning model writes: none of the bundled templates' delimiters occur in it,
# but their first characters do (`<` in comparisons and generics, runs of spaces and newlines).
BLOCK = (
    "Let me think about how the cache behaves when two workers write the same key at once.\n"
    "First, the write is atomic: a temporary file, fsync, then os.replace. If x < y and y < z, "
    "then x < z, so the ordering argument holds.\n\n"
    "## Plan\n\n"
    "1. Read the entry; check the header.\n"
    "2. If the checksum differs -> rebuild.\n"
    "3. Otherwise import it.\n\n"
    "```python\n"
    "def pick(items: list[int], limit: int) -> list[int]:\n"
    "    out = []\n"
    "    for item in items:\n"
    "        if item < limit and item > 0:\n"
    "            out.append(item)\n"
    "    return out\n"
    "```\n\n"
    "Température à Paris : 21 °C, 東京は晴れ, emoji 🙂 and a combining e\u0301.\n"
    "Is Vec<String> the right type here? Probably Option<&str> is better; a < b <= c.\n"
    "    indented line with trailing spaces   \n"
    "\tand a tab, then numbers 3.14159, -2e10, 0x1F, 1_000_000.\n"
    "The quick brown fox jumps over the lazy dog; the five boxing wizards jump quickly. " * 4
    + "\n"
    "Checking the edge case where the list is empty: pick([], 3) == [] as expected.\n"
    "Now the JSON the tool needs: {\"city\": \"Paris\", \"units\": \"metric\"} looks right.\n"
    "Wait, should 'limit' be inclusive? The spec says strictly less, so < is correct.\n\n"
) * 2
TOOL_ARGUMENTS = {"city": "Paris", "units": "metric", "days": 3, "note": "x < y & \"quoted\""}


@dataclass(frozen=True)
class Generation:
    """A long generation and where its repeated-block regions start (in characters)."""

    text: str
    regions: dict  # region name -> (offset of its first block, number of blocks)
    expected: dict  # the parsed message


def blocks_for(size: int) -> int:
    """The number of blocks for a generation of about `size` characters: a multiple of 5, so that
    reasoning and content split it 3:2 exactly and generations of n and 4n blocks are alike; at
    least 15, so that each region has room for two windows that do not overlap."""
    return max(15, size // len(BLOCK) // 5 * 5)


def qwen3_generation(blocks: int) -> Generation:
    """Reasoning (60% of the blocks), then content (40%), then a tool call and the end of turn."""
    thinking, answer = blocks * 3 // 5, blocks - blocks * 3 // 5
    call = json.dumps({"name": "get_weather", "arguments": TOOL_ARGUMENTS})
    parts = ["<think>\n", BLOCK * thinking, "</think>\n\n", BLOCK * answer, "\n<tool_call>\n", call, "\n</tool_call><|im_end|>"]
    text = "".join(parts)
    reasoning_at = len(parts[0])
    content_at = reasoning_at + len(parts[1]) + len(parts[2])
    expected = {
        "role": "assistant",
        "reasoning_content": (BLOCK * thinking).strip(),
        "content": (BLOCK * answer).strip(),
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": TOOL_ARGUMENTS}}],
    }
    return Generation(text, {"reasoning": (reasoning_at, thinking), "content": (content_at, answer)}, expected)


def gpt_oss_generation(blocks: int) -> Generation:
    """Analysis (60% of the blocks), a tool call in the commentary channel, then the final answer."""
    thinking, answer = blocks * 3 // 5, blocks - blocks * 3 // 5
    parts = [
        "<|channel|>analysis<|message|>",
        BLOCK * thinking,
        "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
        json.dumps(TOOL_ARGUMENTS),
        "<|call|><|start|>assistant<|channel|>final<|message|>",
        BLOCK * answer,
        "<|return|>",
    ]
    text = "".join(parts)
    reasoning_at = len(parts[0])
    content_at = sum(map(len, parts[:5]))
    expected = {
        "role": "assistant",
        "reasoning_content": (BLOCK * thinking).strip(),
        "content": (BLOCK * answer).strip(),
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": TOOL_ARGUMENTS}}],
    }
    return Generation(text, {"reasoning": (reasoning_at, thinking), "content": (content_at, answer)}, expected)


GENERATIONS = {"qwen3": qwen3_generation, "gpt_oss": gpt_oss_generation}

# A window is this many blocks of 1-character chunks; the largest few per-chunk allocations of a
# window (amortized list growth) are not counted.
WINDOW_BLOCKS = 2
DROPPED_CHUNKS = 16


@dataclass
class WindowCost:
    opcodes: int  # bytecodes run, over the window's first OPCODE_CHUNKS chunks (sys.settrace)
    calls: int  # Python-level and builtin calls over the whole window (cProfile)
    copied: int  # bytes allocated and not kept, summed over chunks, largest few dropped


# Counting every bytecode is slow (a Python callback per opcode), so it covers only the start of
# each window; the windows hold the same text, so the counts must be equal.
OPCODE_CHUNKS = 1024


def count_opcodes(feed, text: str, start: int, stop: int) -> int:
    """Bytecodes executed by `feed` (and everything it calls) for text[start:stop], 1 char each."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            count += 1
        return tracer

    previous = sys.gettrace()  # e.g. a coverage tracer: put it back afterwards
    sys.settrace(tracer)
    try:
        for i in range(start, stop):
            feed(text[i])
    finally:
        sys.settrace(previous)
    return count


class Streamer:
    """Feeds a text in 1-character chunks (under tracemalloc), measuring chosen windows of it."""

    def __init__(self, parser, text: str):
        self.parser = parser
        self.text = text
        self.position = 0
        self.peak = 0  # tracemalloc peak over everything fed so far (windows reset tracemalloc's)

    def run_to(self, stop: int) -> None:
        assert stop >= self.position, "windows overlap"
        text, feed = self.text, self.parser.feed
        for i in range(self.position, stop):
            feed(text[i])
        self.position = stop

    def measure(self, stop: int, opcode_chunks: int = OPCODE_CHUNKS) -> WindowCost:
        """Feed up to `stop`: bytecodes over the first `opcode_chunks` chunks, then calls and, per
        chunk, the memory allocated and not kept over the rest of the window. The garbage collector
        is off meanwhile: a collection runs Python callbacks (hypothesis installs one) at moments
        that have nothing to do with the parser."""
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._measure(stop, opcode_chunks)
        finally:
            if was_enabled:
                gc.enable()

    def _measure(self, stop: int, opcode_chunks: int) -> WindowCost:
        text, feed = self.text, self.parser.feed
        opcodes_until = self.position + opcode_chunks
        assert opcodes_until + DROPPED_CHUNKS < stop, "window too short, or overlapping the previous one"
        opcodes = count_opcodes(feed, text, self.position, opcodes_until)
        reset, traced = tracemalloc.reset_peak, tracemalloc.get_traced_memory
        self.peak = max(self.peak, traced()[1])
        per_chunk = []
        profiler = cProfile.Profile()
        profiler.enable()
        for i in range(opcodes_until, stop):
            reset()
            before = traced()[0]
            feed(text[i])
            per_chunk.append(traced()[1] - before)
        profiler.disable()
        self.position = stop
        self.peak = max(self.peak, before + max(per_chunk))
        per_chunk.sort()
        # The measuring calls (reset, traced twice, append) are counted too: 4 per chunk, whatever
        # the position, like everything else a linear parser does per chunk.
        return WindowCost(
            opcodes=opcodes,
            calls=pstats.Stats(profiler).total_calls,
            copied=sum(per_chunk[:-DROPPED_CHUNKS]),
        )

    def finish(self) -> dict:
        message, _ = self.parser.finalize()
        self.peak = max(self.peak, tracemalloc.get_traced_memory()[1])
        return message


def measured_run(make_parser, generation: Generation) -> tuple[dict, dict, int]:
    """Stream a whole generation in 1-character chunks under tracemalloc, measuring a window near
    the start and one near the end of each repeated-block region. Returns (message, window costs
    by name, tracemalloc peak of the whole parse)."""
    windows = []
    for region, (offset, blocks) in generation.regions.items():
        windows.append((f"{region} early", offset + 1 * len(BLOCK)))
        windows.append((f"{region} late", offset + (blocks - 1 - WINDOW_BLOCKS) * len(BLOCK)))
    windows.sort(key=lambda w: w[1])
    costs = {}
    tracemalloc.start()
    try:
        streamer = Streamer(make_parser(), generation.text)
        for name, start in windows:
            streamer.run_to(start)
            costs[name] = streamer.measure(start + WINDOW_BLOCKS * len(BLOCK))
        streamer.run_to(len(generation.text))
        message = streamer.finish()
    finally:
        tracemalloc.stop()
    return message, costs, streamer.peak



def compiled(name: str):
    module = rtcompile.load(rtcompile.template_for(name))
    return lambda: module.ResponseParser("")


def interpreted(name: str):
    template = rtcompile.template_for(name)
    return lambda: interpreter.ResponseParser(template, "")


def assert_same_cost_everywhere(costs: dict, label: str) -> None:
    """Windows over the same text cost the same calls and copies, wherever they are in the stream."""
    for region in sorted({name.split()[0] for name in costs}):
        early, late = costs[f"{region} early"], costs[f"{region} late"]
        assert late.opcodes == early.opcodes, f"{label}: {region}: {late.opcodes} bytecodes late vs {early.opcodes} early"
        assert late.calls == early.calls, f"{label}: {region}: {late.calls} calls late vs {early.calls} early"
        # A few KB of slack for allocator noise; copying the stream so far costs MBs per window.
        assert late.copied <= early.copied * 1.05 + 64 * 1024, (
            f"{label}: {region}: each chunk late in the stream allocates more than early on "
            f"({late.copied} vs {early.copied} bytes over {WINDOW_BLOCKS * len(BLOCK)} chunks): "
            "the parser copies text proportional to the stream on every chunk"
        )


TEMPLATES = sorted(GENERATIONS)


@pytest.mark.parametrize("name", TEMPLATES)
def test_cost_per_chunk_does_not_grow_along_the_stream(name):
    generation = GENERATIONS[name](blocks_for(128 * 1024))
    message, costs, _ = measured_run(compiled(name), generation)
    assert message == generation.expected
    assert_same_cost_everywhere(costs, f"{name}, 128 KB")


@pytest.mark.full  # (the 128 KB runs above check the same per-window costs in the quick tier)
@pytest.mark.parametrize("name", TEMPLATES)
def test_one_and_four_megabytes_cost_in_proportion(name):
    # Fail fast, in seconds, when streaming is quadratic: the 4 MB run would then take hours.
    probe = GENERATIONS[name](blocks_for(128 * 1024))
    _, probe_costs, _ = measured_run(compiled(name), probe)
    assert_same_cost_everywhere(probe_costs, f"{name}, 128 KB probe (the 1 MB and 4 MB runs were not attempted)")

    runs = []
    for blocks in (blocks_for(MB), 4 * blocks_for(MB)):
        generation = GENERATIONS[name](blocks)
        message, costs, peak = measured_run(compiled(name), generation)
        assert message == generation.expected
        runs.append((len(generation.text), costs, peak))
    (small_len, small_costs, small_peak), (big_len, big_costs, big_peak) = runs
    size_ratio = big_len / small_len
    assert 0.95 * MB < small_len < 1.05 * MB and 3.99 < size_ratio < 4.01
    # Memory: the peak grows like the output (quadratic copies would make it ~16x, or far more time).
    assert big_peak <= small_peak * size_ratio * 1.125, (big_peak, small_peak)
    # Work: every measured window of the 4 MB run costs what it cost in the 1 MB run.
    for window, cost in big_costs.items():
        assert cost.opcodes == small_costs[window].opcodes, window
        assert cost.calls == small_costs[window].calls, window
        assert cost.copied <= small_costs[window].copied * 1.05 + 64 * 1024, window


def test_total_calls_grow_linearly():
    """Whole-run call counts (exact, so smaller sizes suffice): 4x the text, 4x the calls."""
    totals = {}
    for size in (20, 80):
        generation = qwen3_generation(size)
        parser = compiled("qwen3")()
        profiler = cProfile.Profile()
        gc.disable()  # no collector callbacks in the count (see Streamer.measure)
        profiler.enable()
        try:
            for ch in generation.text:
                parser.feed(ch)
            message, _ = parser.finalize()
        finally:
            profiler.disable()
            gc.enable()
        assert message == generation.expected
        totals[size] = (len(generation.text), pstats.Stats(profiler).total_calls)
    (small_len, small_calls), (big_len, big_calls) = totals.values()
    # Calls per character: equal up to the constant cost of opening and closing the regions.
    assert abs(big_calls / big_len - small_calls / small_len) < 0.01 * small_calls / small_len, totals


@pytest.mark.full
def test_ten_megabytes_in_one_character_chunks():
    """The 10 MB run completes, and its chunks cost, deep in the stream, what they cost at 1 MB.

    The copy measure runs only in the windows here (tracemalloc started for each), so the run
    itself is not slowed down by tracing."""
    generation = qwen3_generation(10 * blocks_for(MB))
    reference = qwen3_generation(blocks_for(MB))
    costs = {}
    for label, gen in (("1 MB", reference), ("10 MB", generation)):
        streamer = Streamer(compiled("qwen3")(), gen.text)
        offset, blocks = gen.regions["content"]
        start = offset + (blocks - 1 - WINDOW_BLOCKS) * len(BLOCK)
        streamer.run_to(start)
        tracemalloc.start()
        try:
            costs[label] = streamer.measure(start + WINDOW_BLOCKS * len(BLOCK))
        finally:
            tracemalloc.stop()
        streamer.run_to(len(gen.text))
        assert streamer.parser.finalize()[0] == gen.expected
    assert costs["10 MB"].opcodes == costs["1 MB"].opcodes
    assert costs["10 MB"].calls == costs["1 MB"].calls
    assert costs["10 MB"].copied <= costs["1 MB"].copied * 1.05 + 64 * 1024


def test_the_copy_measure_catches_the_interpreters_quadratic_buffer():
    """The transformers interpreter appends each chunk to one growing string (a copy per chunk):
    the same measure shows per-chunk copies growing along the stream, while the call counts stay
    flat. So flat call counts alone would prove nothing; the copy measure is what catches it."""
    thinking = 6  # the two windows: blocks 1-2 and 3-4 of the reasoning
    generation = Generation(
        "<think>\n" + BLOCK * thinking + "</think>",
        {"reasoning": (len("<think>\n"), thinking)},
        {"role": "assistant", "reasoning_content": (BLOCK * thinking).strip()},
    )
    message, costs, _ = measured_run(interpreted("qwen3"), generation)
    assert message == generation.expected
    early, late = costs["reasoning early"], costs["reasoning late"]
    assert late.opcodes == early.opcodes and late.calls == early.calls
    assert late.copied > 1.5 * early.copied, (late.copied, early.copied)


# Text around a flood of 2000 newlines, per template: qwen3's content region (where whitespace may
# start `\s*<tool_call>` or the `\s*<|im_end|>` close), gpt_oss between two messages (where it may
# start the tool-call header `...\s*to=functions.`).
FLOODS = {
    "qwen3": ("Answer:", "done<|im_end|>"),
    "gpt_oss": ("<|channel|>analysis<|message|>hmm<|end|>", "<|start|>assistant<|channel|>final<|message|>done<|return|>"),
}


@pytest.mark.parametrize("name", sorted(FLOODS))
def test_a_flood_of_newlines_is_not_quadratic(name):
    """Models that degenerate sometimes emit newlines until the token limit. Whitespace that may
    start a delimiter is held back until something else arrives; holding it must not cost a copy
    or a Python-level walk of the whole run on every chunk."""
    before, after = FLOODS[name]
    text = before + "\n" * 2000 + after
    streamer = Streamer(compiled(name)(), text)
    tracemalloc.start()
    try:  # windows of 240 chunks at 400 and at 1600 newlines held
        streamer.run_to(len(before) + 400)
        early = streamer.measure(len(before) + 640, opcode_chunks=10)
        streamer.run_to(len(before) + 1600)
        late = streamer.measure(len(before) + 1840, opcode_chunks=10)
        streamer.run_to(len(text))
        message = streamer.finish()
    finally:
        tracemalloc.stop()
    assert message == interpreter.parse_response(text, rtcompile.template_for(name), prefix="")
    assert (late.opcodes, late.calls) == (early.opcodes, early.calls), (
        f"per-chunk work grows with the held run of newlines: {late.opcodes} bytecodes and "
        f"{late.calls} calls at 1600 newlines vs {early.opcodes} and {early.calls} at 400"
    )
    assert late.copied <= early.copied * 1.05 + 16 * 1024, (
        f"per-chunk copies grow with the held run of newlines: {late.copied} bytes over 230 chunks "
        f"at 1600 newlines vs {early.copied} at 400"
    )


# ---- memory is given back as soon as a parser is dropped -----------------------------------------

RELEASE_CASES = {
    "qwen3": '<think>x</think>hello <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>',
    "qwen3_5": "<think>x</think>hi<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n"
    "</function>\n</tool_call>",
    "gemma4": "<|channel>thought\nx<channel|><|tool_call>call:f{a:1}<tool_call|>",
    "gpt_oss": "<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.f"
    '<|channel|>commentary json<|message|>{"a": 1}<|call|>',
}


@pytest.mark.parametrize("name", sorted(RELEASE_CASES))
def test_dropped_parsers_and_streams_free_their_text_without_the_collector(name):
    """No reference cycles: a server holding thousands of streams gets each one's buffer back when
    it lets go of it, finished or abandoned mid-call, not at the collector's next full pass."""
    import weakref

    from rtcompile.integrations.openai_stream import OpenAIStream

    module = rtcompile.load(rtcompile.template_for(name))
    text = RELEASE_CASES[name]
    gc.collect()
    gc.disable()
    try:
        for cut in (len(text), len(text) - 12):
            parser = module.ResponseParser("")
            stream = OpenAIStream(module.ResponseParser(""))
            for start in range(0, cut, 3):
                parser.feed(text[start : start + 3])
                stream.feed(text[start : start + 3])
            if cut == len(text):
                parser.finalize()
                stream.finish()
            refs = [weakref.ref(parser), weakref.ref(stream), weakref.ref(stream.parser)]
            del parser, stream
            assert [ref() for ref in refs] == [None, None, None]
        tracemalloc.start()
        try:
            big = text.replace("x", "x" * 200_000)  # ~200 K characters of reasoning
            module.parse_response(big, prefix="")
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(5):
                module.parse_response(big, prefix="")
            assert tracemalloc.get_traced_memory()[0] - before < 100_000  # no message left behind
        finally:
            tracemalloc.stop()
    finally:
        gc.enable()


# ---- token ids: the same flat cost per id ---------------------------------------------------------


def _token_stream_costs(blocks_before: int) -> tuple[int, int]:
    """(calls, bytes copied beyond the stream's own growth) for feeding one block's ids one at a
    time after `blocks_before` blocks of the same ids, into a qwen3 token parser."""
    from token_strategies import Recipe, tokenizer_for
    from tokenizer_pool import AddedSpec

    tokenizer = tokenizer_for(
        Recipe("bpe", (AddedSpec("<|im_end|>", "special"), AddedSpec("<think>", "template"), AddedSpec("</think>", "template")))
    )
    block = tokenizer.encode(BLOCK, add_special_tokens=False)
    parser = rtcompile.ResponseParser(rtcompile.template_for("qwen3"), [], tokenizer=tokenizer)
    parser.feed(tokenizer.encode("<think>\n", add_special_tokens=False))
    for _ in range(blocks_before):
        parser.feed(block)
    feed = parser.feed
    window = [[token_id] for token_id in block]
    gc.collect()
    profiler = cProfile.Profile()
    profiler.enable()
    for ids in window[: len(window) // 2]:
        feed(ids)
    profiler.disable()
    calls = sum(stat[1] for stat in pstats.Stats(profiler).stats.values())
    tracemalloc.start()
    copied = []
    for ids in window[len(window) // 2 :]:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        feed(ids)
        copied.append(tracemalloc.get_traced_memory()[1] - before)
    tracemalloc.stop()
    # (the few ids that grow a list's over-allocation, amortized O(1), are left out, as above)
    return calls, sorted(copied)[-4]


def test_token_id_streaming_costs_the_same_per_id_early_and_late():
    """Feeding a block's ids one at a time costs the same calls after 1 block as after 300 (about
    2 MB of text), and no id copies anything the size of the stream."""
    early_calls, early_copy = _token_stream_costs(1)
    late_calls, late_copy = _token_stream_costs(300)
    assert late_calls == early_calls
    # Per id, a few small objects (events, text pieces); a copy of the stream would be megabytes.
    assert late_copy <= early_copy * 1.25 and late_copy < 64 * 1024

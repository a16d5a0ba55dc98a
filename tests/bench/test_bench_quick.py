"""The benchmark suite (bench/) still works: no timing is asserted anywhere here.

* `python -m bench --quick` completes and every equality check it promises ran, for every
  template, size and implementation (the benchmark refuses to time outputs that differ).
* The hand-written qwen3 parser, the speed limit the benchmark compares against, gives exactly
  the interpreter's events and messages, on generated texts full of delimiters, partial
  delimiters and whitespace.
* The workloads are what the models really emit: the renderer agrees with the real chat
  templates, and each generation parses back into the message it was made from.
* A mismatch stops the harness before anything is timed.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from transformers.utils import chat_parsing

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # bench/ is a folder of the repository, not of the package
    sys.path.insert(0, str(REPO_ROOT))

from bench import handwritten_qwen3, run, workloads  # noqa: E402
from bench.impls import HandwrittenQwen3Adapter, InterpreterAdapter  # noqa: E402

QWEN3 = workloads.load_template("qwen3")[0]
HANDWRITTEN_WHOLE = ("qwen3", "qwen3_5", "gemma4", "gpt_oss")  # templates with a hand-written parse_response


# ---- the quick benchmark -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    output = tmp_path_factory.mktemp("bench") / "quick.json"
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json", str(output)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed, json.loads(output.read_text(encoding="utf-8"))


def test_quick_benchmark_reports_every_template_size_and_implementation(quick_run):
    completed, results = quick_run
    assert results["quick"] is True
    for name in workloads.TEMPLATE_NAMES:
        assert results["templates"][name]["source"] == "bundled"
        for size in run.QUICK.sizes:
            expected = {"interpreter", "rtcompile"} | (
                {"handwritten"} if name == "qwen3" else set()
            )
            assert set(results["streaming"][name][size]) == expected
            # qwen3_5, gemma4 and gpt_oss have hand-written whole-message parsers (they do not stream).
            expected_whole = {"interpreter", "rtcompile"} | (
                {"handwritten"} if name in HANDWRITTEN_WHOLE else set()
            )
            assert set(results["whole_message"][name][size]) == expected_whole
            for figures in results["streaming"][name][size].values():
                assert len(figures["samples_cpu"]) >= 1
        assert results["batch"][name]["rtcompile"]["messages"] == run.QUICK.batch_count
    assert "Streaming in token-like chunks" in completed.stdout
    assert "Equality checks passed before timing" in completed.stdout


def test_quick_benchmark_ran_every_equality_check(quick_run):
    _, results = quick_run
    checks = results["verification"]
    templates = len(workloads.TEMPLATE_NAMES)
    sizes = len(run.QUICK.sizes)
    windowed_sizes = len(run.QUICK.interpreter_windows)
    windows_per_size = run.QUICK.interpreter_windows["128K"][0]
    rtcompile = checks["rtcompile"]
    assert rtcompile["whole_message"] == templates * sizes
    assert rtcompile["streams_full"] == templates * (sizes - windowed_sizes)
    assert rtcompile["streams_windowed"] == templates * windowed_sizes * windows_per_size
    assert rtcompile["streams_full_message_only"] == templates * windowed_sizes
    assert rtcompile["batch_messages"] == templates * run.QUICK.batch_count
    handwritten = checks["handwritten"]
    assert handwritten["whole_message"] == len(HANDWRITTEN_WHOLE) * sizes
    assert handwritten["streams_full"] == sizes - windowed_sizes  # qwen3's only
    assert handwritten["batch_messages"] == len(HANDWRITTEN_WHOLE) * run.QUICK.batch_count
    assert handwritten["feed_calls_compared"] > 1_000


def test_quick_benchmark_measured_batch_throughput(quick_run):
    completed, results = quick_run
    throughput = results["batch_throughput"]
    assert throughput["rows"] == run.QUICK.throughput_rows
    assert set(throughput["results"]) == {
        "interpreter loop", "API, 1 job", "API, 2 jobs", "parse command, 1 job", "parse command, 2 jobs"
    }
    assert all(figures["rows_per_s"] > 0 for figures in throughput["results"].values())
    assert "Batch throughput:" in completed.stdout


def test_quick_benchmark_measured_token_ids_after_checking_them(quick_run):
    """The token-id section ran (its equality checks raise before anything is timed: a mismatch
    would have failed the run) and reports both implementations for every row."""
    completed, results = quick_run
    rows = results["token_ids"]
    assert {(row["template"], row["size"]) for row in rows} == {("qwen3", "1K"), ("gemma4", "1K")}
    for row in rows:
        assert row["ids"] > 100
        for key in ("stream", "whole", "text stream", "text whole"):
            assert row["us"][f"interpreter {key}"] > 0 and row["us"][f"rtcompile {key}"] > 0
    assert "Token ids (one id per feed" in completed.stdout


def test_token_id_workloads_carry_their_delimiters_as_control_token_ids():
    from bench import token_ids

    for name in workloads.TEMPLATE_NAMES:
        workload = token_ids.TokenWorkload(name, "1K")
        tokenizer = workload.tokenizer
        special, control = token_ids.CONTROL_TOKENS[name]
        present = [t for t in special + control if t in workload.text_workload.text]
        assert present, name
        for token in present:
            assert tokenizer.convert_tokens_to_ids(token) in workload.ids, (name, token)


def test_quick_benchmark_measured_start_up_without_asserting_speed(quick_run):
    _, results = quick_run
    first = workloads.TEMPLATE_NAMES[0]
    assert results["import"][first]["runs"] == run.QUICK.import_runs
    assert isinstance(results["import"][first]["heavy_imports"], list)
    assert results["compile"][first]["source_chars"] > 0


# ---- the hand-written parser is the interpreter, only faster ------------------------------------

_DELIMITERS = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
)
_PARTS = ("<", "<t", "<th", "<tool", "</", "</t", "<|", "<|im", "<|end", "x<y", "a < b")
_TEXT = ("word ", "é", " ", "\n", "\n\n", "\t", "\u3000", "\x1c", "\x1f", "{")
_CALLS = (
    '{"name": "get_weather", "arguments": {"location": "Bern"}}',
    '{"name": "search_web", "arguments": {"query": "q", "max_results": "5"}}',
    '{"name": "run_python", "arguments": {"code": "print(1)", "timeout": "2.5"}}',
)
# Equal odds for each group, so whole delimiters and calls are common, not 1 piece in 30.
_PIECES = st.one_of(*(st.sampled_from(group) for group in (_DELIMITERS, _PARTS, _TEXT, _CALLS)))
_PREFIXES = (
    "",
    "<|im_start|>assistant\n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<|im_start|>assistant\n<think>\n",
    "no anchor here <think> so all of it is parsed",
    "<|im_start|>assistant\nhalf an end <|im_",
)


@st.composite
def chunked_texts(draw) -> tuple[str, list[str]]:
    """A text of delimiter-rich pieces, cut at piece boundaries (so chunks often end exactly at a
    delimiter's end) and at arbitrary positions (so delimiters are split)."""
    pieces = draw(st.lists(_PIECES, max_size=12))
    text = "".join(pieces)
    cuts = {
        end for end in itertools.accumulate(len(piece) for piece in pieces) if draw(st.booleans())
    }
    cuts.update(draw(st.lists(st.integers(min_value=0, max_value=len(text)), max_size=6)))
    points = sorted(cuts)
    return text, [text[start:end] for start, end in zip([0, *points], [*points, len(text)])]


def _streamed(adapter, prefix: str, tools, chunks: list[str]):
    try:
        parser = adapter.make_parser(prefix, tools)
        events = [list(parser.initial_events)] + [parser.feed(chunk) for chunk in chunks]
        message, final_events = parser.finalize()
    except Exception as error:
        return "raised", type(error).__name__
    try:
        parser.feed("more")
        after_end = "accepted"
    except Exception as error:
        after_end = type(error).__name__
    return "ok", events + [final_events], message, after_end


def _whole(adapter, text: str, prefix, tools):
    try:
        return "ok", adapter.parse(text, prefix, tools)
    except Exception as error:
        return "raised", type(error).__name__


# The interpreter's subtle cases, always run: a pattern delimiter complete at the end of a chunk
# waits for the next chunk; whitespace before it is held; a literal one commits at once.
@example(
    chunked=(
        "a<tool_call>" + _CALLS[0] + "</tool_call>",
        ["a<tool_call>", _CALLS[0], "</tool_call>"],
    ),
    prefix="",
    tools=None,
)
@example(chunked=("done \n<|im_end|>x", ["done \n", "<|im_end|>", "x"]), prefix="", tools=None)
@example(
    chunked=("<think>a</think>b", ["<think>", "a</think>", "b"]), prefix=_PREFIXES[1], tools=None
)
@given(
    chunked=chunked_texts(),
    prefix=st.sampled_from(_PREFIXES),
    tools=st.sampled_from([None, workloads.TOOLS]),
)
def test_handwritten_qwen3_gives_the_interpreters_events_and_message(chunked, prefix, tools):
    interpreter, handwritten = InterpreterAdapter(QWEN3), HandwrittenQwen3Adapter(QWEN3)
    text, chunks = chunked
    assert _streamed(handwritten, prefix, tools, chunks) == _streamed(
        interpreter, prefix, tools, chunks
    )
    assert _whole(handwritten, text, prefix, tools) == _whole(interpreter, text, prefix, tools)


def test_handwritten_qwen3_requires_a_prefix_like_the_interpreter():
    with pytest.raises(ValueError):
        chat_parsing.ResponseParser(QWEN3)
    with pytest.raises(ValueError):
        handwritten_qwen3.ResponseParser()
    with pytest.raises(ValueError):
        handwritten_qwen3.parse_response("text")


# ---- the workloads are realistic ---------------------------------------------------------------


@pytest.mark.parametrize("name", workloads.TEMPLATE_NAMES)
def test_rendered_generations_are_what_the_real_chat_template_writes(name):
    conversation = workloads._conversation()
    before = workloads.render_with_chat_template(name, conversation, add_generation_prompt=False)
    for seed in range(4):
        generation = workloads.make_generation(random.Random(seed), 1_500)
        if name == "gpt_oss":
            # The chat template renders only the first call, and no answer next to a call.
            generation = workloads.Generation(generation.reasoning, "", generation.calls[:1])
        message = {
            "role": "assistant",
            "reasoning_content": generation.reasoning,
            "tool_calls": [
                {"type": "function", "function": {"name": call_name, "arguments": arguments}}
                for call_name, arguments in generation.calls
            ],
        }
        if generation.content:
            message["content"] = generation.content
        full = workloads.render_with_chat_template(
            name, [*conversation, message], add_generation_prompt=False
        )
        assert full.startswith(before)
        assert full[len(before) :].startswith(workloads.render_assistant_turn(name, generation))


@pytest.mark.parametrize("name", workloads.TEMPLATE_NAMES)
def test_the_prompt_ends_where_the_model_starts_writing(name):
    prefix, origin = workloads.prompt_prefix(name)
    assert origin == "chat template"
    assert prefix.endswith(workloads.GENERATION_PROMPTS[name])


@pytest.mark.parametrize("name", workloads.TEMPLATE_NAMES)
@pytest.mark.parametrize("ascii_only", [False, True])
def test_generations_parse_back_into_their_messages(name, ascii_only):
    interpreter = InterpreterAdapter(workloads.load_template(name)[0])
    workload = workloads.build_workload(name, "1K", ascii_only=ascii_only)
    assert workload.text.isascii() == ascii_only
    message = interpreter.parse(workload.text, workload.prefix, workload.tools)
    assert message == workload.generation.expected_message()
    assert {"reasoning_content", "content", "tool_calls"} <= set(message)
    assert 1 <= len(message["tool_calls"]) <= 3
    texts, generations = workloads.batch_texts(name, 20)
    for text, generation in zip(texts, generations):
        assert (
            interpreter.parse(text, workload.prefix, workload.tools)
            == generation.expected_message()
        )


@pytest.mark.parametrize("size", ["1K", "16K"])
def test_workload_sizes_and_chunks(size):
    workload = workloads.build_workload("qwen3", size)
    target = workloads.SIZES[size]
    assert 0.8 * target <= len(workload.text) <= 1.25 * target
    assert "".join(workload.chunks) == workload.text
    assert {len(chunk) for chunk in workload.chunks[:-1]} == set(workloads.CHUNK_SIZES)
    again = workloads.build_workload("qwen3", size)
    assert (again.text, again.chunks) == (workload.text, workload.chunks)


# ---- a difference stops the run ------------------------------------------------------------------


class _OffByOneChunk(HandwrittenQwen3Adapter):
    """The hand-written parser with one event changed: streams the same message, wrong events."""

    def make_parser(self, prefix, tools):
        parser = super().make_parser(prefix, tools)
        feed = parser.feed
        calls = iter(range(10**9))

        def feed_with_a_swallowed_event(text):
            events = feed(text)
            return events[:-1] if next(calls) == 7 and events else events

        parser.feed = feed_with_a_swallowed_event
        return parser


class _WrongMessage(HandwrittenQwen3Adapter):
    def parse(self, text, prefix, tools):
        message = super().parse(text, prefix, tools)
        return {**message, "content": message.get("content", "") + "!"}


@pytest.mark.parametrize("broken", [_OffByOneChunk, _WrongMessage])
def test_the_harness_refuses_to_time_a_differing_implementation(broken):
    workload = workloads.build_workload("qwen3", "1K")
    adapters = {"interpreter": InterpreterAdapter(QWEN3), "broken": broken(QWEN3)}
    with pytest.raises(run.MismatchError, match="broken"):
        run.verify_workload(adapters, workload, run.QUICK, run.Verification())


# ---- the hand-written whole-message parsers for qwen3_5, gemma4 and gpt_oss ----------------------

from bench import handwritten_gemma4, handwritten_gpt_oss, handwritten_qwen3_5  # noqa: E402

_HANDWRITTEN_WHOLE_MODULES = {
    "qwen3_5": handwritten_qwen3_5,
    "gemma4": handwritten_gemma4,
    "gpt_oss": handwritten_gpt_oss,
}
_EDGE_CASES = {
    "qwen3_5": [
        "plain answer<|im_end|>",
        "<think>\nr\n</think>\n\nbefore\n\n<tool_call>\n<function=get_weather>\n<parameter=location>\nBern\n</parameter>\n</function>\n</tool_call>after<|im_end|>",
        "<tool_call>\n<function=search_web>\n<parameter=query>\na\n\nb\n</parameter>\n<parameter=query>\nagain</parameter>\n<parameter=bad\nkey>\nx\n</parameter>\n</function>\n</tool_call>",
        "<tool_call><function=run_python></function></tool_call>   \n<|im_end|>",
        "<tool_call>\n<function=get_weather>\n<parameter=location>\ncut off",
        "<tool_call>\nno function tag</tool_call> text a < b <|endoftext|>tail",
        "<think>\nnever closed",
        "x </function> y <parameter=k>v</parameter><|im_end|>",
        "  \n<|im_end|>",
    ],
    "gemma4": [
        "plain answer<turn|>",
        "<|channel>thought\nr\n<channel|>before<|tool_call>call:get_weather{location:<|\"|>Bern, \"old\" town<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>after<|tool_response>",
        "<|tool_call>call:run_python{code:<|\"|>a,b:c<|\"|>,timeout:2.5,opts:{deep:[1,true,null]}}<tool_call|><eos>",
        "<|tool_call>call:search_web{query:<|\"|>unpaired}<tool_call|>",
        "<|tool_call>call:{x:1}<tool_call|>a < b<turn|>tail",
        "<|tool_call>call:get_weather{location:<|\"|>cut",
        "<|channel>thought\nnever closed",
        "<|tool_call>call:f{\"q\":\"a,b:c\",k:1}<tool_call|>",
    ],
    "gpt_oss": [
        "<|channel|>final<|message|>plain answer<|return|>",
        "<|channel|>analysis<|message|>r<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"location\": \"Bern\"}<|call|>",
        "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|><|start|>assistant<|channel|>final<|message|> x <|end|>",
        "<|start|>assistant<|channel|>commentary to=functions.search_web <|constrain|>json<|message|>{\"query\": \"q\", \"max_results\": 2}<|call|>",
        "<|start|>assistant\n to=functions.run_python  <|channel|>commentary<|message|>{\"code\": \"a < b\"}<|call|><|start|>assistant to=functions.bad name<|channel|>commentary<|message|>{}<|call|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"location\": ",
        "<|channel|>analysis<|message|>never closed",
        "<|channel|>analysis<|message|>cut by a call<|call|>free text <| <|start|>assistant<|channel|>final<|message|><|return|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>not json<|call|>",
    ],
}


def _whole_outcome(parse, text, prefix, tools):
    try:
        return "ok", parse(text, prefix, tools)
    except Exception as error:  # both must raise (the interpreter's ValueError or a subclass)
        return "raised", isinstance(error, ValueError)


@pytest.mark.parametrize("name", sorted(_HANDWRITTEN_WHOLE_MODULES))
def test_handwritten_whole_message_parsers_give_the_interpreters_messages(name):
    template = workloads.load_template(name)[0]
    interpreter = InterpreterAdapter(template)
    module = _HANDWRITTEN_WHOLE_MODULES[name]
    prefix = workloads.prompt_prefix(name)[0]
    cases = [(text, prefix, workloads.TOOLS) for text in workloads.batch_texts(name, 60)[0]]
    for size in ("1K", "16K"):
        workload = workloads.build_workload(name, size)
        cases.append((workload.text, workload.prefix, workload.tools))
    for text in _EDGE_CASES[name]:
        for case_prefix in (prefix, "", "no anchor in this prompt "):
            cases.extend([(text, case_prefix, None), (text, case_prefix, workloads.TOOLS)])
    for text, case_prefix, tools in cases:
        expected = _whole_outcome(interpreter.parse, text, case_prefix, tools)
        actual = _whole_outcome(
            lambda t, p, tl: module.parse_response(t, prefix=p, tools=tl), text, case_prefix, tools
        )
        assert actual == expected, (text[:300], case_prefix[-40:])


def test_the_serving_benchmarks_add_each_requests_building_to_its_stream():
    """bench/serving.py's measure() and table (both serving benchmarks use them): per request,
    building the parsers plus parsing the stream, and its paired ratio, from the samples given."""
    from bench import serving

    class FakeCase:
        chunks = ["a"] * 10

    implementations = ("template", "rtcompile", "handwritten")
    # (stream CPU s, wall s, building CPU s) per implementation; one repetition
    given = {"template": (0.004, 0.004, 0.001), "rtcompile": (0.001, 0.001, 0.0005),
             "handwritten": (0.002, 0.002, 0.0001)}
    figures = serving.measure(FakeCase(), 1, implementations, lambda case, impl: given[impl])
    for impl, (stream, _, build) in given.items():
        assert figures[impl]["cpu"] == pytest.approx(stream * 1e6 / 10)
        assert figures[impl]["build"] == pytest.approx(build * 1e6)
        assert figures[impl]["request"] == pytest.approx((stream + build) * 1e6)
    assert figures["template"]["paired_request"] == pytest.approx(0.005 / 0.0015)
    assert figures["handwritten"]["paired_request"] == pytest.approx(0.0021 / 0.0015)
    results = {
        "environment": {"cpus": 2, "load_before": "0", "load_after": "0"},
        "cases": {"qwen3:1K": {"chunks": 10, "chars": 10, "figures": figures,
                               "handwritten_matches": True}},
    }
    table = serving.render_table(
        results, title="t", columns=implementations, implementations=implementations,
        mismatch="*", versions="v",
    )
    assert (
        "qwen3 1K: template 5000 (1000), rtcompile 1500 (500), handwritten 2100 (100); "
        "rtcompile vs template 3.33x, vs hand-written 1.40x"
    ) in table

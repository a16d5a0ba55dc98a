"""rtcompile.integrations.sglang against the real SGLang package, on CPU.

These tests run in the environment `.ci/sglang.sh` builds for them (sglang with the transformers it
pins, rtcompile installed beside it): `RTCOMPILE_REQUIRE_SGLANG=1 python -m pytest -q
tests/integrations/test_sglang.py`. Elsewhere (the main test environment has no sglang) they skip; with
RTCOMPILE_REQUIRE_SGLANG=1 a missing sglang is an error, so CI can never skip them silently.

- The plugin: the entry point is installed, SGLang's own plugin loader registers `rtcompile` in its
  reasoning-parser and tool-call-parser registries, its argument parser accepts the names, and
  `ReasoningParser("rtcompile")` / `FunctionCallParser(tools, "rtcompile")` build our detectors.
- Differential against SGLang's `ResponseTemplateReasoningDetector` / `ResponseTemplateToolDetector`
  over every bundled template SGLang accepts (a copy whose reasoning field is named `thinking` for
  SGLang), generated turns and random chunkings: reasoning, normal text and calls (arguments after
  `json.loads`), one-shot and streamed-then-accumulated, with and without a reasoning parser in front.
- Every bundled template, SGLang's refusals included: the stream accumulates to the one-shot result,
  which is rtcompile's own message.
- Incremental calls (the name before the call closes, arguments in fragments), SGLang's serving
  bookkeeping, unknown tools, malformed and truncated calls keep their text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

REQUIRED = os.environ.get("RTCOMPILE_REQUIRE_SGLANG") == "1"
try:
    import sglang.srt.function_call.function_call_parser  # noqa: F401
except ImportError:
    if REQUIRED:
        raise
    pytest.skip(
        "sglang is not installed here: these tests run in the SGLang environment that "
        ".ci/sglang.sh builds (RTCOMPILE_REQUIRE_SGLANG=1 turns a missing sglang into an error)",
        allow_module_level=True,
    )

from hypothesis import given, note, settings
from hypothesis import strategies as st
from sglang.srt.entrypoints.openai.protocol import Tool
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser
from sglang.srt.parser.response_template import validate_response_template_for_serving

import rtcompile
from rtcompile.library import template_for, template_names
from strategies import chunkings
from test_openai_stream import FORMATS, STREAMING_CALL, Turn, _cut_before_call_end, tools_for, turns

# What SGLang does at startup in every process (and before building its argument parser).
from sglang.srt.plugins import load_plugins  # noqa: E402

load_plugins()

from rtcompile.integrations.sglang import (  # noqa: E402
    TEMPLATE_ENVIRONMENT_VARIABLE,
    RtcompileReasoningDetector,
    RtcompileToolDetector,
)

EXAMPLES = 40 if os.environ.get("CI", "").lower() == "true" else 15


@pytest.fixture(scope="module")
def sglang_server():
    """The configuration SGLang publishes in its serving process for `--tool-call-parser rtcompile`
    (with SGLang's own test primitives), and a switch of its `--reasoning-parser`:
    `with sglang_server("rtcompile"): ...` serves behind a reasoning parser, `sglang_server(None)`
    without one (the default here). SGLang's serving reads the same setting to decide whether the
    tool parser gets the whole output or the reasoning parser's normal text."""
    from sglang.srt.arg_groups.arg_utils import namespace_of
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs

    context = get_context()
    bag = namespace_of(ServerArgs)["reasoning_parser"]
    with context.override_server_args(tool_call_parser="rtcompile"):
        yield lambda name: context.config_bag(bag).override(reasoning_parser=name)


class Tokenizer:
    """What the detectors read of a tokenizer: its template metadata and where it was loaded from."""

    def __init__(self, response_template: Any = None, name_or_path: str = ""):
        self.response_template = response_template
        self.init_kwargs: dict = {}
        self.name_or_path = name_or_path

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


def thinking_copy(template: dict) -> dict:
    copy = json.loads(json.dumps(template))
    if "reasoning_content" in copy["fields"]:
        copy["fields"]["thinking"] = copy["fields"].pop("reasoning_content")
    return copy


def sglang_accepts(template: dict) -> bool:
    try:
        validate_response_template_for_serving(template)
    except (TypeError, ValueError):
        return False
    return True


def sglang_tools(tools: list[dict]) -> list[Tool]:
    # a tool the model never calls keeps the list non-empty (no tools: no parsing at all)
    spare = {
        "type": "function",
        "function": {"name": "never_called", "parameters": {"type": "object"}},
    }
    return [Tool.model_validate(tool) for tool in [*tools, spare]]


def reasoning_whole(name: str, tokenizer, prefix: str, text: str) -> tuple[str, str]:
    parser = ReasoningParser(name, tokenizer=tokenizer, prefix=prefix)
    reasoning, normal = parser.parse_non_stream(text)
    return reasoning or "", normal or ""


def reasoning_streamed(name: str, tokenizer, prefix: str, chunks: list[str]) -> tuple[str, str]:
    parser = ReasoningParser(name, tokenizer=tokenizer, prefix=prefix)
    reasoning, normal = [], []
    for chunk in chunks:
        r, n = parser.parse_stream_chunk(chunk)
        reasoning.append(r or "")
        normal.append(n or "")
    r, n = parser.parse_stream_end()
    return "".join(reasoning) + (r or ""), "".join(normal) + (n or "")


def calls_view(calls) -> list[tuple[int, str, Any]]:
    return [(call.tool_index, call.name, json.loads(call.parameters)) for call in calls]


def tools_whole(name, tools, tokenizer, prefix, text) -> tuple[str, list]:
    parser = FunctionCallParser(tools, name, tokenizer=tokenizer, prefix=prefix)
    normal, calls = parser.parse_non_stream(text)
    return normal, calls_view(calls)


def tools_streamed(name, tools, tokenizer, prefix, chunks, items=None) -> tuple[str, list]:
    """Streamed, then accumulated by tool_index as SGLang's serving does (the name from the first
    item, arguments concatenated)."""
    parser = FunctionCallParser(tools, name, tokenizer=tokenizer, prefix=prefix)
    normal, calls = [], {}
    pieces = [parser.parse_stream_chunk(chunk) for chunk in chunks] + [parser.parse_stream_end()]
    for text, items_out in pieces:
        normal.append(text)
        for item in items_out:
            if items is not None:
                items.append(item)
            call = calls.setdefault(item.tool_index, {"name": None, "arguments": ""})
            if item.name:
                assert call["name"] is None, "a call's name is sent once"
                call["name"] = item.name
            call["arguments"] += item.parameters
    assert sorted(calls) == list(range(len(calls))), "tool indices count up from 0"
    view = [
        (index, calls[index]["name"], json.loads(calls[index]["arguments"]))
        for index in sorted(calls)
    ]
    return "".join(normal), view


# --------------------------------------------------------------------------------------------------
# The plugin


def test_sglangs_plugin_loader_registers_the_detectors():
    from importlib.metadata import entry_points

    from sglang.srt.function_call.parser_names import TOOL_CALL_PARSER_NAMES
    from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

    points = {point.name: point.value for point in entry_points(group="sglang.srt.plugins")}
    assert points.get("rtcompile") == "rtcompile.integrations.sglang:register"
    assert ReasoningParser.DetectorMap["rtcompile"] is RtcompileReasoningDetector
    assert FunctionCallParser.ToolCallParserEnum["rtcompile"] is RtcompileToolDetector
    assert "rtcompile" in REASONING_PARSER_NAMES and "rtcompile" in TOOL_CALL_PARSER_NAMES
    tokenizer = Tokenizer(template_for("qwen3"))
    assert isinstance(
        ReasoningParser("rtcompile", tokenizer=tokenizer).detector, RtcompileReasoningDetector
    )
    parser = FunctionCallParser(sglang_tools([]), "rtcompile", tokenizer=tokenizer, prefix="")
    assert isinstance(parser.detector, RtcompileToolDetector)


def test_the_detectors_keep_their_signatures_for_sglangs_per_request_inspection():
    """SGLang's parser wrappers call `inspect.signature(detector_class)` for every request; the
    kept signature is the one inspect computes from `__init__`, and a subclass with an `__init__`
    of its own keeps its own, not its parent's."""
    import inspect

    for cls in (RtcompileReasoningDetector, RtcompileToolDetector):
        assert isinstance(cls.__dict__["__signature__"], inspect.Signature)
        computed = inspect.signature(cls.__init__)
        assert inspect.signature(cls) == computed.replace(
            parameters=list(computed.parameters.values())[1:]  # (without self)
        )
        assert "tokenizer" in inspect.signature(cls).parameters

    class Narrower(RtcompileToolDetector):
        def __init__(self, tokenizer=None, *, only: int = 0):
            super().__init__(tokenizer=tokenizer)

    assert list(inspect.signature(Narrower).parameters) == ["tokenizer", "only"]
    tokenizer = Tokenizer(template_for("qwen3"))
    parser = FunctionCallParser(sglang_tools([]), "rtcompile", tokenizer=tokenizer, prefix="")
    assert parser.detector.response_template == template_for("qwen3")


def test_a_fresh_process_gets_the_names_from_the_entry_point_alone():
    """What `sglang serve` does: load the plugins, then build the argument parser; nothing of
    rtcompile imported by hand."""
    code = (
        "import argparse\n"
        "from sglang.srt.plugins import load_plugins\n"
        "load_plugins()\n"
        "from sglang.srt.server_args import ServerArgs\n"
        "parser = argparse.ArgumentParser()\n"
        "ServerArgs.add_cli_args(parser)\n"
        "args = parser.parse_args(['--model-path', 'm', '--reasoning-parser', 'rtcompile',"
        " '--tool-call-parser', 'rtcompile'])\n"
        "assert (args.reasoning_parser, args.tool_call_parser) == ('rtcompile', 'rtcompile')\n"
        "from sglang.srt.parser.reasoning_parser import ReasoningParser\n"
        "assert ReasoningParser.DetectorMap['rtcompile'].__module__ == 'rtcompile.integrations.sglang'\n"
        # no server in this process (no configuration published): the tool detector reads the
        # whole output, as a caller outside a server hands it
        "from sglang.srt.function_call.function_call_parser import FunctionCallParser\n"
        "assert FunctionCallParser([], 'rtcompile').detector.after_reasoning_parser is False\n"
    )
    environment = {**os.environ, TEMPLATE_ENVIRONMENT_VARIABLE: "qwen3"}
    subprocess.run([sys.executable, "-c", code], check=True, env=environment)
    typo = code.replace(
        "'--tool-call-parser', 'rtcompile'", "'--tool-call-parser', 'rtcompile-typo'"
    )
    failed = subprocess.run([sys.executable, "-c", typo], capture_output=True, text=True)
    assert failed.returncode != 0 and "invalid choice" in failed.stderr


def test_rtcompiles_runtime_and_generated_parsers_never_import_sglang():
    code = (
        "import sys, rtcompile, rtcompile.runtime, rtcompile.integrations.openai_stream\n"
        "import rtcompile.integrations.serving.host\n"
        "from rtcompile.generated import qwen3\n"
        "rtcompile.parse_response('<think>a</think>b', rtcompile.template_for('qwen3'), prefix='')\n"
        "assert not [m for m in sys.modules if m == 'sglang' or m.startswith('sglang.')]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------------------
# Templates


def test_the_template_comes_from_the_argument_the_tokenizer_the_model_type_then_the_environment(
    tmp_path, monkeypatch
):
    monkeypatch.delenv(TEMPLATE_ENVIRONMENT_VARIABLE, raising=False)
    own = template_for("qwen3")
    detector = RtcompileReasoningDetector(tokenizer=Tokenizer(own))
    assert detector.response_template is own
    assert detector.template_origin == "the tokenizer's response_template"
    from_kwargs = Tokenizer()
    from_kwargs.init_kwargs["response_template"] = thinking_copy(own)
    assert RtcompileToolDetector(tokenizer=from_kwargs).response_template == thinking_copy(own)
    explicit = RtcompileToolDetector(tokenizer=Tokenizer(own), response_template="glm4_5")
    assert explicit.response_template == template_for("glm4_5")

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma4"}))
    detector = RtcompileReasoningDetector(tokenizer=Tokenizer(name_or_path=str(tmp_path)))
    assert detector.response_template == template_for("gemma4")

    monkeypatch.setenv(TEMPLATE_ENVIRONMENT_VARIABLE, "kimi_k2")
    assert RtcompileToolDetector(tokenizer=Tokenizer()).response_template == template_for("kimi_k2")
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template_for("minimax_m2")))
    monkeypatch.setenv(TEMPLATE_ENVIRONMENT_VARIABLE, str(path))
    assert RtcompileToolDetector(tokenizer=None).response_template == template_for("minimax_m2")
    # the tokenizer's template comes first
    assert RtcompileToolDetector(tokenizer=Tokenizer(own)).response_template is own

    monkeypatch.delenv(TEMPLATE_ENVIRONMENT_VARIABLE)
    with pytest.raises(ValueError, match=TEMPLATE_ENVIRONMENT_VARIABLE):
        RtcompileReasoningDetector(tokenizer=Tokenizer())


def test_templates_with_fields_no_client_would_see_are_refused():
    template = template_for("qwen3")
    extra = json.loads(json.dumps(template))
    extra["fields"]["citations"] = {"open": "<cite>", "close": "</cite>"}
    with pytest.raises(ValueError, match="citations"):
        RtcompileReasoningDetector(tokenizer=Tokenizer(extra))
    both = json.loads(json.dumps(template))
    both["fields"]["thinking"] = {"open": "<thought>", "close": "</thought>"}
    with pytest.raises(ValueError, match="both"):
        RtcompileToolDetector(tokenizer=Tokenizer(both))
    no_tools = json.loads(json.dumps(template))
    del no_tools["fields"]["tool_calls"]
    with pytest.raises(ValueError, match="tool_calls"):
        RtcompileToolDetector(tokenizer=Tokenizer(no_tools))
    broken = json.loads(json.dumps(template))
    broken["fields"]["content"]["close_pattern"] = "(unclosed"
    with pytest.raises(ValueError):
        RtcompileReasoningDetector(tokenizer=Tokenizer(broken))


# --------------------------------------------------------------------------------------------------
# Differential against SGLang's response-template detectors

DIFFERENTIAL = sorted(FORMATS)


def test_sglang_refuses_a_thinking_copy_only_for_content_parsers_it_lacks():
    """Keeps the set the differential compares on from shrinking unnoticed."""
    for name in DIFFERENTIAL:
        try:
            validate_response_template_for_serving(thinking_copy(template_for(name)))
        except ValueError as error:
            assert "unknown content parser" in str(error), (name, error)
    assert sum(sglang_accepts(thinking_copy(template_for(name))) for name in DIFFERENTIAL) >= 18


@pytest.mark.parametrize("name", DIFFERENTIAL)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_reasoning_normal_text_and_calls_equal_sglangs_detectors(sglang_server, name, data):
    template = template_for(name)
    turn = data.draw(turns(name), label="turn")
    prefix, text = FORMATS[name].render(turn)
    chunks = data.draw(chunkings(text), label="chunks")
    tools = sglang_tools(tools_for(turn.calls))
    note(f"prefix={prefix!r}\ntext={text!r}\nchunks={chunks!r}")
    ours_tokenizer = Tokenizer(template)
    theirs_tokenizer = Tokenizer(thinking_copy(template))
    has_reasoning = "reasoning_content" in template["fields"] or "thinking" in template["fields"]

    ours_reasoning = reasoning_whole("rtcompile", ours_tokenizer, prefix, text)
    assert reasoning_streamed("rtcompile", ours_tokenizer, prefix, chunks) == ours_reasoning
    normal = ours_reasoning[1]
    normal_chunks = data.draw(chunkings(normal), label="normal chunks")
    with sglang_server("rtcompile"):  # the tool parser reads the reasoning parser's normal text
        ours_calls = tools_whole("rtcompile", tools, ours_tokenizer, prefix, normal)
        streamed = tools_streamed("rtcompile", tools, ours_tokenizer, prefix, normal_chunks)
        assert streamed == ours_calls
    with sglang_server(None):  # no reasoning parser: the tool parser reads the whole output
        ours_alone = tools_whole("rtcompile", tools, ours_tokenizer, prefix, text)
        assert tools_streamed("rtcompile", tools, ours_tokenizer, prefix, chunks) == ours_alone

    # the calls are the ones rtcompile's own parser finds in the output
    message = rtcompile.parse_response(
        text, template, prefix=prefix, tools=tools_for(turn.calls) or None
    )
    found = [
        (c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()
    ]
    if all(call_name in {t.function.name for t in tools} for call_name, _ in found):
        assert [(n, a) for _, n, a in ours_calls[1]] == found

    if not sglang_accepts(thinking_copy(template)):
        return
    if has_reasoning:
        theirs_reasoning = reasoning_whole("response_template", theirs_tokenizer, prefix, text)
        assert ours_reasoning == theirs_reasoning
        assert (
            reasoning_streamed("response_template", theirs_tokenizer, prefix, chunks)
            == ours_reasoning
        )
    theirs_calls = tools_whole("response_template", tools, theirs_tokenizer, prefix, normal)
    assert ours_calls == theirs_calls
    theirs_streamed = tools_streamed(
        "response_template", tools, theirs_tokenizer, prefix, normal_chunks
    )
    assert ours_calls == theirs_streamed
    assert ours_alone == tools_whole("response_template", tools, theirs_tokenizer, prefix, text)


@pytest.mark.parametrize("name", sorted(template_names()))
def test_every_bundled_template_is_served(name):
    """SGLang's refusals included: plain text is normal text, where the template gives it a place."""
    template = template_for(name)
    tokenizer = Tokenizer(template)
    reasoning, normal = reasoning_streamed("rtcompile", tokenizer, "", ["Hello", ", world"])
    content = template["fields"]["content"]
    expected = "" if "open" in content or "open_pattern" in content else "Hello, world"
    assert (reasoning, normal) == ("", expected)
    if sglang_accepts(thinking_copy(template)):
        theirs = reasoning_streamed(
            "response_template", Tokenizer(thinking_copy(template)), "", ["Hello", ", world"]
        )
        assert theirs == (reasoning, normal)


# --------------------------------------------------------------------------------------------------
# The stream itself

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]
QWEN3_PREFIX = "<|im_start|>assistant\n"
QWEN3_CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
)


def test_a_calls_name_goes_out_first_and_its_arguments_while_they_are_written():
    tools = sglang_tools(WEATHER)
    text = "Let me check.\n" + QWEN3_CALL
    chunks = [text[i : i + 4] for i in range(0, len(text), 4)]
    parser = FunctionCallParser(
        tools, "rtcompile", tokenizer=Tokenizer(template_for("qwen3")), prefix=QWEN3_PREFIX
    )
    seen = []
    written = ""
    for chunk in chunks:
        written += chunk
        _, items = parser.parse_stream_chunk(chunk)
        seen.extend((written, item) for item in items)
    first_written, first = seen[0]
    assert first.name == "get_weather" and "</tool_call>" not in first_written
    fragments = [item for _, item in seen[1:]]
    assert all(item.name is None and item.tool_index == 0 for item in fragments)
    assert len(fragments) >= 2  # "city" went out before "days" was written
    before_close = [w for w, item in seen if '"city"' in item.parameters]
    assert before_close and '"days"' not in before_close[0].split('"city"', 1)[1]
    arguments = "".join(item.parameters for _, item in seen)
    assert json.loads(arguments) == {"city": "Paris", "days": 3}
    # what SGLang's serving checks at the end of the stream: nothing left to send
    detector = parser.detector
    assert detector.prev_tool_call_arr == [
        {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
    ]
    assert detector.streamed_args_for_tool == [json.dumps({"city": "Paris", "days": 3})]
    assert detector.incomplete_tool_call_indices == set()


def test_a_call_opened_by_a_pattern_streams_through_the_reasoning_detector(sglang_server):
    """qwen3.5's call opener is a pattern that no more text can change: the detectors' parsers are
    eager, so the chunk that completes it opens the call (the interpreter would wait for the next
    chunk). The reasoning detector passes the call's text on from that chunk, so that the tool
    detector announces the call there and streams its arguments before the call closes (it once
    held the text until then)."""
    template = template_for("qwen3_5")
    tokenizer = Tokenizer(template)
    prefix = QWEN3_PREFIX + "<think>\n"
    reasoning = ReasoningParser("rtcompile", tokenizer=tokenizer, prefix=prefix)
    with sglang_server("rtcompile"):
        tools = FunctionCallParser(
            sglang_tools(WEATHER), "rtcompile", tokenizer=tokenizer, prefix=prefix
        )
    chunks = [
        "a</think>\n\n",
        "<tool_call>\n<function=get_weather>",
        "\n<parameter=city>\nParis\n</parameter>\n",
        "<parameter=days>\n3\n</parameter>\n",
        "</function>\n</tool_call>",
    ]
    normal_seen, items = [], []
    for chunk in chunks:
        _, normal = reasoning.parse_stream_chunk(chunk)
        normal_seen.append(normal or "")
        items.append(tools.parse_stream_chunk(normal)[1] if normal else [])
    _, normal = reasoning.parse_stream_end()
    if normal:
        items.append(tools.parse_stream_chunk(normal)[1])
    items.append(tools.parse_stream_end()[1])
    assert "<function=get_weather>\n<parameter=city>\nParis" in "".join(normal_seen[:3])
    # the call goes out with its opener, its first parameter next, the second as it is written,
    # all before the close
    assert [(item.name, item.parameters) for item in items[1]] == [("get_weather", "")]
    assert [(item.name, item.parameters) for item in items[2]] == [(None, '{"city": "Paris"')]
    assert [item.parameters for item in items[3]] == [', "days": 3']
    arguments = "".join(item.parameters for batch in items for item in batch)
    assert json.loads(arguments) == {"city": "Paris", "days": 3}


@pytest.mark.parametrize("size", [1, 3, 7])
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_through_both_detectors_a_calls_arguments_are_out_before_it_closes(
    sglang_server, name, size
):
    """SGLang's serving layering, every bundled format, chunks of a few characters up to the call's
    closing delimiter: the reasoning detector passes the call's text on as it comes, and the tool
    detector has announced the call and sent every argument (only the final "}" waits)."""
    template = template_for(name)
    turn = Turn(None, "", [("get_weather", dict(STREAMING_CALL))], False, True, ["abc123XYZ"])
    prefix, text = FORMATS[name].render(turn)
    cut = _cut_before_call_end(name, text)
    tokenizer = Tokenizer(template)
    reasoning = ReasoningParser("rtcompile", tokenizer=tokenizer, prefix=prefix)
    with sglang_server("rtcompile"):
        tools = FunctionCallParser(
            sglang_tools(tools_for(turn.calls)), "rtcompile", tokenizer=tokenizer, prefix=prefix
        )
    items: list = []

    def feed(piece: str) -> None:
        _, normal = reasoning.parse_stream_chunk(piece)
        if normal:
            items.extend(tools.parse_stream_chunk(normal)[1])

    for start in range(0, cut, size):
        feed(text[start : min(start + size, cut)])
    assert [item.name for item in items if item.name] == ["get_weather"]
    assert json.loads("".join(item.parameters for item in items) + "}") == STREAMING_CALL
    feed(text[cut:])
    _, normal = reasoning.parse_stream_end()
    if normal:
        items.extend(tools.parse_stream_chunk(normal)[1])
    items.extend(tools.parse_stream_end()[1])
    assert json.loads("".join(item.parameters for item in items)) == STREAMING_CALL


def test_calls_to_functions_not_in_the_tools_are_dropped_as_sglang_drops_them():
    tools = sglang_tools(WEATHER)
    other = QWEN3_CALL.replace("get_weather", "launch_rockets")
    text = other + "\n" + QWEN3_CALL
    template = template_for("qwen3")
    ours = tools_whole("rtcompile", tools, Tokenizer(template), QWEN3_PREFIX, text)
    theirs = tools_whole(
        "response_template", tools, Tokenizer(thinking_copy(template)), QWEN3_PREFIX, text
    )
    assert ours == theirs
    assert [name for _, name, _ in ours[1]] == ["get_weather"]
    chunks = [text[i : i + 3] for i in range(0, len(text), 3)]
    assert tools_streamed("rtcompile", tools, Tokenizer(template), QWEN3_PREFIX, chunks) == ours


@pytest.mark.parametrize("cut", [12, 30, 60])
def test_a_truncated_call_loses_nothing(cut):
    tools = sglang_tools(WEATHER)
    text = "Checking." + QWEN3_CALL[:cut]
    template = template_for("qwen3")
    chunks = [text[i : i + 5] for i in range(0, len(text), 5)]
    normal, calls = tools_streamed("rtcompile", tools, Tokenizer(template), QWEN3_PREFIX, chunks)
    body = QWEN3_CALL[len("<tool_call>") : cut]
    # the text is kept as normal text; a call already announced is closed with what was complete
    assert normal == "Checking." + body
    assert calls == ([] if cut < 40 else [(0, "get_weather", {})])
    parser = FunctionCallParser(
        tools, "rtcompile", tokenizer=Tokenizer(template), prefix=QWEN3_PREFIX
    )
    for chunk in chunks:
        parser.parse_stream_chunk(chunk)
    parser.parse_stream_end()
    assert parser.detector.incomplete_tool_call_indices == ({0} if calls else set())
    assert tools_whole("rtcompile", tools, Tokenizer(template), QWEN3_PREFIX, text) == (
        normal,
        calls,
    )
    # SGLang's detector drops the call and its text
    theirs = tools_streamed(
        "response_template", tools, Tokenizer(thinking_copy(template)), QWEN3_PREFIX, chunks
    )
    assert theirs[1] == [] and body not in theirs[0]


def test_a_call_cut_off_after_its_arguments_is_a_call():
    tools = sglang_tools(WEATHER)
    text = QWEN3_CALL[: -len("</tool_call>")]
    template = template_for("qwen3")
    chunks = [text[i : i + 5] for i in range(0, len(text), 5)]
    expected = ("", [(0, "get_weather", {"city": "Paris", "days": 3})])
    assert tools_streamed("rtcompile", tools, Tokenizer(template), QWEN3_PREFIX, chunks) == expected
    assert tools_whole("rtcompile", tools, Tokenizer(template), QWEN3_PREFIX, text) == expected


def test_a_malformed_call_keeps_its_text_and_later_calls_still_parse():
    tools = sglang_tools(WEATHER)
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\n</tool_call>'
    text = "a" + broken + "\n" + QWEN3_CALL
    template = template_for("qwen3")
    normal, calls = tools_whole("rtcompile", tools, Tokenizer(template), QWEN3_PREFIX, text)
    assert '{"name": "get_weather", "arguments": {"city": "Par' in normal
    assert calls[-1][1:] == ("get_weather", {"city": "Paris", "days": 3})
    chunks = [text[i : i + 2] for i in range(0, len(text), 2)]
    assert tools_streamed("rtcompile", tools, Tokenizer(template), QWEN3_PREFIX, chunks) == (
        normal,
        calls,
    )


# A prompt that ends inside a possible delimiter: gemma4's reasoning opens with "<|channel>".
HELD_PREFIX = "<|turn>model\n<|chan"


@pytest.mark.parametrize("chunks", [["nel", " is open", "<turn|>"], list("nel is open<turn|>")])
def test_prompt_text_held_back_at_the_prompts_end_is_not_sent_as_output(chunks):
    """The parser holds the prompt's "<|chan" back (it may start a delimiter); the output shows it
    starts none, and the parser reports it as content with the output's text. It is the prompt's:
    the results carry only what the model wrote, through either detector, streamed and whole."""
    tokenizer = Tokenizer(template_for("gemma4"))
    text = "".join(chunks)
    assert reasoning_streamed("rtcompile", tokenizer, HELD_PREFIX, chunks) == ("", "nel is open")
    assert reasoning_whole("rtcompile", tokenizer, HELD_PREFIX, text) == ("", "nel is open")
    # the tool detector, alone, reads the whole output (the content's closer is normal text to it)
    tools = sglang_tools(WEATHER)
    expected = ("nel is open<turn|>", [])
    assert tools_streamed("rtcompile", tools, tokenizer, HELD_PREFIX, chunks) == expected
    assert tools_whole("rtcompile", tools, tokenizer, HELD_PREFIX, text) == expected
    # completed by the output, it is a delimiter
    chunks = ["nel>", "thought\nplan", "<channel|>", "Answer<turn|>"]
    assert reasoning_streamed("rtcompile", tokenizer, HELD_PREFIX, chunks) == ("plan", "Answer")


def harmony_channels() -> dict:
    """gpt-oss with its analysis channel repeating, joined: harmony writes an analysis message per
    step (between tool calls, say), and the message's reasoning is all of them."""
    template = json.loads(json.dumps(template_for("gpt_oss")))
    template["fields"]["reasoning_content"].update(repeats=True, join="\n\n")
    return template


HARMONY_PREFIX = "<|start|>assistant"
HARMONY_TEXT = (
    "<|channel|>analysis<|message|>First step.<|end|><|start|>assistant"
    "<|channel|>analysis<|message|>Second step.<|end|><|start|>assistant"
    "<|channel|>final<|message|>Done.<|return|>"
)


def test_a_reasoning_field_that_repeats_with_join_is_served():
    """SGLang's own classes refuse a reasoning or content field with `join`; the detectors serve it:
    each region's text as the model wrote it, the join string between two regions, as the message
    joins them (SGLang's auxiliary methods read a copy with the field as plain text)."""
    template = harmony_channels()
    assert not sglang_accepts(thinking_copy(template))
    message = rtcompile.parse_response(HARMONY_TEXT, template, prefix=HARMONY_PREFIX)
    expected = (message["reasoning_content"], message["content"])
    assert expected == ("First step.\n\nSecond step.", "Done.")
    tokenizer = Tokenizer(template)
    assert reasoning_whole("rtcompile", tokenizer, HARMONY_PREFIX, HARMONY_TEXT) == expected
    for size in (1, 5, len(HARMONY_TEXT)):
        chunks = [HARMONY_TEXT[i : i + size] for i in range(0, len(HARMONY_TEXT), size)]
        assert reasoning_streamed("rtcompile", tokenizer, HARMONY_PREFIX, chunks) == expected
    detector = ReasoningParser("rtcompile", tokenizer=tokenizer, prefix=HARMONY_PREFIX).detector
    assert detector.think_start_token == "<|channel|>analysis<|message|>"


def test_reasoning_waits_for_its_close_without_stream_reasoning():
    template = template_for("qwen3")
    parser = ReasoningParser(
        "rtcompile", stream_reasoning=False, tokenizer=Tokenizer(template), prefix=QWEN3_PREFIX
    )
    out = [parser.parse_stream_chunk(chunk) for chunk in ["<think>ab", "cd</th", "ink>Answer"]]
    assert out[0] == ("", "") and out[1] == ("", "")
    assert out[2] == ("abcd", "Answer")
    theirs = ReasoningParser(
        "response_template",
        stream_reasoning=False,
        tokenizer=Tokenizer(thinking_copy(template)),
        prefix=QWEN3_PREFIX,
    )
    assert [theirs.parse_stream_chunk(c) for c in ["<think>ab", "cd</th", "ink>Answer"]] == out


def test_prefilled_reasoning_and_the_tool_call_text_the_reasoning_parser_passes_on():
    template = template_for("qwen3")
    prefix = QWEN3_PREFIX + "<think>\n"
    text = "plan</think>\n\nSure." + "\n" + QWEN3_CALL + "<|im_end|>"
    ours = reasoning_whole("rtcompile", Tokenizer(template), prefix, text)
    assert ours == reasoning_whole(
        "response_template", Tokenizer(thinking_copy(template)), prefix, text
    )
    assert QWEN3_CALL in ours[1]


QWEN3_5_CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"


@pytest.mark.parametrize(
    "name, text",
    [
        # a pattern closer (the parser reports what it matched); two identical calls in one chunk
        (
            "qwen3_5",
            "plan\n</think>\n\nOK." + "\n" + QWEN3_5_CALL + "\n" + QWEN3_5_CALL + "<|im_end|>",
        ),
        # two identical calls in one chunk, closed by a lookahead then by '</s>'
        ("ministral3", "[TOOL_CALLS]get_weather[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{}</s>"),
        # a closer the parser holds back at the end of the output
        ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'),
        # a literal closer at the very end
        ("qwen3", "<think>a</think>b\n" + QWEN3_CALL),
    ],
)
def test_tool_call_text_passes_through_the_reasoning_detector_with_its_closer(name, text):
    template = template_for(name)
    prefix = {
        "qwen3_5": QWEN3_PREFIX + "<think>\n",
        "llama3_json": "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "qwen3": QWEN3_PREFIX,
        "ministral3": "[/INST]",
    }[name]
    ours = reasoning_whole("rtcompile", Tokenizer(template), prefix, text)
    theirs = reasoning_whole("response_template", Tokenizer(thinking_copy(template)), prefix, text)
    assert ours == theirs
    for size in (1, 3, len(text)):
        chunks = [text[i : i + size] for i in range(0, len(text), size)]
        assert reasoning_streamed("rtcompile", Tokenizer(template), prefix, chunks) == theirs


@pytest.mark.parametrize("text", ["<think>only reasoning", "<think>a</think>", "<think>a</think>b"])
def test_force_nonempty_content_as_sglangs_detector(text):
    """A request with force_nonempty_content: reasoning stands in for missing content (one-shot),
    and reasoning the stream leaves open comes back as content at its end."""
    from sglang.srt.parser.response_template import ResponseTemplateReasoningDetector

    template = template_for("qwen3")
    ours = RtcompileReasoningDetector(
        tokenizer=Tokenizer(template), prefix=QWEN3_PREFIX, force_nonempty_content=True
    )
    theirs = ResponseTemplateReasoningDetector(
        tokenizer=Tokenizer(thinking_copy(template)),
        prefix=QWEN3_PREFIX,
        force_nonempty_content=True,
    )

    def whole(detector):
        result = detector.detect_and_parse(text)
        return result.reasoning_text, result.normal_text

    def streamed(detector):
        results = [detector.parse_streaming_increment(c) for c in (text[:5], text[5:])]
        results.append(detector.finish())
        return [(r.reasoning_text, r.normal_text) for r in results]

    assert whole(ours) == whole(theirs)
    assert streamed(ours) == streamed(theirs)


def test_text_results_are_built_without_validation_and_equal_validated_ones():
    """The tool detector's answer to a text chunk skips pydantic's validation where the installed
    pydantic lays instances out as the check expects (it does in the pinned SGLang environment);
    each such result is what the validated constructor builds."""
    from sglang.srt.function_call.core_types import StreamingParseResult

    from rtcompile.integrations import sglang
    from rtcompile.integrations.serving import same_as_validated

    assert sglang._text_result.__name__ == "build"  # (the unvalidated builder was chosen)
    for text in ("", "plain", "<tool_call>", "é\n"):
        fast = sglang._text_result(text)
        assert same_as_validated(fast, StreamingParseResult(normal_text=text))
        fast.calls.append("x")  # a fresh list each time, as pydantic copies the default
        assert sglang._text_result(text).calls == []


def test_call_items_and_call_results_are_built_without_validation_and_equal_validated_ones():
    """A chunk that announces a call or sends some of its arguments is answered with call items
    and a result built without pydantic's validation (in the pinned SGLang environment); each is
    what the validated constructor builds, and a streamed item still takes more arguments."""
    from sglang.srt.function_call.core_types import StreamingParseResult, ToolCallItem

    from rtcompile.integrations import sglang
    from rtcompile.integrations.serving import same_as_validated

    for values in ((0, "get_weather", ""), (2, None, '{"city": "Lisbon"'), (1, "é", "}")):
        fast = sglang._call_item(*values)
        assert type(fast) is ToolCallItem
        assert same_as_validated(
            fast, ToolCallItem(tool_index=values[0], name=values[1], parameters=values[2])
        )
    item = sglang._call_item(0, None, "{")
    item.parameters += "}"
    assert item.parameters == "{}" and item.model_fields_set == {"tool_index", "name", "parameters"}
    for text, calls in (("", []), ("x", [sglang._call_item(0, "f", "{}")])):
        assert same_as_validated(
            sglang._calls_result(text, calls), StreamingParseResult(normal_text=text, calls=calls)
        )
    # the unvalidated builders were chosen, not the validated fallbacks
    assert sglang._call_item.__name__ == "build" and sglang._calls_result.__name__ == "build"


def test_reasoning_results_are_built_without_the_constructor_and_equal_its_results():
    """The reasoning detector's answer to more reasoning or content sets the two attributes of
    SGLang's result class itself (checked once against the constructor, as here)."""
    from sglang.srt.parser.reasoning_parser import StreamingParseResult

    from rtcompile.integrations import sglang

    # the pinned SGLang's class takes plain attributes: the check chose them, not the constructor
    assert sglang._reasoning_result.__name__ == "reasoning_result"
    assert sglang._normal_result.__name__ == "normal_result"
    for text in ("", "plain", "<think>", "é\n"):
        made = sglang._reasoning_result(text)
        assert type(made) is StreamingParseResult
        assert vars(made) == vars(StreamingParseResult(None, text))
        assert vars(sglang._normal_result(text)) == vars(StreamingParseResult(text, None))
    parser = ReasoningParser("rtcompile", tokenizer=Tokenizer(template_for("qwen3")), prefix=QWEN3_PREFIX)
    assert parser.parse_stream_chunk("<think>") == ("", "")
    assert parser.parse_stream_chunk("a plan") == ("a plan", "")
    assert parser.parse_stream_chunk("</think>") == ("", "")
    assert parser.parse_stream_chunk("Sure") == ("", "Sure")
    assert parser.parse_stream_chunk(", done") == ("", ", done")


def test_the_parser_reads_each_tools_name_and_parameters_as_model_dump_gives_them():
    """The tool detector reads a request's `Tool` objects by their attributes (no model_dump, a
    copy of each whole tool, per request); the parser's casting tables come out the same."""
    from rtcompile.integrations.serving import tool_dicts
    from rtcompile.runtime.coerce import tool_parameters

    tools = sglang_tools(WEATHER)
    dumped = [tool.model_dump(exclude_none=True) for tool in tools]
    assert tool_parameters(tool_dicts(tools, parsing_only=True)) == tool_parameters(dumped)
    assert tool_dicts(dumped, parsing_only=True) == dumped  # dicts as they are
    assert [t["function"]["name"] for t in tool_dicts(tools, parsing_only=True)] == ["get_weather", "never_called"]


def test_detectors_of_one_template_share_its_plans_and_see_it_changed_in_place():
    """Detectors built from the tokenizer's one template object reuse its compiled plans and the
    copy SGLang's classes read (found without serializing the template per request); a template
    changed in place gets plans of its own; SGLang's classes leave the shared copy as it was."""
    from rtcompile.integrations import sglang

    template = json.loads(json.dumps(template_for("qwen3")))
    tokenizer = Tokenizer(template)
    tools = sglang_tools(WEATHER)
    first = ReasoningParser("rtcompile", tokenizer=tokenizer).detector
    tool = FunctionCallParser(tools, "rtcompile", tokenizer=tokenizer).detector
    assert first.plans is tool.plans
    view = first.plans.sglang_view
    assert view == sglang._sglang_view(template)
    # used, as a request uses them: the shared copy is unchanged
    text = '<think>a</think>b<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    assert ReasoningParser("rtcompile", tokenizer=tokenizer).parse_non_stream(text)[0] == "a"
    assert calls_view(
        FunctionCallParser(tools, "rtcompile", tokenizer=tokenizer).parse_non_stream(text[16:])[1]
    ) == [(0, "get_weather", {"city": "Rome"})]
    assert view == sglang._sglang_view(template_for("qwen3"))
    assert ReasoningParser("rtcompile", tokenizer=tokenizer).detector.plans is first.plans

    template["fields"]["reasoning_content"]["open"] = "<reason>"  # changed in place
    template["fields"]["reasoning_content"]["close"] = "</reason>"
    changed = ReasoningParser("rtcompile", tokenizer=tokenizer)
    assert changed.detector.plans is not first.plans
    assert changed.parse_non_stream("<reason>r</reason>n") == ("r", "n")


# --------------------------------------------------------------------------------------------------
# Reasoning, with and without a reasoning parser in front of the tool parser
#
# SGLang's serving hands the tool parser the reasoning parser's normal text when a reasoning parser
# is configured, and the whole output when none is. Either way the calls are the template's: a
# call written inside reasoning is reasoning. The reference is rtcompile's own message, which the
# main suite proves equal to transformers 5.25.0's interpreter (SGLang pins another transformers).

REASONING_TEMPLATES = sorted(
    name
    for name in FORMATS
    if {"reasoning_content", "thinking"} & set(template_for(name)["fields"])
)


def test_every_bundled_template_with_a_reasoning_field_is_checked_here():
    assert len(REASONING_TEMPLATES) >= 14 and FORMATS["qwen3"].reasoning
    assert all(FORMATS[name].reasoning for name in REASONING_TEMPLATES)


def reasoning_delimiters(template: dict) -> tuple[str, str]:
    """The reasoning field's first literal opener and closer."""
    field = template["fields"].get("reasoning_content") or template["fields"]["thinking"]
    opener, closer = field["open"], field["close"]
    return (opener if isinstance(opener, str) else opener[0]), (
        closer if isinstance(closer, str) else closer[0]
    )


def message_calls(text: str, template: dict, prefix: str, tools: list[dict]) -> list[tuple]:
    message = rtcompile.parse_response(text, template, prefix=prefix, tools=tools or None)
    return [
        (call["function"]["name"], call["function"]["arguments"])
        for call in message.get("tool_calls") or ()
    ]


def layered_streamed(tools, tokenizer, prefix: str, chunks: list[str]) -> tuple[str, str, list]:
    """SGLang's serving with both parsers: each chunk through the reasoning parser, its normal text
    through the tool parser; then both ends. (reasoning, normal text, calls accumulated)."""
    reasoning_parser = ReasoningParser("rtcompile", tokenizer=tokenizer, prefix=prefix)
    tool_parser = FunctionCallParser(tools, "rtcompile", tokenizer=tokenizer, prefix=prefix)
    reasoning, normal, items = [], [], []

    def tool_step(text: str) -> None:
        normal_text, calls = tool_parser.parse_stream_chunk(text)
        normal.append(normal_text)
        items.extend(calls)

    for chunk in chunks:
        reasoning_text, normal_text = reasoning_parser.parse_stream_chunk(chunk)
        reasoning.append(reasoning_text or "")
        tool_step(normal_text or "")
    reasoning_text, normal_text = reasoning_parser.parse_stream_end()
    reasoning.append(reasoning_text or "")
    tool_step(normal_text or "")
    normal_text, calls = tool_parser.parse_stream_end()
    normal.append(normal_text)
    items.extend(calls)
    arguments: dict[int, str] = {}
    names: dict[int, str] = {}
    for item in items:
        if item.name:
            names[item.tool_index] = item.name
        arguments[item.tool_index] = arguments.get(item.tool_index, "") + item.parameters
    view = [(index, names[index], json.loads(arguments[index])) for index in sorted(arguments)]
    return "".join(reasoning), "".join(normal), view


QWEN3_THINKING = QWEN3_PREFIX + "<think>\n"
# (prefix, output): a call written inside reasoning; the interpreter finds no call in any of them
CALLS_IN_REASONING = [
    (QWEN3_THINKING, "I could call it:\n" + QWEN3_CALL),  # the prompt opened it, never closed
    (QWEN3_PREFIX, "<think>I could call it:\n" + QWEN3_CALL),  # the output opened it, never closed
    (QWEN3_PREFIX, "<think>maybe\n" + QWEN3_CALL + "</think>\n\nNo call needed."),  # closed
    (QWEN3_THINKING, "maybe\n" + QWEN3_CALL + "</think>\n\nNo call needed.<|im_end|>"),
]


@pytest.mark.parametrize("prefix, text", CALLS_IN_REASONING)
def test_without_a_reasoning_parser_a_call_written_in_reasoning_is_reasoning(
    sglang_server, prefix, text
):
    """`sglang serve --tool-call-parser rtcompile` without `--reasoning-parser`: the tool detector
    reads the whole output, reasoning included, and follows the template there: no call, and the
    whole output is normal text (content to the client), whole and streamed."""
    template = template_for("qwen3")
    tools = sglang_tools(WEATHER)
    tokenizer = Tokenizer(template)
    assert message_calls(text, template, prefix, WEATHER) == []
    with sglang_server(None):
        assert tools_whole("rtcompile", tools, tokenizer, prefix, text) == (text, [])
        for size in (1, 4, len(text)):
            chunks = [text[i : i + size] for i in range(0, len(text), size)]
            assert tools_streamed("rtcompile", tools, tokenizer, prefix, chunks) == (text, [])
        parser = FunctionCallParser(tools, "rtcompile", tokenizer=tokenizer, prefix=prefix)
        assert not parser.has_tool_call(text)
        # SGLang's own response-template detector, given the whole output, returns it as a call
        theirs_tokenizer = Tokenizer(thinking_copy(template))
        theirs = tools_whole("response_template", tools, theirs_tokenizer, prefix, text)
        assert theirs[1] == [(0, "get_weather", {"city": "Paris", "days": 3})]


@pytest.mark.parametrize("prefix, text", CALLS_IN_REASONING)
def test_behind_the_reasoning_parser_a_call_written_in_reasoning_is_reasoning(
    sglang_server, prefix, text
):
    template = template_for("qwen3")
    tools = sglang_tools(WEATHER)
    tokenizer = Tokenizer(template)
    with sglang_server("rtcompile"):
        reasoning, normal = reasoning_whole("rtcompile", tokenizer, prefix, text)
        assert QWEN3_CALL in reasoning and QWEN3_CALL not in normal
        assert tools_whole("rtcompile", tools, tokenizer, prefix, normal) == (normal, [])
        chunks = [text[i : i + 3] for i in range(0, len(text), 3)]
        streamed = layered_streamed(tools, tokenizer, prefix, chunks)
        assert streamed == (reasoning, normal, [])


def test_behind_the_reasoning_parser_a_call_after_reasoning_the_prompt_opened_is_a_call(
    sglang_server,
):
    """The reasoning parser took the prompt's open reasoning out, closer included: what reaches
    the tool parser is the answer, and a call there is a call."""
    template = template_for("qwen3")
    tools = sglang_tools(WEATHER)
    tokenizer = Tokenizer(template)
    text = "plan</think>\n\nChecking.\n" + QWEN3_CALL + "<|im_end|>"
    expected = [(0, "get_weather", {"city": "Paris", "days": 3})]
    with sglang_server("rtcompile"):
        reasoning, normal = reasoning_whole("rtcompile", tokenizer, QWEN3_THINKING, text)
        assert reasoning == "plan" and QWEN3_CALL in normal
        assert tools_whole("rtcompile", tools, tokenizer, QWEN3_THINKING, normal)[1] == expected
        chunks = [text[i : i + 2] for i in range(0, len(text), 2)]
        assert layered_streamed(tools, tokenizer, QWEN3_THINKING, chunks)[2] == expected
    with sglang_server(None):  # the whole output: the same call, after the reasoning
        normal, calls = tools_whole("rtcompile", tools, tokenizer, QWEN3_THINKING, text)
        assert calls == expected and normal == "plan</think>\n\nChecking.<|im_end|>"


@st.composite
def calls_in_reasoning(draw, name: str) -> tuple[str, str, list[dict]]:
    """(prefix, output, tools): a rendered turn (content and calls) written inside reasoning that
    the prompt opens, or the output opens and leaves open, or the output closes before another
    turn."""
    template = template_for(name)
    opener, closer = reasoning_delimiters(template)
    inner = draw(turns(name))
    inner = Turn(None, inner.content, inner.calls, False, inner.ensure_ascii, inner.call_ids)
    prefix, body = FORMATS[name].render(inner)
    calls = list(inner.calls)
    shape = draw(st.sampled_from(["prompt opens", "output opens", "closed"]))
    if shape == "prompt opens":
        prefix, text = prefix + opener, body
    elif shape == "output opens":
        text = opener + body
    else:
        after = draw(turns(name))
        after = Turn(
            after.reasoning, after.content, after.calls, False, after.ensure_ascii, after.call_ids
        )
        text = opener + body + closer + FORMATS[name].render(after)[1]
        calls += after.calls
    return prefix, text, tools_for(calls)


@pytest.mark.parametrize("name", REASONING_TEMPLATES)
def test_without_a_reasoning_parser_the_tool_detector_finds_the_templates_calls(
    sglang_server, name
):
    """Every bundled reasoning template, the whole output to the tool detector: its calls are the
    message's (none of those written inside reasoning), whole and streamed; with no call, every
    character the model wrote is normal text."""
    template = template_for(name)
    tokenizer = Tokenizer(template)

    @settings(max_examples=EXAMPLES)
    @given(case=calls_in_reasoning(name), data=st.data())
    def check(case, data):
        prefix, text, tool_dicts = case
        chunks = data.draw(chunkings(text), label="chunks")
        note(f"prefix={prefix!r}\ntext={text!r}")
        tools = sglang_tools(tool_dicts)
        expected = message_calls(text, template, prefix, tool_dicts)
        normal, calls = tools_whole("rtcompile", tools, tokenizer, prefix, text)
        assert [(call_name, arguments) for _, call_name, arguments in calls] == expected
        assert tools_streamed("rtcompile", tools, tokenizer, prefix, chunks) == (normal, calls)
        parser = FunctionCallParser(tools, "rtcompile", tokenizer=tokenizer, prefix=prefix)
        if expected:
            assert parser.has_tool_call(text)
        else:
            assert normal == text

    with sglang_server(None):
        check()


@pytest.mark.parametrize("name", REASONING_TEMPLATES)
def test_behind_the_reasoning_parser_the_tool_detector_finds_the_templates_calls(
    sglang_server, name
):
    """Every bundled reasoning template, the reasoning parser's normal text to the tool detector:
    the calls are the message's, whole and streamed through both parsers."""
    template = template_for(name)
    tokenizer = Tokenizer(template)

    @settings(max_examples=EXAMPLES)
    @given(case=calls_in_reasoning(name), data=st.data())
    def check(case, data):
        prefix, text, tool_dicts = case
        chunks = data.draw(chunkings(text), label="chunks")
        note(f"prefix={prefix!r}\ntext={text!r}")
        tools = sglang_tools(tool_dicts)
        expected = message_calls(text, template, prefix, tool_dicts)
        reasoning, normal = reasoning_whole("rtcompile", tokenizer, prefix, text)
        normal_after, calls = tools_whole("rtcompile", tools, tokenizer, prefix, normal)
        assert [(call_name, arguments) for _, call_name, arguments in calls] == expected
        streamed = layered_streamed(tools, tokenizer, prefix, chunks)
        assert streamed == (reasoning, normal_after, calls)
        if not expected:
            assert normal_after == normal

    with sglang_server("rtcompile"):
        check()


def test_the_tool_detector_reads_the_servers_reasoning_parser_setting(sglang_server):
    """What SGLang's serving reads to decide what the tool parser gets, the tool detector reads to
    know it; a caller building the detector itself may say it (`after_reasoning_parser`)."""
    tokenizer = Tokenizer(template_for("qwen3"))
    tools = sglang_tools(WEATHER)
    for configured, expected in ((None, False), ("rtcompile", True), ("qwen3", True)):
        with sglang_server(configured):
            parser = FunctionCallParser(
                tools, "rtcompile", tokenizer=tokenizer, prefix=QWEN3_THINKING
            )
            assert parser.detector.after_reasoning_parser is expected
            explicit = RtcompileToolDetector(
                tokenizer=tokenizer, after_reasoning_parser=not expected
            )
            assert explicit.after_reasoning_parser is (not expected)


@pytest.mark.parametrize("reasoning_parser", ["qwen3-thinking", "deepseek-r1"])
def test_behind_sglangs_own_reasoning_parsers_the_calls_are_the_templates(
    sglang_server, reasoning_parser
):
    """Whatever reasoning parser is configured: SGLang's own take the reasoning the prompt opened
    out, and the tool detector reads what they hand on. (What is reasoning is then that parser's
    call: SGLang's qwen3 parser also ends reasoning at a `<tool_call>`, where the template does
    not.)"""
    template = template_for("qwen3")
    tokenizer = Tokenizer(template)
    tools = sglang_tools(WEATHER)
    text = "plan</think>\n\nChecking.\n" + QWEN3_CALL + "<|im_end|>"
    expected = [(0, "get_weather", {"city": "Paris", "days": 3})]
    assert message_calls(text, template, QWEN3_THINKING, WEATHER) == [expected[0][1:]]
    with sglang_server(reasoning_parser):
        parser = ReasoningParser(reasoning_parser, tokenizer=tokenizer, force_reasoning=True)
        reasoning, normal = parser.parse_non_stream(text)
        assert reasoning == "plan" and QWEN3_CALL in normal
        assert tools_whole("rtcompile", tools, tokenizer, QWEN3_THINKING, normal)[1] == expected


def test_reasoning_the_prompt_left_open_is_over_behind_a_reasoning_parser_whatever_its_closer():
    """A literal closer is appended to the prompt; a closer that is only a pattern cuts the prompt
    where that reasoning opened (not at a look-alike opener written inside it)."""
    from rtcompile.integrations import sglang

    literal = sglang._Plans.of(template_for("qwen3"))
    assert sglang._prefix_past_reasoning(literal, QWEN3_THINKING) == QWEN3_THINKING + "</think>"
    assert sglang._prefix_past_reasoning(literal, QWEN3_PREFIX) == QWEN3_PREFIX
    template = json.loads(json.dumps(template_for("qwen3")))
    reasoning = template["fields"]["reasoning_content"]
    reasoning["close_pattern"] = reasoning.pop("close")
    pattern = sglang._Plans.of(template)
    prefix = QWEN3_PREFIX + "<think>\nShould I write <think> here? "
    assert sglang._prefix_past_reasoning(pattern, prefix) == QWEN3_PREFIX
    text = "no.</think>\n\nChecking.\n" + QWEN3_CALL + "<|im_end|>"
    tokenizer = Tokenizer(template)
    _, normal = reasoning_whole("rtcompile", tokenizer, prefix, text)
    detector = RtcompileToolDetector(
        tokenizer=tokenizer, prefix=prefix, after_reasoning_parser=True
    )
    calls = detector.detect_and_parse(normal, sglang_tools(WEATHER)).calls
    assert calls_view(calls) == [(0, "get_weather", {"city": "Paris", "days": 3})]


# --------------------------------------------------------------------------------------------------
# Tool guarantees: SGLang asks the tool detector for a structural tag (required, named, strict,
# one call) and compiles it with its xgrammar backend (xgrammar 0.2.7)

from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject  # noqa: E402
from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, ToolChoice  # noqa: E402

from grammar_walk import END_OF_OUTPUT, TOKEN_LIKE, TURN_ENDS  # noqa: E402

SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "exact": {"type": "boolean"}, "limit": {"type": "number"}},
            "required": ["query", "exact"],
        },
    },
}
GUARANTEE_TOOLS = [
    {"type": "function", "function": {**WEATHER[0]["function"], "parameters": {**WEATHER[0]["function"]["parameters"], "required": ["city"]}}},
    SEARCH,
]
GUARANTEES = {
    "required": ("required", True),
    "named": (ToolChoice(function={"name": "search"}), True),
    "one call": ("required", False),
}
TOOL_TEMPLATES = sorted(name for name in FORMATS if "tool_calls" in template_for(name)["fields"])
CLOSERS = frozenset(['"', "'", "}", "]", ")", ">", ",", ":", "|"])


def request_tools() -> list[Tool]:
    return [Tool.model_validate(tool) for tool in GUARANTEE_TOOLS]


class TextKit:
    """A tokenizer for one template whose token-like delimiter pieces are added tokens that read
    as text (as `<tool_call>` in Qwen's tokenizers: SGLang's detectors parse text, and xgrammar
    matches the tag's text delimiters with them, so random walks end), its turn ends special
    tokens and the first of them its end of sequence; SGLang's xgrammar backend for it."""

    def __init__(self, name: str):
        from tokenizer_pool import AddedSpec, build_tokenizer

        self.name = name
        self.template = template_for(name)
        pieces = set(TOKEN_LIKE.findall(json.dumps(self.template, ensure_ascii=False).replace("\\\\", "")))
        stops = sorted(p for p in pieces if p in TURN_ENDS) or [END_OF_OUTPUT]
        added = [AddedSpec(p, "template") for p in sorted(pieces - set(stops))] + [AddedSpec(s, "special") for s in stops]
        self.tokenizer = build_tokenizer("bpe", added)
        self.tokenizer.eos_token = stops[0]
        self.tokenizer.response_template = self.template
        self.stops = [self.tokenizer.convert_tokens_to_ids(s) for s in stops]
        self.backend = XGrammarGrammarBackend(self.tokenizer, vocab_size=len(self.tokenizer), model_eos_token_ids=self.stops)
        controls = set(self.tokenizer.added_tokens_decoder)
        self.controls = controls
        self.closing = {i for i in range(len(self.tokenizer)) if i not in controls and self.tokenizer.decode([i]) in CLOSERS}

    def walk(self, key: str, rng: Any, max_tokens: int = 500) -> tuple[str, bool]:
        """A random output SGLang's grammar for the tag `key` accepts (its text, the stop left
        out), and whether it ended at a stop."""
        import torch

        grammar = self.backend.dispatch_structural_tag(key)
        assert not isinstance(grammar, InvalidGrammarObject), grammar
        size = len(self.tokenizer)
        mask = grammar.allocate_vocab_mask(size, 1, None)
        bits = torch.arange(32, dtype=torch.int32)
        ids: list[int] = []
        while len(ids) < max_tokens:
            grammar.fill_vocab_mask(mask, 0)
            allowed = torch.nonzero(((mask[0].unsqueeze(1) >> bits) & 1).flatten()[:size]).flatten().tolist()
            stops = [i for i in allowed if i in self.stops]
            candidates = [i for i in allowed if i not in self.stops]
            if stops and (not candidates or rng.random() < 0.05 + len(ids) / max_tokens):
                grammar.accept_token(stops[0])
                assert grammar.is_terminated()
                return self.tokenizer.decode(ids), True
            assert candidates, f"a dead end after {self.tokenizer.decode(ids)!r}"
            roll = rng.random()
            favoured = self.controls if roll < 0.3 else self.closing if roll < 0.7 else ()
            choice = rng.choice([i for i in candidates if i in favoured] or candidates)
            grammar.accept_token(choice)  # (raises if the grammar refuses what its mask allowed)
            ids.append(choice)
        return self.tokenizer.decode(ids), False


_TEXT_KITS: dict[str, TextKit] = {}


def text_kit(name: str) -> TextKit:
    if name not in _TEXT_KITS:
        _TEXT_KITS[name] = TextKit(name)
    return _TEXT_KITS[name]


def first(delimiter: str | list[str]) -> str:
    return delimiter[0] if isinstance(delimiter, list) else delimiter


def anchor_of(template: dict) -> str:
    return first(template.get("start_anchor", ""))


def sampling_key(tools: list, tool_choice: Any, parallel: bool, constraint: Any) -> str:
    """The structural tag as SGLang's chat request puts it in the sampling parameters."""
    request = ChatCompletionRequest(
        model="test-model", messages=[{"role": "user", "content": "hi"}], tools=tools,
        tool_choice=tool_choice if isinstance(tool_choice, str) else {"type": "function", "function": {"name": tool_choice.function.name}},
        parallel_tool_calls=parallel,
    )
    return request.to_sampling_params(stop=[], model_generation_config={}, tool_call_constraint=constraint)["structural_tag"]


def guarantee_problems(calls: list[tuple], tool_choice: Any, parallel: bool) -> list[str]:
    import jsonschema

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in GUARANTEE_TOOLS}
    problems = []
    if tool_choice != "auto" and not calls:
        problems.append("a call was required, none was made")
    if not parallel and len(calls) > 1:
        problems.append(f"one call at most, {len(calls)} made")
    for _, call_name, arguments in calls:
        if isinstance(tool_choice, ToolChoice) and call_name != tool_choice.function.name:
            problems.append(f"named {tool_choice.function.name!r}, called {call_name!r}")
        if call_name not in schemas:
            problems.append(f"{call_name!r} is no tool")
            continue
        try:
            jsonschema.validate(arguments, schemas[call_name])
        except jsonschema.ValidationError as error:
            problems.append(f"arguments of {call_name!r}: {error.message}")
    return problems


def assert_walks_keep(kit: TextKit, key: str, prefix: str, before: str, tool_choice: Any, parallel: bool) -> int:
    """Walks through SGLang's grammar for `key`, each written after `before` (the reasoning SGLang's
    gate lets through unconstrained), go through both detectors as SGLang's serving streams them:
    calls that keep the guarantee, the template's calls for the whole output. Returns calls seen."""
    import random

    rng = random.Random(f"{kit.name} {key[:200]}")
    tools = request_tools()
    seen = ended = 0
    for _ in range(9):
        if ended == 3:
            break
        text, finished = kit.walk(key, rng)
        if not finished:
            continue
        ended += 1
        output = before + text
        chunks = [output[i : i + 3] for i in range(0, len(output), 3)]
        _, _, calls = layered_streamed(tools, kit.tokenizer, prefix, chunks)
        assert not guarantee_problems(calls, tool_choice, parallel), (guarantee_problems(calls, tool_choice, parallel), output)
        assert [(n, a) for _, n, a in calls] == message_calls(output, kit.template, prefix, GUARANTEE_TOOLS), output
        seen += len(calls)
    assert ended, "no walk ended"
    return seen


@pytest.mark.parametrize("guarantee", sorted(GUARANTEES))
@pytest.mark.parametrize("name", TOOL_TEMPLATES)
def test_forced_calls_get_rtcompiles_tag(sglang_server, name, guarantee):
    """Behind `--reasoning-parser rtcompile`, as SGLang's chat serving asks: the tool detector's
    constraint for a forced request is rtcompile's structural tag, which SGLang puts in the
    sampling parameters and its xgrammar (0.2.7) backend compiles; walked from the message start
    (the tag SGLang then asks for, reasoning included) and past a prompt-opened reasoning (the tag
    its reasoning gate applies after the reasoning), the outputs stream through both detectors
    calls that keep the guarantee (JSON arguments included: their strings keep the closer out
    without json_schema `excludes`, which 0.2.7 ignores)."""
    kit = text_kit(name)
    tool_choice, parallel = GUARANTEES[guarantee]
    tools = request_tools()
    with sglang_server("rtcompile"):
        parser = FunctionCallParser(tools, "rtcompile", tokenizer=kit.tokenizer)
        constraint = parser.get_structure_constraint(tool_choice, parallel_tool_calls=parallel, thinking_mode=False)
        assert constraint[0] == "structural_tag"
        assert FunctionCallParser(tools, "rtcompile", tokenizer=kit.tokenizer, tool_choice=tool_choice).owns_tool_format()
        anchor = anchor_of(kit.template)
        start = parser.detector.get_structural_tag(
            tools=parser.structural_tag_tools(), tool_choice=tool_choice, thinking_mode=True, parallel_tool_calls=parallel, message_start=True
        )
        seen = assert_walks_keep(kit, sampling_key(tools, tool_choice, parallel, ("structural_tag", start)), "Hi." + anchor, "", tool_choice, parallel)
        reasoning = kit.template["fields"].get("reasoning_content")
        if reasoning is not None:
            key = sampling_key(tools, tool_choice, parallel, constraint)
            seen += assert_walks_keep(kit, key, "Hi." + anchor + reasoning["open"], "weighing it" + first(reasoning["close"]), tool_choice, parallel)
        assert seen > 0


def test_a_tag_that_leans_on_json_schema_excludes_is_refused_under_sglangs_xgrammar(sglang_server):
    """Schema keywords rtcompile's JSON writer does not enforce (here a string `pattern`) go to
    xgrammar's json_schema format, whose `excludes` SGLang's xgrammar 0.2.7 ignores (below): that
    request is refused with the reason, in one line; the same tool without the keyword gets the tag."""
    patterned = json.loads(json.dumps(GUARANTEE_TOOLS))
    patterned[0]["function"]["parameters"]["properties"]["city"]["pattern"] = "^[A-Z]"
    with sglang_server("rtcompile"):
        parser = FunctionCallParser([Tool.model_validate(t) for t in patterned], "rtcompile", tokenizer=text_kit("qwen3").tokenizer)
        with pytest.raises(ValueError) as error:
            parser.get_structure_constraint("required")
        assert "json_schema formats, whose `excludes`" in str(error.value) and "\n" not in str(error.value)
        plain = FunctionCallParser(request_tools(), "rtcompile", tokenizer=text_kit("qwen3").tokenizer)
        assert plain.get_structure_constraint("required")[0] == "structural_tag"


def test_strings_keep_a_non_ascii_closer_out_under_sglangs_xgrammar():
    """xgrammar 0.2.7 clamps the characters of a negated class to ASCII (a class that excludes
    `｜` would let it through); rtcompile writes such classes as the positive class of their
    complement, so a JSON string under 0.2.7 cannot hold a closer made of such characters."""
    import xgrammar as xgr

    kit = text_kit("deepseek_v3_1")
    tag = rtcompile.structural_tag(kit.template, GUARANTEE_TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}, prefix="<｜Assistant｜>")
    info = xgr.TokenizerInfo.from_huggingface(kit.tokenizer, vocab_size=len(kit.tokenizer), stop_token_ids=kit.stops)
    compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_structural_tag(json.dumps(tag))
    opening = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "a'

    def accepts(text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        return all(matcher.accept_token(i) for i in kit.tokenizer.encode(text, add_special_tokens=False))

    assert accepts(opening + '<｜tool▁call" ')  # (a part of it is text)
    assert not accepts(opening + "<｜tool▁call▁end｜>")


def test_xgrammar_0_2_7_ignores_excludes_on_json_schema_formats():
    """Why JSON-argument templates fall back in SGLang 0.5.23: its xgrammar takes a string holding
    an excluded closer (0.2.8 refuses it). When this fails, SGLang's xgrammar keeps `excludes`
    and those templates can take rtcompile's tag too."""
    import xgrammar as xgr

    kit = text_kit("qwen3")
    info = xgr.TokenizerInfo.from_huggingface(kit.tokenizer, vocab_size=len(kit.tokenizer), stop_token_ids=kit.stops)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    tag = {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": schema, "excludes": ["</tool_call>"]}}
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info, cache_enabled=False).compile_structural_tag(json.dumps(tag)))
    assert all(matcher.accept_token(i) for i in kit.tokenizer.encode('{"a": "x</tool_call>y"}', add_special_tokens=False))


def test_strict_or_one_call_on_auto_is_a_tag_or_refused(sglang_server):
    """"auto" with strict tools or one call: rtcompile's tag (SGLang's own response-template
    detector refuses both); refused with the reason where SGLang's xgrammar cannot keep the tag."""
    tools = request_tools()
    strict = [Tool.model_validate({**t, "function": {**t["function"], "strict": True}}) for t in GUARANTEE_TOOLS]
    with sglang_server("rtcompile"):
        coder = FunctionCallParser(tools, "rtcompile", tokenizer=text_kit("qwen3_coder").tokenizer)
        assert coder.get_structure_constraint("auto", parallel_tool_calls=False)[0] == "structural_tag"
        strict_coder = FunctionCallParser(strict, "rtcompile", tokenizer=text_kit("qwen3_coder").tokenizer)
        assert strict_coder.get_structure_constraint("auto")[0] == "structural_tag"
        assert coder.get_structure_constraint("auto") is None  # (plain auto: nothing to keep)
        qwen3 = FunctionCallParser(strict, "rtcompile", tokenizer=text_kit("qwen3").tokenizer)
        assert qwen3.get_structure_constraint("auto")[0] == "structural_tag"
        patterned = json.loads(json.dumps(GUARANTEE_TOOLS))
        patterned[1]["function"]["parameters"]["properties"]["query"]["pattern"] = "^[a-z]"
        patterned[1]["function"]["strict"] = True
        refused = FunctionCallParser([Tool.model_validate(t) for t in patterned], "rtcompile", tokenizer=text_kit("qwen3").tokenizer)
        with pytest.raises(ValueError, match="cannot constrain these tool calls under the installed xgrammar"):
            refused.get_structure_constraint("auto")


def test_without_a_reasoning_parser_a_template_that_reasons_is_not_constrained_blind(sglang_server):
    """Without `--reasoning-parser`, SGLang builds the tag before the prompt is known and applies
    it from the first token: a prompt that opens the reasoning would make the tag's calls
    reasoning. Refused with the reason; a template without reasoning is constrained."""
    tools = request_tools()
    with sglang_server(None):
        with pytest.raises(ValueError, match="only behind --reasoning-parser rtcompile"):
            FunctionCallParser(tools, "rtcompile", tokenizer=text_kit("qwen3_5").tokenizer).get_structure_constraint("required")
        constraint = FunctionCallParser(tools, "rtcompile", tokenizer=text_kit("qwen3_coder").tokenizer).get_structure_constraint("required")
        assert constraint[0] == "structural_tag"
        kit = text_kit("qwen3_coder")
        key = sampling_key(tools, "required", True, constraint)
        assert assert_walks_keep(kit, key, "Hi." + anchor_of(kit.template), "", "required", True) > 0


def test_what_the_grammar_cannot_express_is_refused_in_one_line(sglang_server):
    template = json.loads(json.dumps(template_for("qwen3_coder")))
    template["fields"]["tool_calls"]["optional"] = False
    with sglang_server("rtcompile"):
        parser = FunctionCallParser(request_tools(), "rtcompile", tokenizer=Tokenizer(template))
        with pytest.raises(ValueError) as error:
            parser.get_structure_constraint("required")
    assert "a required field cannot be guaranteed by the grammar" in str(error.value) and "\n" not in str(error.value)


def test_the_pythonic_templates_auto_tags_compile_under_sglangs_xgrammar(sglang_server):
    """rtcompile keeps Llama's pythonic calls' content from starting like a call with a class of
    characters that holds some above U+007F; written as a positive class, SGLang's xgrammar 0.2.7
    compiles the "auto" tag (one call) and its walks keep it."""
    kit = text_kit("llama3_2_pythonic")
    tools = request_tools()
    with sglang_server("rtcompile"):
        constraint = FunctionCallParser(tools, "rtcompile", tokenizer=kit.tokenizer).get_structure_constraint("auto", parallel_tool_calls=False)
    key = sampling_key(tools, "auto", False, constraint)
    grammar = kit.backend.dispatch_structural_tag(key)
    assert not isinstance(grammar, InvalidGrammarObject), grammar
    assert_walks_keep(kit, key, "Hi." + anchor_of(kit.template), "", "auto", False)


def test_with_the_requests_own_format_sglangs_policy_decides(sglang_server):
    """SGLang's chat request, given the detector's tag and a `response_format`: a forced choice
    cannot be combined with it (refused), "auto" with strict tools keeps the request's format and
    drops the tag (SGLang warns that constrained decoding is not compatible with tool calls)."""
    kit = text_kit("qwen3_coder")
    strict = [Tool.model_validate({**t, "function": {**t["function"], "strict": True}}) for t in GUARANTEE_TOOLS]
    answer = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}
    with sglang_server("rtcompile"):
        parser = FunctionCallParser(strict, "rtcompile", tokenizer=kit.tokenizer)
        for tool_choice in ("required", "auto"):
            constraint = parser.get_structure_constraint(tool_choice)
            assert constraint[0] == "structural_tag"
            request = ChatCompletionRequest(
                model="test-model", messages=[{"role": "user", "content": "hi"}], tools=strict,
                tool_choice=tool_choice, response_format=answer,
            )
            if tool_choice == "required":
                with pytest.raises(ValueError, match="cannot be combined with"):
                    request.to_sampling_params(stop=[], model_generation_config={}, tool_call_constraint=constraint)
            else:
                params = request.to_sampling_params(stop=[], model_generation_config={}, tool_call_constraint=constraint)
                assert "structural_tag" not in params and json.loads(params["json_schema"]) == {"type": "object"}

"""rtcompile.integrations.vllm against the real vLLM package, on CPU.

These tests run in the environment `.ci/run` builds for them (vllm with the transformers it pins,
rtcompile installed beside it): `RTCOMPILE_REQUIRE_VLLM=1 python -m pytest -q tests/integrations/test_vllm.py`.
Elsewhere (the main test environment has no vllm) they skip; with RTCOMPILE_REQUIRE_VLLM=1 a missing
vllm is an error, so CI can never skip them silently.

- The plugin: the entry point is installed, vLLM's own plugin loader registers the `rtcompile`
  names, vLLM's parser manager composes `RtcompileParser` from them (for templates vLLM's own class
  refuses, too) and its CLI accepts them.
- Differential against vLLM's `ResponseTemplateParser` over every bundled template (a copy whose
  reasoning field is named `thinking` for vLLM, which accepts no other name), generated turns and
  random chunkings: streamed and whole-output reasoning, content and calls (arguments after
  `json.loads`) equal; reasoning-token counts and reasoning-end detection equal.
- The stream: the official openai client's accumulator gives back the final message; names go out
  before a call closes, arguments in fragments; vLLM's id policy; tool_choice="none"; the refusals;
  malformed and truncated calls keep their text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

REQUIRED = os.environ.get("RTCOMPILE_REQUIRE_VLLM") == "1"
try:
    import vllm  # noqa: F401
except ImportError:
    if REQUIRED:
        raise
    pytest.skip(
        "vllm is not installed here: these tests run in the vLLM environment that .ci/run builds "
        "(RTCOMPILE_REQUIRE_VLLM=1 turns a missing vllm into an error)",
        allow_module_level=True,
    )

from hypothesis import given, note, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.exceptions import VLLMValidationError
from vllm.parser.parser_manager import ParserManager
from vllm.parser.response_template import (
    ResponseTemplateParser,
    ResponseTemplateReasoningParser,
    ResponseTemplateToolParser,
    validate_response_template_for_serving,
)

import rtcompile
from rtcompile.library import template_for, template_names
from rtcompile.integrations.vllm.parser import (
    TEMPLATE_ENVIRONMENT_VARIABLE,
    RtcompileParser,
    RtcompileReasoningParser,
    RtcompileToolParser,
)
from strategies import chunkings
from test_openai_stream import FORMATS, Turn, tools_for, turns

# What every vLLM process does at startup (and `vllm serve` while building its argument parser):
# run the `vllm.general_plugins` entry points, rtcompile's among them.
import vllm.plugins  # noqa: E402

vllm.plugins.load_general_plugins()

# --------------------------------------------------------------------------------------------------
# A tokenizer built here: each distinct text is one token (no hub, no vocabulary files)


class ChunkTokenizer:
    """Token ids for texts: `ids(text)` is one token; decoding concatenates the tokens' texts. What
    vLLM's parsers need of a tokenizer: decode, encode, get_vocab, and the template metadata."""

    def __init__(self, response_template: Any = None, name_or_path: str = ""):
        self.response_template = response_template
        self.init_kwargs: dict = {}
        self.name_or_path = name_or_path
        self.texts: list[str] = []
        self.vocab: dict[str, int] = {}

    def id_of(self, text: str) -> int:
        if text not in self.vocab:
            self.vocab[text] = len(self.texts)
            self.texts.append(text)
        return self.vocab[text]

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.id_of(text)] if text else []

    def decode(self, ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        return "".join(self.texts[i] for i in ids)


def thinking_copy(template: dict) -> dict:
    """The template with its reasoning field named `thinking`, the only name vLLM's class serves."""
    copy = json.loads(json.dumps(template))
    if "reasoning_content" in copy["fields"]:
        copy["fields"]["thinking"] = copy["fields"].pop("reasoning_content")
    return copy


def vllm_accepts(template: dict) -> bool:
    try:
        validate_response_template_for_serving(template)
    except (TypeError, ValueError):
        return False
    return True


def composed(base: type, tokenizer: Any, *, name: str, reasoning: bool = True, tools: bool = True):
    """The parser class vLLM's parser manager composes for these flags (for vLLM's class: `hf`)."""
    cls = ParserManager.get_parser(
        tool_parser_name=name if tools else None,
        reasoning_parser_name=name if reasoning else None,
        enable_auto_tools=True,
        model_name="test-model",
        tokenizer=tokenizer,
    )
    assert issubclass(cls, base)
    return cls


def request_for(tools: list | None, **options: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest(
        messages=[{"role": "user", "content": "hi"}], model="test-model", tools=tools, **options
    )


def stream(parser, tokenizer, prefix: str, chunks: list[str], request) -> list:
    """Deltas as vLLM's chat serving asks for them: one parse_delta per engine chunk."""
    prompt_ids = tokenizer.encode(prefix)
    request = parser.adjust_request(request)
    deltas = []
    for index, chunk in enumerate(chunks):
        delta = parser.parse_delta(
            chunk,
            tokenizer.encode(chunk),
            request,
            prompt_ids,
            finished=index == len(chunks) - 1,
        )
        if delta is not None:
            deltas.append(delta)
    return deltas


def accumulated(deltas: list) -> dict:
    """What a client concatenates from the deltas (tool calls merged by index)."""
    reasoning, content, calls = [], [], {}
    for delta in deltas:
        reasoning.append(delta.reasoning or "")
        content.append(delta.content or "")
        for entry in delta.tool_calls:
            call = calls.setdefault(entry.index, {"id": None, "name": "", "arguments": ""})
            if entry.id is not None:
                assert call["id"] is None, "a call's id is sent once"
                call["id"] = entry.id
            if entry.function is not None:
                call["name"] += entry.function.name or ""
                call["arguments"] += entry.function.arguments or ""
    assert sorted(calls) == list(range(len(calls))), "call indices count up from 0"
    return {
        "reasoning": "".join(reasoning),
        "content": "".join(content),
        "calls": [calls[index] for index in sorted(calls)],
    }


def loaded(view: dict) -> dict:
    """Reasoning, content, and each call's name and arguments after json.loads."""
    return {
        "reasoning": view["reasoning"],
        "content": view["content"],
        "calls": [(call["name"], json.loads(call["arguments"])) for call in view["calls"]],
    }


def whole(parser, tokenizer, prefix: str, text: str, request) -> dict:
    parser.set_prompt_token_ids(tokenizer.encode(prefix))
    reasoning, content, calls = parser.parse(text, parser.adjust_request(request), True)
    return {
        "reasoning": reasoning or "",
        "content": content or "",
        "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls or ()],
    }


def official_client(deltas: list, tools: list | None) -> Any:
    """The message the `openai` package's stream accumulator builds from the chunks vLLM would send
    (each DeltaMessage serialized as vLLM serializes it: exclude_unset)."""
    state = ChatCompletionStreamState(input_tools=tools) if tools else ChatCompletionStreamState()
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict, finish_reason: str | None = None) -> ChatCompletionChunk:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return ChatCompletionChunk.model_validate({**base, "choices": [choice]})

    state.handle_chunk(chunk({"role": "assistant", "content": ""}))
    for delta in deltas:
        state.handle_chunk(chunk(json.loads(delta.model_dump_json(exclude_unset=True))))
    has_calls = any(delta.tool_calls for delta in deltas)
    state.handle_chunk(chunk({}, "tool_calls" if has_calls else "stop"))
    return state.get_final_completion().choices[0].message


CALL_ID = re.compile(r"chatcmpl-tool-[0-9a-f]+")


# --------------------------------------------------------------------------------------------------
# The plugin


def test_the_entry_point_registers_the_parsers_through_vllms_plugin_loader():
    from importlib.metadata import entry_points

    import vllm.plugins
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    points = {point.name: point.value for point in entry_points(group="vllm.general_plugins")}
    assert points.get("rtcompile") == "rtcompile.integrations.vllm:register"
    vllm.plugins.load_general_plugins()
    assert "rtcompile" in ReasoningParserManager.list_registered()
    assert "rtcompile" in ToolParserManager.list_registered()
    assert ReasoningParserManager.get_reasoning_parser("rtcompile") is RtcompileReasoningParser
    assert ToolParserManager.get_tool_parser("rtcompile") is RtcompileToolParser
    assert issubclass(RtcompileReasoningParser, ResponseTemplateReasoningParser)
    assert issubclass(RtcompileToolParser, ResponseTemplateToolParser)


def test_the_parser_manager_composes_rtcompile_for_templates_vllm_refuses():
    tokenizer = ChunkTokenizer(template_for("qwen3"))  # reasoning_content: vLLM's class refuses it
    with pytest.raises(TypeError, match="unsupported semantic fields"):
        composed(ResponseTemplateParser, tokenizer, name="hf")
    cls = composed(RtcompileParser, tokenizer, name="rtcompile")
    assert cls.reasoning_parser_cls is RtcompileReasoningParser
    assert cls.tool_parser_cls is RtcompileToolParser
    assert cls._enable_auto_tools is True
    # vLLM's own check still runs for its own parsers, and for a tokenizer with no template
    with pytest.raises(TypeError, match="requires `response_template` metadata"):
        composed(ResponseTemplateParser, ChunkTokenizer(), name="hf")
    with pytest.raises(TypeError, match="cannot be used with the tokenizer"):
        composed(RtcompileParser, ChunkTokenizer(), name="rtcompile")  # and nothing to fall back on
    with pytest.raises(TypeError, match="cannot be combined"):
        ParserManager.get_parser(
            tool_parser_name="hf",
            reasoning_parser_name="rtcompile",
            enable_auto_tools=True,
            tokenizer=tokenizer,
        )


def test_vllms_serve_argument_check_accepts_the_names():
    """`vllm serve`'s check of --tool-call-parser / --reasoning-parser against the registries (after
    the general plugins ran, as `vllm serve` runs them while building its argument parser)."""
    import vllm.plugins
    from vllm.entrypoints.common.cli_args import validate_api_server_args

    vllm.plugins.load_general_plugins()

    def args(tool_parser: str, reasoning_parser: str) -> SimpleNamespace:
        return SimpleNamespace(
            enable_auto_tool_choice=True,
            tool_call_parser=tool_parser,
            structured_outputs_config=SimpleNamespace(reasoning_parser=reasoning_parser),
        )

    validate_api_server_args(args("rtcompile", "rtcompile"))
    with pytest.raises(KeyError, match="invalid tool call parser"):
        validate_api_server_args(args("rtcompile-typo", "rtcompile"))
    with pytest.raises(KeyError, match="invalid reasoning parser"):
        validate_api_server_args(args("rtcompile", "rtcompile-typo"))


def test_rtcompiles_runtime_and_generated_parsers_never_import_vllm():
    code = (
        "import sys, rtcompile, rtcompile.runtime, rtcompile.integrations.openai_stream\n"
        "from rtcompile.generated import qwen3\n"
        "rtcompile.parse_response('<think>a</think>b', rtcompile.template_for('qwen3'), prefix='')\n"
        "import rtcompile.integrations.vllm\n"  # the plugin entry point module itself is light, too
        "assert not [m for m in sys.modules if m == 'vllm' or m.startswith('vllm.')], 'vllm loaded'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------------------
# Template resolution


def test_the_template_comes_from_the_tokenizer_then_the_model_type_then_the_environment(
    tmp_path, monkeypatch
):
    monkeypatch.delenv(TEMPLATE_ENVIRONMENT_VARIABLE, raising=False)
    own = thinking_copy(template_for("qwen3"))
    parser = RtcompileParser(ChunkTokenizer(own))
    assert parser.response_template is own
    assert parser.template_origin == "the tokenizer's response_template"
    from_kwargs = ChunkTokenizer()
    from_kwargs.init_kwargs["response_template"] = own
    assert RtcompileParser(from_kwargs).response_template is own

    config = SimpleNamespace(hf_config=SimpleNamespace(model_type="qwen3_moe"))
    parser = RtcompileParser(ChunkTokenizer(), model_config=config)
    assert parser.response_template == template_for("qwen3")
    # without vLLM's model config (vLLM validates with the tokenizer alone): config.json beside it
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma4"}))
    parser = RtcompileParser(ChunkTokenizer(name_or_path=str(tmp_path)))
    assert parser.response_template == template_for("gemma4")

    monkeypatch.setenv(TEMPLATE_ENVIRONMENT_VARIABLE, "glm4_5")
    assert RtcompileParser(ChunkTokenizer()).response_template == template_for("glm4_5")
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template_for("kimi_k2")))
    monkeypatch.setenv(TEMPLATE_ENVIRONMENT_VARIABLE, str(path))
    assert RtcompileParser(ChunkTokenizer()).response_template == template_for("kimi_k2")
    # the tokenizer's own template comes first
    assert RtcompileParser(ChunkTokenizer(own), model_config=config).response_template is own

    monkeypatch.delenv(TEMPLATE_ENVIRONMENT_VARIABLE)
    with pytest.raises(ValueError, match=TEMPLATE_ENVIRONMENT_VARIABLE):
        RtcompileParser(ChunkTokenizer())


def test_templates_with_fields_no_client_would_see_are_refused():
    template = template_for("qwen3")
    extra = json.loads(json.dumps(template))
    extra["fields"]["citations"] = {"open": "<cite>", "close": "</cite>"}
    with pytest.raises(ValueError, match="citations"):
        RtcompileParser(ChunkTokenizer(extra))
    both = json.loads(json.dumps(template))
    both["fields"]["thinking"] = {"open": "<thought>", "close": "</thought>"}
    with pytest.raises(ValueError, match="both"):
        RtcompileParser(ChunkTokenizer(both))
    default = json.loads(json.dumps(template))
    default["defaults"]["content"] = "nothing"
    with pytest.raises(ValueError, match="defaults.content"):
        RtcompileParser(ChunkTokenizer(default))
    broken = json.loads(json.dumps(template))
    broken["fields"]["content"]["close_pattern"] = "(unclosed"
    with pytest.raises(ValueError):
        RtcompileParser(ChunkTokenizer(broken))


# --------------------------------------------------------------------------------------------------
# Differential against vLLM's ResponseTemplateParser


DIFFERENTIAL = sorted(FORMATS)


def test_vllm_refuses_a_thinking_copy_only_for_content_parsers_it_lacks():
    """The differential below compares wherever vLLM's class accepts the template; this keeps the
    set it compares on from shrinking unnoticed: vLLM's vendored interpreter may lack a content
    parser transformers has (python-call-list), and nothing else may keep a template out."""
    for name in DIFFERENTIAL:
        try:
            validate_response_template_for_serving(thinking_copy(template_for(name)))
        except ValueError as error:
            assert "unknown content parser" in str(error), (name, error)
    assert sum(vllm_accepts(thinking_copy(template_for(name))) for name in DIFFERENTIAL) >= 18


def pair(name: str, model_config: Any = None):
    """(vLLM's parser on the thinking copy, or None where vLLM refuses it, and its tokenizer;
    rtcompile's parser on the template as bundled, and its tokenizer)."""
    template = template_for(name)
    vllm_template = thinking_copy(template)
    # a reasoning parser where there is reasoning (vLLM refuses one elsewhere)
    reasoning = "thinking" in vllm_template["fields"]
    ours_tokenizer = ChunkTokenizer(template)
    ours = composed(RtcompileParser, ours_tokenizer, name="rtcompile", reasoning=reasoning)
    theirs = None
    vllm_tokenizer = ChunkTokenizer(vllm_template)
    if vllm_accepts(vllm_template):
        theirs = composed(ResponseTemplateParser, vllm_tokenizer, name="hf", reasoning=reasoning)
    return theirs, vllm_tokenizer, ours, ours_tokenizer


@pytest.mark.parametrize("name", DIFFERENTIAL)
@settings(max_examples=min(settings().max_examples, 100))
@given(data=st.data())
def test_streams_and_whole_outputs_equal_vllms_class(name, data):
    turn = data.draw(turns(name), label="turn")
    prefix, text = FORMATS[name].render(turn)
    chunks = data.draw(chunkings(text), label="chunks")
    tools = tools_for(turn.calls) if data.draw(st.booleans(), label="with tools") else None
    tools = tools or None  # vLLM's request refuses an empty list
    # tool_choice="none": tool parsing off, calls pass through as content
    options = {"tool_choice": "none"} if tools and data.draw(st.booleans(), label="none") else {}
    note(f"prefix={prefix!r}\ntext={text!r}\nchunks={chunks!r}\noptions={options}")
    theirs_cls, vllm_tokenizer, ours_cls, ours_tokenizer = pair(name)

    def request():  # (a fresh one for each parser: adjust_request may change it)
        return request_for(tools, **options)

    ours_deltas = stream(ours_cls(ours_tokenizer, tools), ours_tokenizer, prefix, chunks, request())
    ours = accumulated(ours_deltas)
    ours_whole = whole(ours_cls(ours_tokenizer, tools), ours_tokenizer, prefix, text, request())
    for view in (ours, ours_whole):
        assert all(CALL_ID.fullmatch(call["id"]) for call in view["calls"])
    assert len({call["id"] for call in ours["calls"]}) == len(ours["calls"])
    assert loaded(ours) == loaded(ours_whole)

    # the official client builds the same message from the chunks vLLM would send
    message = official_client(ours_deltas, tools)
    assert (message.content or "") == ours["content"]
    assert [
        (call.id, call.function.name, json.loads(call.function.arguments))
        for call in message.tool_calls or ()
    ] == [(call["id"], call["name"], json.loads(call["arguments"])) for call in ours["calls"]]

    if theirs_cls is None:
        return
    theirs = accumulated(
        stream(theirs_cls(vllm_tokenizer, tools), vllm_tokenizer, prefix, chunks, request())
    )
    theirs_whole = whole(theirs_cls(vllm_tokenizer, tools), vllm_tokenizer, prefix, text, request())
    assert loaded(ours) == loaded(theirs)
    assert loaded(ours_whole) == loaded(theirs_whole)


def whole_delimiters(template: dict, text: str, chunks: list[str]) -> list[str]:
    """The chunks as tokens of a real tokenizer: the reasoning field's literal delimiters (special
    tokens in these models) never split (the count is documented to be vLLM's only then)."""
    spec = next(
        (template["fields"][f] for f in ("reasoning_content", "thinking") if f in template["fields"]),
        {},
    )
    literals = [
        literal
        for key in ("open", "close")
        for literal in ([spec[key]] if isinstance(spec.get(key), str) else spec.get(key) or [])
    ]
    inside = set()
    for literal in literals:
        for match in re.finditer(re.escape(literal), text):
            inside.update(range(match.start() + 1, match.end()))
    tokens, current, position = [], "", 0
    for chunk in chunks:
        current += chunk
        position += len(chunk)
        if position not in inside:
            tokens.append(current)
            current = ""
    return tokens + ([current] if current else [])


@pytest.mark.parametrize("name", DIFFERENTIAL)
@settings(max_examples=min(settings().max_examples, 50))
@given(data=st.data())
def test_reasoning_tokens_and_reasoning_end_equal_vllms_class(name, data):
    turn = data.draw(turns(name), label="turn")
    prefix, text = FORMATS[name].render(turn)
    tokens = whole_delimiters(template_for(name), text, data.draw(chunkings(text), label="tokens"))
    theirs_cls, vllm_tokenizer, ours_cls, ours_tokenizer = pair(name)
    if theirs_cls is None:
        return
    ours, theirs = ours_cls(ours_tokenizer), theirs_cls(vllm_tokenizer)
    for parser, tokenizer in ((ours, ours_tokenizer), (theirs, vllm_tokenizer)):
        parser.set_prompt_token_ids(tokenizer.encode(prefix))
    assert ours.is_reasoning_end(ours_tokenizer.encode(prefix)) == theirs.is_reasoning_end(
        vllm_tokenizer.encode(prefix)
    )
    ours_ids = [ours_tokenizer.id_of(token) for token in tokens]
    theirs_ids = [vllm_tokenizer.id_of(token) for token in tokens]
    cut = data.draw(st.integers(0, len(tokens)), label="counted first after")
    # counted as the output grows (incrementally), then for the whole output
    assert ours.count_reasoning_tokens(ours_ids[:cut]) == theirs.count_reasoning_tokens(
        theirs_ids[:cut]
    )
    assert ours.count_reasoning_tokens(ours_ids) == theirs.count_reasoning_tokens(theirs_ids)


HELD_REASONING_CASES = [
    # Reasoning ending in "<" (it may start "</think>") is held until the next token, which brings
    # the closer: that "<" is the first token's text, the second token is no reasoning.
    ("glm4_5", "00000000000000<", ["\n<think>00000000000000<", "</think>\n<|user|>"]),
    # One "[" written while the next is held (it may start "[/THINK]"), then "[/" held: each
    # token's text comes out later, credited to it.
    ("ministral3", "[[/INST ", ["[THINK]", "[", "[", "/", "I", "N", "S", "T", " ", "[/THINK]"]),
]


@pytest.mark.parametrize("name, reasoning, tokens", HELD_REASONING_CASES)
def test_held_reasoning_text_counts_for_the_token_it_came_from(name, reasoning, tokens):
    """Random test cases found both (rtcompile counted 2 against vLLM's 1, and 7 against 8)."""
    theirs_cls, vllm_tokenizer, ours_cls, ours_tokenizer = pair(name)
    turn = Turn(reasoning=reasoning, content="", calls=[], prefill=False, ensure_ascii=False, call_ids=[])
    prefix, text = FORMATS[name].render(turn)
    assert text.startswith("".join(tokens[:-1]))
    counts = []
    for cls, tokenizer in ((ours_cls, ours_tokenizer), (theirs_cls, vllm_tokenizer)):
        parser = cls(tokenizer)
        parser.set_prompt_token_ids(tokenizer.encode(prefix))
        ids = [tokenizer.id_of(token) for token in tokens]
        counts.append([parser.count_reasoning_tokens(ids[:cut]) for cut in range(len(ids) + 1)])
    assert counts[0] == counts[1]


@pytest.mark.parametrize("name", sorted(template_names()))
def test_every_bundled_template_is_served(name):
    """Including templates vLLM's class refuses (content parsers its vendored interpreter lacks,
    `reasoning_content`): plain text streams as content where the content field has no opener
    (elsewhere text outside every region has no place in the template, for vLLM's class too)."""
    template = template_for(name)
    reasoning = any(name in template["fields"] for name in ("reasoning_content", "thinking"))
    tokenizer = ChunkTokenizer(template)
    parser = composed(RtcompileParser, tokenizer, name="rtcompile", reasoning=reasoning)(tokenizer)
    chunks = ["Hello", ", world"]
    view = accumulated(stream(parser, tokenizer, "", chunks, request_for(None)))
    content = template["fields"]["content"]
    expected = "" if "open" in content or "open_pattern" in content else "Hello, world"
    assert view == {"reasoning": "", "content": expected, "calls": []}
    vllm_template = thinking_copy(template)
    if vllm_accepts(vllm_template):
        vllm_tokenizer = ChunkTokenizer(vllm_template)
        theirs_cls = composed(ResponseTemplateParser, vllm_tokenizer, name="hf", reasoning=reasoning)
        theirs = theirs_cls(vllm_tokenizer)
        assert accumulated(stream(theirs, vllm_tokenizer, "", chunks, request_for(None))) == view


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
QWEN3_TEXT = (
    "<think>\nThe user wants the weather.\n</think>\n\nLet me look.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 1}}\n</tool_call>'
    "<|im_end|>"
)


def qwen3_parser(tools=WEATHER, model_config=None, **flags):
    tokenizer = ChunkTokenizer(template_for("qwen3"))
    cls = composed(RtcompileParser, tokenizer, name="rtcompile", **flags)
    return cls(tokenizer, tools, model_config=model_config), tokenizer


def test_names_go_out_when_known_and_arguments_while_written():
    parser, tokenizer = qwen3_parser()
    request = parser.adjust_request(request_for(WEATHER))
    prompt = tokenizer.encode(QWEN3_PREFIX)
    first_call_end = QWEN3_TEXT.index("</tool_call>")
    seen: list[tuple[int, Any]] = []
    for position in range(len(QWEN3_TEXT)):
        delta = parser.parse_delta(
            QWEN3_TEXT[position],
            [0],
            request,
            prompt,
            finished=position == len(QWEN3_TEXT) - 1,
        )
        if delta is not None and delta.tool_calls:
            seen.extend((position, entry) for entry in delta.tool_calls)
    header_position, header = seen[0]
    assert header.index == 0 and header.function.name == "get_weather" and header.id
    fragments = [(pos, e.function.arguments) for pos, e in seen if e.index == 0 and e.function.arguments]
    before_close = "".join(text for pos, text in fragments if pos < first_call_end)
    assert header_position < QWEN3_TEXT.index('"arguments"')
    assert before_close.startswith('{"city": "Paris", "days": 3')
    assert len(fragments) >= 2  # the arguments came in pieces


def test_call_ids_follow_vllms_policy_for_the_model():
    kimi = SimpleNamespace(hf_config=SimpleNamespace(model_type="kimi_k2"))
    parser, tokenizer = qwen3_parser(model_config=kimi)
    deltas = stream(parser, tokenizer, QWEN3_PREFIX, [QWEN3_TEXT], request_for(WEATHER))
    assert [call["id"] for call in accumulated(deltas)["calls"]] == [
        "functions.get_weather:0",
        "functions.get_weather:1",
    ]
    # a conversation that already holds a call: kimi ids count on from the history
    history = ChatCompletionRequest(
        model="test-model",
        tools=WEATHER,
        messages=[
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "functions.get_weather:0",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny"},
        ],
    )
    parser, tokenizer = qwen3_parser(model_config=kimi)
    deltas = stream(parser, tokenizer, QWEN3_PREFIX, [QWEN3_TEXT], history)
    assert [call["id"] for call in accumulated(deltas)["calls"]] == [
        "functions.get_weather:1",
        "functions.get_weather:2",
    ]


def test_tool_choice_none_passes_a_call_through_as_it_is_written():
    """qwen3's call opener is a pattern (`\\s*<tool_call>`): with tool parsing off the call goes out
    as content while it is written, not only once it closes; accumulated, as vLLM's class has it."""
    parser, tokenizer = qwen3_parser()
    request = parser.adjust_request(request_for(WEATHER, tool_choice="none"))
    prompt = tokenizer.encode(QWEN3_PREFIX)
    first_close = QWEN3_TEXT.index("</tool_call>")
    content = []
    for start in range(0, len(QWEN3_TEXT), 3):
        chunk = QWEN3_TEXT[start : start + 3]
        delta = parser.parse_delta(
            chunk, tokenizer.encode(chunk), request, prompt, finished=start + 3 >= len(QWEN3_TEXT)
        )
        content.append(delta.content or "" if delta is not None else "")
        if start + 3 <= first_close:
            written = "".join(content)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par' in written
    assert QWEN3_TEXT[QWEN3_TEXT.index("Let me look.") : QWEN3_TEXT.index("<|im_end|>")] in "".join(content)


def test_tool_choice_none_keeps_no_more_text_than_tool_parsing_does():
    """Passing calls through as content, what a closer pattern matched comes with its close event,
    not through a lookbehind closer: the parser keeps no more consumed text than with tool parsing
    on. (A lookbehind over qwen3.5's unbounded `\\s*</function>\\s*</tool_call>` kept the whole
    output and took every chunk off the fast path.)"""
    from rtcompile.integrations.vllm import parser as plugin

    checked = 0
    for name in template_names():
        template = template_for(name)
        if "tool_calls" not in template["fields"]:
            continue
        parsing, passing = plugin._plan_for(template, True), plugin._plan_for(template, False)
        assert passing.parser_class.CONTEXT == parsing.parser_class.CONTEXT, name
        checked += 1
    assert checked >= 20


def test_tool_choice_none_passes_calls_through_as_content_like_vllm():
    vllm_tokenizer = ChunkTokenizer(thinking_copy(template_for("qwen3")))
    theirs_cls = composed(ResponseTemplateParser, vllm_tokenizer, name="hf")
    parser, tokenizer = qwen3_parser()
    chunks = [QWEN3_TEXT[k : k + 3] for k in range(0, len(QWEN3_TEXT), 3)]
    ours = accumulated(stream(parser, tokenizer, QWEN3_PREFIX, chunks, request_for(WEATHER, tool_choice="none")))
    theirs = accumulated(
        stream(
            theirs_cls(vllm_tokenizer, WEATHER),
            vllm_tokenizer,
            QWEN3_PREFIX,
            chunks,
            request_for(WEATHER, tool_choice="none"),
        )
    )
    assert ours["calls"] == theirs["calls"] == []
    assert '{"name": "get_weather", "arguments": {"city": "Rome", "days": 1}}' in ours["content"]
    assert ours == theirs


def test_without_a_reasoning_parser_reasoning_is_content_like_vllm():
    vllm_tokenizer = ChunkTokenizer(thinking_copy(template_for("qwen3")))
    theirs_cls = composed(ResponseTemplateParser, vllm_tokenizer, name="hf", reasoning=False)
    parser, tokenizer = qwen3_parser(reasoning=False)
    ours = accumulated(stream(parser, tokenizer, QWEN3_PREFIX, [QWEN3_TEXT], request_for(WEATHER)))
    theirs = accumulated(
        stream(theirs_cls(vllm_tokenizer, WEATHER), vllm_tokenizer, QWEN3_PREFIX, [QWEN3_TEXT], request_for(WEATHER))
    )
    assert ours["reasoning"] == "" and "The user wants the weather." in ours["content"]
    assert loaded(ours) == loaded(theirs)


def test_include_reasoning_false_drops_the_reasoning():
    parser, tokenizer = qwen3_parser()
    view = accumulated(
        stream(parser, tokenizer, QWEN3_PREFIX, [QWEN3_TEXT], request_for(WEATHER, include_reasoning=False))
    )
    assert view["reasoning"] == "" and "weather" not in view["content"].split("Let me")[0]
    assert len(view["calls"]) == 2


@pytest.mark.parametrize(
    "options, parameter",
    [
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
        ({"parallel_tool_calls": False}, "parallel_tool_calls"),
        ({"tools": [{**WEATHER[0], "function": {**WEATHER[0]["function"], "strict": True}}]}, "tools"),
    ],
)
def test_what_vllms_class_refuses_is_refused_the_same_way(options, parameter):
    vllm_tokenizer = ChunkTokenizer(thinking_copy(template_for("qwen3")))
    theirs = composed(ResponseTemplateParser, vllm_tokenizer, name="hf")(vllm_tokenizer, WEATHER)
    ours, _ = qwen3_parser()
    options = {"tools": WEATHER, **options}
    with pytest.raises(VLLMValidationError) as their_error:
        theirs.adjust_request(request_for(**options))
    with pytest.raises(VLLMValidationError) as our_error:
        ours.adjust_request(request_for(**options))
    assert our_error.value.parameter == their_error.value.parameter == parameter
    # tool_choice="none" asks for no guarantee: accepted by both, and special tokens are kept
    for parser in (theirs, ours):
        adjusted = parser.adjust_request(request_for(**{**options, "tool_choice": "none"}))
        assert adjusted.skip_special_tokens is False


@pytest.mark.parametrize(
    "text, kept",
    [
        # malformed JSON inside a complete call
        (
            'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\n</tool_call><|im_end|>',
            '{"name": "get_weather", "arguments": {"city": "Par',
        ),
        # cut off by the token limit inside the arguments
        (
            'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3',
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3',
        ),
    ],
)
def test_a_broken_call_loses_nothing_and_the_stream_stays_valid(text, kept):
    vllm_tokenizer = ChunkTokenizer(thinking_copy(template_for("qwen3")))
    theirs_cls = composed(ResponseTemplateParser, vllm_tokenizer, name="hf")
    theirs = accumulated(
        stream(theirs_cls(vllm_tokenizer, WEATHER), vllm_tokenizer, QWEN3_PREFIX, [text], request_for(WEATHER))
    )
    assert theirs["calls"] == [] and kept not in theirs["content"]  # vLLM drops the call
    for chunks in ([text], list(text)):
        parser, tokenizer = qwen3_parser()
        deltas = stream(parser, tokenizer, QWEN3_PREFIX, chunks, request_for(WEATHER))
        view = accumulated(deltas)
        assert kept in view["content"]
        assert view["content"].startswith("Sure.")
        for call in view["calls"]:  # announced before it broke: closed with valid JSON
            assert call["name"] == "get_weather"
            assert isinstance(json.loads(call["arguments"]), dict)
        message = official_client(deltas, WEATHER)
        assert kept in message.content


# A prompt that ends inside a possible delimiter: gemma4's reasoning opens with "<|channel>".
HELD_PREFIX = "<|turn>model\n<|chan"


@pytest.mark.parametrize("chunks", [["nel", " is open", "<turn|>"], list("nel is open<turn|>")])
def test_prompt_text_held_back_at_the_prompts_end_is_not_sent_as_output(chunks):
    """The parser holds the prompt's "<|chan" back (it may start a delimiter); the output shows it
    starts none, and the parser reports it as content with the output's text. It is the prompt's:
    the deltas carry only what the model wrote, streamed and whole."""
    tokenizer = ChunkTokenizer(template_for("gemma4"))
    cls = composed(RtcompileParser, tokenizer, name="rtcompile")
    view = accumulated(stream(cls(tokenizer), tokenizer, HELD_PREFIX, chunks, request_for(None)))
    assert view == {"reasoning": "", "content": "nel is open", "calls": []}
    assert whole(cls(tokenizer), tokenizer, HELD_PREFIX, "".join(chunks), request_for(None)) == view
    # completed by the output, it is a delimiter
    chunks = ["nel>", "thought\nplan", "<channel|>", "Answer<turn|>"]
    view = accumulated(stream(cls(tokenizer), tokenizer, HELD_PREFIX, chunks, request_for(None)))
    assert view == {"reasoning": "plan", "content": "Answer", "calls": []}


def test_a_request_chat_template_is_warned_about_once(monkeypatch):
    """As vLLM's own class warns (`warning_once`): the response template may no longer match."""
    from rtcompile.integrations.vllm import parser as plugin

    warnings = []
    monkeypatch.setattr(plugin.logger, "warning_once", warnings.append)
    parser, _ = qwen3_parser()
    parser.adjust_request(request_for(WEATHER))
    assert warnings == []
    parser.adjust_request(request_for(WEATHER, chat_template="{{ messages }}"))
    assert len(warnings) == 1 and "response template" in warnings[0]


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
    """vLLM's class refuses a reasoning or content field with `join`; rtcompile serves it: each
    region's text as the model wrote it, the join string between two regions, as the message
    joins them."""
    template = harmony_channels()
    assert not vllm_accepts(thinking_copy(template))
    message = rtcompile.parse_response(HARMONY_TEXT, template, prefix=HARMONY_PREFIX)
    expected = {"reasoning": message["reasoning_content"], "content": message["content"], "calls": []}
    assert expected["reasoning"] == "First step.\n\nSecond step."
    tokenizer = ChunkTokenizer(template)
    cls = composed(RtcompileParser, tokenizer, name="rtcompile")
    for size in (1, 5, len(HARMONY_TEXT)):
        chunks = [HARMONY_TEXT[i : i + size] for i in range(0, len(HARMONY_TEXT), size)]
        assert accumulated(stream(cls(tokenizer), tokenizer, HARMONY_PREFIX, chunks, request_for(None))) == expected
    assert whole(cls(tokenizer), tokenizer, HARMONY_PREFIX, HARMONY_TEXT, request_for(None)) == expected


def test_a_stream_with_no_output_sends_nothing():
    parser, tokenizer = qwen3_parser()
    request = parser.adjust_request(request_for(WEATHER))
    assert parser.parse_delta("", [], request, tokenizer.encode(QWEN3_PREFIX), finished=True) is None
    assert parser.parse("", request, True) == (None, None, None)


def test_the_serving_benchmark_compares_parsers_that_agree():
    """bench/serving.py's checks (run before anything is timed) on its 1K workloads: vLLM's class
    and rtcompile both give back the generation that was rendered; with `--tool-choice none`,
    rtcompile passes the calls through as vLLM's class does (check stops the run otherwise)."""
    from bench import serving

    for name in serving.TEMPLATES:
        matches = serving.check(serving.Case(name, "1K"))
        assert matches["vllm-template"] and matches["rtcompile"], name
        matches = serving.check(serving.Case(name, "1K", "none"))
        assert matches["vllm-template"] and matches["rtcompile"], name


def test_text_deltas_are_built_without_validation_and_equal_validated_ones():
    """A text chunk's DeltaMessage skips pydantic's validation where the installed pydantic lays
    instances out as the check expects (it does in the pinned vLLM environment); each is what the
    validated constructor builds."""
    from vllm.entrypoints.generate.base.protocol import DeltaMessage

    from rtcompile.integrations.serving_common import same_as_validated
    from rtcompile.integrations.vllm import parser

    for key in ("content", "reasoning"):
        make = parser._TEXT_DELTAS[key]
        assert make is not parser._VALIDATED_TEXT_DELTAS[key]
        for text in ("plain", "<think>", "é\n"):
            fast = make(text)
            assert same_as_validated(fast, DeltaMessage(**{key: text}))
            fast.tool_calls.append("x")  # a fresh list each time
            assert make(text).tool_calls == []

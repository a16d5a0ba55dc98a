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
- Token ids (the default), on a tokenizer per bundled template whose delimiter tokens are control
  tokens (token_serving.py): with every delimiter generated as its id, the parse is the text parse
  and vLLM's; a delimiter spelled out with ordinary tokens stays text where vLLM's class parses it
  (VLLM_FORGED records what it does); the stop token vLLM leaves out of the text; ids in every form
  vLLM passes them; text for requests with stop strings; the text-mode switch.

The tests above the token-id section run on a ChunkTokenizer (each chunk a token): rtcompile reads
their text (there is nothing to decode), as for any tokenizer that is not a fast transformers one.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
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
    TOKEN_IDS_ENVIRONMENT_VARIABLE,
    RtcompileParser,
    RtcompileReasoningParser,
    RtcompileToolParser,
)
import token_serving
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
    """rtcompile's parser for qwen3 on a ChunkTokenizer, in text mode (a ChunkTokenizer's ids are
    its chunks: there is nothing to decode)."""
    tokenizer = ChunkTokenizer(template_for("qwen3"))
    cls = composed(RtcompileParser, tokenizer, name="rtcompile", **flags)
    return cls(tokenizer, tools, model_config=model_config, token_ids=False), tokenizer


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


def test_tool_choice_none_asks_for_no_guarantee_and_keeps_special_tokens():
    """vLLM's class and rtcompile's accept tool_choice="none" with strict tools and one call at
    most: no grammar is set (no call is parsed), special tokens are kept for the parser."""
    vllm_tokenizer = ChunkTokenizer(thinking_copy(template_for("qwen3")))
    theirs = composed(ResponseTemplateParser, vllm_tokenizer, name="hf")(vllm_tokenizer, WEATHER)
    ours, _ = qwen3_parser()
    strict = [{**WEATHER[0], "function": {**WEATHER[0]["function"], "strict": True}}]
    for parser in (theirs, ours):
        adjusted = parser.adjust_request(request_for(strict, tool_choice="none", parallel_tool_calls=False))
        assert adjusted.skip_special_tokens is False
        assert adjusted.structured_outputs is None


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

    parser, _ = qwen3_parser()
    warnings = []
    monkeypatch.setattr(plugin.logger, "warning_once", warnings.append)
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
    rtcompile passes the calls through as vLLM's class does; with `--token-ids`, rtcompile reads
    the ids, and the text of the same steps (check stops the run otherwise)."""
    from bench import serving

    for name in serving.TEMPLATES:
        matches = serving.check(serving.Case(name, "1K"))
        assert matches["vllm-template"] and matches["rtcompile"], name
        matches = serving.check(serving.Case(name, "1K", "none"))
        assert matches["vllm-template"] and matches["rtcompile"], name
        case = serving.Case(name, "1K", token_ids=True)
        matches = serving.check(case, serving.TOKEN_IMPLEMENTATIONS)
        assert matches["vllm-template"] and matches["rtcompile"] and matches["rtcompile-text"], name
        assert case.new_parser("rtcompile")[0].reads_token_ids


def test_text_deltas_are_built_without_validation_and_equal_validated_ones():
    """A text chunk's DeltaMessage skips pydantic's validation where the installed pydantic lays
    instances out as the check expects (it does in the pinned vLLM environment); each is what the
    validated constructor builds."""
    from vllm.entrypoints.generate.base.protocol import DeltaMessage

    from rtcompile.integrations.serving import same_as_validated
    from rtcompile.integrations.vllm import parser

    for key in ("content", "reasoning"):
        make = parser._TEXT_DELTAS[key]
        assert make.__name__ == "build"  # (the unvalidated builder was chosen)
        for text in ("plain", "<think>", "é\n"):
            fast = make(text)
            assert same_as_validated(fast, DeltaMessage(**{key: text}))
            fast.tool_calls.append("x")  # a fresh list each time
            assert make(text).tool_calls == []


# --------------------------------------------------------------------------------------------------
# Token ids: rtcompile's default in vLLM, on tokenizers whose delimiter tokens are control tokens
# (token_serving.py: one per bundled template, built locally)


def token_parser(name: str, tools: list | None = None, *, vllm: bool = False, reasoning: bool = True, **options: Any):
    """A parser as vLLM's parser manager composes it, on the template's token_serving tokenizer
    (a copy carrying the template its parser reads): rtcompile's, or vLLM's class (`vllm=True`) on
    the thinking copy (None where vLLM refuses it)."""
    template = template_for(name)
    tokenizer = copy.copy(token_serving.tokenizer_for(name))
    tokenizer.response_template = thinking_copy(template) if vllm else template
    if vllm and not vllm_accepts(tokenizer.response_template):
        return None
    reasoning = reasoning and "thinking" in thinking_copy(template)["fields"]
    if vllm:
        cls = composed(ResponseTemplateParser, tokenizer, name="hf", reasoning=reasoning)
    else:
        cls = composed(RtcompileParser, tokenizer, name="rtcompile", reasoning=reasoning)
    return cls(tokenizer, tools, **options)


def stream_ids(parser, prompt: list[int], chunks: list[list[int]], texts: list[str], request) -> list:
    """Deltas as vLLM's chat serving asks for them: each engine step's text and ids."""
    request = parser.adjust_request(request)
    deltas = []
    for index, (ids, text) in enumerate(zip(chunks, texts)):
        delta = parser.parse_delta(text, ids, request, prompt, finished=index == len(chunks) - 1)
        if delta is not None:
            deltas.append(delta)
    return deltas


def whole_ids(parser, prompt: list[int], ids: list[int], text: str, request) -> dict:
    parser.set_prompt_token_ids(prompt)
    reasoning, content, calls = parser.parse(text, parser.adjust_request(request), True, model_output_token_ids=ids)
    return {
        "reasoning": reasoning or "",
        "content": content or "",
        "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls or ()],
    }


def test_token_ids_are_read_by_default_and_text_is_an_option(monkeypatch):
    monkeypatch.delenv(TOKEN_IDS_ENVIRONMENT_VARIABLE, raising=False)
    assert token_parser("qwen3").reads_token_ids
    assert not token_parser("qwen3", token_ids=False).reads_token_ids
    monkeypatch.setenv(TOKEN_IDS_ENVIRONMENT_VARIABLE, "0")
    assert not token_parser("qwen3").reads_token_ids
    assert token_parser("qwen3", token_ids=True).reads_token_ids
    monkeypatch.setenv(TOKEN_IDS_ENVIRONMENT_VARIABLE, "1")
    assert token_parser("qwen3").reads_token_ids
    # a tokenizer that cannot decode ids as transformers does: text, said once
    from rtcompile.integrations.vllm import parser as plugin

    warnings = []
    monkeypatch.setattr(plugin.logger, "warning_once", warnings.append)
    assert not RtcompileParser(ChunkTokenizer(template_for("qwen3"))).reads_token_ids
    assert len(warnings) == 1 and "not token ids" in warnings[0]


@pytest.mark.parametrize("name", DIFFERENTIAL)
@settings(max_examples=min(settings().max_examples, 50))
@given(data=st.data())
def test_token_ids_give_what_vllms_class_gives_where_the_model_generated_every_control_token(name, data):
    """Every delimiter generated as its id (nothing spelled out): the token-id parse is the text
    parse, rtcompile's as vLLM's, streamed (one or several ids per step) and whole, and the
    reasoning tokens counted are vLLM's."""
    turn = data.draw(turns(name), label="turn")
    prefix, text = FORMATS[name].render(turn)
    ids = token_serving.encode(name, text)
    chunks = data.draw(token_serving.id_chunks(ids), label="chunks")
    texts = token_serving.detokenized(name, chunks)
    prompt = token_serving.encode(name, prefix)
    tools = tools_for(turn.calls) or None
    note(f"prefix={prefix!r}\ntext={text!r}\nchunks={chunks!r}")
    ours = token_parser(name, tools)
    assert ours.reads_token_ids
    view = loaded(accumulated(stream_ids(ours, prompt, chunks, texts, request_for(tools))))
    text_mode = token_parser(name, tools, token_ids=False)
    assert view == loaded(accumulated(stream_ids(text_mode, prompt, chunks, texts, request_for(tools))))
    assert loaded(whole_ids(token_parser(name, tools), prompt, ids, "".join(texts), request_for(tools))) == view
    theirs = token_parser(name, tools, vllm=True)
    if theirs is None:
        return
    assert view == loaded(accumulated(stream_ids(theirs, prompt, chunks, texts, request_for(tools))))
    counted = [token_id for chunk in chunks for token_id in chunk]
    cut = data.draw(st.integers(0, len(counted)), label="counted first after")
    ours, theirs = token_parser(name, tools), token_parser(name, tools, vllm=True)
    for parser in (ours, theirs):
        parser.set_prompt_token_ids(prompt)
    assert ours.count_reasoning_tokens(counted[:cut]) == theirs.count_reasoning_tokens(counted[:cut])
    assert ours.count_reasoning_tokens(counted) == theirs.count_reasoning_tokens(counted)


# ---- a spelled-out delimiter: text for rtcompile, a delimiter for vLLM's class (it parses text)

PLACEHOLDER = "QQFORGEDQQ"  # where a delimiter is spelled out: text in every format, no delimiter


def _literal_match(text: str, spec: dict, key: str, start: int = 0) -> str | None:
    """The first text, from `start`, that the field's `key` delimiter ("open" or "close": a literal,
    a list of them, or the `_pattern`) matches in `text`."""
    import regex

    literals = spec.get(key)
    if isinstance(literals, str):
        literals = [literals]
    found = [(text.find(literal, start), literal) for literal in literals or () if text.find(literal, start) >= 0]
    if found:
        return min(found)[1]
    pattern = spec.get(key + "_pattern")
    if pattern is None:
        return None
    match = regex.compile(pattern).search(text, start)
    return match.group() if match and match.group() else None


def forged_spellings(name: str) -> dict[str, str]:
    """Per position (reasoning, content, arguments), the delimiter a model might spell out there,
    as the template's own format writes it: the reasoning closer inside the reasoning; inside the
    content, a call's opener (or, where the content is a region of its own, its closer); a call's
    closer inside a string argument. Only delimiters made of control tokens."""
    template = template_for(name)
    fields = template["fields"]
    controls = token_serving.control_tokens(name)

    def has_control(text: str | None) -> bool:
        return bool(text) and any(token in text for token in controls)

    spellings = {}
    reasoning = fields.get("reasoning_content")
    if reasoning is not None and has_control("".join(literals_of(reasoning, "close"))):
        spellings["reasoning"] = literals_of(reasoning, "close")[0]
    turn = Turn(None, "", [("get_weather", {"city": "Paris"})], False, False, ["call_1"])
    _, text = FORMATS[name].render(turn)
    opener = _literal_match(text, fields["tool_calls"], "open")
    if "open" not in fields["content"] and has_control(opener):
        # (up to its last control token where the text after it is an opener on its own, like
        # minimax's `<invoke name="...">` after an optional `<minimax:tool_call>`)
        end = max(opener.rfind(token) + len(token) for token in controls if token in opener)
        if _literal_match(opener[end:], fields["tool_calls"], "open") is not None:
            opener = opener[:end]
        spellings["content"] = opener.lstrip()
    else:
        _, answer = FORMATS[name].render(Turn(None, "Done.", [], False, False, []))
        closer = _literal_match(answer, fields["content"], "close", answer.index("Done.") + 5)
        if has_control(closer):
            spellings["content"] = closer.lstrip()
    if FORMATS[name].arguments != "python":
        start = text.index("Paris") + len("Paris")
        closer = _literal_match(text, fields["tool_calls"], "close", start)
        if has_control(closer):
            spellings["arguments"] = closer.lstrip()
    return spellings


def literals_of(spec: dict, key: str) -> list[str]:
    value = spec.get(key)
    return [value] if isinstance(value, str) else list(value or ())


def forged_turn(name: str, position: str) -> Turn:
    fmt = FORMATS[name]
    reasoning = f"Plan: {PLACEHOLDER} then go." if position == "reasoning" else ("Plan." if fmt.reasoning else None)
    if position == "content" or not fmt.content_with_calls:
        content = f"Answer {PLACEHOLDER} done." if position == "content" else ""
    else:
        content = "Let me look."
    calls = []
    if position != "content" or fmt.content_with_calls:
        city = f"Paris {PLACEHOLDER} now" if position == "arguments" else "Paris"
        calls = [("get_weather", {"city": city, "days": 3})]
    return Turn(reasoning, content, calls, False, False, ["call_1"])


def substituted(value: Any, spelling: str) -> Any:
    if isinstance(value, str):
        return value.replace(PLACEHOLDER, spelling)
    if isinstance(value, list):
        return [substituted(item, spelling) for item in value]
    if isinstance(value, tuple):
        return tuple(substituted(item, spelling) for item in value)
    if isinstance(value, dict):
        return {key: substituted(item, spelling) for key, item in value.items()}
    return value


FORGED_CASES = [(name, position) for name in DIFFERENTIAL for position in forged_spellings(name)]


def forged_run(name: str, position: str) -> dict:
    """The forged case's views: what it means (the spelling as text: the turn parsed as text with the
    placeholder there, then the spelling put back), rtcompile's (token ids, default), and vLLM's
    class's (None where it refuses the template), on the same engine steps (one id each)."""
    spelling = forged_spellings(name)[position]
    # as the format writes it: a JSON string escapes what it must (a newline)
    written = spelling
    if position == "arguments" and FORMATS[name].arguments == "json":
        written = json.dumps(spelling, ensure_ascii=False)[1:-1]
    turn = forged_turn(name, position)
    prefix, text = FORMATS[name].render(turn)
    assert text.count(PLACEHOLDER) == 1, text
    tools = tools_for(turn.calls) or None
    before, after = text.split(PLACEHOLDER)
    forged_ids = token_serving.spelled_out(name, written)
    ids = token_serving.encode(name, before) + forged_ids + token_serving.encode(name, after)
    tokenizer = token_serving.tokenizer_for(name)
    assert tokenizer.decode(forged_ids) == written
    assert not set(forged_ids) & set(tokenizer.added_tokens_decoder), (written, forged_ids)
    chunks = [[token_id] for token_id in ids]
    texts = token_serving.detokenized(name, chunks)
    assert "".join(texts) == text.replace(PLACEHOLDER, written)
    prompt = token_serving.encode(name, prefix)
    meaning = token_parser(name, tools, token_ids=False)
    expected = substituted(loaded(accumulated(stream_ids(meaning, prompt, [[]], [text], request_for(tools)))), spelling)
    ours = loaded(accumulated(stream_ids(token_parser(name, tools), prompt, chunks, texts, request_for(tools))))
    ours_whole = loaded(whole_ids(token_parser(name, tools), prompt, ids, "".join(texts), request_for(tools)))
    theirs = token_parser(name, tools, vllm=True)
    if theirs is not None:
        theirs = loaded(accumulated(stream_ids(theirs, prompt, chunks, texts, request_for(tools))))
    return {"spelling": spelling, "expected": expected, "ours": ours, "ours_whole": ours_whole, "theirs": theirs}


def vllm_effect(spelling: str, expected: dict, theirs: dict | None) -> str:
    """What vLLM's class made of the spelled-out delimiter, against what it means (the spelling as
    text), in words: the README's table."""
    if theirs is None:
        return "refuses the template"
    effects = []
    for key in ("reasoning", "content"):
        want, got = expected[key], theirs[key]
        at = want.find(spelling)
        if got == want or at < 0:
            continue
        if got.split() == (want[:at] + want[at + len(spelling) :]).split():
            effects.append(f"drops the spelling from the {key}")
        elif key == "reasoning" and got == want[:at]:
            effects.append("cuts the reasoning there, the rest is content")
        elif got.rstrip() == want[:at].rstrip():
            effects.append(f"cuts the {key} there, the rest is lost")
        else:
            effects.append(f"changes the {key}")
    want, got = expected["calls"], theirs["calls"]
    if got != want:
        if not got:
            effects.append("loses the call" if len(want) == 1 else "loses the calls")
        elif [name for name, _ in got] != [name for name, _ in want]:
            effects.append(f"calls {', '.join(repr(name) for name, _ in got)}")
        else:
            effects.append("loses the arguments")
    return "; ".join(effects) or "text, as rtcompile"


# What vLLM 0.34.0's ResponseTemplateParser (`--reasoning-parser hf --tool-call-parser hf`) makes of
# each spelling, fed the same engine steps: it parses their decoded text, where a control token
# spelled out with ordinary tokens is its delimiter (README, vLLM: the table of this test).
VLLM_FORGED = {
    ('cohere_command_r7b', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('cohere_command_r7b', 'content'): 'cuts the content there, the rest is lost',
    ('cohere_command_r7b', 'arguments'): 'loses the call',
    ('deepseek_r1', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('deepseek_r1', 'content'): 'cuts the content there, the rest is lost; loses the call',
    ('deepseek_r1', 'arguments'): 'text, as rtcompile',
    ('deepseek_v3_1', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('deepseek_v3_1', 'content'): 'cuts the content there, the rest is lost; loses the call',
    ('deepseek_v3_1', 'arguments'): 'loses the call',
    ('ernie', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('ernie', 'content'): 'cuts the content there, the rest is lost; loses the call',
    ('ernie', 'arguments'): 'loses the call',
    ('gemma3_pythonic', 'content'): 'refuses the template',
    ('gemma4', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('gemma4', 'content'): 'cuts the content there, the rest is lost; loses the call',
    ('gemma4', 'arguments'): 'loses the call',
    ('glm4_5', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('glm4_5', 'content'): "cuts the content there, the rest is lost; calls 'get_weather done.'",
    ('glm4_5', 'arguments'): 'loses the arguments',
    ('gpt_oss', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('gpt_oss', 'content'): 'cuts the content there, the rest is lost',
    ('gpt_oss', 'arguments'): 'loses the call',
    ('hermes2_pro', 'content'): 'cuts the content there, the rest is lost; loses the call',
    ('hermes2_pro', 'arguments'): 'loses the call',
    ('kimi_k2', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('kimi_k2', 'content'): 'cuts the content there, the rest is lost; loses the call',
    ('kimi_k2', 'arguments'): 'loses the call',
    ('lfm2_5', 'reasoning'): 'refuses the template',
    ('lfm2_5', 'content'): 'refuses the template',
    ('llama3_2_pythonic', 'content'): 'refuses the template',
    ('llama3_json', 'content'): 'drops the spelling from the content',
    ('llama3_json', 'arguments'): 'loses the call',
    ('llama4_pythonic', 'content'): 'refuses the template',
    ('minimax_m2', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('minimax_m2', 'content'): 'text, as rtcompile',
    ('ministral3', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('ministral3', 'content'): 'cuts the content there, the rest is lost',
    ('ministral3', 'arguments'): 'loses the call',
    ('mistral_nemo', 'content'): 'cuts the content there, the rest is lost; loses the call',
    ('mistral_nemo', 'arguments'): 'loses the call',
    ('mistral_small_3_2', 'content'): 'cuts the content there, the rest is lost',
    ('mistral_small_3_2', 'arguments'): 'loses the call',
    ('phi4_mini', 'content'): 'cuts the content there, the rest is lost; loses the call',
    ('phi4_mini', 'arguments'): 'loses the call',
    ('qwen3', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('qwen3', 'content'): 'cuts the content there, the rest is lost; loses the call',
    ('qwen3', 'arguments'): 'loses the call',
    ('qwen3_5', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('qwen3_5', 'content'): 'cuts the content there, the rest is lost',
    ('qwen3_5', 'arguments'): 'loses the arguments',
    ('qwen3_coder', 'content'): 'cuts the content there, the rest is lost',
    ('qwen3_coder', 'arguments'): 'loses the arguments',
    ('smollm3', 'reasoning'): 'cuts the reasoning there, the rest is content',
    ('smollm3', 'content'): 'cuts the content there, the rest is lost; loses the call',
    ('smollm3', 'arguments'): 'loses the call',
}


def test_every_bundled_template_has_a_spelled_out_delimiter_case():
    assert {name for name, _ in FORGED_CASES} == set(template_names())
    assert set(VLLM_FORGED) == set(FORGED_CASES)


@pytest.mark.parametrize("name, position", FORGED_CASES)
def test_a_spelled_out_delimiter_is_text_for_rtcompile_where_vllms_class_parses_it(name, position):
    """The model spells a delimiter's control tokens out with ordinary tokens inside its reasoning,
    its content or a string argument: rtcompile (token ids, vLLM's default here) keeps it as text
    there, streamed and whole, as transformers 5.25.0's token-id parsing does; vLLM's class, on the
    same engine steps, parses it as the delimiter (VLLM_FORGED records what it does)."""
    run = forged_run(name, position)
    assert run["ours"] == run["expected"]
    assert run["ours_whole"] == run["expected"]
    assert vllm_effect(run["spelling"], run["expected"], run["theirs"]) == VLLM_FORGED[(name, position)]


# ---- what vLLM hands the parser

QWEN3_TOKEN_TEXT = (
    "<think>\nThe user wants the weather.\n</think>\n\nLet me look.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
)


def _id_forms() -> dict[str, Any]:
    from vllm.v1.token_buffer import TokenBuffer, TokenIdsView
    from vllm.v1.utils import ConstantList

    return {
        "list": list,
        "tuple": tuple,
        "TokenBuffer": TokenBuffer,
        "ConstantList": lambda ids: ConstantList(list(ids)),
        "TokenIdsView": lambda ids: TokenIdsView(TokenBuffer(ids)),
        "TokenIdsView with a suffix": lambda ids: TokenIdsView(TokenBuffer(ids[: len(ids) // 2]), ids[len(ids) // 2 :]),
    }


@pytest.mark.parametrize("form", list(_id_forms()))
def test_token_ids_in_every_form_vllm_passes_them(form):
    """vLLM hands ids as lists (parse_delta's deltas), `TokenBuffer`s (int32 arrays: the request's
    prompt), `ConstantList`s and `TokenIdsView`s (the structured-output engine's), tuples (the
    reasoning count's): every entry point reads them all alike."""
    make = _id_forms()[form]
    prompt = token_serving.encode("qwen3", QWEN3_PREFIX)
    ids = token_serving.encode("qwen3", QWEN3_TEXT)
    chunks = [ids[k : k + 3] for k in range(0, len(ids), 3)]
    texts = token_serving.detokenized("qwen3", chunks)

    def results(convert: Any) -> tuple:
        streamed = token_parser("qwen3", WEATHER)
        request = streamed.adjust_request(request_for(WEATHER))
        deltas = [
            streamed.parse_delta(text, convert(chunk), request, convert(prompt), finished=k == len(chunks) - 1)
            for k, (chunk, text) in enumerate(zip(chunks, texts))
        ]
        view = loaded(accumulated([delta for delta in deltas if delta is not None]))
        parser = token_parser("qwen3", WEATHER)
        parser.set_prompt_token_ids(convert(prompt))
        answer = parser.parse("".join(texts), parser.adjust_request(request_for(WEATHER)), True, convert(ids))
        answer = (answer[0], answer[1], [(call.name, json.loads(call.arguments)) for call in answer[2]])
        reasoning = parser._reasoning_parser
        end = ids.index(token_serving.tokenizer_for("qwen3").convert_tokens_to_ids("</think>")) + 1
        ends = [
            parser.is_reasoning_end(convert(prompt)),
            reasoning.is_reasoning_end_streaming(convert(prompt + ids[:5]), convert(ids[:5])),
            reasoning.is_reasoning_end_streaming(convert(prompt + ids[:end]), convert(ids[end - 2 : end])),
        ]
        return view, answer, parser.count_reasoning_tokens(convert(ids)), ends

    expected = results(list)
    assert results(make) == expected
    assert expected[0]["reasoning"] == "\nThe user wants the weather.\n" and len(expected[0]["calls"]) == 2
    assert expected[2] > 0 and expected[3] == [False, False, True]


@pytest.mark.parametrize("include", [False, True], ids=["stop token skipped", "include_stop_str_in_output"])
def test_the_stop_token_vllm_leaves_out_of_the_text_is_left_out_of_the_ids(include):
    """The generation stops with `<|im_end|>` while reasoning: vLLM's detokenizer leaves the stop
    token out of the text (unless the request includes it), and the ids read leave it out too, so
    the reasoning is the text mode's, without the spelling of the stop token."""
    tokenizer = token_serving.tokenizer_for("qwen3")
    prompt = token_serving.encode("qwen3", QWEN3_PREFIX)
    ids = token_serving.encode("qwen3", "<think>\nplan, then") + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    for chunks in ([[token_id] for token_id in ids], [ids[:-3], ids[-3:]], [ids]):
        texts = token_serving.detokenized("qwen3", chunks)
        if not include:
            texts[-1] = texts[-1].removesuffix("<|im_end|>")
        text_mode = loaded(accumulated(stream_ids(token_parser("qwen3", token_ids=False), prompt, chunks, texts, request_for(None))))
        ours = loaded(accumulated(stream_ids(token_parser("qwen3"), prompt, chunks, texts, request_for(None))))
        assert ours == text_mode
        assert ours["reasoning"] == "\nplan, then" + ("<|im_end|>" if include else "")
        whole = whole_ids(token_parser("qwen3"), prompt, ids, "".join(texts), request_for(None))
        assert loaded(whole) == ours
    # an output that is only the stop token wrote nothing
    parser = token_parser("qwen3")
    request = parser.adjust_request(request_for(None))
    assert parser.parse_delta("", ids[-1:], request, prompt, finished=True) is None
    assert parser.parse("", request, True, model_output_token_ids=ids[-1:]) == (None, None, None)


def test_a_request_with_stop_strings_is_parsed_as_text():
    """vLLM cuts its text at a stop string, inside a token, and holds back text the ids already
    show: such a request is parsed as text (a spelled-out delimiter then acts, as in text mode)."""
    run = forged_run("qwen3", "reasoning")
    turn = forged_turn("qwen3", "reasoning")
    prefix, text = FORMATS["qwen3"].render(turn)
    before, after = text.split(PLACEHOLDER)
    ids = token_serving.encode("qwen3", before) + token_serving.spelled_out("qwen3", "</think>")
    ids += token_serving.encode("qwen3", after)
    chunks = [[token_id] for token_id in ids]
    texts = token_serving.detokenized("qwen3", chunks)
    prompt = token_serving.encode("qwen3", prefix)
    tools = tools_for(turn.calls)
    with_stop = loaded(accumulated(stream_ids(token_parser("qwen3", tools), prompt, chunks, texts, request_for(tools, stop=["zzz"]))))
    text_mode = loaded(accumulated(stream_ids(token_parser("qwen3", tools, token_ids=False), prompt, chunks, texts, request_for(tools))))
    assert with_stop == text_mode != run["expected"]
    assert with_stop["reasoning"] == "\nPlan: "


ANCHORED = {
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {"reasoning_content": {"open": "<think>", "close": "</think>\n<|im_start|>assistant\n"}, "content": {}},
}


def test_a_closer_missing_only_the_next_messages_anchor_is_completed_from_ids_the_model_generated():
    """A reasoning closer that ends with the next message's start anchor: the output stops before
    the anchor, and the closer is completed at the end (as vLLM completes it), in token mode from
    the ids; a closer whose control token the model spelled out is text, and is not completed."""
    tokenizer = copy.copy(token_serving.tokenizer_for("qwen3"))
    tokenizer.response_template = ANCHORED
    vllm_tokenizer = copy.copy(token_serving.tokenizer_for("qwen3"))
    vllm_tokenizer.response_template = thinking_copy(ANCHORED)
    ours_cls = composed(RtcompileParser, tokenizer, name="rtcompile", tools=False)
    theirs_cls = composed(ResponseTemplateParser, vllm_tokenizer, name="hf", tools=False)
    prompt = token_serving.encode("qwen3", "<|im_start|>assistant\n")
    ids = token_serving.encode("qwen3", "<think>plan</think>\n")
    for chunks in ([[token_id] for token_id in ids], [ids]):
        texts = token_serving.detokenized("qwen3", chunks)
        views = [
            accumulated(stream_ids(parser, prompt, chunks, texts, request_for(None)))
            for parser in (ours_cls(tokenizer), ours_cls(tokenizer, token_ids=False), theirs_cls(vllm_tokenizer))
        ]
        assert views[0] == views[1] == views[2] == {"reasoning": "plan", "content": "", "calls": []}
    spelled = token_serving.encode("qwen3", "<think>plan") + token_serving.spelled_out("qwen3", "</think>\n")
    chunks = [[token_id] for token_id in spelled]
    texts = token_serving.detokenized("qwen3", chunks)
    view = accumulated(stream_ids(ours_cls(tokenizer), prompt, chunks, texts, request_for(None)))
    assert view == {"reasoning": "plan</think>\n", "content": "", "calls": []}


def test_a_byte_fallback_decode_stream_failure_ends_no_stream():
    """A byte-fallback tokenizer (the Llama 2 / Mistral shape) and ids one per step where a valid
    byte (`;`) is followed by an invalid one (0x80): tokenizers' DecodeStream fails at the next id,
    so transformers 5.25.0's interpreter raises mid-stream, and rtcompile's parser by default.
    rtcompile's vLLM parser goes on, as vLLM's own detokenizer does: the `;` already streamed
    stands, the invalid byte is U+FFFD."""
    from tokenizer_pool import AddedSpec, build_tokenizer

    special, written = token_serving.CONTROL_TOKENS["qwen3"]
    added = [AddedSpec(token, "special") for token in special] + [AddedSpec(token, "template") for token in written]
    tokenizer = build_tokenizer("sentencepiece", added)
    tokenizer.response_template = template_for("qwen3")
    byte = tokenizer.convert_tokens_to_ids
    ids = tokenizer.encode("<think>\nplan a", add_special_tokens=False) + [byte("<0x3B>"), byte("<0x80>")]
    ids += tokenizer.encode("b\n</think>\n\nDone.<|im_end|>", add_special_tokens=False)
    prompt = tokenizer.encode(QWEN3_PREFIX, add_special_tokens=False)
    chunks = [[token_id] for token_id in ids]

    drop_in = rtcompile.ResponseParser(template_for("qwen3"), prompt, tokenizer=tokenizer)
    with pytest.raises(Exception, match="^Invalid prefix encountered while decoding stream"):
        for chunk in chunks:
            drop_in.feed(chunk)

    ours = composed(RtcompileParser, tokenizer, name="rtcompile", reasoning=True)(tokenizer, None)
    assert ours.reads_token_ids
    texts = [tokenizer.decode(chunk) for chunk in chunks]  # (read as ids: the text is not what is parsed)
    view = loaded(accumulated(stream_ids(ours, prompt, chunks, texts, request_for(None))))
    # what the same ids without the two bytes give (one feed: no failure), with `;` and U+FFFD added
    bytes_at = ids.index(byte("<0x3B>"))
    baseline = rtcompile.parse_response(
        ids[:bytes_at] + ids[bytes_at + 2 :], template_for("qwen3"), prefix=prompt, tokenizer=tokenizer
    )
    assert baseline["reasoning_content"] == "plan a b"
    assert view["reasoning"].strip() == "plan a;\ufffd b" and view["content"].strip() == baseline["content"]


# --------------------------------------------------------------------------------------------------
# Tool guarantees: required, named, strict and one call, kept by rtcompile's structural tag, which
# vLLM's own xgrammar backend compiles (constraint.py)

from vllm.entrypoints.openai.responses.protocol import ResponsesRequest  # noqa: E402
from vllm.parser.abstract_parser import structured_outputs_to_format  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputOptions  # noqa: E402
from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend, validate_xgrammar_grammar  # noqa: E402
from vllm.v1.structured_output.request import get_structured_output_key  # noqa: E402

from grammar_walk import TURN_ENDS, family_tokenizer, message_calls  # noqa: E402

SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "exact": {"type": "boolean"},
                "limit": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query", "exact"],
        },
    },
}
GUARANTEE_TOOLS = [
    {"type": "function", "function": {**WEATHER[0]["function"], "parameters": {**WEATHER[0]["function"]["parameters"], "required": ["city"]}}},
    SEARCH,
]
NAMED_SEARCH = {"type": "function", "function": {"name": "search"}}
GUARANTEES = {
    "required": {"tool_choice": "required"},
    "named": {"tool_choice": NAMED_SEARCH},
    "one call": {"tool_choice": "required", "parallel_tool_calls": False},
}
# gpt-oss is served by vLLM's Harmony parser, not rtcompile's (the last test of this section)
TOOL_TEMPLATES = sorted(name for name in FORMATS if "tool_calls" in template_for(name)["fields"] and name != "gpt_oss")
CLOSING = frozenset(['"', "'", "}", "]", ")", ">", ",", ":", "|"])


class Kit:
    """A template family's tokenizer with what these tests do with it: vLLM's xgrammar backend
    for it, parsers as vLLM composes them (with its stop ids as the model's generation config),
    encoding, detokenizing, and the ids a walk favours."""

    def __init__(self, name: str, tokenizer: Any, stops: list[int]):
        self.name = name
        self.template = template_for(name)
        self.tokenizer = copy.copy(tokenizer)
        self.tokenizer.response_template = self.template
        self.stops = list(stops)
        self._backends: dict[int, XgrammarBackend] = {}
        controls = set(tokenizer.added_tokens_decoder)
        delimiters = json.dumps(self.template, ensure_ascii=False)
        self.controls = controls
        # ordinary tokens that close something: one-character closers, pieces of delimiters
        self.closing = {
            token_id
            for token_id in range(len(tokenizer))
            if token_id not in controls
            and ((text := tokenizer.decode([token_id])) in CLOSING or (len(text.strip()) > 1 and text.strip() in delimiters))
        }

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def detokenized(self, chunks: list[list[int]]) -> list[str]:
        """Each chunk's text as vLLM's detokenizer hands it out (special tokens kept)."""
        from tokenizers.decoders import DecodeStream

        stream = DecodeStream(skip_special_tokens=False)
        backend = self.tokenizer.backend_tokenizer
        return ["".join(stream.step(backend, token_id) or "" for token_id in chunk) for chunk in chunks]

    def model_config(self) -> SimpleNamespace:
        stops = self.stops
        return SimpleNamespace(hf_config=SimpleNamespace(model_type="test"), try_get_generation_config=lambda: {"eos_token_id": stops})

    def parser(self, tools: list | None = GUARANTEE_TOOLS, **options: Any) -> RtcompileParser:
        reasoning = "reasoning_content" in self.template["fields"]
        cls = composed(RtcompileParser, self.tokenizer, name="rtcompile", reasoning=reasoning)
        return cls(self.tokenizer, tools, model_config=self.model_config(), **options)

    def backend(self, cache_mb: int = 0) -> XgrammarBackend:
        """vLLM's xgrammar backend, as its engine builds it (structural tags compile against the
        full vocabulary), with `VLLM_XGRAMMAR_CACHE_MB` at 0 as the README asks for token-id
        grammars (test_xgrammars_compiler_cache_confuses_tags_that_differ_only_in_a_token_id)."""
        if cache_mb not in self._backends:
            config = SimpleNamespace(
                structured_outputs_config=SimpleNamespace(disable_any_whitespace=False),
                model_config=SimpleNamespace(hf_config=SimpleNamespace(model_type="test")),
                speculative_config=None,
            )
            previous = os.environ.get("VLLM_XGRAMMAR_CACHE_MB")
            os.environ["VLLM_XGRAMMAR_CACHE_MB"] = str(cache_mb)
            try:
                self._backends[cache_mb] = XgrammarBackend(config, tokenizer=self.tokenizer, vocab_size=len(self.tokenizer))
            finally:
                if previous is None:
                    del os.environ["VLLM_XGRAMMAR_CACHE_MB"]
                else:
                    os.environ["VLLM_XGRAMMAR_CACHE_MB"] = previous
        return self._backends[cache_mb]

    def engine_grammar(self, request: Any) -> Any:
        """The request's grammar the way vLLM gets there: sampling params from the adjusted
        request, the frontend's xgrammar validation (nesting limits included), the engine's compile
        with the request's stop ids as the matcher's stops."""
        params = request.to_sampling_params(max_tokens=500, default_sampling_params={})
        validate_xgrammar_grammar(params)
        kind, spec = get_structured_output_key(params.structured_outputs)
        assert kind == StructuredOutputOptions.STRUCTURAL_TAG
        return self.backend().compile_grammar(kind, spec, stop_token_ids=set(self.stops))

    def walk(self, grammar: Any, rng: Any, max_tokens: int = 500, start: Sequence[int] = ()) -> tuple[list[int], bool]:
        """A random output the grammar accepts, beginning with `start` (the stop id left out), and
        whether it ended at a stop. Draws favour control tokens and closers, so that regions and
        walks end; a stop is taken, where allowed, more and more often."""
        import torch

        mask = self.backend().allocate_token_bitmask(1)
        bits = torch.arange(32, dtype=torch.int32)
        size = len(self.tokenizer)
        grammar.reset()
        ids = list(start)
        assert grammar.accept_tokens("walk", ids)
        while len(ids) < max_tokens:
            grammar.fill_bitmask(mask, 0)
            allowed = torch.nonzero(((mask[0].unsqueeze(1) >> bits) & 1).flatten()[:size]).flatten().tolist()
            stops = [i for i in allowed if i in self.stops]
            candidates = [i for i in allowed if i not in self.stops]
            if stops and (not candidates or rng.random() < 0.05 + len(ids) / max_tokens):
                assert grammar.accept_tokens("walk", stops[:1]) and grammar.is_terminated()
                return ids, True
            assert candidates, f"a dead end after {self.tokenizer.decode(ids)!r}"
            roll = rng.random()
            favoured = self.controls if roll < 0.3 else self.closing if roll < 0.7 else ()
            choice = rng.choice([i for i in candidates if i in favoured] or candidates)
            assert grammar.accept_tokens("walk", [choice]), self.tokenizer.decode(ids + [choice])
            ids.append(choice)
        return ids, False

    def stream(self, parser: Any, prompt: list[int], ids: list[int], request: Any) -> dict:
        """The output through `parse_delta`, one id a step with its detokenized text."""
        chunks = [[token_id] for token_id in ids] or [[]]
        deltas = []
        for index, (chunk, text) in enumerate(zip(chunks, self.detokenized(chunks))):
            delta = parser.parse_delta(text, chunk, request, prompt, finished=index == len(chunks) - 1)
            if delta is not None:
                deltas.append(delta)
        return loaded(accumulated(deltas))

    def whole_calls(self, ids: list[int], prompt: list[int], reads_ids: bool) -> list[tuple[str, Any]]:
        """The calls rtcompile's whole parse gives: of the ids, or of their text."""
        if reads_ids:
            message = rtcompile.parse_response(ids, self.template, prefix=prompt, tokenizer=self.tokenizer, tools=GUARANTEE_TOOLS, errors="keep")
        else:
            text, prefix = self.tokenizer.decode(ids), self.tokenizer.decode(prompt)
            message = rtcompile.parse_response(text, self.template, prefix=prefix, tools=GUARANTEE_TOOLS, errors="keep")
        return [(call["function"]["name"], call["function"]["arguments"]) for call in message_calls(message)]

    def adjusted(self, parser: Any, prompt_text: str, options: dict) -> tuple[Any, list[int]]:
        prompt = self.encode(prompt_text)
        parser.set_prompt_token_ids(prompt)
        return parser.adjust_request(request_for(GUARANTEE_TOOLS, **options)), prompt


_KITS: dict[tuple[str, str], Kit] = {}


def serving_kit(name: str) -> Kit:
    """The family's tokenizer as its model has it (token_serving.py: only the model's own
    control tokens), ending turns where the model's do."""
    if ("serving", name) not in _KITS:
        tokenizer = token_serving.tokenizer_for(name)
        stops = [tokenizer.convert_tokens_to_ids(t) for t in token_serving.control_tokens(name) if t in TURN_ENDS]
        _KITS["serving", name] = Kit(name, tokenizer, stops)
    return _KITS["serving", name]


def family_kit(name: str) -> Kit:
    """A tokenizer with every token-like piece of the template's delimiters as a control token
    (grammar_walk.family_tokenizer, what the grammar backend's own walks use): `</parameter>` is
    one id, so random walks through XML-like formats end."""
    if ("family", name) not in _KITS:
        _KITS["family", name] = Kit(name, *family_tokenizer(template_for(name)))
    return _KITS["family", name]


def prompt_for(name: str, prefilled: bool) -> str:
    """A prompt that ends at the assistant's start anchor, or (`prefilled`) that also opens the
    reasoning, as thinking chat templates render it."""
    template = template_for(name)
    anchor = template.get("start_anchor", "")
    anchor = anchor[0] if isinstance(anchor, list) else anchor
    return "Hi." + anchor + (template["fields"]["reasoning_content"]["open"] if prefilled else "")


def call_problems(calls: list[tuple[str, Any]], tools: list[dict], options: dict) -> list[str]:
    """What is wrong with the streamed calls for the request's guarantee (empty: nothing)."""
    import jsonschema

    choice = options.get("tool_choice", "auto")
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {"type": "object"} for t in tools}
    problems = []
    if choice != "auto" and not calls:
        problems.append("a call was required, none was made")
    if options.get("parallel_tool_calls") is False and len(calls) > 1:
        problems.append(f"one call at most, {len(calls)} made")
    for call_name, arguments in calls:
        if isinstance(choice, dict) and call_name != choice["function"]["name"]:
            problems.append(f"named {choice['function']['name']!r}, called {call_name!r}")
        if call_name not in schemas:
            problems.append(f"{call_name!r} is no tool")
            continue
        try:
            jsonschema.validate(arguments, schemas[call_name])
        except jsonschema.ValidationError as error:
            problems.append(f"arguments of {call_name!r}: {error.message}")
    return problems


def assert_walks_keep_the_guarantee(kit: Kit, make_parser: Any, request: Any, prompt: list[int], options: dict, walks: int = 3) -> int:
    """Walk the request's grammar as vLLM compiles it; each finished output, streamed through a
    fresh parser (`make_parser()`), gives calls that keep the guarantee, and the calls rtcompile's
    whole parse gives. Returns the number of calls seen."""
    import random

    grammar = kit.engine_grammar(request)
    rng = random.Random(f"{kit.name} {options}")
    seen = ended = 0
    for _ in range(3 * walks):  # (a walk that has not ended after its tokens is retried)
        if ended == walks:
            break
        ids, finished = kit.walk(grammar, rng)
        if not finished:
            continue
        ended += 1
        parser = make_parser()
        view = kit.stream(parser, prompt, ids, request)
        problems = call_problems(view["calls"], GUARANTEE_TOOLS, options)
        assert not problems, (problems, kit.tokenizer.decode(ids))
        assert view["calls"] == kit.whole_calls(ids, prompt, parser.reads_token_ids), kit.tokenizer.decode(ids)
        seen += len(view["calls"])
    assert ended, "no walk ended"
    return seen


@pytest.mark.parametrize("guarantee", sorted(GUARANTEES))
@pytest.mark.parametrize("name", TOOL_TEMPLATES)
def test_a_guarantee_is_a_tag_vllm_compiles_and_every_walk_streams_calls_that_keep_it(name, guarantee):
    """Required, named and one-call requests through the plugin (token ids, a reasoning parser
    where the template reasons): the structured outputs are rtcompile's tag for the prompt (one
    that opens the reasoning where the template has reasoning), applied from the first token;
    vLLM's frontend validates it and its engine compiles it; outputs walked through that grammar
    stream, through `parse_delta`, calls that keep the guarantee, arguments valid against their
    tool's schema, as rtcompile's whole parse reads them."""
    options = GUARANTEES[guarantee]
    kit = family_kit(name)
    parser = kit.parser()
    request, prompt = kit.adjusted(parser, prompt_for(name, "reasoning_content" in kit.template["fields"]), options)
    assert request._grammar_from_parser and request.resolve_reasoning_ended(parser, prompt) is True
    expected = rtcompile.structural_tag(
        kit.template, GUARANTEE_TOOLS, tool_choice=options["tool_choice"],
        parallel_tool_calls=options.get("parallel_tool_calls", True), prefix=prompt,
        tokenizer=kit.tokenizer, stop_tokens=kit.stops,
    )
    assert json.loads(request.structured_outputs.structural_tag) == expected
    assert assert_walks_keep_the_guarantee(kit, kit.parser, request, prompt, options) > 0


@pytest.mark.parametrize("name", ["qwen3", "qwen3_5", "deepseek_r1", "minimax_m2"])
def test_the_tag_follows_the_prompt_where_reasoning_opens_or_not(name):
    """The same request after a prompt that opens the reasoning and after one that does not gets
    a different tag, each sound for its prompt (a tag for the wrong prompt lets a call written
    inside the reasoning count, which the parser reads as reasoning)."""
    kit = family_kit(name)
    tags = []
    for prefilled in (False, True):
        request, prompt = kit.adjusted(kit.parser(), prompt_for(name, prefilled), GUARANTEES["required"])
        tags.append(request.structured_outputs.structural_tag)
        assert_walks_keep_the_guarantee(kit, kit.parser, request, prompt, GUARANTEES["required"])
    assert tags[0] != tags[1]


@pytest.mark.parametrize("guarantee", sorted(GUARANTEES))
def test_on_the_models_own_control_tokens_walks_keep_the_guarantee(guarantee):
    """qwen3's tokenizer as the model has it (`<tool_call>` a control token, JSON spelled out):
    the same through vLLM's compile and the stream."""
    kit, options = serving_kit("qwen3"), GUARANTEES[guarantee]
    request, prompt = kit.adjusted(kit.parser(), prompt_for("qwen3", True), options)
    assert assert_walks_keep_the_guarantee(kit, kit.parser, request, prompt, options) > 0


def test_vllms_class_refuses_the_guarantees_rtcompile_keeps():
    vllm_tokenizer = ChunkTokenizer(thinking_copy(template_for("qwen3")))
    theirs = composed(ResponseTemplateParser, vllm_tokenizer, name="hf")(vllm_tokenizer, WEATHER)
    strict = [{**WEATHER[0], "function": {**WEATHER[0]["function"], "strict": True}}]
    cases = [
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
        ({"parallel_tool_calls": False}, "parallel_tool_calls"),
        ({"tools": strict}, "tools"),
    ]
    kit = serving_kit("qwen3")
    for options, parameter in cases:
        options = {"tools": WEATHER, **options}
        with pytest.raises(VLLMValidationError) as their_error:
            theirs.adjust_request(request_for(**options))
        assert their_error.value.parameter == parameter
        ours = kit.parser(options["tools"])
        ours.set_prompt_token_ids(kit.encode(QWEN3_PREFIX))
        tag = json.loads(ours.adjust_request(request_for(**options)).structured_outputs.structural_tag)
        assert tag["type"] == "structural_tag"


def test_in_text_mode_the_tag_writes_delimiters_as_text():
    """RTCOMPILE_VLLM_TOKEN_IDS=0 (and a request with stop strings): the parser reads text, so the
    tag has no token formats; walks through vLLM's grammar still stream calls that keep the
    guarantee, read as text."""
    kit = serving_kit("qwen3")
    options = {"tool_choice": "required", "parallel_tool_calls": False}
    request, prompt = kit.adjusted(kit.parser(token_ids=False), prompt_for("qwen3", True), options)
    assert '"type": "token"' not in request.structured_outputs.structural_tag
    assert assert_walks_keep_the_guarantee(kit, lambda: kit.parser(token_ids=False), request, prompt, options) > 0
    with_stop, _ = kit.adjusted(kit.parser(), prompt_for("qwen3", True), {**options, "stop": ["zzz"]})
    assert '"type": "token"' not in with_stop.structured_outputs.structural_tag
    by_id, _ = kit.adjusted(kit.parser(), prompt_for("qwen3", True), options)
    assert '"type": "token"' in by_id.structured_outputs.structural_tag


def test_auto_with_strict_tools_or_one_call_is_constrained_and_plain_auto_is_not():
    kit = serving_kit("qwen3")
    strict_tools = [{**GUARANTEE_TOOLS[0], "function": {**GUARANTEE_TOOLS[0]["function"], "strict": True}}, SEARCH]
    prompt = kit.encode(prompt_for("qwen3", True))
    for tools, options in ((strict_tools, {}), (GUARANTEE_TOOLS, {"parallel_tool_calls": False})):
        parser = kit.parser(tools)
        parser.set_prompt_token_ids(prompt)
        request = parser.adjust_request(request_for(tools, **options))
        assert request._grammar_from_parser
        assert_walks_keep_the_guarantee(kit, lambda: kit.parser(tools), request, prompt, options)
    request, _ = kit.adjusted(kit.parser(), prompt_for("qwen3", True), {})
    assert request.structured_outputs is None


def test_with_structural_tags_switched_off_only_forced_choices_get_one(monkeypatch):
    """VLLM_ENFORCE_STRICT_TOOL_CALLING=0, as for vLLM's own parsers: "auto" goes unconstrained
    (strict tools and one call unenforced); a forced choice keeps its tag (the parser reads calls in
    the template's format)."""
    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", "0")
    kit = serving_kit("qwen3")
    request, _ = kit.adjusted(kit.parser(), prompt_for("qwen3", False), {"parallel_tool_calls": False})
    assert request.structured_outputs is None
    request, _ = kit.adjusted(kit.parser(), prompt_for("qwen3", False), GUARANTEES["required"])
    assert request.structured_outputs.structural_tag is not None


def test_the_stop_ids_are_the_ones_vllms_matcher_allows():
    """The grammar never writes a stop token: the tokenizer's eos, the generation config's and
    the request's `stop_token_ids` all end it (here `<|im_end|>` closes qwen3's content)."""
    kit = serving_kit("qwen3")
    im_end, end_of_text = (kit.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>"))
    config = SimpleNamespace(hf_config=SimpleNamespace(model_type="test"), try_get_generation_config=lambda: {"eos_token_id": end_of_text})
    prompt = kit.encode(prompt_for("qwen3", False))
    tags = {}
    for case, extra in (("config only", {}), ("config and request", {"stop_token_ids": [im_end]})):
        parser = composed(RtcompileParser, kit.tokenizer, name="rtcompile")(kit.tokenizer, GUARANTEE_TOOLS, model_config=config)
        parser.set_prompt_token_ids(prompt)
        tags[case] = parser.adjust_request(request_for(GUARANTEE_TOOLS, tool_choice="required", **extra)).structured_outputs.structural_tag
        expected = rtcompile.structural_tag(
            kit.template, GUARANTEE_TOOLS, tool_choice="required", prefix=prompt, tokenizer=kit.tokenizer,
            stop_tokens=[end_of_text, *extra.get("stop_token_ids", ())],
        )
        assert json.loads(tags[case]) == expected
    assert tags["config only"] != tags["config and request"]


# ---- the request's own structured output ----------------------------------------------------------

ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
JSON_ANSWER = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}


def test_a_forced_choice_wins_over_the_requests_own_format(monkeypatch):
    from rtcompile.integrations.vllm import constraint

    warnings = []
    monkeypatch.setattr(constraint.logger, "warning_once", lambda message, **_: warnings.append(message))
    monkeypatch.setenv("VLLM_XGRAMMAR_CACHE_MB", "0")  # (no warning about xgrammar's cache)
    kit = serving_kit("qwen3")
    request, prompt = kit.adjusted(kit.parser(), prompt_for("qwen3", False), {"tool_choice": "required", "response_format": JSON_ANSWER})
    assert request.response_format is None and request._grammar_from_parser
    assert warnings == [constraint.FORCED_WINS]
    assert_walks_keep_the_guarantee(kit, kit.parser, request, prompt, GUARANTEES["required"])


@pytest.mark.parametrize("reasoning_in_output", [False, True], ids=["prompt closed the reasoning", "reasoning left to the output"])
def test_auto_with_strict_tools_and_the_requests_own_format_is_calls_or_that_format(reasoning_in_output):
    """As vLLM: `or(at least one call, the request's format)`, applied where vLLM applies the
    request's format: from the first token after a prompt that closed the reasoning, after the
    reasoning otherwise (the call branch is then the template's output past a reasoning region).
    Each walked output is in the request's own format (vLLM's grammar for that format alone
    accepts it), or streams calls that keep the guarantee."""
    import random

    kit = serving_kit("qwen3")
    strict_tools = [{**t, "function": {**t["function"], "strict": True}} for t in GUARANTEE_TOOLS]
    prompt = kit.encode(QWEN3_PREFIX + ("" if reasoning_in_output else "<think>\n\n</think>\n\n"))
    parser = kit.parser(strict_tools)
    parser.set_prompt_token_ids(prompt)
    request = parser.adjust_request(request_for(strict_tools, response_format=JSON_ANSWER))
    assert request.response_format is None and not request._grammar_from_parser
    assert request.resolve_reasoning_ended(parser, prompt) is (not reasoning_in_output)
    own = structured_outputs_to_format(request_for(strict_tools, response_format=JSON_ANSWER).extract_structured_outputs())
    calls = rtcompile.structural_tag(
        kit.template, strict_tools, tool_choice="required",
        prefix=prompt + (kit.encode("<think></think>") if reasoning_in_output else []),
        tokenizer=kit.tokenizer, stop_tokens=kit.stops,
    )
    tag = json.loads(request.structured_outputs.structural_tag)
    assert tag["format"] == {"type": "or", "elements": [calls["format"], own.model_dump()]}
    # vLLM's engine feeds the grammar from where reasoning ended: the walk follows a reasoning there
    reasoning = kit.encode("<think>\nweighing it\n</think>") if reasoning_in_output else []
    grammar = kit.engine_grammar(request)
    own_only = kit.backend().compile_grammar(
        StructuredOutputOptions.STRUCTURAL_TAG, json.dumps({"type": "structural_tag", "format": own.model_dump()}), stop_token_ids=set(kit.stops)
    )
    rng = random.Random("or")
    branches = {"own format": 0, "calls": 0}
    opening = kit.encode('{"answer": "')
    for attempt in range(10):
        # (half the walks start the way the request's format starts; either branch may go on)
        ids, finished = kit.walk(grammar, rng, start=opening if attempt % 2 else [])
        if not finished:
            continue
        own_only.reset()
        if own_only.accept_tokens("replay", ids + kit.stops[:1]) and own_only.is_terminated():
            branches["own format"] += 1
            continue
        view = kit.stream(kit.parser(strict_tools), prompt, reasoning + ids, request)
        assert view["calls"] and not call_problems(view["calls"], strict_tools, {"tool_choice": "required"})
        branches["calls"] += 1
    assert branches["calls"] and branches["own format"], branches


def test_auto_with_only_one_call_asked_keeps_the_requests_own_format(monkeypatch):
    from rtcompile.integrations.vllm import constraint

    warnings = []
    monkeypatch.setattr(constraint.logger, "warning_once", lambda message, **_: warnings.append(message))
    kit = serving_kit("qwen3")
    request, _ = kit.adjusted(kit.parser(), prompt_for("qwen3", False), {"parallel_tool_calls": False, "response_format": JSON_ANSWER})
    assert request.structured_outputs is None and request.response_format is not None
    assert warnings == [constraint.OWN_FORMAT_WINS]


def test_a_responses_request_gets_the_tag_and_loses_its_text_format():
    kit = serving_kit("qwen3")
    parser = kit.parser()
    prompt = kit.encode(prompt_for("qwen3", False))
    parser.set_prompt_token_ids(prompt)
    tools = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]} for t in GUARANTEE_TOOLS]
    request = ResponsesRequest(
        model="test-model", input="hi", tools=tools, tool_choice="required",
        text={"format": {"type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA}},
    )
    request = parser.adjust_request(request)
    assert request.text is None and request._grammar_from_parser
    expected = rtcompile.structural_tag(kit.template, GUARANTEE_TOOLS, tool_choice="required", prefix=prompt, tokenizer=kit.tokenizer, stop_tokens=kit.stops)
    assert json.loads(request.extract_structured_outputs().structural_tag) == expected


# ---- what cannot be expressed ---------------------------------------------------------------------


def test_what_the_template_cannot_express_is_refused_with_the_reason_in_one_line():
    """A reasoning field the template requires (`optional: false`): no grammar can guarantee it;
    the refusal names the request field that asked for the guarantee and gives the reason."""
    template = copy.deepcopy(template_for("qwen3"))
    template["fields"]["reasoning_content"]["optional"] = False
    tokenizer = copy.copy(token_serving.tokenizer_for("qwen3"))
    tokenizer.response_template = template
    parser = composed(RtcompileParser, tokenizer, name="rtcompile")(tokenizer, GUARANTEE_TOOLS)
    parser.set_prompt_token_ids(token_serving.encode("qwen3", QWEN3_PREFIX))
    for options, parameter in (
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": NAMED_SEARCH}, "tool_choice"),
        ({"parallel_tool_calls": False}, "parallel_tool_calls"),
    ):
        with pytest.raises(VLLMValidationError) as error:
            parser.adjust_request(request_for(GUARANTEE_TOOLS, **options))
        message = str(error.value)
        assert error.value.parameter == parameter and "\n" not in message
        assert "a required field cannot be guaranteed by the grammar" in message


def test_a_request_the_grammar_refuses_is_refused_naming_its_field():
    twice = [WEATHER[0], WEATHER[0]]
    kit = serving_kit("qwen3")
    parser = kit.parser(twice)
    parser.set_prompt_token_ids(kit.encode(QWEN3_PREFIX))
    with pytest.raises(VLLMValidationError) as error:
        parser.adjust_request(request_for(twice, tool_choice="required"))
    assert error.value.parameter == "tools" and "names 'get_weather' twice" in str(error.value)


def test_without_the_prompts_ids_a_guarantee_is_refused():
    with pytest.raises(VLLMValidationError) as error:
        serving_kit("qwen3").parser().adjust_request(request_for(GUARANTEE_TOOLS, tool_choice="required"))
    assert error.value.parameter == "tool_choice" and "prompt" in str(error.value)


def test_gpt_oss_on_vllm_goes_through_its_harmony_parser_which_refuses_rtcompiles():
    """For `model_type` gpt_oss vLLM composes its Harmony parser, which takes only vLLM's gpt-oss
    parsers: rtcompile's names are refused at startup, so none of the above reaches gpt-oss."""
    tokenizer = copy.copy(token_serving.tokenizer_for("gpt_oss"))
    tokenizer.response_template = template_for("gpt_oss")
    with pytest.raises(TypeError, match="Harmony requires GptOssReasoningParser"):
        ParserManager.get_parser(
            tool_parser_name="rtcompile", reasoning_parser_name="rtcompile", enable_auto_tools=True,
            model_name="test-model", is_harmony=True, tokenizer=tokenizer,
        )


def test_xgrammars_compiler_cache_confuses_tags_that_differ_only_in_a_token_id():
    """Why the README asks for `VLLM_XGRAMMAR_CACHE_MB=0` with token-id grammars: with its cache on
    (vLLM's default, 512 MB), xgrammar 0.2.8 reuses what it compiled for an earlier structural tag
    for a later one that differs only in a `token` format's id, so the later grammar's mask offers
    the earlier token (which its matcher then rejects: vLLM ends such a request with an error).
    The same two tags compile apart with the cache at 0. When this fails, xgrammar keeps token ids
    apart: the README's advice and the plugin's warning can go."""
    import torch

    kit = serving_kit("qwen3")
    first, second = (kit.tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", "</tool_call>"))
    bits = torch.arange(32, dtype=torch.int32)

    def offered_after_a(backend: Any, token_id: int) -> list[int]:
        elements = [{"type": "const_string", "value": "a"}, {"type": "token", "token": token_id}]
        tag = json.dumps({"type": "structural_tag", "format": {"type": "sequence", "elements": elements}})
        grammar = backend.compile_grammar(StructuredOutputOptions.STRUCTURAL_TAG, tag, stop_token_ids=set(kit.stops))
        assert grammar.accept_tokens("a", kit.encode("a"))
        mask = backend.allocate_token_bitmask(1)
        grammar.fill_bitmask(mask, 0)
        return torch.nonzero(((mask[0].unsqueeze(1) >> bits) & 1).flatten()[: len(kit.tokenizer)]).flatten().tolist()

    cached, uncached = kit.backend(cache_mb=512), kit.backend(cache_mb=0)
    assert offered_after_a(cached, first) == [first] and offered_after_a(cached, second) == [first]
    assert offered_after_a(uncached, first) == [first] and offered_after_a(uncached, second) == [second]


def test_a_token_id_grammar_with_xgrammars_cache_on_is_warned_about(monkeypatch):
    from rtcompile.integrations.vllm import constraint

    warnings = []
    monkeypatch.setattr(constraint.logger, "warning_once", lambda message, **_: warnings.append(message))
    kit = serving_kit("qwen3")
    for cache, token_ids in (("0", True), ("512", False), ("512", True)):
        monkeypatch.setenv("VLLM_XGRAMMAR_CACHE_MB", cache)
        kit.adjusted(kit.parser(token_ids=token_ids), prompt_for("qwen3", False), GUARANTEES["required"])
    assert warnings == [constraint.XGRAMMAR_CACHE]

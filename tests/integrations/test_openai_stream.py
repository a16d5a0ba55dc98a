"""OpenAI-style streaming deltas (rtcompile.integrations.openai_stream), checked by the official client.

The contract: for every template and every chunking, the deltas an `OpenAIStream` sends, accumulated
by the `openai` package's own `ChatCompletionStreamState`, give back the parser's final message:
content and reasoning text, and tool calls with the same names, ids, order and arguments (the
arguments fragments concatenate to JSON that loads to exactly the final arguments, after `tools=`
coercion). Proven here with hypothesis over

- every bundled template, with generated turns (reasoning, content, tool calls with nested arguments,
  unicode, delimiter look-alikes inside strings) rendered in the template's format, random chunkings
  and prefilled reasoning;
- simple generated templates covering the transform shapes, content parsers and dialects the
  adapter streams incrementally;
- the differential suite's random templates (tests/strategies.py), where the final message is
  ambiguous only in documented ways: the client's view must not depend on the chunking, and equal the
  message whenever every field was written by at most one region.

Plus: arguments really stream (everything complete before a call's closing delimiter is already sent),
every intermediate arguments text is a JSON object prefix (`text + "}"` loads), call ids, whitespace,
truncated and malformed calls, and the cost of incremental extraction (linear in the output).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pytest
from hypothesis import assume, event, given, note
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

import rtcompile
from rtcompile.library import template_for, template_names
from rtcompile.integrations.serving import arguments as serving_arguments, calls
from rtcompile.runtime import RegionParseError
from rtcompile.integrations.openai_stream import (
    OpenAIStream,
    accumulate_deltas,
    completion_chunk,
    message_tool_calls,
    text_of,
)
from strategies import chunkings, outputs, prefixes, template_plans, tools_lists

import token_serving
import tokenizer_pool

# --------------------------------------------------------------------------------------------------
# Running a stream and looking at it through the official client


def canonical(value: Any) -> str:
    """Strict equality for JSON values (1 != 1.0 != True), order-insensitive for objects."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


@dataclass
class Run:
    adapter: OpenAIStream
    deltas: list[dict]
    # After each feed: the arguments text of every call so far (for the prefix invariant).
    snapshots: list[dict[int, str]] = field(default_factory=list)

    @property
    def message(self) -> dict:
        return self.adapter.message


def run_stream(
    template: dict,
    prefix: str,
    chunks: list[str],
    *,
    tools: Optional[list] = None,
    errors: str = "keep",
    seed: int = 0,
    snapshots: bool = False,
    **options: Any,
) -> Run:
    parser = rtcompile.ResponseParser(template, prefix, tools=tools, errors=errors)
    adapter = OpenAIStream(parser, template, seed=seed, **options)
    run = Run(adapter, list(adapter.initial_deltas))
    arguments: dict[int, str] = {}
    for chunk in chunks:
        new = adapter.feed(chunk)
        run.deltas += new
        if snapshots and new:
            for delta in new:
                for entry in delta.get("tool_calls", ()):
                    text = entry.get("function", {}).get("arguments") or ""
                    arguments[entry["index"]] = arguments.get(entry["index"], "") + text
            run.snapshots.append(dict(arguments))
    run.deltas += adapter.finish()
    return run


def official_client_choice(
    deltas: list[dict], finish_reason: str, input_tools: Optional[list] = None
) -> Any:
    """What the `openai` package accumulates from these deltas sent as chat.completion.chunk objects."""
    state = (
        ChatCompletionStreamState(input_tools=input_tools)
        if input_tools
        else ChatCompletionStreamState()
    )
    chunk_fields = {"completion_id": "chatcmpl-test", "model": "replay", "created": 1}
    for delta in deltas:
        state.handle_chunk(
            ChatCompletionChunk.model_validate(completion_chunk(delta, **chunk_fields))
        )
    last = completion_chunk({}, finish_reason=finish_reason, **chunk_fields)
    state.handle_chunk(ChatCompletionChunk.model_validate(last))
    if finish_reason == "length":  # get_final_completion refuses to parse a cut-off completion
        return state.current_completion_snapshot.choices[0]
    return state.get_final_completion().choices[0]


def client_view(run: Run) -> dict:
    choice = official_client_choice(run.deltas, run.adapter.finish_reason)
    message = choice.message
    return {
        "content": message.content or "",
        "reasoning": getattr(message, "reasoning_content", None) or "",
        "calls": [
            (call.id, call.function.name, call.function.arguments)
            for call in message.tool_calls or []
        ],
        "finish_reason": choice.finish_reason,
    }


def reasoning_field_of(template: dict) -> Optional[str]:
    return next((f for f in ("reasoning_content", "thinking") if f in template["fields"]), None)


def assert_view_is_message(
    view: dict, run: Run, template: dict, tool_field: str = "tool_calls"
) -> None:
    """The contract: the client's view equals the parser's final message."""
    message = run.message
    assert view["content"] == text_of(message.get("content"))
    reasoning = reasoning_field_of(template)
    assert view["reasoning"] == (text_of(message.get(reasoning)) if reasoning else "")
    final_calls = message_tool_calls(message, template, tool_field)
    assert len(view["calls"]) == len(final_calls)
    generated_ids = []
    for (call_id, name, arguments), item in zip(view["calls"], final_calls):
        function = item["function"]
        assert name == function["name"]
        assert canonical(json.loads(arguments)) == canonical(function.get("arguments", {}))
        if item.get("id"):
            assert call_id == item["id"]
        else:
            assert re.fullmatch(r"call_[A-Za-z0-9]{24}", call_id)
            generated_ids.append(call_id)
    assert len(set(generated_ids)) == len(generated_ids)
    assert view["finish_reason"] == ("tool_calls" if final_calls else "stop")
    assert run.adapter.divergences == []


def assert_well_formed(view: dict, run: Run) -> None:
    """What holds for any output, broken or not: valid JSON arguments, named calls, nothing lost."""
    for call_id, name, arguments in view["calls"]:
        assert isinstance(name, str) and call_id
        json.loads(arguments)
    for error in run.adapter.errors:
        key = "reasoning" if error["sent_as"] == "reasoning_content" else error["sent_as"]
        assert error["raw"] in view[key]


def assert_prefix_invariant(run: Run) -> None:
    """Between any two chunks, each call's arguments so far are a JSON object missing only its `}`
    (or complete), whose keys are keys of the final arguments."""
    final_view = accumulate_deltas(run.deltas).get("tool_calls", [])
    for snapshot in run.snapshots:
        for index, text in snapshot.items():
            if not text:
                continue
            try:
                partial = json.loads(text)
            except ValueError:
                partial = json.loads(text + "}")
            final_arguments = json.loads(final_view[index]["function"]["arguments"])
            if isinstance(partial, dict) and isinstance(final_arguments, dict):
                assert set(partial) <= set(final_arguments)


# --------------------------------------------------------------------------------------------------
# Generated turns in the format of each bundled template

TEXT_ALPHABET = "abcxyz 0123\n\t<>/\"'{}[]:,.\\|=é中😀\u2028"
KEY_ALPHABET = "abcxyz_0123 \"'\\é😀:,{}"
NAMES = st.sampled_from(["get_weather", "search_docs", "f", "write_note"]) | st.from_regex(
    r"[a-z_][a-z0-9_]{0,10}", fullmatch=True
)
IDENTIFIERS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)


def lookalikes(template: dict) -> list[str]:
    """Every literal delimiter of the template minus its last character, plus the pieces of the
    pattern delimiters: text a streaming parser must hold back, then release."""
    pieces = {
        "<tool_call",
        "</tool_call",
        "<parameter=",
        "</parameter",
        "<arg_value",
        "<think",
        "</think",
    }
    literals = []
    for spec in template["fields"].values():
        for key in ("open", "close"):
            value = spec.get(key)
            literals += [value] if isinstance(value, str) else list(value or [])
    anchor = template.get("start_anchor")
    literals += [anchor] if isinstance(anchor, str) else list(anchor or [])
    pieces.update(literal[:-1] for literal in literals if len(literal) > 1)
    return sorted(pieces)


@st.composite
def free_text(draw, pieces: list[str], max_parts: int = 4) -> str:
    """Text with look-alikes; each look-alike is followed by a space so none can complete."""
    parts = draw(
        st.lists(
            st.one_of(
                st.text(TEXT_ALPHABET, max_size=12), st.sampled_from(pieces).map(lambda p: p + " ")
            ),
            max_size=max_parts,
        )
    )
    return "".join(parts)


def json_values(
    strings: st.SearchStrategy[str], keys: st.SearchStrategy[str]
) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**9), 10**9),
        st.floats(allow_nan=False, allow_infinity=False, width=32),
        strings,
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=3), st.dictionaries(keys, children, max_size=3)
        ),
        max_leaves=6,
    )


@dataclass
class Turn:
    reasoning: Optional[str]
    content: str
    calls: list[tuple[str, dict]]
    prefill: bool  # the prompt opened the reasoning block
    ensure_ascii: bool
    call_ids: list[str]


def _json(obj: Any, turn: Turn) -> str:
    return json.dumps(obj, ensure_ascii=turn.ensure_ascii)


def _xml_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _gemma_value(value: Any) -> str:
    if isinstance(value, str):
        return '<|"|>' + value + '<|"|>'
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_gemma_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_gemma_value(v) for v in value) + "]"
    return json.dumps(value)


def _think(turn: Turn, open_tag: str = "<think>\n", close_tag: str = "\n</think>\n\n") -> str:
    if turn.reasoning is None:
        return close_tag.lstrip("\n") if turn.prefill else ""
    return ("" if turn.prefill else open_tag) + turn.reasoning + close_tag


def render_hermes(
    turn: Turn, anchor: str, end: str = "<|im_end|>", reasoning: bool = True
) -> tuple[str, str]:
    prefix = anchor + ("<think>\n" if turn.prefill and reasoning else "")
    text = _think(turn) if reasoning else ""
    text += turn.content
    for name, arguments in turn.calls:
        text += (
            "\n<tool_call>\n"
            + _json({"name": name, "arguments": arguments}, turn)
            + "\n</tool_call>"
        )
    return prefix, text + end


def render_qwen_xml(turn: Turn, reasoning: bool) -> tuple[str, str]:
    prefix = "<|im_start|>assistant\n" + ("<think>\n" if turn.prefill and reasoning else "")
    text = (_think(turn) if reasoning else "") + turn.content
    for name, arguments in turn.calls:
        text += f"\n<tool_call>\n<function={name}>\n"
        for key, value in arguments.items():
            text += f"<parameter={key}>\n{_xml_value(value)}\n</parameter>\n"
        text += "</function>\n</tool_call>"
    return prefix, text + "<|im_end|>"


def render_glm(turn: Turn) -> tuple[str, str]:
    text = (
        (f"\n<think>{turn.reasoning}</think>" if turn.reasoning is not None else "")
        + "\n"
        + turn.content
    )
    for name, arguments in turn.calls:
        text += f"\n<tool_call>{name}\n"
        for key, value in arguments.items():
            text += f"<arg_key>{key}</arg_key>\n<arg_value>{_xml_value(value)}</arg_value>\n"
        text += "</tool_call>"
    return "<|assistant|>", text + ("<|observation|>" if turn.calls else "<|user|>")


def render_minimax(turn: Turn) -> tuple[str, str]:
    prefix = "]~b]ai\n" + ("<think>\n" if turn.prefill else "")
    text = _think(turn) + turn.content
    if turn.calls:
        text += "\n<minimax:tool_call>\n"
        for name, arguments in turn.calls:
            text += f'<invoke name="{name}">\n'
            for key, value in arguments.items():
                text += f'<parameter name="{key}">{_xml_value(value)}</parameter>\n'
            text += "</invoke>\n"
        text += "</minimax:tool_call>"
    return prefix, text + "[e~["


def render_gpt_oss(turn: Turn) -> tuple[str, str]:
    text = ""
    if turn.reasoning is not None:
        text += f"<|channel|>analysis<|message|>{turn.reasoning}<|end|>"
    if turn.content:
        text += f"<|start|>assistant<|channel|>final<|message|>{turn.content}<|end|>"
    for name, arguments in turn.calls:
        text += f"<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"
        text += _json(arguments, turn) + "<|call|>"
    if not turn.calls:
        text += "<|return|>"
    return "<|start|>assistant", text


def render_kimi(turn: Turn) -> tuple[str, str]:
    text = (f"<think>{turn.reasoning}</think>" if turn.reasoning is not None else "") + turn.content
    if turn.calls:
        text += "<|tool_calls_section_begin|>"
        for index, (name, arguments) in enumerate(turn.calls):
            text += f"<|tool_call_begin|>functions.{name}:{index}<|tool_call_argument_begin|>"
            text += _json(arguments, turn) + "<|tool_call_end|>"
        text += "<|tool_calls_section_end|>"
    return "<|im_assistant|>assistant<|im_middle|>", text + "<|im_end|>"


def render_deepseek_r1(turn: Turn) -> tuple[str, str]:
    prefix = "<｜Assistant｜>" + ("<think>\n" if turn.prefill else "")
    text = _think(turn) + turn.content
    if turn.calls:
        text += (
            "<｜tool▁calls▁begin｜>"
            + "\n".join(
                f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{_json(arguments, turn)}\n```<｜tool▁call▁end｜>"
                for name, arguments in turn.calls
            )
            + "<｜tool▁calls▁end｜>"
        )
    return prefix, text + "<｜end▁of▁sentence｜>"


def render_deepseek_v3_1(turn: Turn) -> tuple[str, str]:
    if turn.reasoning is not None:
        prefix, text = "<｜Assistant｜><think>", turn.reasoning + "</think>"
    else:
        prefix, text = "<｜Assistant｜></think>", ""
    text += turn.content
    if turn.calls:
        text += (
            "<｜tool▁calls▁begin｜>"
            + "".join(
                f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{_json(arguments, turn)}<｜tool▁call▁end｜>"
                for name, arguments in turn.calls
            )
            + "<｜tool▁calls▁end｜>"
        )
    return prefix, text + "<｜end▁of▁sentence｜>"


def render_gemma(turn: Turn) -> tuple[str, str]:
    text = f"<|channel>thought\n{turn.reasoning}<channel|>" if turn.reasoning is not None else ""
    text += turn.content
    for name, arguments in turn.calls:
        text += f"<|tool_call>call:{name}{_gemma_value(arguments)}<tool_call|>"
    return "<|turn>model\n", text + ("<|tool_response>" if turn.calls else "<turn|>")


def render_llama(turn: Turn) -> tuple[str, str]:
    anchor = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    if turn.calls:  # one call per turn, and nothing before it
        name, arguments = turn.calls[0]
        return anchor, _json({"name": name, "parameters": arguments}, turn) + "<|eot_id|>"
    return anchor, turn.content + "<|eot_id|>"


def render_ministral(turn: Turn) -> tuple[str, str]:
    text = (f"[THINK]{turn.reasoning}[/THINK]" if turn.reasoning is not None else "") + turn.content
    for name, arguments in turn.calls:
        text += f"[TOOL_CALLS]{name}[ARGS]{_json(arguments, turn)}"
    return "[/INST]", text + "</s>"


def render_mistral_small(turn: Turn) -> tuple[str, str]:
    text = turn.content
    for (name, arguments), call_id in zip(turn.calls, turn.call_ids):
        text += (
            f"[TOOL_CALLS]{name}"
            + (f"[CALL_ID]{call_id}" if call_id else "")
            + f"[ARGS]{_json(arguments, turn)}"
        )
    return "[/INST]", text + "</s>"


def render_mistral_nemo(turn: Turn) -> tuple[str, str]:
    text = turn.content
    if turn.calls:
        items = [
            {"name": name, "arguments": arguments, **({"id": call_id} if call_id else {})}
            for (name, arguments), call_id in zip(turn.calls, turn.call_ids)
        ]
        text += "[TOOL_CALLS]" + _json(items, turn)
    return "[/INST]", text + "</s>"


def render_cohere(turn: Turn) -> tuple[str, str]:
    text = (
        f"<|START_THINKING|>{turn.reasoning}<|END_THINKING|>" if turn.reasoning is not None else ""
    )
    if turn.calls:
        items = [
            {"tool_call_id": str(index), "tool_name": name, "parameters": arguments}
            for index, (name, arguments) in enumerate(turn.calls)
        ]
        text += "<|START_ACTION|>" + _json(items, turn) + "<|END_ACTION|>"
    if turn.content:
        text += f"<|START_RESPONSE|>{turn.content}<|END_RESPONSE|>"
    return "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", text + "<|END_OF_TURN_TOKEN|>"


def _python_calls(turn: Turn) -> str:
    """Python-style calls (python-call-list): JSON values are valid call-list values."""
    calls = [
        f"{name}("
        + ", ".join(f"{key}={_json(value, turn)}" for key, value in arguments.items())
        + ")"
        for name, arguments in turn.calls
    ]
    return "[" + ", ".join(calls) + "]"


def render_lfm2(turn: Turn) -> tuple[str, str]:
    text = _think(turn) + turn.content
    if turn.calls:
        text += "<|tool_call_start|>" + _python_calls(turn) + "<|tool_call_end|>"
    return "<|im_start|>assistant\n", text + "<|im_end|>"


def _render_pythonic(anchor: str, end: str) -> Callable[[Turn], tuple[str, str]]:
    """Llama 3.2 / Llama 4 / Gemma 3 pythonic: the whole turn is the call list, or the answer."""

    def render(turn: Turn) -> tuple[str, str]:
        return anchor, (_python_calls(turn) if turn.calls else turn.content) + end

    return render


def render_phi4_mini(turn: Turn) -> tuple[str, str]:
    text = turn.content
    for name, arguments in turn.calls:
        text += "<|tool_call|>" + _json({"name": name, "arguments": arguments}, turn) + "<|/tool_call|>"
    return "<|assistant|>", text + "<|end|>"


@dataclass(frozen=True)
class Format:
    render: Callable[[Turn], tuple[str, str]]
    # "json", "xml" (values are text), "gemma" (the JSON dialect) or "python" (python-call-list)
    arguments: str = "json"
    reasoning: bool = True
    prefill: bool = False  # the prompt may open the reasoning block
    content_with_calls: bool = True


FORMATS = {
    "qwen3": Format(lambda t: render_hermes(t, "<|im_start|>assistant\n"), prefill=True),
    "smollm3": Format(lambda t: render_hermes(t, "<|im_start|>assistant\n"), prefill=True),
    "ernie": Format(lambda t: render_hermes(t, "<|im_start|>assistant\n"), prefill=True),
    "hermes2_pro": Format(
        lambda t: render_hermes(t, "<|im_start|>assistant\n", reasoning=False), reasoning=False
    ),
    "qwen3_5": Format(lambda t: render_qwen_xml(t, True), "xml", prefill=True),
    "qwen3_coder": Format(lambda t: render_qwen_xml(t, False), "xml", reasoning=False),
    "glm4_5": Format(render_glm, "xml"),
    "minimax_m2": Format(render_minimax, "xml", prefill=True),
    "gpt_oss": Format(render_gpt_oss),
    "kimi_k2": Format(render_kimi),
    "deepseek_r1": Format(render_deepseek_r1, prefill=True),
    "deepseek_v3_1": Format(render_deepseek_v3_1),
    "gemma4": Format(render_gemma, "gemma"),
    "llama3_json": Format(render_llama, reasoning=False, content_with_calls=False),
    "ministral3": Format(render_ministral),
    "mistral_small_3_2": Format(render_mistral_small, reasoning=False),
    "mistral_nemo": Format(render_mistral_nemo, reasoning=False),
    "cohere_command_r7b": Format(render_cohere),
    "lfm2_5": Format(render_lfm2, "python"),
    "llama3_2_pythonic": Format(
        _render_pythonic("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
        "python",
        reasoning=False,
        content_with_calls=False,
    ),
    "llama4_pythonic": Format(
        _render_pythonic("<|header_start|>assistant<|header_end|>\n\n", "<|eot|>"),
        "python",
        reasoning=False,
        content_with_calls=False,
    ),
    "gemma3_pythonic": Format(
        _render_pythonic("<start_of_turn>model\n", "<end_of_turn>"),
        "python",
        reasoning=False,
        content_with_calls=False,
    ),
    "phi4_mini": Format(render_phi4_mini, reasoning=False),
}


def test_every_bundled_template_has_a_format():
    assert set(FORMATS) == set(template_names())


SCHEMA_TYPES = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
    dict: "object",
    list: "array",
}


def tools_for(calls: list[tuple[str, dict]]) -> list[dict]:
    """Schemas typed after the generated values, so text-valued formats get their types back."""
    tools = {}
    for name, arguments in calls:
        properties = {key: {"type": SCHEMA_TYPES[type(value)]} for key, value in arguments.items()}
        tools[name] = {
            "type": "function",
            "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
        }
    return list(tools.values())


@st.composite
def turns(draw, name: str) -> Turn:
    fmt = FORMATS[name]
    template = template_for(name)
    pieces = lookalikes(template)
    text = free_text(pieces)
    strings = st.one_of(st.text(TEXT_ALPHABET, max_size=10), text)
    keys = st.one_of(IDENTIFIERS, st.text(KEY_ALPHABET, max_size=6))
    if fmt.arguments == "gemma":
        strings = strings.map(
            lambda s: s.replace("|", "/")
        )  # a string cannot hold its own delimiter
        keys = IDENTIFIERS
    if fmt.arguments in ("xml", "python"):
        keys = IDENTIFIERS  # (python: keyword arguments are names)
    arguments = st.dictionaries(keys, json_values(strings, keys), max_size=4)
    calls = draw(st.lists(st.tuples(NAMES, arguments), max_size=1 if name == "llama3_json" else 3))
    reasoning = draw(st.none() | text) if fmt.reasoning else None
    content = draw(text) if (fmt.content_with_calls or not calls) else ""
    call_ids = [draw(st.sampled_from(["", "abc123XYZ", "k9k9k9k9k"])) for _ in calls]
    return Turn(
        reasoning,
        content,
        calls,
        fmt.prefill and draw(st.booleans()),
        draw(st.booleans()),
        call_ids,
    )


@pytest.mark.parametrize("name", sorted(FORMATS))
@given(data=st.data())
def test_bundled_templates_client_view_equals_message(name, data):
    template = template_for(name)
    turn = data.draw(turns(name), label="turn")
    prefix, text = FORMATS[name].render(turn)
    chunks = data.draw(chunkings(text), label="chunks")
    tools = tools_for(turn.calls) if data.draw(st.booleans(), label="with tools") else None
    note(f"prefix={prefix!r}\ntext={text!r}")
    run = run_stream(template, prefix, chunks, tools=tools, snapshots=True)
    view = client_view(run)
    assert_well_formed(view, run)
    assert_prefix_invariant(run)
    if run.adapter.errors:  # a look-alike completed a delimiter after all: the recovery path
        event("region failed to parse")
        return
    assert_view_is_message(view, run, template)
    # The calls the turn wrote are the calls the client sees.
    assert [name for _, name, _ in view["calls"]] == [name for name, _ in turn.calls]
    event(f"calls: {len(turn.calls)}")


@pytest.mark.parametrize("name", sorted(FORMATS))
@given(data=st.data())
def test_text_the_parser_read_first_gives_the_deltas_feed_gives(name, data):
    """The servers' path: each chunk to the parser's feed_text first, what it read to
    `OpenAIStream.read`, the rest to `feed`; the deltas and the message are feed's."""
    template = template_for(name)
    turn = data.draw(turns(name), label="turn")
    prefix, text = FORMATS[name].render(turn)
    chunks = data.draw(chunkings(text), label="chunks")
    tools = tools_for(turn.calls)
    expected = run_stream(template, prefix, chunks, tools=tools)
    parser = rtcompile.ResponseParser(template, prefix, tools=tools, errors="keep")
    adapter = OpenAIStream(parser, template, seed=0)
    deltas = list(adapter.initial_deltas)
    read = 0
    for chunk in chunks:
        taken = parser.feed_text(chunk)
        if taken is None:
            deltas += adapter.feed(chunk)
        else:
            read += 1
            deltas += adapter.read(*taken)
    deltas += adapter.finish()
    event(f"chunks read first: {'some' if read else 'none'}")
    assert deltas == expected.deltas
    assert adapter.message == expected.message and adapter.errors == expected.adapter.errors


# --------------------------------------------------------------------------------------------------
# Token ids: OpenAIStream over a token parser, differential against transformers' interpreter


def run_token_stream(name: str, prompt: list[int], chunks: list[list[int]], tools: Optional[list]) -> Run:
    parser = rtcompile.ResponseParser(
        template_for(name), prompt, tools=tools, tokenizer=token_serving.tokenizer_for(name), errors="keep"
    )
    adapter = OpenAIStream(parser, seed=0)
    run = Run(adapter, list(adapter.initial_deltas))
    for chunk in chunks:
        run.deltas += adapter.feed(chunk)
    run.deltas += adapter.finish()
    return run


def interpreter_token_run(name: str, prompt: list[int], chunks: list[list[int]], tools: Optional[list]) -> Any:
    """(message, events) of transformers' interpreter fed the same ids, or the exception it raised."""
    return token_serving.interpreter_run(template_for(name), prompt, chunks, tools, token_serving.tokenizer_for(name))


@pytest.mark.parametrize("name", sorted(FORMATS))
@given(data=st.data())
def test_token_ids_client_view_is_the_interpreters_message(name, data):
    """The ids a model generates (each control token as its id, or spelled out with ordinary tokens,
    which makes it text), fed one or several at a time: the client's view is the parser's final
    message, and that message is the interpreter's, fed the same ids."""
    template = template_for(name)
    turn = data.draw(turns(name), label="turn")
    prefix, text = FORMATS[name].render(turn)
    ids = data.draw(token_serving.generation_ids(name, text), label="ids")
    chunks = data.draw(token_serving.id_chunks(ids), label="chunks")
    tools = tools_for(turn.calls) if data.draw(st.booleans(), label="with tools") else None
    prompt = token_serving.encode(name, prefix)
    note(f"prefix={prefix!r}\ntext={text!r}\nchunks={chunks!r}")
    expected = interpreter_token_run(name, prompt, chunks, tools)
    try:
        run = run_token_stream(name, prompt, chunks, tools)
    except Exception as error:  # (errors="keep" raises only what the interpreter raises at its end)
        assert isinstance(expected, Exception) and type(error) is type(expected), (error, expected)
        return
    view = client_view(run)
    assert_well_formed(view, run)
    if isinstance(expected, Exception):  # a region the interpreter refuses: kept, with its text
        assert run.adapter.errors, expected
        event("a region failed to parse")
        return
    assert not run.adapter.errors
    message, events = expected
    closes: dict[str, int] = {}
    for item in events:
        if item["type"] == "region_close":
            closes[item["field"]] = closes.get(item["field"], 0) + 1
    if any(count > 1 and not template["fields"][field].get("repeats") for field, count in closes.items()):
        # errors="keep" joins a field written twice where the interpreter keeps the last value
        event("a field written by several regions")
        return
    assert run.message == message
    assert_view_is_message(view, run, template)
    event("spelled out" if run.adapter.parser.defused else "ids only")


def test_token_ids_a_spelled_out_delimiter_is_text_in_the_deltas():
    """qwen3: `</think>` spelled out with ordinary tokens inside the reasoning, `<tool_call>` inside
    the content: both stay text, as in transformers' token-id mode; generated as ids, they are
    delimiters."""
    real = "<think>\nplan\n</think>\n\nDone.<|im_end|>"
    ids = token_serving.encode("qwen3", "<think>\nI write ")
    ids += token_serving.spelled("</think>", [2])
    ids += token_serving.encode("qwen3", " here\n</think>\n\nSee ")
    ids += token_serving.spelled("<tool_call>")
    ids += token_serving.encode("qwen3", " as text.<|im_end|>")
    prompt = token_serving.encode("qwen3", "<|im_start|>assistant\n")
    run = run_token_stream("qwen3", prompt, [[token_id] for token_id in ids], None)
    view = accumulate_deltas(run.deltas)
    assert view == {
        "role": "assistant",
        "reasoning_content": "I write </think> here",
        "content": "See <tool_call> as text.",
    }
    assert run.adapter.parser.defused
    run = run_token_stream("qwen3", prompt, [token_serving.encode("qwen3", real)], None)
    assert accumulate_deltas(run.deltas) == {"role": "assistant", "reasoning_content": "plan", "content": "Done."}
    assert not run.adapter.parser.defused


def test_token_ids_arguments_after_a_spelled_out_control_token_go_out_at_the_close():
    """glm4_5 writes arguments as tags of control tokens (`<arg_key>`, `<arg_value>`). Spelled out
    with ordinary tokens they are text, which a region's reported text (its markers stripped, as
    the interpreter reports it) no longer shows: once the model spelled a control token out, a
    call's arguments go out at its close, from the parsed value, never from tags that were text."""
    prompt = token_serving.encode("glm4_5", "<|assistant|>")
    tags = "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    generated = token_serving.encode("glm4_5", "<tool_call>get_weather\n" + tags + "</tool_call><|observation|>")
    spelled = token_serving.encode("glm4_5", "<tool_call>get_weather\n")
    spelled += token_serving.spelled_out("glm4_5", tags) + token_serving.encode("glm4_5", "</tool_call><|observation|>")
    for ids, arguments in ((generated, {"city": "Paris"}), (spelled, {})):
        chunks = [[token_id] for token_id in ids]
        run = run_token_stream("glm4_5", prompt, chunks, None)
        view = client_view(run)
        assert_view_is_message(view, run, template_for("glm4_5"))
        assert run.message == interpreter_token_run("glm4_5", prompt, chunks, None)[0]
        assert [json.loads(call[2]) for call in view["calls"]] == [arguments]


def test_token_ids_an_empty_feed_between_two_loses_nothing():
    """llama3_json holds `s` back after `{"name": "s` (it may start the call's delimiter); an empty
    feed, then one id whose text the decoder knows (`ear`): the parser's text of the empty feed
    is read before the id's, and nothing is lost."""
    prompt = token_serving.encode("llama3_json", "<|start_header_id|>assistant<|end_header_id|>\n\n")
    text = '{"name": "search_docs", "parameters": {}}<|eot_id|>'
    ids = token_serving.encode("llama3_json", text)
    run_token_stream("llama3_json", prompt, [ids], None)  # (every id seen once: known to the decoder)
    first = len(token_serving.encode("llama3_json", '{"name": "s'))
    chunks = [ids[:first], [], ids[first : first + 1], ids[first + 1 :]]
    assert token_serving.tokenizer_for("llama3_json").decode(chunks[2]) == "ear"
    run = run_token_stream("llama3_json", prompt, chunks, None)
    assert run.message == interpreter_token_run("llama3_json", prompt, chunks, None)[0]
    assert [call["function"]["name"] for call in run.message["tool_calls"]] == ["search_docs"]
    assert_view_is_message(client_view(run), run, template_for("llama3_json"))


def test_token_ids_a_str_fed_to_a_token_stream_is_refused():
    parser = rtcompile.ResponseParser(
        template_for("qwen3"), [], tokenizer=token_serving.tokenizer_for("qwen3"), errors="keep"
    )
    adapter = OpenAIStream(parser)
    with pytest.raises(TypeError, match="takes token ids"):
        adapter.feed("text")


# --------------------------------------------------------------------------------------------------
# Arguments stream: what is complete before a call's closing delimiter has already been sent

STREAMING_CALL = {
    "city": "Paris",
    "days": 3,
    "query": {"text": "rate limits", "tags": ["a", "b"]},
    "exact": True,
}


def _cut_before_call_end(name: str, text: str) -> int:
    """Where the last call's closing delimiter (and what follows) starts in the rendered text."""
    markers = {
        "qwen3": "\n</tool_call>",
        "smollm3": "\n</tool_call>",
        "ernie": "\n</tool_call>",
        "hermes2_pro": "\n</tool_call>",
        "qwen3_5": "</function>",
        "qwen3_coder": "</function>",
        "glm4_5": "</tool_call>",
        "minimax_m2": "</invoke>",
        "gpt_oss": "<|call|>",
        "kimi_k2": "<|tool_call_end|>",
        "deepseek_r1": "\n```<｜tool▁call▁end｜>",
        "deepseek_v3_1": "<｜tool▁call▁end｜>",
        "gemma4": "<tool_call|>",
        "llama3_json": "<|eot_id|>",
        "ministral3": "</s>",
        "mistral_small_3_2": "</s>",
        "mistral_nemo": "]</s>",
        "cohere_command_r7b": "]<|END_ACTION|>",
        "lfm2_5": "]<|tool_call_end|>",
        "llama3_2_pythonic": "]<|eot_id|>",
        "llama4_pythonic": "]<|eot|>",
        "gemma3_pythonic": "]<end_of_turn>",
        "phi4_mini": "<|/tool_call|>",
    }
    return text.rindex(markers[name])


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_arguments_stream_before_the_call_closes(name):
    """Feed a call character by character up to its closing delimiter: the name was announced and
    every argument is out; only the final "}" waits for the region's close."""
    template = template_for(name)
    arguments = dict(STREAMING_CALL)
    turn = Turn(None, "", [("get_weather", arguments)], False, True, ["abc123XYZ"])
    prefix, text = FORMATS[name].render(turn)
    cut = _cut_before_call_end(name, text)
    tools = tools_for(turn.calls)
    parser = rtcompile.ResponseParser(template, prefix, tools=tools)
    adapter = OpenAIStream(parser, seed=1)
    deltas = list(adapter.initial_deltas)
    for character in text[:cut]:
        deltas += adapter.feed(character)
    so_far = accumulate_deltas(deltas)["tool_calls"]
    assert [call["function"]["name"] for call in so_far] == ["get_weather"]
    # xml formats: each text value is final at its closing tag, typed back by the tools' schemas.
    assert json.loads(so_far[0]["function"]["arguments"] + "}") == arguments
    for character in text[cut:]:
        deltas += adapter.feed(character)
    deltas += adapter.finish()
    assert (
        json.loads(accumulate_deltas(deltas)["tool_calls"][0]["function"]["arguments"]) == arguments
    )
    assert adapter.divergences == []


def test_name_is_announced_as_soon_as_known():
    template = template_for("qwen3")
    parser = rtcompile.ResponseParser(template, "")
    adapter = OpenAIStream(parser, seed=3)
    assert adapter.feed('<tool_call>\n{"name": "get_wea') == []
    (delta,) = adapter.feed('ther", "arguments": {"city": "Par')
    assert delta["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": ""}
    (delta,) = adapter.feed('is", "days"')
    assert delta["tool_calls"][0]["function"] == {"arguments": '{"city": "Paris"'}
    assert adapter.feed(": 3") == []  # a number may go on: it is complete at the next , or }
    (delta,) = adapter.feed("}}\n</tool_call>")
    assert delta["tool_calls"][0]["function"] == {"arguments": ', "days": 3}'}


def test_name_from_an_open_pattern_capture_goes_out_when_the_region_opens():
    template = template_for("qwen3_5")
    parser = rtcompile.ResponseParser(template, "")
    adapter = OpenAIStream(parser, seed=3)
    deltas = adapter.feed("<tool_call>\n<function=get_weather>\n<parameter=city")
    assert accumulate_deltas(deltas)["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": "",
    }


# --------------------------------------------------------------------------------------------------
# Simple generated templates: the transform shapes, parsers and dialects the adapter streams


@dataclass
class Shape:
    """A tool-call field and how to write one call for it."""

    spec: dict
    render: Callable[
        [list[tuple[str, dict, str]]], str
    ]  # calls (name, arguments, id) -> region texts
    arguments: str = "json"


def _shapes(open_tag: str, close_tag: str, draw) -> Shape:
    dialect = {"unquoted_keys": True, "string_delims": [["<s>", "</s>"]]}
    kind = draw(
        st.sampled_from(
            [
                "function_content",
                "named",
                "named_xml",
                "named_kv",
                "each",
                "llama",
                "with_id",
                "dialect",
                "nested_path",
                "python_calls",
            ]
        )
    )
    escaped_open = re.escape(open_tag)
    if kind == "function_content":
        return Shape(
            {
                "open": open_tag,
                "close": close_tag,
                "repeats": True,
                "content": "json",
                "transform": {"type": "function", "function": "{content}"},
            },
            lambda calls: "".join(
                open_tag + json.dumps({"name": n, "arguments": a}) + close_tag for n, a, _ in calls
            ),
        )
    if kind == "named":
        return Shape(
            {
                "open_pattern": escaped_open + r"(?P<name>\w+)>",
                "close": close_tag,
                "repeats": True,
                "content": "json",
                "transform": {
                    "type": "function",
                    "function": {"name": "{name}", "arguments": "{content}"},
                },
            },
            lambda calls: "".join(f"{open_tag}{n}>{json.dumps(a)}{close_tag}" for n, a, _ in calls),
        )
    if kind == "named_xml":
        return Shape(
            {
                "open_pattern": escaped_open + r"(?P<name>\w+)>",
                "close": close_tag,
                "repeats": True,
                "content": "xml-inline",
                "content_args": {
                    "tag_pattern": r"<(?P<key>\w+)>(?P<value>.*?)</(?P=key)>",
                    "merge_duplicates": draw(st.booleans()),
                },
                "transform": {
                    "type": "function",
                    "function": {"name": "{name}", "arguments": "{content}"},
                },
            },
            lambda calls: "".join(
                f"{open_tag}{n}>"
                + "".join(f"\n<{k}>{_xml_value(v)}</{k}>" for k, v in a.items())
                + close_tag
                for n, a, _ in calls
            ),
            "xml",
        )
    if kind == "named_kv":
        return Shape(
            {
                "open_pattern": escaped_open + r"(?P<name>\w+)>",
                "close": close_tag,
                "repeats": True,
                "content": "kv-lines",
                "content_args": {"kv_sep": "="},
                "transform": {
                    "type": "function",
                    "function": {"name": "{name}", "arguments": "{content}"},
                },
            },
            lambda calls: "".join(
                f"{open_tag}{n}>"
                + "".join(f"\n{k}={json.dumps(v)}" for k, v in a.items())
                + "\n"
                + close_tag
                for n, a, _ in calls
            ),
            "kv",
        )
    if kind == "each":
        return Shape(
            {
                "open": open_tag,
                "close": close_tag,
                "content": "json",
                "transform_each": True,
                "transform": {
                    "type": "function",
                    "function": {"name": "{name}", "arguments": "{arguments}"},
                },
            },
            lambda calls: (
                (
                    open_tag
                    + json.dumps([{"name": n, "arguments": a} for n, a, _ in calls])
                    + close_tag
                )
                if calls
                else ""
            ),
        )
    if kind == "llama":
        return Shape(
            {
                "open": open_tag,
                "close": close_tag,
                "repeats": True,
                "content": "json",
                "transform": {
                    "type": "function",
                    "function": {"name": "{content.name}", "arguments": "{content.parameters}"},
                },
            },
            lambda calls: "".join(
                open_tag + json.dumps({"parameters": a, "name": n}) + close_tag for n, a, _ in calls
            ),
        )
    if kind == "with_id":
        return Shape(
            {
                "open_pattern": escaped_open + r"(?P<name>\w+):(?P<id>\w+)>",
                "close": close_tag,
                "repeats": True,
                "content": "json",
                "transform": {
                    "id": "{id}",
                    "type": "function",
                    "function": {"name": "{name}", "arguments": "{content}"},
                },
            },
            lambda calls: "".join(
                f"{open_tag}{n}:{i or 'x1'}>{json.dumps(a)}{close_tag}" for n, a, i in calls
            ),
        )
    if kind == "python_calls":
        layout = draw(st.randoms(use_true_random=False))
        return Shape(
            {
                "open": open_tag,
                "close": close_tag,
                "content": "python-call-list",
                "transform_each": True,
                "transform": {
                    "type": "function",
                    "function": {"name": "{name}", "arguments": "{arguments}"},
                },
            },
            lambda calls: (open_tag + _python_list(calls, layout) + close_tag) if calls else "",
            "python",
        )
    if kind == "nested_path":
        return Shape(
            {
                "open": open_tag,
                "close": close_tag,
                "repeats": True,
                "content": "json",
                "transform": {
                    "id": "{content.call.id}",
                    "type": "function",
                    "function": "{content.call}",
                },
            },
            lambda calls: "".join(
                open_tag
                + json.dumps({"call": {"id": i or "id0", "name": n, "arguments": a}})
                + close_tag
                for n, a, i in calls
            ),
        )
    return Shape(
        {
            "open_pattern": escaped_open + r"(?P<name>\w+)>",
            "close": close_tag,
            "repeats": True,
            "content": "json",
            "content_args": dialect,
            "transform": {
                "type": "function",
                "function": {"name": "{name}", "arguments": "{content}"},
            },
        },
        lambda calls: "".join(f"{open_tag}{n}>{_dialect(a)}{close_tag}" for n, a, _ in calls),
        "dialect",
    )


def _python_list(calls: list[tuple[str, dict, str]], layout) -> str:
    """A python-call-list text in every spelling the grammar allows, laid out by `layout` (a
    Random): whitespace between tokens, both quotes, escapes and surrogate-pair escapes,
    True/true and None/null."""

    def space() -> str:
        return layout.choice(["", "", " ", "\n", "\t ", "\r\n"])

    def string(text: str) -> str:
        quote = layout.choice("'\"")
        out = []
        for char in text:
            if char in (quote, "\\"):
                out.append("\\" + char)
            elif char in "\n\r":
                out.append({"\n": "\\n", "\r": "\\r"}[char])
            elif ord(char) > 0xFFFF and layout.random() < 0.5:
                code = ord(char) - 0x10000
                out.append("\\u%04x\\u%04X" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)))
            elif ord(char) <= 0xFFFF and layout.random() < 0.1:
                out.append("\\u%04x" % ord(char))
            else:
                out.append(char)
        return quote + "".join(out) + quote

    def value(item: Any) -> str:
        if item is None:
            return layout.choice(["None", "null"])
        if item is True or item is False:
            return layout.choice(["True", "true"] if item else ["False", "false"])
        if isinstance(item, str):
            return string(item)
        if isinstance(item, list):
            return "[" + ",".join(space() + value(v) + space() for v in item) + "]"
        if isinstance(item, dict):
            pairs = (space() + string(k) + space() + ":" + space() + value(v) for k, v in item.items())
            return "{" + ",".join(pairs) + space() + "}"
        return json.dumps(item)

    rendered = []
    for name, arguments, _ in calls:
        members = ",".join(f"{space()}{k}{space()}={space()}{value(v)}{space()}" for k, v in arguments.items())
        rendered.append(f"{space()}{name}{space()}({members}){space()}")
    return space() + "[" + ",".join(rendered) + "]" + space()


def _dialect(value: Any) -> str:
    if isinstance(value, str):
        return "<s>" + value + "</s>"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_dialect(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dialect(v) for v in value) + "]"
    return json.dumps(value)


@st.composite
def generated_cases(draw):
    open_tag, close_tag = draw(
        st.sampled_from([("<call=", "</call>"), ("[C", "[/C]"), ("%%call:", " %%")])
    )
    shape = _shapes(open_tag, close_tag, draw)
    reasoning_name = draw(st.sampled_from(["reasoning_content", "thinking"]))
    strip = draw(st.booleans())
    template = {
        "start_anchor": "<a>",
        "fields": {
            reasoning_name: {
                "open": "<r>",
                "close": "</r>",
                "content": "text",
                "content_args": {"strip": strip},
            },
            "tool_calls": shape.spec,
            "content": {"close": "<end>"},
        },
    }
    pieces = ["<r", "</r", "<en", open_tag[:-1], close_tag[:-1]]
    text = free_text(pieces)
    strings = st.text('abc xyz\n"\\{}[],:é😀', max_size=8)
    if shape.arguments == "dialect":
        strings = st.text('abc xyz\n"\\{}[],:é😀', max_size=8)  # no "<": cannot form the delimiter
    if shape.arguments in ("xml", "kv"):
        strings = st.text("abcxyz 0123é😀", max_size=8).map(str.strip)  # one line, no tag text
    keys = IDENTIFIERS
    values = json_values(strings, keys)
    names = NAMES.filter(str.isidentifier)
    if shape.arguments == "python":  # call names may have dots and dashes there
        names = names | st.sampled_from(["ns.get-weather", "a.b.c", "x-y_z"])
    calls = draw(
        st.lists(
            st.tuples(
                names,
                st.dictionaries(keys, values, max_size=4),
                st.sampled_from(["", "c1", "zz9"]),
            ),
            max_size=3,
        )
    )
    reasoning = draw(st.none() | text)
    content = draw(text)
    output = (
        (f"<r>{reasoning}</r>" if reasoning is not None else "")
        + content
        + shape.render(calls)
        + "<end>"
    )
    prefix = draw(st.sampled_from(["", "<a>", "earlier turn<a>"]))
    tools = tools_for([(n, a) for n, a, _ in calls]) if draw(st.booleans()) else None
    return template, prefix, output, draw(chunkings(output)), tools, [n for n, _, _ in calls]


@given(case=generated_cases())
def test_generated_templates_client_view_equals_message(case):
    template, prefix, text, chunks, tools, names = case
    note(f"template={template!r}\ntext={text!r}")
    run = run_stream(template, prefix, chunks, tools=tools, snapshots=True)
    view = client_view(run)
    assert_well_formed(view, run)
    assert_prefix_invariant(run)
    assert run.adapter.errors == []
    assert_view_is_message(view, run, template)
    assert [name for _, name, _ in view["calls"]] == names


# --------------------------------------------------------------------------------------------------
# The differential suite's random templates: chunking never changes the client's view


@dataclass
class RandomCase:
    template: dict
    prefix: str
    chunks: list[str]
    tools: list

    @property
    def text(self) -> str:
        return "".join(self.chunks)


def _tool_field(template: dict) -> Optional[str]:
    for name, spec in template["fields"].items():
        transform = spec.get("transform")
        if isinstance(transform, dict) and "function" in transform:
            return name
    return None


def _parser_accepts(case: "RandomCase") -> bool:
    """Whether the parser itself (errors="keep") gets through this output, streamed and whole:
    templates can still fail at finalize (a required field missing, a join over non-strings, ...).
    """
    try:
        for pieces in (case.chunks, [case.text]):
            parser = rtcompile.ResponseParser(
                case.template, case.prefix, tools=case.tools, errors="keep"
            )
            for piece in pieces:
                parser.feed(piece)
            parser.finalize()
    except Exception:
        return False
    return True


def _adapter_options(tool_field: Optional[str]) -> dict:
    return {
        "tool_calls_field": tool_field or "tool_calls",
        "content_field": "content" if tool_field != "content" else "-",
        "reasoning_field": "reasoning_content" if tool_field != "reasoning_content" else "-",
    }


def _region_counts(template, prefix, chunks, tools) -> dict[str, int]:
    """How many regions of each field closed (on a separate parser, fed the same chunks)."""
    parser = rtcompile.ResponseParser(template, prefix, tools=tools, errors="keep")
    events = list(parser.initial_events)
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.finalize()[1]
    counts: dict[str, int] = {}
    for e in events:
        if e["type"] == "region_close":
            counts[e["field"]] = counts.get(e["field"], 0) + 1
    return counts


def _loaded(view: dict) -> dict:
    calls = view.get("tool_calls", [])
    for call in calls:
        json.loads(call["function"]["arguments"])  # valid JSON, whatever happened
    return {
        **view,
        "tool_calls": [
            (c["id"], c["function"]["name"], canonical(json.loads(c["function"]["arguments"])))
            for c in calls
        ],
    }


@given(data=st.data())
def test_random_templates_chunking_never_changes_the_view(data):
    plan = data.draw(template_plans(tool_call=True, valid_only=True), label="plan")
    template = copy.deepcopy(plan.template)
    try:
        rtcompile.load(template)
    except ValueError:
        assume(False)
    prefix = data.draw(prefixes(plan), label="prefix")
    assume(prefix is not None)
    text = data.draw(outputs(plan), label="text")
    case = RandomCase(
        template,
        prefix,
        data.draw(chunkings(text), label="chunks"),
        data.draw(tools_lists, label="tools"),
    )
    assume(_parser_accepts(case))
    tool_field = _tool_field(case.template)
    options = _adapter_options(tool_field)
    runs = [
        run_stream(case.template, case.prefix, chunks, tools=case.tools, **options)
        for chunks in (case.chunks, [case.text])
    ]
    views = [_loaded(accumulate_deltas(run.deltas)) for run in runs]
    # (what the parser holds back at the prompt's end: text the stream cuts, the prompt's)
    prompt_parser = rtcompile.ResponseParser(case.template, case.prefix, tools=case.tools, errors="keep")
    held = prompt_parser.unread_text
    if any(run.adapter.errors for run in runs):
        # Whether a broken region's call was announced before it broke depends on when its name
        # was known: only well-formedness (above) and the raw text (below) are chunking-invariant.
        event("a region failed to parse")
        for run, view in zip(runs, views):
            for error in run.adapter.errors:
                assert error["raw"] in view.get(error["sent_as"], "")
        return
    if runs[0].message == runs[1].message:
        assert views[0] == views[1]
    else:  # some templates parse differently by chunking (the interpreter does the same)
        event("the parser's message depends on the chunking")
    # Where the final message is unambiguous, the view is the message.
    for run, view, chunks in zip(runs, views, (case.chunks, [case.text])):
        counts = _region_counts(case.template, case.prefix, chunks, case.tools)
        # errors="keep" joins the texts of a text field written twice (and so does the stream);
        # a text field whose transform builds another value keeps only its last value, which an
        # append-only stream cannot follow once the first was sent.
        single = all(
            counts.get(name, 0) <= 1
            or spec.get("repeats")
            or (
                name != tool_field
                and spec.get("content", "text") == "text"
                and spec.get("transform") in (None, "{content}")
            )
            for name, spec in case.template["fields"].items()
            if name in ("content", "reasoning_content", tool_field)
        )
        if not single:
            event("a field written by several regions")
            continue
        event("unambiguous")
        message = run.message
        if tool_field != "content":
            assert _sent_of(text_of(message.get("content")), view.get("content", ""), held)
        if tool_field != "reasoning_content":
            text = text_of(message.get("reasoning_content"))
            assert _sent_of(text, view.get("reasoning_content", ""), held)
        final_calls = message_tool_calls(message, case.template, tool_field or "tool_calls")
        assert [
            (c["function"]["name"], canonical(c["function"].get("arguments", {})))
            for c in final_calls
        ] == [(name, arguments) for _, name, arguments in view["tool_calls"]]
        assert run.adapter.divergences == []


@pytest.mark.parametrize("chunked", [False, True])
def test_a_name_the_closer_captures_too_goes_out_at_the_close(chunked):
    """The opener and the closer both capture `name`: the closer's value is the call's name, so the
    name goes out at the close, not when the opener has matched."""
    template = {
        "fields": {
            "tool_calls": {
                "open_pattern": "<a>(?P<name>\\w+)>",
                "close_pattern": "<a>(?P<name>\\w+)<a>",
                "repeats": True,
                "content": "kv-lines",
                "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
            }
        },
        "start_anchor": "<|a|>\n",
    }
    text = "<a>ab><a>a<a><a>b>x: 1\n<a>c<a>"
    run = run_stream(template, "", list(text) if chunked else [text], tool_calls_field="tool_calls")
    names = [c["function"]["name"] for c in accumulate_deltas(run.deltas)["tool_calls"]]
    assert names == [c["function"]["name"] for c in run.message["tool_calls"]] == ["a", "c"]
    assert run.adapter.divergences == []


def _sent_of(text: str, sent: str, held: str) -> bool:
    """Whether `sent` is the message's `text`, but for the prompt's text held back at its end that
    the parser reported with the output's and the stream cut (all of it, or the part of it a
    delimiter did not consume): see test_prompt_text_held_back_at_the_prompts_end_is_not_sent_...
    below."""
    if text == sent:
        return True
    return text.endswith(sent) and held.startswith(text[: len(text) - len(sent)])


# --------------------------------------------------------------------------------------------------
# The official client, beyond accumulation


def test_strict_tools_get_parsed_arguments_from_the_official_client():
    """With strict tools, ChatCompletionStreamState partially parses the arguments after every
    chunk (jiter, partial mode) and validates them at the end: our prefixes are JSON it accepts."""
    template = template_for("qwen3")
    arguments = {"city": "Paris", "days": 3, "options": {"hourly": True, "fields": ["t", "w"]}}
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": '
        + json.dumps(arguments)
        + "}\n</tool_call><|im_end|>"
    )
    run = run_stream(template, "", list(text))
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "options": {
                        "type": "object",
                        "properties": {
                            "hourly": {"type": "boolean"},
                            "fields": {"type": "array", "items": {"type": "string"}},
                        },
                        "required": ["hourly", "fields"],
                        "additionalProperties": False,
                    },
                },
                "required": ["city", "days", "options"],
                "additionalProperties": False,
            },
        },
    }
    choice = official_client_choice(run.deltas, run.adapter.finish_reason, input_tools=[tool])
    (call,) = choice.message.tool_calls
    assert call.function.parsed_arguments == arguments
    assert choice.finish_reason == "tool_calls"


def test_chunks_validate_as_chat_completion_chunks_and_start_with_the_role():
    template = template_for("qwen3")
    run = run_stream(
        template, "<|im_start|>assistant\n<think>\n", ["Thinking.</think>Answer.<|im_end|>"]
    )
    assert run.deltas[0] == {"role": "assistant"}
    for delta in run.deltas:
        chunk = ChatCompletionChunk.model_validate(
            completion_chunk(delta, completion_id="c", model="m", created=0)
        )
        assert chunk.object == "chat.completion.chunk"
    view = client_view(run)
    assert view == {
        "content": "Answer.",
        "reasoning": "Thinking.",
        "calls": [],
        "finish_reason": "stop",
    }


# --------------------------------------------------------------------------------------------------
# Whitespace, ids, field names


def test_whitespace_is_stripped_like_the_final_message_across_chunk_boundaries():
    template = template_for("qwen3")
    text = "<think>\n \n  a b  \n\n c \n</think>\n\n  x  \n y \t<|im_end|>"
    for chunks in ([text], list(text), [text[:9], text[9:14], text[14:30], text[30:]]):
        run = run_stream(template, "", chunks)
        view = accumulate_deltas(run.deltas)
        assert view["reasoning_content"] == "a b  \n\n c" == run.message["reasoning_content"]
        assert view["content"] == "x  \n y" == run.message["content"]
        # No delta ever ends in held-back whitespace that the final value drops.
        assert all(not d.get("content", "x").endswith((" ", "\t")) for d in run.deltas)


def test_unstripped_text_fields_stream_raw():
    template = {
        "start_anchor": "<a>",
        "fields": {"content": {"content": "text", "content_args": {"strip": False}}},
    }
    run = run_stream(template, "", ["  a ", " b  "])
    assert accumulate_deltas(run.deltas)["content"] == "  a  b  " == run.message["content"]


def test_a_text_field_whose_transform_makes_another_value_sends_that_value():
    """Text with a transform that builds something else (a dict here) is not the text streamed so
    far: the field's value is sent at the close, as for structured parsers (found by hypothesis)."""
    call = {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}
    template = {
        "start_anchor": "<a>",
        "fields": {
            "content": {"open_pattern": r"<c=(?P<name>\w+)>", "close": "</c>", "transform": call},
            "reasoning_content": {"open": "<r>", "close": "</r>", "transform": "{content}"},
        },
    }
    for chunks in (["<r> why </r><c=f>x y</c>"], list("<r> why </r><c=f>x y</c>")):
        run = run_stream(template, "", chunks)
        view = accumulate_deltas(run.deltas)
        assert run.message["content"] == {"type": "function", "function": {"name": "f", "arguments": "x y"}}
        assert json.loads(view["content"]) == run.message["content"]
        assert view["reasoning_content"] == run.message["reasoning_content"] == "why"  # still streamed
        assert run.adapter.divergences == []
    streamed = run_stream(template, "", list("<r> why </r>"))
    assert len([d for d in streamed.deltas if d.get("reasoning_content")]) > 1  # piece by piece


def test_join_fields_stream_their_separator():
    template = {
        "start_anchor": "<a>",
        "fields": {"content": {"open": "<c>", "close": "</c>", "repeats": True, "join": "\n--\n"}},
    }
    run = run_stream(template, "", list("<c> a </c>x<c> </c><c>b</c>"))
    assert accumulate_deltas(run.deltas)["content"] == run.message["content"] == "a\n--\n\n--\nb"


def test_default_values_reach_the_stream():
    template = {
        "start_anchor": "<a>",
        "defaults": {"content": "(no answer)"},
        "fields": {"content": {"open": "<c>", "close": "</c>"}},
    }
    run = run_stream(template, "", ["noise"])
    assert accumulate_deltas(run.deltas)["content"] == "(no answer)" == run.message["content"]


def test_thinking_field_and_reasoning_key():
    template = {
        "start_anchor": "<a>",
        "fields": {"thinking": {"open": "<t>", "close": "</t>"}, "content": {}},
    }
    run = run_stream(template, "", ["<t>hm</t>ok"], reasoning_key="reasoning")
    assert accumulate_deltas(run.deltas) == {
        "role": "assistant",
        "reasoning": "hm",
        "content": "ok",
    }


def test_unseeded_call_ids_use_every_character_and_never_repeat():
    from rtcompile.integrations.openai_stream import _ID_CHARS, _random_call_id

    ids = [_random_call_id(0) for _ in range(2000)]
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", i) for i in ids) and len(set(ids)) == 2000
    # 48,000 characters: each of the 62 is expected about 774 times, so none may be missing
    assert set("".join(i[5:] for i in ids)) == set(_ID_CHARS)


def test_call_ids_seeded_random_captured_and_custom():
    template = template_for("qwen3")
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "g", "arguments": {}}</tool_call>'

    def ids(**options):
        return [
            c["id"]
            for c in accumulate_deltas(run_stream(template, "", [text], **options).deltas)[
                "tool_calls"
            ]
        ]

    assert ids(seed=5) == ids(seed=5) != ids(seed=6)
    unseeded = [
        c["id"]
        for c in accumulate_deltas(OpenAIStream(rtcompile.ResponseParser(template, "")).feed(text))[
            "tool_calls"
        ]
    ]
    assert (
        all(re.fullmatch(r"call_[A-Za-z0-9]{24}", i) for i in unseeded) and len(set(unseeded)) == 2
    )
    assert ids(call_id=lambda index: f"id-{index}") == ["id-0", "id-1"]
    first_seeded_id = ids(seed=1)[0]
    kimi = template_for("kimi_k2")
    text = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:7<|tool_call_argument_begin|>"
        '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>'
    )
    run = run_stream(kimi, "", list(text))
    assert (
        accumulate_deltas(run.deltas)["tool_calls"][0]["id"]
        == "functions.get_weather:7"
        == run.message["tool_calls"][0]["id"]
    )
    # An id-like capture the transform does not use is not read (it would depend on the chunking).
    capture_only = {
        "start_anchor": "<a>",
        "fields": {
            "tool_calls": {
                "open_pattern": r"<c (?P<call_id>\w+) (?P<name>\w+)>",
                "close": "</c>",
                "repeats": True,
                "content": "json",
                "transform": {
                    "type": "function",
                    "function": {"name": "{name}", "arguments": "{content}"},
                },
            }
        },
    }
    for chunks in (['<c abc f>{"x": 1}</c>'], ['<c abc f>{"x"', ": 1}</c>"]):
        run = run_stream(capture_only, "", chunks, seed=1)
        assert accumulate_deltas(run.deltas)["tool_calls"][0]["id"] == first_seeded_id


def test_template_is_found_on_generated_modules_and_checked_in_parsers():
    from rtcompile.generated import qwen3

    adapter = OpenAIStream(qwen3.ResponseParser(""))
    assert adapter.template == qwen3.TEMPLATE
    assert OpenAIStream(
        rtcompile.ResponseParser(template_for("gemma4"), "")
    ).template == template_for("gemma4")

    class Bare:
        initial_events: list = []

    with pytest.raises(TypeError, match="template="):
        OpenAIStream(Bare())


def test_tools_default_to_the_parsers_own():
    template = template_for("qwen3_5")
    tools = tools_for([("f", {"n": 1, "on": True})])
    text = "<tool_call>\n<function=f>\n<parameter=n>\n7\n</parameter>\n<parameter=on>\ntrue\n</parameter>\n"
    adapter = OpenAIStream(rtcompile.ResponseParser(template, "", tools=tools))
    deltas = adapter.feed(text)
    assert json.loads(
        accumulate_deltas(deltas)["tool_calls"][0]["function"]["arguments"] + "}"
    ) == {"n": 7, "on": True}


# --------------------------------------------------------------------------------------------------
# Reconciliation, broken and truncated calls


def test_duplicate_keys_follow_json_last_one_wins():
    template = template_for("qwen3")
    text = '<tool_call>{"name": "f", "arguments": {"a": 1, "b": 2, "a": 3}}</tool_call>'
    run = run_stream(template, "", list(text))
    arguments = accumulate_deltas(run.deltas)["tool_calls"][0]["function"]["arguments"]
    assert (
        json.loads(arguments)
        == {"a": 3, "b": 2}
        == run.message["tool_calls"][0]["function"]["arguments"]
    )
    assert run.adapter.divergences == []


def test_merged_duplicate_parameters_are_sent_again():
    template = {
        "start_anchor": "<a>",
        "fields": {
            "tool_calls": {
                "open_pattern": r"<call=(?P<name>\w+)>",
                "close": "</call>",
                "repeats": True,
                "content": "xml-inline",
                "content_args": {
                    "tag_pattern": r"<(?P<key>\w+)>(?P<value>.*?)</(?P=key)>",
                    "merge_duplicates": True,
                },
                "transform": {
                    "type": "function",
                    "function": {"name": "{name}", "arguments": "{content}"},
                },
            }
        },
    }
    text = "<call=f><a>1</a><b>x</b><a>2</a><a>3</a></call>"
    run = run_stream(template, "", list(text), tools=tools_for([("f", {"a": 1})]))
    arguments = accumulate_deltas(run.deltas)["tool_calls"][0]["function"]["arguments"]
    assert (
        json.loads(arguments)
        == {"a": [1, 2, 3], "b": "x"}
        == run.message["tool_calls"][0]["function"]["arguments"]
    )


def test_greedy_tag_patterns_wait_for_the_close():
    """A greedy pattern may still grow: nothing is sent until the region closes."""
    template = {
        "start_anchor": "<a>",
        "fields": {
            "tool_calls": {
                "open_pattern": r"<call=(?P<name>\w+)>",
                "close": "</call>",
                "repeats": True,
                "content": "xml-inline",
                "content_args": {"tag_pattern": r"<p (?P<key>\w+)>(?P<value>.*)</p>"},
                "transform": {
                    "type": "function",
                    "function": {"name": "{name}", "arguments": "{content}"},
                },
            }
        },
    }
    text = "<call=f><p a>1</p><p b>2</p></call>"
    run = run_stream(template, "", list(text))
    arguments = accumulate_deltas(run.deltas)["tool_calls"][0]["function"]["arguments"]
    assert (
        json.loads(arguments)
        == {"a": "1</p><p b>2"}
        == run.message["tool_calls"][0]["function"]["arguments"]
    )
    assert run.adapter.divergences == []


# A prompt that ends inside a possible delimiter: gemma4's reasoning opens with "<|channel>".
HELD_PREFIX = "<|turn>model\n<|chan"


@pytest.mark.parametrize(
    "chunks",
    [["nel"], ["nel", " is open", "<turn|>"], ["n", "el is open<turn|>"], list("nel is open<turn|>")],
)
def test_prompt_text_held_back_at_the_prompts_end_is_not_sent_as_output(chunks):
    """The parser holds the prompt's "<|chan" back (it may start a delimiter); the output shows it
    starts none, and the parser reports it as content with the output's text. It is the prompt's:
    the deltas carry only what the model wrote."""
    parser = rtcompile.ResponseParser(template_for("gemma4"), HELD_PREFIX, errors="keep")
    assert parser.unread_text == "<|chan"
    adapter = OpenAIStream(parser, seed=0)
    deltas = list(adapter.initial_deltas)
    for chunk in chunks:
        deltas += adapter.feed(chunk)
    deltas += adapter.finish()
    written = "".join(chunks).removesuffix("<turn|>")
    assert accumulate_deltas(deltas) == {"role": "assistant", "content": written}
    assert adapter.message["content"] == "<|chan" + written  # (the parser's message has it)
    assert adapter.divergences == []


def test_output_like_the_held_prompt_text_after_a_silent_close_is_sent():
    """deepseek_v3_1's prompt ends in "</think>", held back (it closes content, whose region never
    opened: a close that reports nothing); output that begins like it is the model's and is sent."""
    parser = rtcompile.ResponseParser(template_for("deepseek_v3_1"), "<｜Assistant｜></think>")
    assert parser.unread_text == "</think>"
    run_deltas = OpenAIStream(parser, seed=0)
    deltas = run_deltas.feed("</think <｜end▁of▁sentence｜>") + run_deltas.finish()
    assert accumulate_deltas(deltas)["content"] == "</think" == run_deltas.message["content"]


def test_prompt_text_held_back_that_the_output_completes_is_a_delimiter():
    parser = rtcompile.ResponseParser(template_for("gemma4"), HELD_PREFIX, errors="keep")
    adapter = OpenAIStream(parser, seed=0)
    deltas = list(adapter.initial_deltas)
    for chunk in ["nel>", "thought\nplan", "<channel|>", "Answer"]:
        deltas += adapter.feed(chunk)
    deltas += adapter.finish()
    assert accumulate_deltas(deltas) == {
        "role": "assistant",
        "reasoning_content": "plan",
        "content": "Answer",
    }


@pytest.mark.parametrize("steps", ["one id each", "bytes one by one", "all at once"])
def test_token_ids_prompt_text_held_back_at_the_prompts_end_is_not_sent_as_output(steps):
    """The same with ids: the prompt's `<|chan` (ordinary tokens) is held back; the output's ids,
    decoded, show it starts no delimiter (`é` split between two ids: a step that decodes to
    nothing yet); the deltas carry only what the model wrote, the message is the interpreter's."""
    tokenizer = token_serving.tokenizer_for("gemma4")
    prompt = token_serving.encode("gemma4", HELD_PREFIX)
    written = "nel is opén"
    if steps == "bytes one by one":
        ids = tokenizer_pool.ordinary_ids(token_serving.BASE, written, [], byte_wise=True)
    else:
        ids = token_serving.spelled(written)
    ids += [tokenizer.convert_tokens_to_ids("<turn|>")]
    chunks = [ids] if steps == "all at once" else [[token_id] for token_id in ids]
    parser = rtcompile.ResponseParser(template_for("gemma4"), prompt, tokenizer=tokenizer, errors="keep")
    assert parser.unread_text == "<|chan"
    run = run_token_stream("gemma4", prompt, chunks, None)
    assert accumulate_deltas(run.deltas) == {"role": "assistant", "content": written}
    assert run.message == interpreter_token_run("gemma4", prompt, chunks, None)[0]
    assert run.message["content"] == "<|chan" + written
    assert run.adapter.divergences == []


def test_token_ids_prompt_text_held_back_that_the_output_completes_is_a_delimiter():
    """`nel>` written with ordinary tokens after the prompt's `<|chan`: the interpreter's decoder
    flushes the prompt, so the text `<|channel>` is the opener, as it is here."""
    prompt = token_serving.encode("gemma4", HELD_PREFIX)
    ids = token_serving.spelled("nel>thought\nplan") + token_serving.encode("gemma4", "<channel|>Answer")
    chunks = [[token_id] for token_id in ids]
    run = run_token_stream("gemma4", prompt, chunks, None)
    assert accumulate_deltas(run.deltas) == {"role": "assistant", "reasoning_content": "plan", "content": "Answer"}
    assert run.message == interpreter_token_run("gemma4", prompt, chunks, None)[0]


def test_truncated_call_finishes_with_length_valid_json_and_the_raw_text():
    template = template_for("qwen3")
    text = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "cel'
    parser = rtcompile.ResponseParser(template, "", errors="keep")
    adapter = OpenAIStream(parser, seed=0)
    deltas = list(adapter.initial_deltas)
    for character in text:
        deltas += adapter.feed(character)
    deltas += adapter.finish(length=True)
    assert adapter.finish_reason == "length"
    choice = official_client_choice(deltas, adapter.finish_reason)
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {
        "city": "Paris",
        "days": 3,
    }  # complete members only
    raw = '\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "cel'
    assert choice.message.content == "Checking." + raw
    assert adapter.errors[0]["raw"] == raw and adapter.errors[0]["calls"] == [0]
    assert adapter.message["rtcompile_parse_errors"][0]["raw"] == raw


def test_malformed_call_keeps_its_text_and_later_calls_parse():
    template = template_for("qwen3")
    text = (
        '<tool_call>\n{"name": "f", "arguments": {"a": 1,}}\n</tool_call>\n'
        '<tool_call>\n{"name": "g", "arguments": {"b": 2}}\n</tool_call><|im_end|>'
    )
    run = run_stream(template, "", list(text))
    view = client_view(run)
    assert [(name, json.loads(arguments)) for _, name, arguments in view["calls"]] == [
        ("f", {"a": 1}),
        ("g", {"b": 2}),
    ]
    assert '{"name": "f", "arguments": {"a": 1,}}' in view["content"]
    assert view["finish_reason"] == "tool_calls"
    assert run.adapter.divergences == []


def test_strict_parsers_raise_through_the_adapter():
    template = template_for("qwen3")
    adapter = OpenAIStream(rtcompile.ResponseParser(template, ""))
    adapter.feed('<tool_call>{"name": "f", "arguments": {')
    with pytest.raises(RegionParseError):
        adapter.finish()


def test_a_field_written_twice_follows_the_parsers_rule():
    """errors="keep" joins two texts of a field without `repeats` with a blank line, and so does the
    stream. A strict parser keeps the last (the interpreter's rule): the stream has sent both, and
    reports it."""
    template = template_for("qwen3")
    text = 'Hello <tool_call>{"name": "f", "arguments": {}}</tool_call> more <tool_call>{"name": "g", "arguments": {}}</tool_call>  <|im_end|>'
    for chunks in ([text], list(text)):
        run = run_stream(template, "", chunks)
        assert accumulate_deltas(run.deltas)["content"] == "Hello\n\nmore" == run.message["content"]
        assert run.adapter.divergences == []
        run = run_stream(template, "", chunks, errors="strict")
        assert accumulate_deltas(run.deltas)["content"] == "Hellomore"
        assert run.message["content"] == "more"
        assert len(run.adapter.divergences) == 1 and "content" in run.adapter.divergences[0]


def test_unknown_transform_shapes_send_the_arguments_at_close():
    template = {
        "start_anchor": "<a>",
        "fields": {
            "tool_calls": {
                "open": "<c>",
                "close": "</c>",
                "repeats": True,
                "content": "json",
                "transform": {
                    "type": "function",
                    "function": {"name": "fixed", "arguments": {"wrapped": "{content}"}},
                },
            }
        },
    }
    adapter = OpenAIStream(rtcompile.ResponseParser(template, ""), seed=0)
    first = adapter.feed('<c>{"a": 1, "b": 2}')
    assert accumulate_deltas(first)["tool_calls"][0]["function"] == {
        "name": "fixed",
        "arguments": "",
    }
    rest = adapter.feed("</c>") + adapter.finish()
    assert json.loads(
        accumulate_deltas(first + rest)["tool_calls"][0]["function"]["arguments"]
    ) == {"wrapped": {"a": 1, "b": 2}}


# --------------------------------------------------------------------------------------------------
# Cost: incremental extraction is linear in the output


class _Counting:
    """Wraps a callable or pattern, adding up the length of the text it is given."""

    def __init__(self, inner):
        self.inner = inner
        self.chars = 0

    def __call__(self, text):
        self.chars += len(text)
        return self.inner(text)

    def search(self, text, pos=0, *args, **kwargs):
        self.chars += len(text) - pos
        return self.inner.search(text, pos, *args, **kwargs)

    def match(self, text, pos=0, *args, **kwargs):
        self.chars += len(text) - pos
        return self.inner.match(text, pos, *args, **kwargs)


def test_json_arguments_are_parsed_once_each(monkeypatch):
    """A long call streamed one character at a time: the JSON parser sees each character of the
    arguments about once (members are parsed when complete, never re-parsed)."""
    template = template_for("qwen3")
    arguments = {f"k{i}": "x" * 50 + '\\"}{' * 5 for i in range(200)}
    body = json.dumps({"name": "f", "arguments": arguments})
    counters = []
    real_init = calls.ToolRegion.__init__

    def counting_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.parse_json = _Counting(self.parse_json)
        counters.append(self.parse_json)

    monkeypatch.setattr(calls.ToolRegion, "__init__", counting_init)
    run = run_stream(template, "", list("<tool_call>" + body + "</tool_call>"))
    assert (
        json.loads(accumulate_deltas(run.deltas)["tool_calls"][0]["function"]["arguments"])
        == arguments
    )
    assert counters[0].chars <= 1.1 * len(body)


def test_xml_arguments_are_searched_a_bounded_number_of_times(monkeypatch):
    template = template_for("qwen3_5")
    value = "a < b and </parameter not yet " * 40
    body = "".join(f"<parameter=k{i}>\n{value}\n</parameter>\n" for i in range(30))
    text = "<tool_call>\n<function=f>\n" + body + "</function>\n</tool_call>"
    patterns = []
    real_init = serving_arguments.TagArguments.__init__

    def counting_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.pattern = _Counting(self.pattern)
        patterns.append(self.pattern)

    monkeypatch.setattr(serving_arguments.TagArguments, "__init__", counting_init)
    run = run_stream(template, "", list(text))
    assert (
        len(json.loads(accumulate_deltas(run.deltas)["tool_calls"][0]["function"]["arguments"]))
        == 30
    )
    # A few searches per parameter, each over that parameter's text: linear, not quadratic.
    assert patterns[0].chars <= 4 * len(body)


def test_the_adapter_loads_no_compiler_module():
    """Servers import the adapter at run time: like generated parsers, it needs the runtime only."""
    import subprocess
    import sys

    code = "import sys, json\nimport rtcompile.integrations.openai_stream\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = json.loads(out.stdout.splitlines()[-1])
    forbidden = (
        "jinja2",
        "black",
        "transformers",
        "openai",
        "rtcompile.api",
        "rtcompile.codegen",
        "rtcompile.frontend",
    )
    assert [m for m in modules if m.split(".")[0] in forbidden or m in forbidden] == []
    assert "rtcompile.integrations.openai_stream" in modules


_JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from('"\\\n\u2028'))
)
_JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5) | st.integers() | st.booleans() | st.none(), inner, max_size=4),
    max_leaves=12,
)


@given(_JSON_VALUES)
def test_arguments_are_encoded_as_json_dumps_encodes_them(value):
    """The encoder the deltas' arguments are written with (built once, no per-value set-up) writes
    exactly what json.dumps(..., ensure_ascii=False) writes, NaN and non-string keys included."""
    assert serving_arguments.to_json.__name__ == "to_json"  # (the kept C encoder was chosen)
    assert serving_arguments.to_json(value) == json.dumps(value, ensure_ascii=False)


def test_arguments_that_are_not_json_data_fail_as_json_dumps_fails():
    with pytest.raises(TypeError):
        serving_arguments.to_json({"a": object()})

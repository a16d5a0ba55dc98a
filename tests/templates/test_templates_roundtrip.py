"""Round trips between real chat templates and the bundled response templates.

A bundled response template is correct for a model when it undoes that model's chat template. For
every family we render assistant messages with the family's real chat template (kept byte for
byte in `template_cases/chat_templates/`, see the README there), split the render into the prompt
the model was given and the text it would have generated (up to and including its stop token),
and check that parsing the generation gives back the message we rendered: once on the whole
text and once streamed one character at a time.

Hand-written outputs in `template_cases/<template>.json` cover what no chat template renders:
prefills that open a reasoning block, generations cut off inside a region, and formats whose
template drops reasoning or tool calls from the history (SmolLM3, DeepSeek), writes calls in a
form the model does not (vLLM's pythonic example templates for Llama and Gemma 3: bare strings,
missing brackets or commas), or that have no chat template here at all (ERNIE).

Every check runs against two parser implementations: transformers' interpreter (the reference)
and rtcompile's compiled parsers (`rtcompile.parse_response` / `rtcompile.ResponseParser`).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from transformers.utils import chat_parsing
from transformers.utils.chat_template_utils import render_jinja_template

from rtcompile.library import template_for, template_names

CASES_DIR = Path(__file__).resolve().parents[1] / "template_cases"
CHAT_TEMPLATES_DIR = CASES_DIR / "chat_templates"
PARSERS = ("interpreter", "rtcompile")


# --------------------------------------------------------------------------------------------
# The two parser implementations under test


def _parser_api(parser: str) -> tuple[Callable[..., dict], type]:
    if parser == "interpreter":
        return chat_parsing.parse_response, chat_parsing.ResponseParser
    import rtcompile  # imported late: the interpreter half must run while rtcompile is built

    return rtcompile.parse_response, rtcompile.ResponseParser


def parse_whole(parser: str, template: dict, prefix: str, text: str, tools: list | None) -> dict:
    parse_response, _ = _parser_api(parser)
    return parse_response(text, template, prefix=prefix, tools=tools)


def parse_streamed(parser: str, template: dict, prefix: str, text: str, tools: list | None) -> dict:
    """Feed the generation one character at a time, the worst case for held-back delimiters."""
    _, response_parser = _parser_api(parser)
    stream = response_parser(template, prefix, tools=tools)
    for character in text:
        stream.feed(character)
    message, _ = stream.finalize()
    return message


def assert_parses_to(parser, template, prefix, text, expected, tools) -> None:
    assert parse_whole(parser, template, prefix, text, tools) == expected
    assert parse_streamed(parser, template, prefix, text, tools) == expected


# --------------------------------------------------------------------------------------------
# Tools and the assistant messages we render


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


# The schemas matter beyond the prompt: formats that write argument values as bare text
# (Qwen3.5/Qwen3-Coder, GLM, MiniMax) only get their types back through `tools=`.
TOOLS = [
    _tool(
        "get_weather",
        "Current weather for a city.",
        {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"},
        },
        ["city"],
    ),
    _tool(
        "search_docs",
        "Search the documentation.",
        {
            "query": {"type": "object", "description": "Structured query"},
            "limit": {"type": "integer"},
            "exact": {"type": "boolean"},
            "score": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            # `nullable` rather than a type list: Hermes 2 Pro's template recurses forever on
            # type lists.
            "cursor": {"type": "string", "nullable": True},
        },
        ["query"],
    ),
    _tool(
        "write_note",
        "Store a note.",
        {
            "title": {"type": "string"},
            "body": {"type": "string"},
            "ref": {"type": "string", "description": "Reference code, digits kept as text"},
        },
        ["title", "body"],
    ),
]


def function_call(name: str, arguments: dict) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


WEATHER_PARIS = function_call("get_weather", {"city": "Paris", "unit": "celsius"})
WEATHER_TOKYO = function_call("get_weather", {"city": "Tokyo", "days": 3})

NESTED_ARGUMENTS = {
    "query": {
        "text": "rate limits",
        "filters": [
            {"field": "year", "op": ">=", "value": 2020},
            {"field": "lang", "op": "in", "value": ["en", "de"]},
        ],
        "boost": {"title": 2.5, "recent": True},
    },
    "limit": 5,
    "exact": True,
    "score": 0.75,
    "tags": ["api", "limits"],
    "cursor": None,
}

# Pieces of delimiters that hold a streaming parser back until the next character shows they
# are not the real thing. Each template's own literal delimiters are added too (minus their
# last character), see `lookalike_text`.
GENERIC_LOOKALIKES = (
    "<tool_call",
    "</tool_call",
    "<think",
    "</think",
    "<|im_end|",
    "[TOOL_CALLS",
    "[/INST",
    "<|channel|",
    "<|start|",
    "<｜tool▁call",
    "<arg_key",
    "<invoke name=",
    "<parameter=",
    "<|tool_call_begin|",
    "<|START_ACTION|",
    "<turn|",
    "<|eot_id|",
    "[e~",
    "[THINK",
    "<|tool_call_start|",
    "<|tool_call|",
    "<|python_start|",
    "<|end|",
    "<|eot|",
)


def _literals(spec: Any) -> list[str]:
    if isinstance(spec, str):
        return [spec]
    return list(spec or [])


def lookalike_text(template_name: str, unrenderable: tuple[str, ...] = ()) -> str:
    """Delimiter look-alikes for one template, space-separated so none is complete."""
    template = template_for(template_name)
    pieces = set(GENERIC_LOOKALIKES)
    for spec in template["fields"].values():
        for literal in _literals(spec.get("open")) + _literals(spec.get("close")):
            if len(literal) > 1:
                pieces.add(literal[:-1])
    for anchor in _literals(template.get("start_anchor")):
        if len(anchor.rstrip()) > 1:
            pieces.add(anchor.rstrip()[:-1])
    # Some chat templates rewrite content holding their own markers; those cannot round-trip.
    pieces = {p for p in pieces if not any(bad in p for bad in unrenderable)}
    return " ".join(sorted(pieces))


def tricky_text(template_name: str, unrenderable: tuple[str, ...] = ()) -> str:
    return (
        'Ünïcödé ✓ 日本語 🚀 — "quotes", back\\slash, {"braces": [1, 2]}, tab\there; '
        f"look-alikes: {lookalike_text(template_name, unrenderable)} — the end."
    )


def tricky_body(template_name: str, unrenderable: tuple[str, ...] = ()) -> str:
    return 'He said "hi" \\ {not: json} [x]\nsecond line\ttab, ' + lookalike_text(
        template_name, unrenderable
    )


def tricky_call(template_name: str, unrenderable: tuple[str, ...] = ()) -> dict:
    body = tricky_body(template_name, unrenderable)
    return function_call(
        "write_note", {"title": "Ünïcödé ✓ 日本語 🚀", "body": body, "ref": "0042"}
    )


def canonical_message(case: str, template_name: str, family: "Family") -> dict:
    """The message a case renders, in the shape the parser should give back."""
    nested = dict(NESTED_ARGUMENTS)
    if not family.renders_null:
        del nested["cursor"]
    messages = {
        "answer": {"content": "The capital of France is Paris."},
        "reasoning_answer": {
            "reasoning_content": "The user asks for a capital.\nFrance → Paris, no tools needed.",
            "content": "It is Paris.",
        },
        "one_call": {"tool_calls": [WEATHER_PARIS]},
        "reasoning_call": {
            "reasoning_content": "I need live data, so I will call the weather tool.",
            "tool_calls": [WEATHER_PARIS],
        },
        "content_call": {
            "content": "Let me check the weather first.",
            "tool_calls": [WEATHER_PARIS],
        },
        "parallel_calls": {"tool_calls": [WEATHER_PARIS, WEATHER_TOKYO]},
        "nested_arguments": {"tool_calls": [function_call("search_docs", nested)]},
        "tricky_answer": {"content": tricky_text(template_name, family.unrenderable)},
        "tricky_call": {"tool_calls": [tricky_call(template_name, family.unrenderable)]},
        # Calls of one argument each, for a chat template that drops the commas between
        # arguments (Gemma 3 pythonic); the values are as hard as those of the cases above.
        "one_argument_call": {"tool_calls": [function_call("get_weather", {"city": "Paris"})]},
        "one_argument_parallel_calls": {
            "tool_calls": [
                function_call("get_weather", {"city": "Tokyo"}),
                function_call("search_docs", {"query": NESTED_ARGUMENTS["query"]}),
            ]
        },
        "one_argument_tricky_call": {
            "tool_calls": [
                function_call(
                    "write_note", {"body": tricky_body(template_name, family.unrenderable)}
                )
            ]
        },
    }
    return {"role": "assistant", **copy.deepcopy(messages[case])}


ALL_CASES = (
    "answer",
    "reasoning_answer",
    "one_call",
    "reasoning_call",
    "content_call",
    "parallel_calls",
    "nested_arguments",
    "tricky_answer",
    "tricky_call",
)
NO_REASONING = tuple(c for c in ALL_CASES if "reasoning" not in c)
ONE_ARGUMENT_CALLS = (
    "one_argument_call",
    "one_argument_parallel_calls",
    "one_argument_tricky_call",
)
ALL_SHAPES = ("single_turn", "multi_turn", "after_tool_result")


# --------------------------------------------------------------------------------------------
# How each chat template wants its messages, and what comes back


@dataclass(frozen=True)
class Family:
    """One chat template (with its switches) checked against one bundled response template.

    `prepare(message, number)` turns a canonical message into what the chat template reads
    (argument strings, call ids, thinking chunks, ...); `number` tells the messages of one
    conversation apart (0 and 1 for history turns, 9 for the rendered turn) so call ids never
    clash. `expect` turns a canonical message into what the parser should return (ids the
    format carries). Cases the chat template cannot render faithfully are left out of `cases`
    (or `excluded` for one conversation shape) and covered by the hand-written outputs instead.
    """

    template: str
    chat_template: str
    cases: tuple[str, ...]
    stop_tokens: tuple[str, ...]
    render_kwargs: dict = field(default_factory=dict)
    excluded: frozenset = frozenset()  # (case, shape) pairs the chat template mangles
    prepare: Callable[[dict, int], dict] | None = None
    expect: Callable[[dict], dict] | None = None
    # Where the finished turn does not start like the generation prompt (the prompt prefills
    # something the finished turn does not contain), the split falls back to the last of these.
    turn_markers: tuple[str, ...] = ()
    # Text the model writes to end a turn when the chat template renders no stop token.
    missing_end: Callable[[dict], str] | None = None
    renders_null: bool = True
    unrenderable: tuple[str, ...] = ()
    tool_result_id: Callable[[int], str] = lambda index: f"call_{index}"


def _with_content(message: dict, empty: Any) -> dict:
    """Chat templates disagree on how a turn without content must look: "", None or absent."""
    message = copy.deepcopy(message)
    if not message.get("content"):
        if empty == "absent":
            message.pop("content", None)
        else:
            message["content"] = empty
    return message


def _with_call_ids(message: dict, make_id: Callable[[int, dict], str]) -> dict:
    message = copy.deepcopy(message)
    for index, call in enumerate(message.get("tool_calls", [])):
        call["id"] = make_id(index, call)
    return message


def _arguments_as_json_strings(message: dict) -> dict:
    message = copy.deepcopy(message)
    for call in message.get("tool_calls", []):
        call["function"]["arguments"] = json.dumps(
            call["function"]["arguments"], ensure_ascii=False
        )
    return message


def _mistral_id(number: int) -> str:
    return f"callid{number:03d}"  # Mistral templates insist on 9 alphanumeric characters


def _kimi_id(index: int, call: dict) -> str:
    return f"functions.{call['function']['name']}:{index}"


def _expected_with_ids(make_id: Callable[[int, dict], str]) -> Callable[[dict], dict]:
    """For formats whose calls carry an id, the parsed call has it as its first key."""

    def expect(message: dict) -> dict:
        message = copy.deepcopy(message)
        if "tool_calls" in message:
            message["tool_calls"] = [
                {"id": make_id(index, call), **call}
                for index, call in enumerate(message["tool_calls"])
            ]
        return message

    return expect


def _ministral_chunks(message: dict, index: int) -> dict:
    """Ministral reads reasoning only from a {'type': 'thinking'} content chunk."""
    message = copy.deepcopy(message)
    reasoning = message.pop("reasoning_content", None)
    if reasoning is not None:
        chunks = [{"type": "thinking", "thinking": reasoning}]
        if message.get("content"):
            chunks.append({"type": "text", "text": message["content"]})
        message["content"] = chunks
    return message


def _cohere_plan(message: dict, index: int) -> dict:
    """Command R7B writes a tool-call turn's plan from `tool_plan` and drops its content."""
    message = copy.deepcopy(message)
    reasoning = message.pop("reasoning_content", None)
    if message.get("tool_calls"):
        message["tool_plan"] = reasoning or ""
        message = _with_call_ids(message, lambda i, call: f"call_{index}_{i}")
    return message


def _quoted_string_arguments(message: dict, index: int) -> dict:
    """The Llama pythonic example templates print each argument with `"%s"|format`: a string
    comes out bare (`city=Paris`), which is not what the model writes. Handing them the string
    already written as a literal (`"Paris"`) renders the calls the way the model writes them;
    other values print as Python's repr (`True`, `None`, `{'k': 'v'}`), which the model writes too.
    """
    message = _with_content(message, "")
    for call in message.get("tool_calls", []):
        arguments = call["function"]["arguments"]
        for key, value in arguments.items():
            if isinstance(value, str):
                arguments[key] = json.dumps(value, ensure_ascii=False)
    return message


def _glm_end(message: dict) -> str:
    """GLM has no end-of-turn token: the model stops at the next turn's role token."""
    return "<|observation|>" if message.get("tool_calls") else "<|user|>"


FAMILIES: dict[str, Family] = {
    "qwen3": Family(
        template="qwen3",
        chat_template="qwen3.jinja",
        cases=ALL_CASES,
        stop_tokens=("<|im_end|>",),
        prepare=lambda m, i: _with_content(m, ""),
    ),
    "qwen3_no_thinking": Family(
        template="qwen3",
        chat_template="qwen3.jinja",
        cases=NO_REASONING,
        stop_tokens=("<|im_end|>",),
        render_kwargs={"enable_thinking": False},
        prepare=lambda m, i: _with_content(m, ""),
    ),
    "qwen3_5": Family(
        template="qwen3_5",
        chat_template="qwen3_5.jinja",
        cases=ALL_CASES,
        stop_tokens=("<|im_end|>",),
    ),
    "qwen3_5_no_thinking": Family(
        template="qwen3_5",
        chat_template="qwen3_5.jinja",
        cases=NO_REASONING,
        stop_tokens=("<|im_end|>",),
        render_kwargs={"enable_thinking": False},
    ),
    "qwen3_coder": Family(
        template="qwen3_coder",
        chat_template="qwen3_coder.jinja",
        cases=NO_REASONING,
        stop_tokens=("<|im_end|>",),
    ),
    "gpt_oss": Family(
        template="gpt_oss",
        chat_template="gpt_oss.jinja",
        # Only tool_calls[0] is rendered, and content on a call turn becomes the analysis.
        cases=tuple(c for c in ALL_CASES if c not in ("parallel_calls", "content_call")),
        stop_tokens=("<|return|>", "<|call|>"),
        prepare=lambda m, i: _with_content(m, "absent"),
    ),
    "cohere_command_r7b": Family(
        template="cohere_command_r7b",
        chat_template="cohere_command_r7b.jinja",
        # Answers never carry reasoning and call turns drop their content.
        cases=tuple(c for c in ALL_CASES if c not in ("reasoning_answer", "content_call")),
        stop_tokens=("<|END_OF_TURN_TOKEN|>",),
        prepare=_cohere_plan,
        tool_result_id=lambda index: f"call_{index}_0",
    ),
    "gemma4": Family(
        template="gemma4",
        chat_template="gemma4.jinja",
        # Reasoning is rendered only on tool-call turns.
        cases=tuple(c for c in ALL_CASES if c != "reasoning_answer"),
        stop_tokens=("<turn|>", "<|tool_response>"),
        render_kwargs={"enable_thinking": True, "bos_token": "<bos>"},
        renders_null=False,  # None is written as Python's `None`, which is not JSON
        unrenderable=("<|channel>", "<channel|>"),
    ),
    "gemma4_no_thinking": Family(
        template="gemma4",
        chat_template="gemma4.jinja",
        cases=NO_REASONING,
        stop_tokens=("<turn|>", "<|tool_response>"),
        render_kwargs={"bos_token": "<bos>"},
        # The prompt ends with an empty thought channel that finished turns do not contain.
        turn_markers=("<|turn>model\n", "<tool_response|>"),
        renders_null=False,
        unrenderable=("<|channel>", "<channel|>"),
    ),
    "deepseek_r1": Family(
        template="deepseek_r1",
        chat_template="deepseek_r1.jinja",
        # Reasoning is never rendered; tool calls only when content is None.
        cases=(
            "answer",
            "one_call",
            "parallel_calls",
            "nested_arguments",
            "tricky_answer",
            "tricky_call",
        ),
        # A second tool-call turn loses its opening tokens (the template never resets is_first).
        excluded=frozenset(
            (case, "after_tool_result")
            for case in ("one_call", "parallel_calls", "nested_arguments", "tricky_call")
        ),
        stop_tokens=("<｜end▁of▁sentence｜>",),
        render_kwargs={"bos_token": "<｜begin▁of▁sentence｜>"},
        prepare=lambda m, i: _arguments_as_json_strings(_with_content(m, None)),
        # The prompt prefills "<think>\n"; finished turns are rendered without it.
        turn_markers=("<｜Assistant｜>", "<｜tool▁outputs▁end｜>"),
        # A single call is rendered without its closing tokens (a defect of the template).
        missing_end=lambda m: "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
    ),
    "deepseek_v3_1": Family(
        template="deepseek_v3_1",
        chat_template="deepseek_v3_1.jinja",
        cases=NO_REASONING,  # reasoning_content is never rendered
        stop_tokens=("<｜end▁of▁sentence｜>",),
        render_kwargs={"bos_token": "<｜begin▁of▁sentence｜>"},
        prepare=lambda m, i: _arguments_as_json_strings(_with_content(m, None)),
    ),
    "llama3_3": Family(
        template="llama3_json",
        chat_template="llama3_3.jinja",
        # One call per turn (the template raises otherwise) and a call turn drops its content.
        cases=("answer", "one_call", "nested_arguments", "tricky_answer", "tricky_call"),
        stop_tokens=("<|eot_id|>",),
        render_kwargs={"bos_token": "<|begin_of_text|>"},
    ),
    "mistral_nemo": Family(
        template="mistral_nemo",
        chat_template="mistral_nemo.jinja",
        cases=(
            "answer",
            "one_call",
            "parallel_calls",
            "nested_arguments",
            "tricky_answer",
            "tricky_call",
        ),
        stop_tokens=("</s>",),
        render_kwargs={"bos_token": "<s>", "eos_token": "</s>"},
        prepare=lambda m, i: _with_call_ids(m, lambda j, call: _mistral_id(10 * i + j)),
        tool_result_id=lambda index: _mistral_id(10 * index),
    ),
    "mistral_small_3_2": Family(
        template="mistral_small_3_2",
        chat_template="mistral_small_3_2.jinja",
        cases=(
            "answer",
            "one_call",
            "parallel_calls",
            "nested_arguments",
            "tricky_answer",
            "tricky_call",
        ),
        stop_tokens=("</s>",),
        render_kwargs={"bos_token": "<s>", "eos_token": "</s>"},
        # The rendered message is the last one, numbered 90.. so ids never clash with history.
        prepare=lambda m, i: _with_call_ids(m, lambda j, call: _mistral_id(10 * i + j)),
        expect=_expected_with_ids(lambda j, call: _mistral_id(90 + j)),
        tool_result_id=lambda index: _mistral_id(10 * index),
    ),
    "ministral3_reasoning": Family(
        template="ministral3",
        chat_template="ministral3_reasoning.jinja",
        cases=ALL_CASES,
        stop_tokens=("</s>",),
        render_kwargs={"bos_token": "<s>", "eos_token": "</s>"},
        prepare=_ministral_chunks,
    ),
    "kimi_k2": Family(
        template="kimi_k2",
        chat_template="kimi_k2.jinja",
        cases=NO_REASONING,
        stop_tokens=("<|im_end|>",),
        expect=_expected_with_ids(_kimi_id),
    ),
    "kimi_k2_thinking": Family(
        template="kimi_k2",
        chat_template="kimi_k2_thinking.jinja",
        # The reasoning of a final answer is never rendered; a tool-call turn's is.
        cases=tuple(c for c in ALL_CASES if c != "reasoning_answer"),
        stop_tokens=("<|im_end|>",),
        prepare=lambda m, i: _with_call_ids(m, _kimi_id),
        expect=_expected_with_ids(_kimi_id),
        tool_result_id=lambda index: f"functions.get_weather:{index}",
    ),
    "glm4_6": Family(
        template="glm4_5",
        chat_template="glm4_6.jinja",
        cases=ALL_CASES,
        stop_tokens=("<|observation|>", "<|user|>"),
        prepare=lambda m, i: _with_content(m, "absent"),  # None would be rendered as "None"
        missing_end=_glm_end,
    ),
    "glm4_6_no_thinking": Family(
        template="glm4_5",
        chat_template="glm4_6.jinja",
        cases=NO_REASONING,
        stop_tokens=("<|observation|>", "<|user|>"),
        render_kwargs={"enable_thinking": False},
        prepare=lambda m, i: _with_content(m, "absent"),
        missing_end=_glm_end,
    ),
    "minimax_m2": Family(
        template="minimax_m2",
        chat_template="minimax_m2.jinja",
        cases=ALL_CASES,
        stop_tokens=("[e~[",),
        prepare=lambda m, i: _with_content(m, "absent"),  # None would be rendered as "None"
        # The prompt always opens <think>; a finished turn without reasoning has none.
        turn_markers=("]~b]ai\n",),
    ),
    "smollm3": Family(
        template="smollm3",
        chat_template="smollm3.jinja",
        # Only content is ever rendered; reasoning and tool calls are hand-written cases.
        cases=("answer", "tricky_answer"),
        stop_tokens=("<|im_end|>",),
    ),
    "smollm3_no_think": Family(
        template="smollm3",
        chat_template="smollm3.jinja",
        cases=("answer", "tricky_answer"),
        stop_tokens=("<|im_end|>",),
        render_kwargs={"enable_thinking": False},
    ),
    "hermes2_pro": Family(
        template="hermes2_pro",
        chat_template="hermes2_pro.jinja",
        cases=(
            "answer",
            "one_call",
            "parallel_calls",
            "nested_arguments",
            "tricky_answer",
            "tricky_call",
        ),
        stop_tokens=("<|im_end|>",),
        # After a tool result the history drops a newline the prompt had.
        turn_markers=("<|im_start|>assistant\n",),
    ),
    "lfm2_5": Family(
        template="lfm2_5",
        chat_template="lfm2_5.jinja",
        # The chat template wraps string arguments in single quotes without escaping them, so
        # the tricky call's quotes, backslash and line break cannot be written back; the
        # escaped form the grammar needs is a hand-written case.
        cases=tuple(c for c in ALL_CASES if c != "tricky_call"),
        stop_tokens=("<|im_end|>",),
        prepare=lambda m, i: _with_content(m, "absent"),  # a None content raises
    ),
    "llama3_2_pythonic": Family(
        template="llama3_2_pythonic",
        chat_template="llama3_2_pythonic.jinja",
        # A call turn drops its content; a call list is only a call at the start of the turn.
        cases=(
            "answer",
            "one_call",
            "parallel_calls",
            "nested_arguments",
            "tricky_answer",
            "tricky_call",
        ),
        stop_tokens=("<|eot_id|>",),
        render_kwargs={"bos_token": "<|begin_of_text|>", "date_string": "26 Jul 2024"},
        prepare=_quoted_string_arguments,
    ),
    "llama4_pythonic": Family(
        template="llama4_pythonic",
        chat_template="llama4_pythonic.jinja",
        # The chat template writes calls without the list's brackets and with bare strings
        # (`get_weather(city=Paris)`), which no model writes: calls are hand-written cases.
        cases=("answer", "tricky_answer"),
        stop_tokens=("<|eot|>", "<|eom|>"),
        render_kwargs={"bos_token": "<|begin_of_text|>"},
        prepare=lambda m, i: _with_content(m, ""),  # a None content raises
    ),
    "gemma3_pythonic": Family(
        template="gemma3_pythonic",
        chat_template="gemma3_pythonic.jinja",
        # Content on a call turn is written after the list, where the format (a reply that is
        # a call list) does not allow text: hand-written cases show it fails. The chat template
        # writes a call's arguments without commas between them (its `first` flag is set inside
        # the loop, which Jinja scopes to one iteration), so calls are rendered with one
        # argument each; calls of several arguments are hand-written cases.
        cases=("answer", "tricky_answer") + ONE_ARGUMENT_CALLS,
        stop_tokens=("<end_of_turn>",),
        render_kwargs={"bos_token": "<bos>"},
        prepare=lambda m, i: _with_content(m, ""),  # a None content raises
    ),
    "phi4_mini": Family(
        template="phi4_mini",
        chat_template="phi4_mini.jinja",
        cases=NO_REASONING,
        # Every render passes TOOLS: with tools=None this template iterates None and raises.
        stop_tokens=("<|end|>",),
        render_kwargs={"eos_token": "<|endoftext|>"},
    ),
}


@functools.lru_cache(maxsize=None)
def _chat_template_source(file_name: str) -> str:
    return (CHAT_TEMPLATES_DIR / file_name).read_text(encoding="utf-8")


def render(family: Family, messages: list[dict], add_generation_prompt: bool) -> str:
    (text,), _ = render_jinja_template(
        conversations=[messages],
        tools=TOOLS,
        chat_template=_chat_template_source(family.chat_template),
        add_generation_prompt=add_generation_prompt,
        **family.render_kwargs,
    )
    return text


def _prepared(family: Family, message: dict, index: int) -> dict:
    return family.prepare(message, index) if family.prepare else copy.deepcopy(message)


def history_for(family: Family, shape: str) -> list[dict]:
    """The conversation before the rendered assistant turn."""
    question = {"role": "user", "content": "What is the weather in Paris? Answer briefly."}
    if shape == "single_turn":
        return [question]
    if shape == "multi_turn":
        earlier = {"role": "assistant", "content": "Hello! What would you like to know?"}
        return [
            {"role": "user", "content": "Hi there."},
            _prepared(family, earlier, 0),
            question,
        ]
    call_turn = {"role": "assistant", "tool_calls": [WEATHER_PARIS]}
    result = {
        "role": "tool",
        "tool_call_id": family.tool_result_id(1),
        "name": "get_weather",
        "content": '{"temperature": 21, "sky": "clear"}',
    }
    return [question, _prepared(family, call_turn, 1), result]


def split_rendered_turn(family: Family, history: list[dict], message: dict) -> tuple[str, str]:
    """(prefix, generation) for the last assistant turn of `history + [message]`."""
    prompt = render(family, history, add_generation_prompt=True)
    full = render(family, history + [message], add_generation_prompt=False)
    if full.startswith(prompt):
        prefix, rest = prompt, full[len(prompt) :]
    else:
        assert family.turn_markers, "the finished turn does not start with the generation prompt"
        cut = max(
            full.rfind(marker) + len(marker) for marker in family.turn_markers if marker in full
        )
        prefix, rest = full[:cut], full[cut:]
    stops = [rest.find(token) + len(token) for token in family.stop_tokens if token in rest]
    if stops:
        return prefix, rest[: min(stops)]  # what follows the stop token was never generated
    assert family.missing_end is not None, f"no stop token in the rendered turn: {rest!r}"
    return prefix, rest + family.missing_end(message)


ROUNDTRIP_PARAMS = [
    pytest.param(family_name, case, shape, id=f"{family_name}-{case}-{shape}")
    for family_name, family in FAMILIES.items()
    for case in family.cases
    for shape in ALL_SHAPES
    if (case, shape) not in family.excluded
]


@functools.lru_cache(maxsize=None)
def rendered_case(family_name: str, case: str, shape: str) -> tuple[str, str, dict]:
    family = FAMILIES[family_name]
    canonical = canonical_message(case, family.template, family)
    history = history_for(family, shape)
    prefix, generation = split_rendered_turn(family, history, _prepared(family, canonical, 9))
    expected = family.expect(canonical) if family.expect else canonical
    return prefix, generation, expected


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(("family_name", "case", "shape"), ROUNDTRIP_PARAMS)
def test_rendered_turn_parses_back(parser, family_name, case, shape):
    prefix, generation, expected = rendered_case(family_name, case, shape)
    template = template_for(FAMILIES[family_name].template)
    assert_parses_to(parser, template, prefix, generation, expected, TOOLS)


def test_every_bundled_template_with_a_chat_template_has_round_trips():
    """ERNIE has no chat template here (see the chat templates' INDEX.json `not_found`)."""
    covered = {family.template for family in FAMILIES.values()}
    assert covered == set(template_names()) - {"ernie"}


def test_every_chat_template_is_used():
    used = {family.chat_template for family in FAMILIES.values()}
    assert used == {path.name for path in CHAT_TEMPLATES_DIR.glob("*.jinja")}


def test_chat_templates_are_the_published_bytes():
    """The copies must stay byte for byte what INDEX.json records (source, commit, sha256)."""
    index = json.loads((CHAT_TEMPLATES_DIR / "INDEX.json").read_text(encoding="utf-8"))
    recorded = {entry["file"]: entry["sha256"] for entry in index["templates"]}
    assert set(recorded) == {path.name for path in CHAT_TEMPLATES_DIR.glob("*.jinja")}
    for file_name, sha256 in recorded.items():
        assert hashlib.sha256((CHAT_TEMPLATES_DIR / file_name).read_bytes()).hexdigest() == sha256


# --------------------------------------------------------------------------------------------
# Hand-written outputs


def _hand_written_params() -> list:
    params = []
    for path in sorted(CASES_DIR.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for case in data["cases"]:
            params.append(
                pytest.param(data["template"], case, id=f"{data['template']}-{case['id']}")
            )
    return params


HAND_WRITTEN_PARAMS = _hand_written_params()


def test_every_bundled_template_has_hand_written_cases():
    with_cases = {
        json.loads(p.read_text(encoding="utf-8"))["template"] for p in CASES_DIR.glob("*.json")
    }
    assert with_cases == set(template_names())


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(("template_name", "case"), HAND_WRITTEN_PARAMS)
def test_hand_written_output(parser, template_name, case):
    template = template_for(template_name)
    tools = TOOLS if case.get("tools", True) else None
    if "error" in case:
        # A generation cut off inside a structured region cannot be parsed: both the whole and
        # the streamed parse must fail the same way.
        assert case["error"] == "ValueError"
        with pytest.raises(ValueError):
            parse_whole(parser, template, case["prefix"], case["generation"], tools)
        with pytest.raises(ValueError):
            parse_streamed(parser, template, case["prefix"], case["generation"], tools)
        return
    assert_parses_to(parser, template, case["prefix"], case["generation"], case["expected"], tools)

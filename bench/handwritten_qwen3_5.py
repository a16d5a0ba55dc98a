"""A hand-written whole-message parser for the Qwen3.5 output format: the practical speed limit.

It knows one format only, the one the bundled `templates/qwen3_5.json` describes:
`<think>...</think>` reasoning, tool calls written as XML parameters

    <tool_call>
    <function=get_weather>
    <parameter=location>
    Bern
    </parameter>
    </function>
    </tool_call>

and the rest is content ending at `<|im_end|>` or `<|endoftext|>`. It is written the way a person
would write the fastest pure-Python parser for a finished generation: `str.find` on the `<` that
starts every delimiter, one pass, no regex. Whole messages only (the benchmark times it beside
`parse_response`); the interpreter's rules that shape the message:

* `<tool_call>`, the end markers and `</function>` are patterns led by `\\s*`, so the whitespace
  before them belongs to the delimiter, not to the text before it.
* A region's text is stripped; content is overwritten by every region of it that has text, and
  the implicit content region opens only on its first character.
* Parameters are matched like `<parameter=(?P<key>[^>\\n]+)>\\n?(?P<value>.*?)\\n?</parameter>`,
  later keys overwriting earlier ones; arguments are then cast by the tools' JSON schemas.

Not in the package: this file exists only to be benchmarked against.
"""

from __future__ import annotations

from typing import Any

from .handwritten_qwen3 import (
    _WHITESPACE,
    _cast_arguments,
    _tool_properties,
    _whitespace_run_start,
    _without_empty_values,
)

ANCHOR = "<|im_start|>assistant\n"
_END_MARKERS = ("<|im_end|>", "<|endoftext|>")


def _skip_whitespace(text: str, index: int) -> int:
    end = len(text)
    while index < end and text[index] in _WHITESPACE:
        index += 1
    return index


def _parameters(body: str) -> dict:
    """xml-inline with the template's tag_pattern, by str.find."""
    out: dict[str, str] = {}
    find = body.find
    pos = 0
    while True:
        tag = find("<parameter=", pos)
        if tag < 0:
            return out
        key_end = find(">", tag + 11)
        if key_end < 0:
            return out
        key = body[tag + 11 : key_end]
        if not key or "\n" in key:
            pos = tag + 1
            continue
        value_start = key_end + 2 if body.startswith("\n", key_end + 1) else key_end + 1
        close = find("</parameter>", value_start)
        if close < 0:
            return out
        value_end = close - 1 if close > value_start and body[close - 1] == "\n" else close
        out[key] = body[value_start:value_end]
        pos = close + 12


def _call_open_at(text: str, at: int) -> tuple[str, int] | None:
    """(name, end) when `<tool_call>\\s*<function=NAME>` starts at `at`."""
    function = _skip_whitespace(text, at + 11)
    if not text.startswith("<function=", function):
        return None
    name_end = text.find(">", function + 10)
    if name_end <= function + 10:
        return None
    name = text[function + 10 : name_end]
    if "\n" in name:
        return None
    return name, name_end + 1


def _call_close(text: str, start: int) -> tuple[int, int]:
    """(end of the call's body, end of `\\s*</function>\\s*</tool_call>`), or the text's end."""
    search = start
    while True:
        function = text.find("</function>", search)
        if function < 0:
            return len(text), len(text)
        after = _skip_whitespace(text, function + 11)
        if text.startswith("</tool_call>", after):
            return _whitespace_run_start(text, function, start), after + 12
        search = function + 1


def _whole_message(text: str, prefix: str | None) -> str:
    """The prompt's text after its last start anchor, then the generation (a prefix is required,
    as the interpreter requires it)."""
    if prefix is None:
        raise ValueError('prefix is required (pass prefix="" when the text holds the whole message)')
    if prefix:
        anchor = prefix.rfind(ANCHOR)
        text = (prefix[anchor + len(ANCHOR) :] if anchor >= 0 else prefix) + text
    return text


def parse_response(text: str, *, prefix: str | None = None, tools: list | None = None) -> dict:
    text = _whole_message(text, prefix)
    properties = _tool_properties(tools) if tools else None
    message: dict[str, Any] = {"role": "assistant"}
    find, startswith = text.find, text.startswith
    end = len(text)
    pos = 0
    content: list[str] = []  # the open content region's text (opened on its first character)
    while True:
        candidate = find("<", pos)
        kind = None
        while candidate >= 0:
            if startswith("<think>", candidate):
                kind, start, stop = "think", candidate, candidate + 7
                break
            if startswith("<tool_call>", candidate):
                opened = _call_open_at(text, candidate)
                if opened is not None:
                    name, stop = opened
                    kind, start = "call", _whitespace_run_start(text, candidate, pos)
                    break
            elif startswith("<|", candidate):
                for marker in _END_MARKERS:
                    if startswith(marker, candidate):
                        kind, start, stop = "end", _whitespace_run_start(text, candidate, pos), candidate + len(marker)
                        break
                if kind is not None:
                    break
            candidate = find("<", candidate + 1)
        if kind is None:
            if pos < end:
                content.append(text[pos:])
            if content:
                message["content"] = "".join(content).strip()
            break
        if start > pos:
            content.append(text[pos:start])
        if content:
            message["content"] = "".join(content).strip()
            content = []
        if kind == "think":
            close = find("</think>", stop)
            if close < 0:
                message["reasoning_content"] = text[stop:].strip()
                break
            message["reasoning_content"] = text[stop:close].strip()
            pos = close + 8
        elif kind == "call":
            body_end, pos = _call_close(text, stop)
            call = {"type": "function", "function": {"name": name, "arguments": _parameters(text[stop:body_end])}}
            if properties:
                _cast_arguments(call, properties)
            message.setdefault("tool_calls", []).append(call)
        else:
            pos = stop
    return _without_empty_values(message)

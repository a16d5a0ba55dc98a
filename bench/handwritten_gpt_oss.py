"""A hand-written whole-message parser for the gpt-oss (harmony) output format: the practical speed limit.

It knows one format only, the one the bundled `templates/gpt_oss.json` describes:

    <|channel|>analysis<|message|>...<|end|>
    <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Bern"}<|call|>
    <|start|>assistant<|channel|>final<|message|>...<|return|>

Reasoning is an analysis message (ended by `<|end|>`, `<|return|>` or `<|call|>`), each tool call a
commentary message addressed to `functions.NAME` (the recipient before the channel, as the chat
template renders it, or after it), with JSON arguments ended by `<|call|>`, and the answer a final
message (ended by `<|return|>` or `<|end|>`). Text outside these messages (the `<|start|>assistant`
headers) belongs to no field and is dropped. It is written the way a person would write the
fastest pure-Python parser for a finished generation: `str.find` on the `<|` that starts every
marker, one pass, no regex. Whole messages only (the benchmark times it beside `parse_response`);
the interpreter's rules that shape the message:

* A region's text is stripped; a later message of the same channel overwrites the earlier one.
* The call opener is the template's pattern `(?:<|start|>assistant)?\\s*(?:to=functions.NAME\\s*
  <|channel|>commentary|<|channel|>commentary\\s+to=functions.NAME)[^<]*(?:<|constrain|>[^<]*)?
  <|message|>`, read here by hand from its `<|start|>` or its `<|channel|>`; NAME is a run of
  characters other than `<` and whitespace.
* Arguments are cast by the tools' JSON schemas.

Not in the package: this file exists only to be benchmarked against.
"""

from __future__ import annotations

import json
from typing import Any

from .handwritten_qwen3 import _WHITESPACE, _cast_arguments, _tool_properties, _without_empty_values

ANCHOR = "<|start|>assistant"
_ANALYSIS = "<|channel|>analysis<|message|>"
_FINAL = "<|channel|>final<|message|>"
_COMMENTARY = "<|channel|>commentary"
_RECIPIENT = "to=functions."
_MESSAGE = "<|message|>"
_CONSTRAIN = "<|constrain|>"
_CALL = "<|call|>"


def _skip_whitespace(text: str, index: int) -> int:
    end = len(text)
    while index < end and text[index] in _WHITESPACE:
        index += 1
    return index


def _name_end(text: str, start: int) -> int:
    end = len(text)
    index = start
    while index < end and text[index] != "<" and text[index] not in _WHITESPACE:
        index += 1
    return index


def _call_opener(text: str, at: int) -> tuple[str, int] | None:
    """(name, end) of a call opener starting with the `<|` at `at`, or None."""
    index = at
    if text.startswith(ANCHOR, index):
        index = _skip_whitespace(text, index + len(ANCHOR))
    if text.startswith(_RECIPIENT, index):  # recipient first: to=functions.NAME <|channel|>commentary
        name_start = index + len(_RECIPIENT)
        name_end = _name_end(text, name_start)
        index = _skip_whitespace(text, name_end)
        if name_end == name_start or not text.startswith(_COMMENTARY, index):
            return None
        index += len(_COMMENTARY)
    elif text.startswith(_COMMENTARY, index):  # channel first: <|channel|>commentary to=functions.NAME
        index += len(_COMMENTARY)
        after = _skip_whitespace(text, index)
        if after == index or not text.startswith(_RECIPIENT, after):
            return None
        name_start = after + len(_RECIPIENT)
        name_end = _name_end(text, name_start)
        if name_end == name_start:
            return None
        index = name_end
    else:
        return None
    index = text.find("<", index)  # [^<]* (the content type, " json")
    if index >= 0 and text.startswith(_CONSTRAIN, index):
        index = text.find("<", index + len(_CONSTRAIN))
    if index < 0 or not text.startswith(_MESSAGE, index):
        return None
    return text[name_start:name_end], index + len(_MESSAGE)


def _end_of(text: str, start: int, markers: tuple[str, ...]) -> tuple[int, int]:
    """(where the message's text ends, where the text after its end marker starts)."""
    find, startswith = text.find, text.startswith
    candidate = find("<|", start)
    while candidate >= 0:
        for marker in markers:
            if startswith(marker, candidate):
                return candidate, candidate + len(marker)
        candidate = find("<|", candidate + 2)
    return len(text), len(text)


_REASONING_ENDS = ("<|end|>", "<|return|>", "<|call|>")
_FINAL_ENDS = ("<|return|>", "<|end|>")


def parse_response(text: str, *, prefix: str | None = None, tools: list | None = None) -> dict:
    if prefix is None:
        raise ValueError('prefix is required (pass prefix="" when the text holds the whole message)')
    if prefix:
        anchor = prefix.rfind(ANCHOR)
        text = (prefix[anchor + len(ANCHOR) :] if anchor >= 0 else prefix) + text
    properties = _tool_properties(tools) if tools else None
    message: dict[str, Any] = {"role": "assistant"}
    find, startswith = text.find, text.startswith
    end = len(text)
    pos = 0
    while pos < end:
        candidate = find("<|", pos)
        if candidate < 0:
            break
        if startswith(_ANALYSIS, candidate):
            body_end, pos = _end_of(text, candidate + len(_ANALYSIS), _REASONING_ENDS)
            message["reasoning_content"] = text[candidate + len(_ANALYSIS) : body_end].strip()
        elif startswith(_FINAL, candidate):
            body_end, pos = _end_of(text, candidate + len(_FINAL), _FINAL_ENDS)
            message["content"] = text[candidate + len(_FINAL) : body_end].strip()
        else:
            opened = _call_opener(text, candidate)
            if opened is None:
                pos = candidate + 2
                continue
            name, body_start = opened
            close = find(_CALL, body_start)
            body_end, pos = (end, end) if close < 0 else (close, close + len(_CALL))
            body = text[body_start:body_end]
            try:
                arguments = json.loads(body)
            except json.JSONDecodeError as error:
                raise ValueError(f"tool call arguments are not valid JSON: {body!r} ({error})") from error
            call = {"type": "function", "function": {"name": name, "arguments": arguments}}
            if properties:
                _cast_arguments(call, properties)
            message.setdefault("tool_calls", []).append(call)
    return _without_empty_values(message)

"""A hand-written whole-message parser for the Gemma 4 output format: the practical speed limit.

It knows one format only, the one the bundled `templates/gemma4.json` describes:
`<|channel>thought\\n...<channel|>` reasoning, tool calls written as

    <|tool_call>call:get_weather{location:<|"|>Bern<|"|>,days:3}<tool_call|>

(JSON with bare keys and `<|"|>` string quotes) and the rest is content ending at `<turn|>`,
`<|tool_response>` or `<eos>`. It is written the way a person would write the fastest pure-Python
parser for a finished generation: `str.find` on the `<` that starts every delimiter, one pass,
strings cut out with `str.split` and bare keys quoted by one small regex. Whole messages only
(the benchmark times it beside `parse_response`), with the interpreter's rules: a region's text
is stripped, content is overwritten by every region of it that has text, and arguments are cast
by the tools' JSON schemas.

Not in the package: this file exists only to be benchmarked against.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .handwritten_qwen3 import _WHITESPACE, _cast_arguments, _tool_properties, _without_empty_values

ANCHORS = ("<|turn>model\n", "<tool_response|>")
_REASONING_OPEN = "<|channel>thought\n"
_CALL_OPEN = "<|tool_call>call:"
_CONTENT_CLOSES = ("<turn|>", "<|tool_response>", "<eos>")
_QUOTE = '<|"|>'
_NAME_STOPS = frozenset("{<") | _WHITESPACE
# The interpreter's bare-key rewrite; with no '"' in a piece only its second alternative can match.
_BARE_KEY = re.compile(r"(?<=[{,])(\s*)(\w+)(\s*):")
_BARE_KEY_OR_STRING = re.compile(r'"(?:\\.|[^"\\])*"|(?<=[{,])(\s*)(\w+)(\s*):')


def _quote_keys(piece: str) -> str:
    if '"' not in piece:
        return _BARE_KEY.sub(r'\1"\2"\3:', piece)
    return _BARE_KEY_OR_STRING.sub(
        lambda m: m.group(0) if m.group(2) is None else f'{m.group(1)}"{m.group(2)}"{m.group(3)}:', piece
    )


def _arguments(body: str) -> Any:
    """json with unquoted_keys and the `<|"|>` string delimiters."""
    if "\x01" in body or "\x02" in body:  # the interpreter's reserved placeholders
        raise ValueError("json: input contains reserved sentinel characters (\\x01/\\x02); cannot parse safely.")
    parts = body.split(_QUOTE)
    if len(parts) % 2 == 0:  # an unpaired last quote stays literal text
        parts[-2:] = [parts[-2] + _QUOTE + parts[-1]]
    pieces = []
    for index, part in enumerate(parts):
        pieces.append(json.dumps(part) if index % 2 else _quote_keys(part))
    return json.loads("".join(pieces))


def _whole_message(text: str, prefix: str | None) -> str:
    """The prompt's text after its last start anchor, then the generation (a prefix is required,
    as the interpreter requires it)."""
    if prefix is None:
        raise ValueError('prefix is required (pass prefix="" when the text holds the whole message)')
    if prefix:
        cut = max((found + len(anchor) for anchor in ANCHORS if (found := prefix.rfind(anchor)) >= 0), default=0)
        text = prefix[cut:] + text
    return text


def _call(name: str, body: str, properties: dict | None) -> dict:
    call = {"type": "function", "function": {"name": name, "arguments": _arguments(body)}}
    if properties:
        _cast_arguments(call, properties)
    return call


def parse_response(text: str, *, prefix: str | None = None, tools: list | None = None) -> dict:
    text = _whole_message(text, prefix)
    properties = _tool_properties(tools) if tools else None
    message: dict[str, Any] = {"role": "assistant"}
    find, startswith = text.find, text.startswith
    end = len(text)
    pos = 0
    content: list[str] = []
    while True:
        candidate = find("<", pos)
        kind = None
        while candidate >= 0:
            if startswith("<|", candidate):
                if startswith(_REASONING_OPEN, candidate):
                    kind, stop = "think", candidate + len(_REASONING_OPEN)
                    break
                if startswith(_CALL_OPEN, candidate):
                    name_start = name_end = candidate + len(_CALL_OPEN)
                    while name_end < end and text[name_end] not in _NAME_STOPS:
                        name_end += 1
                    if name_end > name_start:
                        kind, stop = "call", name_end
                        break
                if startswith("<|tool_response>", candidate):
                    kind, stop = "end", candidate + 16
                    break
            elif startswith("<turn|>", candidate):
                kind, stop = "end", candidate + 7
                break
            elif startswith("<eos>", candidate):
                kind, stop = "end", candidate + 5
                break
            candidate = find("<", candidate + 1)
        if kind is None:
            if pos < end:
                content.append(text[pos:])
            if content:
                message["content"] = "".join(content).strip()
            break
        if candidate > pos:
            content.append(text[pos:candidate])
        if content:
            message["content"] = "".join(content).strip()
            content = []
        if kind == "think":
            close = find("<channel|>", stop)
            if close < 0:
                message["reasoning_content"] = text[stop:].strip()
                break
            message["reasoning_content"] = text[stop:close].strip()
            pos = close + 10
        elif kind == "call":
            close = find("<tool_call|>", stop)
            body_end, pos = (end, end) if close < 0 else (close, close + 12)
            call = _call(text[name_start:name_end], text[stop:body_end], properties)
            message.setdefault("tool_calls", []).append(call)
        else:
            pos = stop
    return _without_empty_values(message)

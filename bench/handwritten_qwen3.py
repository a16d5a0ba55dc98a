"""A hand-written streaming parser for the Qwen3 output format: the practical speed limit.

This module knows one format only, the one the bundled `templates/qwen3.json` describes:
`<think>...</think>` reasoning, `<tool_call>{json}</tool_call>` calls, and the rest is content
ending at `<|im_end|>` or `<|endoftext|>`. It is written the way a person would write the
fastest pure-Python parser for that format: `str.find` / `str.startswith` on the few characters
that can start a delimiter, only the unconsumed tail of the stream kept in memory, and a fast
path for chunks that cannot touch a delimiter at all.

It must emit exactly the events (same chunk boundaries) and the same message as the
transformers interpreter running the Qwen3 template, so the benchmark compares equal work.
The interpreter's rules that shape the output:

* Whitespace may lead into `<tool_call>` and the end markers (their patterns start with
  `\\s*`), so whitespace before them is swallowed, and trailing whitespace in the content
  region is held back until the next byte shows whether a marker follows.
* Those two are patterns, so a complete match that ends exactly at the end of the received
  text is held too (the interpreter cannot know a pattern will not grow); `<think>`,
  `</think>` and `</tool_call>` are plain literals and commit as soon as they are complete.
* A suffix that could be the beginning of a delimiter is held back.
* The content region opens lazily on its first byte; every close overwrites `content`.

Not in the package: this file exists only to be benchmarked against.
"""

from __future__ import annotations

import json
from typing import Any

ANCHOR = "<|im_start|>assistant\n"
_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_CALL_OPEN = "<tool_call>"
_CALL_CLOSE = "</tool_call>"
_END_MARKERS = ("<|im_end|>", "<|endoftext|>")
# Delimiters whose template pattern starts with `\s*`.
_WHITESPACE_LED = (_CALL_OPEN,) + _END_MARKERS
# Every delimiter starts with "<" and has no other "<", so the last "<" is the only candidate
# start of a partial delimiter at the end of the text; it is at most this far from the end.
_LONGEST_PARTIAL = max(len(marker) for marker in _WHITESPACE_LED) - 1

# `\s` of the `regex` module (what the interpreter's patterns use) is str.isspace() without the
# four information separators U+001C..U+001F.
_WHITESPACE = frozenset(
    character for character in map(chr, range(0x3001)) if character.isspace()
) - frozenset("\x1c\x1d\x1e\x1f")

_CONTENT, _REASONING, _TOOL_CALL, _FINISHED = 0, 1, 2, 3
_FIELD_NAMES = ("content", "reasoning_content", "tool_calls")


def _whitespace_run_start(text: str, index: int, floor: int) -> int:
    """Start of the run of whitespace that ends at `index` (never before `floor`)."""
    while index > floor and text[index - 1] in _WHITESPACE:
        index -= 1
    return index


def _whitespace_led_marker_at(text: str, index: int) -> str | None:
    if text.startswith(_CALL_OPEN, index):
        return _CALL_OPEN
    if text.startswith("<|", index):
        for marker in _END_MARKERS:
            if text.startswith(marker, index):
                return marker
    return None


def _content_hold_start(text: str, pos: int, end: int) -> int:
    """Where the text that must wait for more input begins, in the content region."""
    hold = end
    last_open = text.rfind("<", max(pos, end - _LONGEST_PARTIAL), end)
    if last_open >= 0:
        fragment = text[last_open:]
        if _THINK_OPEN.startswith(fragment):
            hold = last_open
        for marker in _WHITESPACE_LED:
            if marker.startswith(fragment):
                hold = min(hold, _whitespace_run_start(text, last_open, pos))
                break
    if end > pos and text[end - 1] in _WHITESPACE:
        hold = min(hold, _whitespace_run_start(text, end, pos))
    return hold


def _literal_hold_start(text: str, pos: int, end: int, delimiter: str) -> int:
    last_open = text.rfind("<", max(pos, end - len(delimiter) + 1), end)
    if last_open >= 0 and delimiter.startswith(text[last_open:]):
        return last_open
    return end


# Tool-argument casting, same rules as the interpreter's `tools=` handling.


def _declared_types(schema: Any) -> tuple[str, ...]:
    if not isinstance(schema, dict):
        return ()
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else []
    if isinstance(declared, list):
        types.extend(name for name in declared if isinstance(name, str))
    for union in ("anyOf", "oneOf"):
        for choice in schema.get(union) or []:
            types.extend(_declared_types(choice))
    if schema.get("nullable") and "null" not in types:
        types.append("null")
    return tuple(types)


def _cast(raw: str, types: tuple[str, ...]) -> Any:
    for name in types:
        try:
            if name == "integer":
                try:
                    return int(raw)
                except ValueError:
                    number = float(raw)
                    if number.is_integer():
                        return int(number)
                    continue
            if name == "number":
                number = float(raw)
                if number != number or number in (float("inf"), float("-inf")):
                    continue
                return int(number) if number.is_integer() and "." not in raw else number
            if name == "boolean":
                word = raw.strip().lower()
                if word in ("true", "1", "false", "0"):
                    return word in ("true", "1")
            if name == "null" and raw.strip() in ("null", "None"):
                return None
            if name == "object" or name == "array":
                decoded = json.loads(raw)
                if isinstance(decoded, dict if name == "object" else list):
                    return decoded
        except ValueError:
            continue
    return raw


def _without_empty_values(message: dict) -> dict:
    """The finished message as the interpreter returns it: keys whose value is None or an empty
    string, list or dict are left out, except the role."""
    return {
        key: value
        for key, value in message.items()
        if key == "role"
        or not (value is None or (isinstance(value, (str, list, dict)) and not value))
    }


def _tool_properties(tools: list | None) -> dict[str, dict]:
    """Tool name -> JSON-schema `properties`, for tools given as JSON schemas (dicts)."""
    properties_by_tool: dict[str, dict] = {}
    for tool in tools or []:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            properties = parameters.get("properties") if isinstance(parameters, dict) else None
            properties_by_tool[function["name"]] = (
                properties if isinstance(properties, dict) else {}
            )
    return properties_by_tool


def _cast_arguments(call: dict, properties_by_tool: dict[str, dict]) -> None:
    function = call["function"]
    if not isinstance(function, dict):
        return
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return
    properties = properties_by_tool.get(name)
    if not properties:
        return
    for key, argument in arguments.items():
        if key not in properties:
            continue
        types = _declared_types(properties[key])
        if not types:
            continue
        if isinstance(argument, str):
            arguments[key] = _cast(argument, types)
        elif isinstance(argument, list) and "array" not in types:
            arguments[key] = [
                _cast(item, types) if isinstance(item, str) else item for item in argument
            ]


def _parse_call(body: str) -> dict:
    try:
        return {"type": "function", "function": json.loads(body)}
    except json.JSONDecodeError as error:
        raise ValueError(f"tool call is not valid JSON: {body!r} ({error})") from error


class ResponseParser:
    """Streaming parser: `initial_events`, `feed(text) -> events`, `finalize() -> (message, events)`."""

    def __init__(self, prefix: str | None = None, *, tools: list | None = None):
        if prefix is None:
            raise ValueError(
                'prefix is required (pass prefix="" when the text holds the whole message)'
            )
        self._properties_by_tool = _tool_properties(tools)
        self._state = _CONTENT
        self._opened = False  # the content region opens on its first byte
        self._body: list[str] = []
        self._tail = ""  # received text not yet routed to a region
        self._message: dict[str, Any] = {"role": "assistant"}
        self._finalized = False
        self.initial_events: list[dict] = []
        if prefix:
            anchor = prefix.rfind(ANCHOR)
            rest = prefix[anchor + len(ANCHOR) :] if anchor >= 0 else prefix
            if rest:
                self._run(rest, self.initial_events, False)

    def feed(self, text: str) -> list[dict]:
        if text and "<" not in text:
            state = self._state
            tail = self._tail
            # Fast path: nothing held back and no "<": no delimiter can start in this chunk.
            if not tail:
                if state == _REASONING:
                    self._body.append(text)
                    return [
                        {
                            "type": "region_chunk",
                            "field": "reasoning_content",
                            "text": text,
                            "dirty": False,
                        }
                    ]
                if state == _CONTENT and self._opened and text[-1] not in _WHITESPACE:
                    self._body.append(text)
                    return [
                        {"type": "region_chunk", "field": "content", "text": text, "dirty": False}
                    ]
                if state == _TOOL_CALL:
                    self._body.append(text)
                    return [
                        {"type": "region_chunk", "field": "tool_calls", "text": text, "dirty": True}
                    ]
            # Content with at most held-back whitespace: only trailing whitespace must wait.
            if state == _CONTENT and "<" not in tail:
                return self._route_plain_content(tail + text)
        if self._finalized:
            raise RuntimeError("ResponseParser already finalized")
        events: list[dict] = []
        self._run(self._tail + text, events, False)
        return events

    def _route_plain_content(self, text: str) -> list[dict]:
        events: list[dict] = []
        hold = len(text)
        if text[-1] in _WHITESPACE:
            hold = _whitespace_run_start(text, hold, 0)
        if hold:
            self._emit(text[:hold], events)
        self._tail = text[hold:]
        return events

    def finalize(self) -> tuple[dict, list[dict]]:
        if self._finalized:
            raise RuntimeError("ResponseParser already finalized")
        events: list[dict] = []
        self._run(self._tail, events, True)
        self._finalized = True
        self._state = _FINISHED  # no fast path after the end
        return self._finished_message(), events

    def _finished_message(self) -> dict:
        return _without_empty_values(self._message)

    def _emit(self, text: str, events: list[dict]) -> None:
        state = self._state
        if not self._opened:
            self._opened = True
            events.append({"type": "region_open", "field": "content"})
        self._body.append(text)
        events.append(
            {
                "type": "region_chunk",
                "field": _FIELD_NAMES[state],
                "text": text,
                "dirty": state == _TOOL_CALL,
            }
        )

    def _open(self, state: int, events: list[dict]) -> None:
        self._state = state
        self._opened = True
        self._body = []
        events.append({"type": "region_open", "field": _FIELD_NAMES[state]})

    def _close(self, events: list[dict]) -> None:
        state = self._state
        if self._opened:
            body = "".join(self._body)
            if state == _TOOL_CALL:
                value = _parse_call(body)
                if self._properties_by_tool:
                    _cast_arguments(value, self._properties_by_tool)
                self._message.setdefault("tool_calls", []).append(value)
            else:
                value = body.strip()
                self._message[_FIELD_NAMES[state]] = value
            events.append({"type": "region_close", "field": _FIELD_NAMES[state], "value": value})
        self._state = _CONTENT
        self._opened = False
        self._body = []

    def _run(self, text: str, events: list[dict], eos: bool) -> None:
        """Route `text` (held tail + new input) to regions; keep back what may still change."""
        pos = 0
        end = len(text)
        while True:
            state = self._state
            if state != _CONTENT:
                delimiter = _THINK_CLOSE if state == _REASONING else _CALL_CLOSE
                found = text.find(delimiter, pos)
                if found >= 0:
                    if found > pos:
                        self._emit(text[pos:found], events)
                    pos = found + len(delimiter)
                    self._close(events)
                    continue
                hold = end if eos else _literal_hold_start(text, pos, end, delimiter)
            else:
                hold = end
                committed = False
                candidate = text.find("<", pos)
                while candidate >= 0:
                    if text.startswith(_THINK_OPEN, candidate):
                        if candidate > pos:
                            self._emit(text[pos:candidate], events)
                        self._close(events)
                        self._open(_REASONING, events)
                        pos = candidate + len(_THINK_OPEN)
                        committed = True
                        break
                    marker = _whitespace_led_marker_at(text, candidate)
                    if marker is not None:
                        start = _whitespace_run_start(text, candidate, pos)
                        stop = candidate + len(marker)
                        if stop == end and not eos:
                            hold = start
                            break
                        if start > pos:
                            self._emit(text[pos:start], events)
                        self._close(events)
                        if marker is _CALL_OPEN:
                            self._open(_TOOL_CALL, events)
                        pos = stop
                        committed = True
                        break
                    candidate = text.find("<", candidate + 1)
                if committed:
                    continue
                if not eos and hold == end:
                    hold = _content_hold_start(text, pos, end)
            if eos:
                if pos < end:
                    self._emit(text[pos:], events)
                self._close(events)
                self._tail = ""
                return
            if hold > pos:
                self._emit(text[pos:hold], events)
            self._tail = text[hold:]
            return


def parse_response(text: str, *, prefix: str | None = None, tools: list | None = None) -> dict:
    """Parse a finished generation in one pass (no per-chunk bookkeeping)."""
    parser = ResponseParser(prefix, tools=tools)
    scratch: list[dict] = []
    parser._run(parser._tail + text, scratch, True)
    return parser._finished_message()

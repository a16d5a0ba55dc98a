"""OpenAI `chat.completion.chunk` deltas from a streaming response parser.

A response parser reports *regions* (`region_open`, `region_chunk`, `region_close`); an OpenAI-style
server must send *deltas*: `{"role": "assistant"}`, then `content` / `reasoning_content` text as it is
written, then `tool_calls` entries (`index`, `id`, `type`, `function.name`, then `function.arguments`
fragments), and a finish reason. `OpenAIStream` turns the first into the second, for any template:

    parser = rtcompile.ResponseParser(template, prefix, tools=tools, errors="keep")
    stream = OpenAIStream(parser)                     # the template is read from the parser
    send(stream.initial_deltas)                       # {"role": "assistant"} and prefilled text
    for text in generation:
        send(stream.feed(text))                       # a list of delta dicts, often empty
    send(stream.finish(length=hit_max_tokens))        # the rest; then stream.finish_reason
    # each delta goes out as completion_chunk(delta, ...); the last chunk carries the finish reason

The contract (proven by tests/test_openai_stream.py for the bundled templates, generated templates
and random chunkings): the `function.arguments` fragments of one call concatenate to a JSON text that
`json.loads` to exactly that call's arguments in the parser's final message (after `tools=`
coercion); names, ids, indices and the number of calls match the final message; the concatenated
`content` and `reasoning_content` deltas equal the final message's fields.

Where the contract bends, by design (each case is also reported in `OpenAIStream.divergences`):
- Whitespace: a `text` field is stripped at its region's close in the final message. Deltas drop the
  whitespace at a region's start and hold back trailing whitespace until more text follows in the same
  region, so the concatenation equals the stripped value exactly (a held-back run is dropped at close).
- A field without `repeats` written by several regions: a parser with `errors="keep"` joins two
  non-empty texts with a blank line, and so does the stream (exact). A strict parser keeps only the
  last value (the interpreter's rule), but the stream has already sent the earlier ones: they stay
  in the stream (nothing the model wrote disappears from the client's view), and `divergences`
  says so. The same holds for a tool-call field without `repeats`.
- A tool-call region that fails to parse (a parser built with `errors="keep"`; e.g. a call cut off by
  the token limit): a call already announced is closed with the arguments complete so far (always
  valid JSON), and the region's raw text is sent as `content`, so nothing is lost. A content or
  reasoning region that fails (a non-`text` parser) sends its raw text under its own key. `errors`
  lists such regions. With a strict parser the parser's exception propagates from `feed`/`finish`.
- Content and reasoning fields with another parser than `text` send their value's text (`text_of`)
  when the region closes.
- A region value that is not call-shaped (`{"function": {"name": str, ...}}`) is not sent as a call.

Incremental arguments. Where a call's name, id and arguments come from is read from the field's
`transform` ("{content}", "{content.arguments}", "{name}" from an open-pattern capture, item keys under
`transform_each`, literals). For `json` content the region text is scanned once, incrementally (string,
escape and depth state, plus the `string_delims` / `unquoted_keys` dialect), and each top-level
member of the arguments object is sent as soon as its value is complete, parsed by the template's own
JSON parser and coerced with `tools`; for `xml-inline` each parameter is sent when its tag closes, for
`kv-lines` when its line ends. Fragments are `{"k1": v1`, `, "k2": v2`, ..., `}`. Arguments of an
unknown transform shape arrive whole at the region's close.

Reconciliation at the region's close, against the parsed value: keys not sent yet are sent; a key
whose final value differs from what was sent (a duplicate key, `merge_duplicates`, a `tools` schema
edited in between) is sent again with the final value, which JSON's last-one-wins rule makes the
value that `json.loads` returns; then `}`. What was sent is therefore always a prefix of a JSON text
that loads to the final arguments, as long as every key sent is a key of the final arguments: that
holds whenever the region parses, except for pathological output the scanner cannot predict (the same
call object carrying two `arguments` or `name` keys, several `string_delims` pairs interacting,
lookbehind in an xml `tag_pattern`). Those cases are reported in `divergences`.

Call ids: from the template when its transform gives the call an `id` (e.g. an open-pattern capture,
`"id": "{id}"`) and that id is not empty, else `call_` plus 24 random letters and digits; `seed=`
makes them deterministic and `call_id=` (a function of the call's index) replaces the policy. (An
id-like capture the transform does not use is not read: a parser reports captures only while their
region is open, so it would depend on the chunking.)

Cost, linear in the output: a JSON region is scanned once (a regex jumps to the next structural
character; a chunk that ends inside a custom string delimiter is re-read by at most the delimiter's
length) and each value is parsed once, when complete. An xml-inline region is searched only when a
chunk completes the tag pattern's literal suffix (e.g. `</parameter>`), over the text after the last
match; kv-lines splits only on a new separator. Per chunk the work is proportional to the chunk, plus
the parsing of whatever values it completes.

Standard library and `regex` only: servers import this at run time.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import random
import re
import string
import weakref
from typing import Any, Callable

import regex

from rtcompile.runtime.coerce import TYPED, cast_mode, coerce_argument, schema_types, tool_parameters
from rtcompile.runtime.content_parsers import CallListReader, make_parser, parse_content
from rtcompile.runtime.twin import stdlib_twin

try:  # the stdlib regex parser, to read an xml tag_pattern's literal suffix
    import re._parser as _sre_parse  # Python 3.11+
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

__all__ = [
    "OpenAIStream",
    "accumulate_deltas",
    "completion_chunk",
    "message_tool_calls",
    "text_of",
]

_PLACEHOLDER = re.compile(r"\{(\w+(?:\.\w+)*)\}")
_WORD = regex.compile(r"\w+")
_ID_CHARS = string.ascii_letters + string.digits


def _random_call_id(index: int) -> str:
    """"call_" and 24 characters of _ID_CHARS, uniform, from the OS's random source in one read
    (SystemRandom.choices reads it once per character: 24 reads, 32 µs a call against 5). Bytes
    from 248 up are skipped, so that each kept one picks a character with equal chance."""
    chars: list[str] = []
    while len(chars) < 24:
        chars.extend(_ID_CHARS[b % 62] for b in os.urandom(32) if b < 248)
    return "call_" + "".join(chars[:24])


# ---- helpers shared with servers and tests ------------------------------------------------------

def _json_encoder() -> Callable[[Any], str]:
    """json.dumps(value, ensure_ascii=False), called per argument member sent and per call closed:
    json.dumps builds an encoder per call for any non-default option, and even a kept
    JSONEncoder's encode builds its C encoder anew for every value that is not a string (about
    1 us of a member's 1.3). Here the C encoder is built once, without the circular-reference
    check (parsed values hold no cycles; a value that did would raise RecursionError instead of
    ValueError), and used if it writes what JSONEncoder writes (checked once); otherwise
    JSONEncoder."""
    plain = json.JSONEncoder(ensure_ascii=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # (a Python without json's C speedups)
        return plain.encode
    encode_any = make(
        None, plain.default, json.encoder.encode_basestring, None, ": ", ", ", False, False, True
    )
    encode_string = json.encoder.encode_basestring

    def to_json(value: Any) -> str:
        if type(value) is str:
            return encode_string(value)
        return "".join(encode_any(value, 0))

    samples = ["x", 'é"\n\u2028', 0, -1.5, 1e300, float("nan"), True, None, [1, ["a"]],
               {"a": {"b": [1.0, False]}, "c": None}, {1: 2, 2.5: 3, True: 4, None: 5}]
    try:
        if all(to_json(value) == plain.encode(value) for value in samples):
            return to_json
    except Exception:  # an encoder that takes other arguments
        pass
    return plain.encode


_to_json = _json_encoder()


def text_of(value: Any) -> str:
    """How a content/reasoning field's value reads as streamed text: a string as it is; nothing for
    None or an empty object (the final message drops empty values); a list as the concatenation of
    its items' texts (a repeating field holds one value per region, each sent when its region
    closes); any other value as JSON."""
    if isinstance(value, str):
        return value
    if value is None or value == {}:
        return ""
    if isinstance(value, list):
        return "".join(text_of(item) for item in value)
    return _to_json(value)


def _call_parts(item: Any) -> tuple[str, Any, str | None] | None:
    """(name, arguments or _MISSING, id or None) of a call-shaped value, else None."""
    if not isinstance(item, dict):
        return None
    function = item.get("function")
    if not isinstance(function, dict):
        return None
    name = function.get("name")
    if not isinstance(name, str):
        return None
    call_id = item.get("id")
    return (
        name,
        function.get("arguments", _MISSING),
        call_id if isinstance(call_id, str) and call_id else None,
    )


def message_tool_calls(message: dict, template: dict, field: str = "tool_calls") -> list[dict]:
    """The call-shaped values of `message[field]`, flattened in stream order: a repeating field holds
    one value per region, a `transform_each` region a list of values."""
    spec = template.get("fields", {}).get(field) or {}
    value = message.get(field)
    if value is None:
        return []
    each = spec.get("transform_each") is True
    regions = value if spec.get("repeats") and isinstance(value, list) else [value]
    items: list = []
    for region in regions:
        items.extend(region if each and isinstance(region, list) else [region])
    return [item for item in items if _call_parts(item) is not None]


def completion_chunk(
    delta: dict,
    *,
    completion_id: str,
    model: str,
    created: int,
    finish_reason: str | None = None,
    index: int = 0,
) -> dict:
    """A `chat.completion.chunk` object (a JSON-ready dict) carrying one delta."""
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        ],
    }


def accumulate_deltas(deltas: list[dict]) -> dict:
    """The assistant message a client builds from `deltas` (text concatenated, tool calls merged by
    index), in the OpenAI response shape: what a server returns for `stream=False`."""
    message: dict = {"role": "assistant"}
    calls: list[dict] = []
    for delta in deltas:
        for key, value in delta.items():
            if key == "tool_calls":
                for entry in value:
                    index = entry["index"]
                    if index == len(calls):
                        calls.append(
                            {
                                "id": "",
                                "type": "function",
                                "function": {"name": "", "arguments": ""},
                            }
                        )
                    call = calls[index]
                    if "id" in entry:
                        call["id"] += entry["id"]
                    function = entry.get("function", {})
                    call["function"]["name"] += function.get("name") or ""
                    call["function"]["arguments"] += function.get("arguments") or ""
            elif key == "role":
                message["role"] = value
            else:
                message[key] = message.get(key, "") + value
    if calls:
        message["tool_calls"] = calls
    return message


# ---- the emitter: deltas, with adjacent pieces of one kind merged ---------------------------------


class _Deltas:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out: list[dict] = []

    def take(self) -> list[dict]:
        out, self.out = self.out, []
        return out

    def text(self, key: str, text: str) -> None:
        if not text:
            return
        out = self.out
        if out and len(out[-1]) == 1 and key in out[-1]:
            out[-1][key] += text
        else:
            out.append({key: text})

    def call_header(self, index: int, call_id: str, name: str) -> None:
        entry = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        self.out.append({"tool_calls": [entry]})

    def arguments(self, index: int, text: str) -> None:
        out = self.out
        if out:
            last = out[-1]
            calls = last.get("tool_calls")
            if (
                calls is not None
                and len(last) == 1
                and len(calls) == 1
                and calls[0]["index"] == index
            ):
                calls[0]["function"]["arguments"] += text
                return
        out.append({"tool_calls": [{"index": index, "function": {"arguments": text}}]})


_MISSING = object()


# ---- text fields ------------------------------------------------------------------------------


class _TextField:
    """A content or reasoning field: `text` regions stream (stripped like the final value); other
    content parsers, and text turned into something else by a transform, send the value's text at
    the region's close.

    Separators between the values of successive regions follow the parser: `join` puts its string
    between every two values (also empty ones, and after a default); a parser with `errors="keep"`
    joins two non-empty texts of a field without `repeats` with a blank line (the interpreter keeps
    only the last). The separator goes out with the next region's first text."""

    def __init__(self, key: str, spec: dict, default: Any, deltas: _Deltas, keep_mode: bool):
        self.key = key
        self.deltas = deltas
        args = spec.get("content_args", {})
        # Text streams as it comes, unless a transform makes the value something else than the
        # region's text: then, as for the structured parsers, the value's text goes at the close.
        self.streams = spec.get("content", "text") == "text" and spec.get("transform") in (None, "{content}")
        self.strip = bool(args.get("strip", True)) if isinstance(args, dict) else True
        join = spec.get("join")
        self.join = join if isinstance(join, str) and spec.get("repeats") else None
        self.has_previous = self.join is not None and default is not None
        self.blank_lines = keep_mode and self.join is None and not spec.get("repeats")
        self.has_text = False  # (blank_lines) the field's value so far is a non-empty string
        self.parts: list[str] = []  # everything sent, for the check at finish
        self.started = False
        self.pending = ""  # trailing whitespace held back
        self.separator: str | None = None  # join: sent even before an empty value
        self.blank_line: str | None = None  # keep mode: sent only before non-empty text
        self.region_text = False
        self.closes = 0
        self.raw: list[str] = []  # region text of a field that does not stream
        self.inserted: list[str] = []  # raw text of failed regions, sent where they occurred

    def send(self, text: str) -> None:
        """Text of the current region's value (with the separator it needs)."""
        if text:
            self.region_text = True
            if self.blank_line is not None:
                text = self.blank_line + text
                self.blank_line = None
        if self.separator is not None:
            text = self.separator + text
            self.separator = None
        if text:
            self.parts.append(text)
            self.deltas.text(self.key, text)

    def open(self) -> None:
        self.started = False
        self.pending = ""
        self.region_text = False
        self.separator = self.join if self.has_previous else None
        self.blank_line = "\n\n" if self.blank_lines and self.has_text else None

    def chunk(self, text: str) -> None:
        if not self.streams:
            self.raw.append(text)
            return
        if not self.strip:
            self.send(text)
            return
        if not self.started:
            text = text.lstrip()
            if not text:
                return
            self.started = True
        core = text.rstrip()
        if not core:
            self.pending += text
            return
        piece = self.pending + core if self.pending else core
        self.pending = text[len(core) :]
        self.send(piece)

    def close(self, event: dict) -> None:
        self.closes += 1
        self.pending = ""
        raw, self.raw = "".join(self.raw), []
        if "error" in event:  # errors="keep": the value is lost to the message, not to the stream
            self.separator = self.blank_line = None
            self.insert(raw)
            return
        value_is_text = True
        if not self.streams:
            value = event.get("value")
            value_is_text = isinstance(value, str)
            self.send(text_of(value))
        elif self.separator is not None:
            self.send("")  # an empty value still gets its separator
        self.blank_line = None
        if self.join is not None:
            self.has_previous = True
        if self.blank_lines:  # the field's value is now a non-empty string, or not
            self.has_text = (self.has_text or self.region_text) if value_is_text else False

    def insert(self, raw: str) -> None:
        """Raw text of a failed tool-call region, sent as this field's text (content)."""
        self.inserted.append(raw)
        self.parts.append(raw)
        self.deltas.text(self.key, raw)


# ---- where a call's parts come from ---------------------------------------------------------------


class _Source:
    """One part of a call (name, id or arguments): a literal, an open-pattern capture, or a path into
    the parsed content (relative to the list item under transform_each)."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: Any = None):
        self.kind = kind  # "literal" | "capture" | "path" | "unknown"
        self.value = value


def _source(node: Any, each: bool) -> _Source:
    if isinstance(node, (dict, list)):  # built from placeholders: known only once parsed
        return _Source("unknown")
    if not isinstance(node, str):
        return _Source("literal", node)
    whole = _PLACEHOLDER.fullmatch(node)
    if whole is None:
        return _Source("literal", node)
    root, *keys = whole.group(1).split(".")
    if each:  # the scope is the captures overlaid by the item's keys: assume the item has it
        return _Source("path", (root, *keys))
    if root == "content":
        return _Source("path", tuple(keys))
    if keys:  # captures are strings: a dotted path into one always fails
        return _Source("unknown")
    return _Source("capture", root)


class _Plan:
    """What the adapter knows about the tool-call field from the template."""

    def __init__(self, spec: dict):
        self.each = spec.get("transform_each") is True
        transform = spec.get("transform")
        self.name = self.arguments = self.id = _Source("unknown")
        self.has_id = False
        if isinstance(transform, dict):
            function = transform.get("function")
            if isinstance(function, str):
                base = _source(function, self.each)
                if base.kind == "path":
                    self.name = _Source("path", base.value + ("name",))
                    self.arguments = _Source("path", base.value + ("arguments",))
            elif isinstance(function, dict):
                if "name" in function:
                    self.name = _source(function["name"], self.each)
                if "arguments" in function:
                    self.arguments = _source(function["arguments"], self.each)
            if "id" in transform:
                self.has_id = True
                self.id = _source(transform["id"], self.each)
        self.content = spec.get("content", "text")
        self.content_args = spec.get("content_args", {})


# ---- incremental extractors ----------------------------------------------------------------------


class _Capture:
    """Raw text from a start position on, collected across chunks (identity-compared)."""

    __slots__ = ("parts", "start")

    def __init__(self, start: int):
        self.parts: list[str] = []
        self.start = start


# What a member's value is, as far as the scanner has seen (it completes at its closing quote or
# bracket; a number or literal only at the following "," or "}").
_V_NONE, _V_STRING, _V_CONTAINER, _V_DONE, _V_DELIMITED = 0, 1, 2, 3, 4


class _Frame:
    __slots__ = (
        "kind",
        "rel",
        "slot",
        "role",
        "expect_key",
        "key",
        "index",
        "cap",
        "vcap",
        "vwhich",
        "vstate",
    )

    def __init__(self, kind: str, rel: tuple | None, slot: int, role: int):
        self.kind = kind  # "{" or "["
        self.rel = rel  # path relative to the call object (None: the transform_each list itself)
        self.slot = slot
        self.role = role
        self.expect_key = True
        self.key: str | None = None
        self.index = 0
        self.cap: _Capture | None = None  # the member (args frames) or the key (tracked frames)
        self.vcap: _Capture | None = None  # a name/id value
        self.vwhich = ""
        self.vstate = _V_NONE


_OPAQUE, _TRACK, _ARGS = 0, 1, 2


class _JsonScanner:
    """One pass over a JSON region, chunk by chunk: reports the members of the arguments object and
    the name/id values of each call as soon as they are complete (their raw text; the caller parses
    it with the template's own JSON parser). Subtrees that hold nothing of interest are only counted.
    """

    def __init__(
        self, sink: "_ToolRegion", plan: _Plan, delims: list[tuple[str, str]], unquoted: bool
    ):
        self.sink = weakref.proxy(sink)  # (a back reference: no cycle to wait for the collector)
        self.each = plan.each
        paths = {}
        for which, source in (("name", plan.name), ("id", plan.id), ("args", plan.arguments)):
            if source.kind == "path":
                paths[which] = source.value
        args = paths.get("args")
        # arguments that contain the name or id cannot stream member by member
        if args is not None and any(
            p[: len(args)] == args for w, p in paths.items() if w != "args"
        ):
            args = None
        self.args_rel = args
        self.leaves = {p: w for w, p in paths.items() if w != "args"}
        self.prefixes = {
            p[:i]
            for w, p in paths.items()
            if w != "args" or args is not None
            for i in range(len(p))
        }
        self.delims = delims
        self.unquoted = unquoted
        firsts = "".join(sorted({o[0] for o, _ in delims}))
        self.opener_firsts = firsts
        self.structural = re.compile("[" + re.escape('{}[],:"' + firsts) + "]")
        self.string_stop = re.compile("[" + re.escape('"\\' + firsts) + "]")
        self.stack: list[_Frame] = []
        self.opaque = 0
        self.in_string = False
        self.delim_close: str | None = None
        self.carry = ""
        self.active: list[_Capture] = []
        self.root_seen = False

    # -- captures
    def _start(self, pos: int) -> _Capture:
        capture = _Capture(pos)
        self.active.append(capture)
        return capture

    def _end(self, capture: _Capture, text: str, pos: int) -> str:
        capture.parts.append(text[capture.start : pos])
        self.active.remove(capture)
        return "".join(capture.parts)

    # -- the dialect's custom string delimiters
    def _opener_at(self, text: str, j: int) -> tuple[str, str] | None | bool:
        """The delimiter pair opening at j, None if none does, False if the text ends too soon."""
        undecided = False
        rest = len(text) - j
        for opener, closer in self.delims:
            if text.startswith(opener, j):
                return opener, closer
            if rest < len(opener) and opener.startswith(text[j:]):
                undecided = True
        return False if undecided else None

    def feed(self, chunk: str) -> None:
        text = self.carry + chunk if self.carry else chunk
        n = len(text)
        i = 0
        end = n
        firsts = self.opener_firsts
        while i < n:
            if self.delim_close is not None:  # inside a custom-delimited string: no escapes
                closer = self.delim_close
                j = text.find(closer, i)
                if j < 0:
                    end = max(i, n - len(closer) + 1)  # the closer may straddle the boundary
                    break
                i = j + len(closer)
                self.delim_close = None
                if (
                    not self.in_string
                    and not self.opaque
                    and self.stack
                    and self.stack[-1].vstate == _V_DELIMITED
                ):
                    self._complete(self.stack[-1], text, i)
                continue
            if self.in_string:
                m = self.string_stop.search(text, i)
                if m is None:
                    break
                j = m.start()
                c = text[j]
                if firsts and c in firsts:
                    pair = self._opener_at(text, j)
                    if pair is False:
                        end = j
                        break
                    if pair is not None:
                        self.delim_close = pair[1]
                        i = j + len(pair[0])
                        continue
                if c == "\\":
                    if j + 1 >= n:
                        end = j
                        break
                    i = j + 2
                elif c == '"':
                    self.in_string = False
                    i = j + 1
                    if not self.opaque and self.stack and self.stack[-1].vstate == _V_STRING:
                        self._complete(self.stack[-1], text, i)
                else:
                    i = j + 1
                continue
            m = self.structural.search(text, i)
            if m is None:
                break
            j = m.start()
            c = text[j]
            i = j + 1
            if firsts and c in firsts:
                pair = self._opener_at(text, j)
                if pair is False:
                    end = j
                    break
                if pair is not None:
                    self.delim_close = pair[1]
                    i = j + len(pair[0])
                    self._value_starts(_V_DELIMITED)
                    continue
            if c == '"':
                self.in_string = True
                self._value_starts(_V_STRING)
            elif self.opaque:
                if c == "{" or c == "[":
                    self.opaque += 1
                elif c == "}" or c == "]":
                    self.opaque -= 1
                    if not self.opaque and self.stack and self.stack[-1].vstate == _V_CONTAINER:
                        self._complete(self.stack[-1], text, i)
            elif c in "{}[],:":
                self._structural(c, text, j)
        for capture in self.active:
            capture.parts.append(text[capture.start : end])
            capture.start = 0
        self.carry = text[end:] if end < n else ""

    def _value_starts(self, state: int) -> None:
        if not self.opaque and self.stack:
            frame = self.stack[-1]
            if frame.vstate == _V_NONE and not frame.expect_key and frame.kind == "{":
                frame.vstate = state

    def _complete(self, frame: _Frame, text: str, pos: int) -> None:
        """A member's value ended at `pos` (a string or a container): report it now."""
        frame.vstate = _V_DONE
        if frame.role == _ARGS and frame.cap is not None:
            raw = self._end(frame.cap, text, pos)
            frame.cap = None
            self.sink.member(frame.slot, raw)
        if frame.vcap is not None:
            raw = self._end(frame.vcap, text, pos)
            frame.vcap = None
            self.sink.leaf(frame.slot, frame.vwhich, raw)

    def _role(self, rel: tuple) -> int:
        if rel == self.args_rel:
            return _ARGS
        return _TRACK if rel in self.prefixes else _OPAQUE

    def _push_object(self, rel: tuple, slot: int, role: int, j: int) -> None:
        frame = _Frame("{", rel, slot, role)
        frame.cap = self._start(j + 1)
        self.stack.append(frame)

    def _member_end(self, frame: _Frame, text: str, j: int) -> None:
        if frame.cap is not None:
            raw = self._end(frame.cap, text, j)
            frame.cap = None
            if frame.role == _ARGS and raw.strip() and frame.vstate == _V_NONE:
                self.sink.member(frame.slot, raw)
        if frame.vcap is not None:
            raw = self._end(frame.vcap, text, j)
            frame.vcap = None
            self.sink.leaf(frame.slot, frame.vwhich, raw)
        frame.expect_key = True
        frame.key = None
        frame.vstate = _V_NONE

    def _structural(self, c: str, text: str, j: int) -> None:
        stack = self.stack
        if not stack:
            if c == "{" or c == "[":
                if self.root_seen:  # extra data after the value: the region will fail to parse
                    self.opaque = 1
                    return
                self.root_seen = True
                if self.each:
                    if c == "[":
                        stack.append(_Frame("[", None, 0, _TRACK))
                    else:
                        self.opaque = 1
                elif c == "{" and self._role(()) != _OPAQUE:
                    self._push_object((), 0, self._role(()), j)
                else:
                    self.opaque = 1
            return
        frame = stack[-1]
        if c == "{" or c == "[":
            if frame.kind == "[":  # an item of the transform_each list
                if c == "{":
                    self.sink.element(frame.index)
                    self._push_object((), frame.index, self._role(()), j)
                else:
                    self.opaque = 1
                return
            if frame.vstate == _V_NONE and not frame.expect_key:
                frame.vstate = _V_CONTAINER
            if frame.expect_key or frame.role == _ARGS or frame.key is None:
                self.opaque = 1
                return
            rel = frame.rel + (frame.key,)
            role = self._role(rel)
            if c == "{" and role != _OPAQUE:
                self._push_object(rel, frame.slot, role, j)
            else:
                self.opaque = 1
            return
        if c == ",":
            if frame.kind == "[":
                frame.index += 1
            else:
                self._member_end(frame, text, j)
                frame.cap = self._start(j + 1)
            return
        if c == ":":
            if frame.kind == "{" and frame.expect_key:
                frame.expect_key = False
                if frame.role == _TRACK and frame.cap is not None:
                    raw = self._end(frame.cap, text, j)
                    frame.cap = None
                    frame.key = key = self._decode_key(raw)
                    if key is not None:
                        which = self.leaves.get(frame.rel + (key,))
                        if which is not None:
                            frame.vcap = self._start(j + 1)
                            frame.vwhich = which
            return
        # "}" or "]"
        if frame.kind == "{":
            self._member_end(frame, text, j)
        stack.pop()
        if stack and stack[-1].vstate == _V_CONTAINER:
            self._complete(stack[-1], text, j + 1)

    def _decode_key(self, raw: str) -> str | None:
        key = raw.strip()
        if key.startswith('"'):
            try:
                value = json.loads(key)
            except ValueError:
                return None
            return value if isinstance(value, str) else None
        for opener, closer in self.delims:
            if (
                key.startswith(opener)
                and key.endswith(closer)
                and len(key) >= len(opener) + len(closer)
            ):
                return key[len(opener) : len(key) - len(closer)]
        if self.unquoted and _WORD.fullmatch(key):
            return key
        return None


@functools.lru_cache(maxsize=256)  # (read once per pattern, not once per call region)
def _literal_suffix(pattern: str) -> str:
    """The literal text every match of `pattern` ends with ("" if unknown)."""
    return _literal_edge(pattern, last=True)


@functools.lru_cache(maxsize=256)
def _literal_prefix(pattern: str) -> str:
    """The literal text every match of `pattern` starts with ("" if unknown)."""
    return _literal_edge(pattern, last=False)


def _literal_edge(pattern: str, last: bool) -> str:
    try:
        parsed = _sre_parse.parse(pattern)
    except Exception:  # regex-module syntax the stdlib parser does not know
        return ""
    if parsed.state.flags & (re.IGNORECASE | re.VERBOSE):
        return ""
    chars: list[str] = []
    for op, value in reversed(list(parsed)) if last else list(parsed):
        if op is not _sre_parse.LITERAL:
            break
        chars.append(chr(value))
    return "".join(reversed(chars) if last else chars)


@functools.lru_cache(maxsize=256)  # (regex.compile's own cache lookup costs a few µs, once per call)
def _tag_regex(pattern: str) -> Any:
    return regex.compile(pattern, regex.DOTALL)


class _TagArgs:
    """xml-inline: each `tag_pattern` match becomes one argument when it can no longer change.

    The region text after the last match is kept; a search runs only when a new chunk completes an
    occurrence of the pattern's literal suffix (every match ends with it). A match is final when no
    earlier start is still a partial match and appending the suffix again does not move its end (a
    greedy pattern would). Duplicate keys follow `merge_duplicates`, like the final parse."""

    def __init__(self, region: "_ToolRegion", args: dict):
        self.region = weakref.proxy(region)  # (a back reference: no cycle to wait for the collector)
        tag_pattern = args.get("tag_pattern")
        self.dead = not isinstance(tag_pattern, str)
        self.suffix = "" if self.dead else _literal_suffix(tag_pattern)
        if not self.suffix:
            self.dead = True
            return
        try:
            self.pattern = _tag_regex(tag_pattern)
        except Exception:
            self.dead = True
            return
        # Complete matches (the search below wants one; the probe is one) by the pattern's stdlib
        # twin where it has one: the faster engine, and about 15 us a tag less on a long value.
        self.complete = stdlib_twin(tag_pattern)
        self.first = _literal_prefix(tag_pattern)[:1]  # every match starts with it ("" if unknown)
        self.value_parser = args.get("value_parser")
        self.merge = args.get("merge_duplicates", False)
        self.parts: list[str] = []
        self.edge = ""  # the last len(suffix) - 1 characters seen
        self.values: dict = {}
        self.merged: set = set()  # keys whose values merge_duplicates turned into a list

    def feed(self, text: str) -> None:
        if self.dead:
            return
        self.parts.append(text)
        suffix = self.suffix
        window = self.edge + text
        if suffix not in window:
            self.edge = window[max(0, len(window) - len(suffix) + 1) :]
            return
        tail = "".join(self.parts)
        pos = 0
        pattern = self.pattern
        complete = self.complete
        while True:
            # A partial search reports the leftmost complete match wherever there is one (else a
            # partial one, which ends the loop): a complete search finds the same.
            if complete is not None:
                m = complete.search(tail, pos)
                if m is None:
                    break
            else:
                m = pattern.search(tail, pos, partial=True)
                if m is None or m.partial:
                    break
            start, end = m.span()
            if start == end:
                self.dead = True
                return
            if start > pos and (not self.first or self.first in tail[pos:start]):
                earlier = pattern.search(tail, pos, start, partial=True)
                if earlier is not None and earlier.start() < start:
                    break
            probe = (complete or pattern).match(tail + suffix, start)
            if probe is None or probe.end() != end:
                break
            if not self._emit(m):
                return
            pos = end
        tail = tail[pos:]
        self.parts = [tail]
        self.edge = tail[max(0, len(tail) - len(suffix) + 1) :]

    def _emit(self, m: Any) -> bool:
        groups = m.groupdict()
        key = groups.get("key")
        try:
            if key is None:
                raise ValueError("no key")
            value = _sub_parse(groups.get("value", ""), self.value_parser)
        except Exception:  # the final parse fails the same way: leave it to the region's close
            self.dead = True
            return False
        values = self.values
        if key in values and self.merge:
            if key not in self.merged:  # (the first repeat makes the list, as in the final parse)
                values[key] = [values[key]]
                self.merged.add(key)
            values[key].append(value)
        else:
            values[key] = value
        self.region.pair(0, key, values[key])
        return True


def _sub_parse(raw: Any, value_parser: Any) -> Any:
    # as content_parsers._sub_parse: the value parser of xml-inline and kv-lines
    if value_parser is None:
        return raw
    return parse_content(raw, value_parser.get("name", "text"), value_parser.get("args", {}))


class _LineArgs:
    """kv-lines: each line becomes one argument once its separator arrives (the last line at close)."""

    def __init__(self, region: "_ToolRegion", args: dict):
        self.region = weakref.proxy(region)  # (a back reference: no cycle to wait for the collector)
        self.line_sep = args.get("line_sep", "\n")
        self.kv_sep = args.get("kv_sep", ":")
        self.dead = not (
            isinstance(self.line_sep, str)
            and self.line_sep
            and isinstance(self.kv_sep, str)
            and self.kv_sep
        )
        self.strip = args.get("strip", True)
        self.value_parser = args.get("value_parser")
        self.parts: list[str] = []
        self.edge = ""

    def feed(self, text: str) -> None:
        if self.dead:
            return
        sep = self.line_sep
        self.parts.append(text)
        window = self.edge + text
        if sep not in window:
            self.edge = window[max(0, len(window) - len(sep) + 1) :]
            return
        *lines, rest = "".join(self.parts).split(sep)
        for line in lines:
            if not self._line(line):
                return
        self.parts = [rest]
        self.edge = rest[max(0, len(rest) - len(sep) + 1) :]

    def _line(self, line: str) -> bool:
        strip = self.strip
        if strip:
            line = line.strip()
        if not line or self.kv_sep not in line:
            return True
        key, value = line.split(self.kv_sep, 1)
        if strip:
            key, value = key.strip(), value.strip()
        try:
            value = _sub_parse(value, self.value_parser)
        except Exception:
            self.dead = True
            return False
        self.region.pair(0, key, value)
        return True


# python-call-list: where the scanner stands in `[name(key=value, ...), ...]`.
_CL_BEFORE, _CL_BETWEEN, _CL_NAME, _CL_ARGUMENTS, _CL_DONE = range(5)
_CL_SPACE = " \t\n\r"
_CL_NAME_START = frozenset(string.ascii_letters + "_")
# What can end or nest an argument's value, outside strings.
_CL_ARGUMENT_STOP = re.compile(r"[\[\]{}()'\",]")
_CL_STRING_STOP = {"'": re.compile(r"['\\]"), '"': re.compile(r'["\\]')}


class _CallListArgs:
    """python-call-list: each call is announced once its name is complete (at its "("), and each
    keyword argument is sent once its value is (at the "," or ")" after it), read by the content
    parser's own reader, so that it is exactly the value the region's final parse gives.

    The region is scanned once: outside strings a regex jumps to the next bracket, quote or comma;
    inside one, to its quote or a backslash (an escape split across chunks is remembered). Only the
    current name or argument is kept. Text the grammar refuses stops the scan: the final parse then
    fails too, and the region's close reports it."""

    def __init__(self, region: "_ToolRegion"):
        self.region = weakref.proxy(region)  # (a back reference: no cycle to wait for the collector)
        self.state = _CL_BEFORE
        self.slot = 0  # the call being read
        self.piece: list[str] = []  # its name, or its current argument, so far
        self.depth = 0  # lists and dicts open in the current argument
        self.quote = ""  # the quote of the string the scan is in, if any
        self.escaped = False  # the last chunk ended in a string's backslash

    def feed(self, text: str) -> None:
        i, n = 0, len(text)
        while i < n:
            state = self.state
            if state == _CL_ARGUMENTS:
                i = self._arguments(text, i, n)
            elif state == _CL_NAME:
                j = text.find("(", i)
                if j < 0:
                    self.piece.append(text[i:])
                    return
                self.piece.append(text[i:j])
                self._name()
                i = j + 1
            elif state == _CL_DONE:
                return
            else:  # before the list, or between calls
                c = text[i]
                if c in _CL_SPACE:
                    i += 1
                elif state == _CL_BEFORE:
                    self.state = _CL_BETWEEN if c == "[" else _CL_DONE
                    i += 1
                elif c == ",":
                    i += 1
                elif c in _CL_NAME_START:
                    self.state = _CL_NAME
                    self.piece = []
                else:  # "]" ends the list; anything else fails the final parse
                    self.state = _CL_DONE

    def _name(self) -> None:
        name = "".join(self.piece).rstrip(_CL_SPACE)
        self.piece = []
        reader = CallListReader(name)  # (the grammar's own name rule)
        try:
            reader.read_name("a function name")
            whole = reader.at_end()
        except ValueError:
            whole = False
        if not whole:
            self.state = _CL_DONE
            return
        self.region.element(self.slot)
        self.region.named(self.slot, name)
        self.state = _CL_ARGUMENTS
        self.depth = 0

    def _arguments(self, text: str, i: int, n: int) -> int:
        """Scan arguments from text[i:]; return where the scan stopped (n: the chunk is used up)."""
        piece = self.piece
        while i < n:
            if self.quote:
                if self.escaped:  # the character after a backslash at the last chunk's end
                    self.escaped = False
                    piece.append(text[i])
                    i += 1
                    continue
                m = _CL_STRING_STOP[self.quote].search(text, i)
                if m is None:
                    piece.append(text[i:])
                    return n
                j = m.start()
                if text[j] == "\\":
                    if j + 1 == n:
                        self.escaped = True
                        piece.append(text[i:])
                        return n
                    piece.append(text[i : j + 2])
                    i = j + 2
                else:
                    self.quote = ""
                    piece.append(text[i : j + 1])
                    i = j + 1
                continue
            m = _CL_ARGUMENT_STOP.search(text, i)
            if m is None:
                piece.append(text[i:])
                return n
            j = m.start()
            c = text[j]
            if c == "'" or c == '"':
                self.quote = c
            elif c == "[" or c == "{" or c == "(":
                self.depth += 1
            elif self.depth and (c == "]" or c == "}" or c == ")"):
                self.depth -= 1
            elif c == "," or c == ")":
                if self.depth == 0:
                    piece.append(text[i:j])
                    self._argument(last=c == ")")
                    return j + 1
            else:  # a "]" or "}" closing nothing: the final parse fails
                self.state = _CL_DONE
                return n
            piece.append(text[i : j + 1])
            i = j + 1
        return n

    def _argument(self, last: bool) -> None:
        raw = "".join(self.piece)
        self.piece = []
        slot = self.slot
        if last:  # the call's ")": the next call comes
            self.state = _CL_BETWEEN
            self.slot += 1
            if not raw.strip(_CL_SPACE):
                return  # `f()`, or the end after a trailing comma (which the final parse refuses)
        self.region.keyword_argument(slot, raw)


# ---- tool calls -----------------------------------------------------------------------------------


class _Call:
    __slots__ = (
        "slot",
        "index",
        "name",
        "id",
        "header",
        "args_open",
        "sent",
        "queue",
        "broken",
        "fragments",
    )

    def __init__(self, slot: int):
        self.slot = slot
        self.index = -1  # the OpenAI index, once announced
        self.name: str | None = None
        self.id: str | None = None
        self.header = False
        self.args_open = False  # "{" sent
        self.sent: dict[str, str] = {}  # key -> JSON text of the value sent last
        self.queue: list[tuple[str, Any]] = []  # members waiting for the header
        self.broken = False  # a member failed to parse: the rest waits for the region's close
        self.fragments: list[str] = []


def _delimiter_pairs(value: Any) -> list[tuple[str, str]] | None:
    """`string_delims` as (opener, closer) pairs; None when malformed (no incremental scan)."""
    if not isinstance(value, list):
        return None
    pairs = []
    for pair in value:
        if not (
            isinstance(pair, (list, tuple))
            and len(pair) == 2
            and all(isinstance(s, str) and s for s in pair)
        ):
            return None
        pairs.append((pair[0], pair[1]))
    return pairs


class _ToolRegion:
    """One open region of the tool-call field: its calls, its extractor and its raw text."""

    def __init__(self, field: "_ToolField", captures: dict | None):
        self.field = weakref.proxy(field)  # (a back reference: no cycle to wait for the collector)
        self.plan = plan = field.plan
        self.captures = captures
        self.raw: list[str] = []
        self.calls: dict[int, _Call] = {}
        self.next_header = 0  # headers go out in slot order
        self.extractor: Any = None
        self.parse_json: Callable[[str], Any] | None = None
        args = plan.content_args
        arguments = plan.arguments
        if plan.content == "json" and isinstance(args, dict) and not args.get("allow_non_json"):
            delims = _delimiter_pairs(args.get("string_delims", []))
            if delims is not None:
                self.parse_json = field.json_parser
                self.extractor = _JsonScanner(self, plan, delims, bool(args.get("unquoted_keys")))
        elif (
            plan.content == "python-call-list"
            and plan.each
            and plan.name.kind == "path"
            and plan.name.value == ("name",)
            and plan.arguments.kind == "path"
            and plan.arguments.value == ("arguments",)
            and plan.id.kind != "path"
        ):
            self.extractor = _CallListArgs(self)
        elif (
            plan.content in ("xml-inline", "kv-lines")
            and isinstance(args, dict)
            and "value_parser_by" not in args  # (a value's parser is chosen per tag: sent whole at the close)
            and not plan.each
            and arguments.kind == "path"
            and arguments.value == ()
        ):
            self.extractor = (
                _TagArgs(self, args) if plan.content == "xml-inline" else _LineArgs(self, args)
            )
        if not plan.each:
            self.element(0)

    # -- from the extractors
    def element(self, slot: int) -> None:
        call = self.calls.get(slot)
        if call is None:
            call = self.calls[slot] = _Call(slot)
            plan = self.plan
            call.name = self._known(plan.name)
            if plan.has_id:
                call.id = self._known(plan.id)
            self.flush()

    def _known(self, source: _Source) -> Any:
        """A part known when the region opens (literal or capture), else None."""
        if source.kind == "literal":
            return source.value if isinstance(source.value, str) else None
        if source.kind == "capture" and self.captures is not None:
            value = self.captures.get(source.value)
            return value if isinstance(value, str) else None
        return None

    def leaf(self, slot: int, which: str, raw: str) -> None:
        call = self.calls.get(slot)
        if call is None or call.header:
            return
        try:
            value = self.parse_json(raw)
        except Exception:
            return
        if not isinstance(value, str):
            return
        if which == "name" and call.name is None:
            call.name = value
        elif which == "id" and call.id is None:
            call.id = value
        self.flush()

    def member(self, slot: int, raw: str) -> None:
        call = self.calls.get(slot)
        if call is None or call.broken:
            return
        try:
            members = self.parse_json("{" + raw + "}")
        except Exception:
            members = None
        if not isinstance(members, dict):
            call.broken = True
            return
        for key, value in members.items():
            self.pair(slot, key, value)

    def named(self, slot: int, name: str) -> None:
        """A call's name, complete (python-call-list)."""
        call = self.calls[slot]
        if not call.header and call.name is None:
            call.name = name
            self.flush()

    def keyword_argument(self, slot: int, raw: str) -> None:
        """`key=value` of a python-call-list call, complete: read as the final parse reads it."""
        call = self.calls.get(slot)
        if call is None or call.broken:
            return
        reader = CallListReader(raw)
        try:
            key, value = reader.read_keyword_argument(None)
            if not reader.at_end():
                raise ValueError("more after the value")
        except ValueError:
            call.broken = True  # the final parse fails on it too: the region's close says so
            return
        self.pair(slot, key, value)

    def pair(self, slot: int, key: str, value: Any) -> None:
        call = self.calls[slot]
        if call.header:
            self.field.send_member(call, key, value)
        else:
            call.queue.append((key, value))

    def flush(self) -> None:
        """Announce the calls whose name (and id, when the template gives one) is known, in order."""
        plan = self.plan
        while True:
            call = self.calls.get(self.next_header)
            if call is None or call.name is None:
                return
            if plan.has_id and plan.id.kind == "path" and call.id is None:
                return
            self.field.announce(call, call.id)
            for key, value in call.queue:
                self.field.send_member(call, key, value)
            call.queue = []
            self.next_header += 1


# The tool-call field's plan and JSON parser, per field spec (id -> (spec, a copy as it was, plan,
# parser)): a server builds a stream per request, all from one template. The copy, compared on
# lookup, catches a spec changed in place; holding the spec keeps its id from being reused.
_TOOL_PLANS: dict[int, tuple[dict, dict, _Plan, Any]] = {}
_TOOL_PLANS_LIMIT = 64


def _tool_plan(spec: dict) -> tuple[_Plan, Any]:
    cached = _TOOL_PLANS.get(id(spec))
    if cached is not None and cached[0] is spec and cached[1] == spec:
        return cached[2], cached[3]
    plan = _Plan(spec)
    args = plan.content_args
    json_parser = make_parser("json", args if isinstance(args, dict) else {})
    if len(_TOOL_PLANS) >= _TOOL_PLANS_LIMIT:
        _TOOL_PLANS.clear()
    _TOOL_PLANS[id(spec)] = (spec, copy.deepcopy(spec), plan, json_parser)
    return plan, json_parser


class _ToolField:
    def __init__(
        self, stream: "OpenAIStream", spec: dict, tool_params: dict, make_id: Callable[[int], str]
    ):
        # A back reference to the stream, weak: otherwise the stream (and its parser's buffer) would
        # stay alive after its last use, until the garbage collector's next full pass.
        self.stream = weakref.proxy(stream)
        self.deltas = stream._deltas
        self.plan, self.json_parser = _tool_plan(spec)
        self.tool_params = tool_params
        self.cast = cast_mode(self.plan.content, self.plan.content_args)
        self.make_id = make_id
        self.region: _ToolRegion | None = None
        self.calls: list[_Call] = []  # every announced call, by OpenAI index
        self.closes = 0

    # -- the stream side
    def announce(self, call: _Call, template_id: str | None) -> None:
        index = len(self.calls)
        call.index = index
        call.header = True
        call.id = (
            template_id if isinstance(template_id, str) and template_id else self.make_id(index)
        )
        self.calls.append(call)
        self.deltas.call_header(index, call.id, call.name)

    def _arguments(self, call: _Call, text: str) -> None:
        call.fragments.append(text)
        self.deltas.arguments(call.index, text)

    def send_member(self, call: _Call, key: str, value: Any) -> None:
        value_text = _to_json(self._coerce(call.name, key, value))
        lead = ", " if call.args_open else "{"
        call.args_open = True
        call.sent[key] = value_text
        self._arguments(call, lead + _to_json(key) + ": " + value_text)

    def _coerce(self, name: str | None, key: str, value: Any) -> Any:
        """coerce_tool_calls for one argument (same rules; never mutates `value`)."""
        properties = self.tool_params.get(name) if name is not None and self.cast is not None else None
        if not properties or key not in properties:
            return value
        types = schema_types(properties[key])
        if not types:
            return value
        return coerce_argument(value, types, self.cast == TYPED)

    def _close_arguments(self, call: _Call) -> None:
        self._arguments(call, "}" if call.args_open else "{}")

    # -- the parser side
    def open(self, captures: dict | None) -> None:
        self.region = _ToolRegion(self, captures)

    def chunk(self, text: str) -> None:
        region = self.region  # (the open region's side of a chunk, here: most chunks of a call)
        if region is not None:
            region.raw.append(text)
            if region.extractor is not None:
                region.extractor.feed(text)

    def close(self, event: dict) -> None:
        self.closes += 1
        region, self.region = self.region, None
        if region is None:  # a close without an open we saw: nothing was streamed
            region = _ToolRegion(self, None)
        stream = self.stream
        if "error" in event:
            for call in region.calls.values():
                if call.header:
                    self._close_arguments(call)
            raw = "".join(region.raw)
            announced = [call.index for call in region.calls.values() if call.header]
            stream.errors.append(
                {
                    "field": event["field"],
                    "raw": raw,
                    "error": event["error"],
                    "sent_as": "content",
                    "calls": announced,
                }
            )
            stream._content_raw(raw)
            return
        value = event.get("value")
        items = value if region.plan.each and isinstance(value, list) else [value]
        for slot, item in enumerate(items):
            call = region.calls.get(slot)
            parts = _call_parts(item)
            if parts is None:
                if call is not None and call.header:
                    self._close_arguments(call)
                    stream._diverged(
                        f"call {call.index}: its region's value is not a tool call: {item!r}"
                    )
                continue
            name, arguments, final_id = parts
            if call is None:
                call = region.calls[slot] = _Call(slot)
            if not call.header:
                call.name = name
                call.queue = []
                self.announce(call, final_id)
            elif call.name != name:
                stream._diverged(
                    f"call {call.index}: name {call.name!r} was sent, the message has {name!r}"
                )
            elif final_id and final_id != call.id:
                stream._diverged(
                    f"call {call.index}: id {call.id!r} was sent, the message has {final_id!r}"
                )
            self._reconcile(call, {} if arguments is _MISSING else arguments)
        for slot, call in region.calls.items():
            if slot >= len(items) and call.header:
                self._close_arguments(call)
                stream._diverged(f"call {call.index}: announced, but not in the region's value")

    def _reconcile(self, call: _Call, arguments: Any) -> None:
        if not call.args_open:
            self._arguments(call, _to_json(arguments))
            return
        if not isinstance(arguments, dict):
            self._arguments(call, "}")
            self.stream._diverged(
                f"call {call.index}: members were sent, but the arguments are {arguments!r}"
            )
            return
        missing = [key for key in call.sent if key not in arguments]
        if missing:
            self.stream._diverged(
                f"call {call.index}: keys {missing} were sent but are not in the arguments"
            )
        for key, value in arguments.items():
            value_text = _to_json(value)
            if call.sent.get(key) != value_text:
                call.sent[key] = value_text
                self._arguments(call, ", " + _to_json(key) + ": " + value_text)
        self._arguments(call, "}")


def _loads_to(text: str, arguments: Any) -> bool:
    """Whether the arguments text sent loads to exactly the message's arguments (absent: {})."""
    # The usual case, at one encoding instead of a load and two sorted dumps: the members went out
    # in the message's order, each as json.dumps writes it.
    if isinstance(arguments, dict):
        try:
            if text == _to_json(arguments):
                return True
        except (TypeError, ValueError):
            pass
    try:
        sent = json.loads(text)
    except ValueError:
        return False
    expected = {} if arguments is _MISSING else arguments
    try:
        return json.dumps(sent, sort_keys=True) == json.dumps(expected, sort_keys=True)
    except (TypeError, ValueError):  # not JSON data after all (e.g. a value_parser's odd result)
        return sent == expected


def _without(text: str, pieces: list[str]) -> str:
    """`text` with each of `pieces` removed once, in order (the raw text of failed regions)."""
    for piece in pieces:
        position = text.find(piece)
        if position >= 0:
            text = text[:position] + text[position + len(piece) :]
    return text


# ---- the adapter ----------------------------------------------------------------------------------


def _keeps_errors(parser: Any) -> bool:
    """Whether the parser was built with errors="keep" (which also changes how a field without
    `repeats` that is written twice ends up in the message)."""
    errors = getattr(parser, "errors", None)
    if isinstance(errors, str):
        return errors == "keep"
    return getattr(parser, "errors", "strict") == "keep"


def _template_of(parser: Any) -> dict | None:
    """The TEMPLATE of the generated module that defined the parser's class."""
    for cls in type(parser).__mro__:
        for attribute in vars(cls).values():
            function = getattr(attribute, "__func__", attribute)
            template = getattr(function, "__globals__", {}).get("TEMPLATE")
            if isinstance(template, dict):
                return template
    return None


class OpenAIStream:
    """OpenAI chat-completion deltas from a response parser (see the module docstring).

    `parser`: a fresh parser (`rtcompile.ResponseParser(...)`, a generated module's `ResponseParser`,
    or anything with `initial_events`, `feed(text) -> events` and `finalize() -> (message, events)`);
    parsers that expose `current_field` and `region_captures` let names and ids from open-pattern
    captures go out when a region opens instead of at its close. Build parsers for servers with
    `errors="keep"`, so that a broken tool call does not end the stream.
    `template`: the response template; by default the parser's module's `TEMPLATE`.
    `content_field`, `reasoning_field` (default: `reasoning_content`, else `thinking`),
    `tool_calls_field`: the template's field names (a name the template does not have turns that
    part off). `reasoning_key`: the delta key for reasoning (vLLM's `reasoning_content` by default).
    `tools`: schemas for argument coercion, as the parser's `tools=`; by default the parser's own.
    `seed`: deterministic call ids; `call_id`: a function of the call's index that makes the ids.
    """

    def __init__(
        self,
        parser: Any,
        template: dict | None = None,
        *,
        content_field: str = "content",
        reasoning_field: str | None = None,
        tool_calls_field: str = "tool_calls",
        reasoning_key: str = "reasoning_content",
        tools: list | None = None,
        seed: int | None = None,
        call_id: Callable[[int], str] | None = None,
    ):
        if template is None:
            template = _template_of(parser)
            if template is None:
                raise TypeError("cannot find the parser's template: pass template=")
        self.parser = parser
        self.template = template
        fields = template.get("fields", {})
        defaults = template.get("defaults") or {}
        if reasoning_field is None:
            reasoning_field = next(
                (f for f in ("reasoning_content", "thinking") if f in fields), None
            )
        self._deltas = _Deltas()
        self._text_fields: dict[str, _TextField] = {}
        keep_mode = _keeps_errors(parser)
        for field, key in ((content_field, "content"), (reasoning_field, reasoning_key)):
            if field is None or field == tool_calls_field:
                continue
            if field in fields or field in defaults:  # a default alone is sent at finish
                handler = _TextField(
                    key, fields.get(field, {}), defaults.get(field), self._deltas, keep_mode
                )
                self._text_fields[field] = handler
        if call_id is None:
            if seed is not None:
                rng = random.Random(seed)

                def call_id(index: int) -> str:
                    return "call_" + "".join(rng.choices(_ID_CHARS, k=24))

            else:
                call_id = _random_call_id

        if tools is not None:
            tool_params = tool_parameters(tools)
        else:
            tool_params = getattr(parser, "tool_parameters", None) or {}
        self._tool_field_name = tool_calls_field
        self._tools = (
            _ToolField(self, fields[tool_calls_field], tool_params, call_id)
            if tool_calls_field in fields
            else None
        )
        self._chunk_handlers = {
            field: handler.chunk for field, handler in self._text_fields.items()
        }
        if self._tools is not None:
            self._chunk_handlers[tool_calls_field] = self._tools.chunk
        # Regions that failed to parse (errors="keep"): {"field", "raw", "error", "sent_as": the delta
        # key their raw text went out under, "calls": indices of calls announced before the failure}.
        self.errors: list[dict] = []
        self.divergences: list[str] = []  # where the stream could not follow the final message
        self.finish_reason: str | None = None
        self.message: dict | None = None
        self._finished = False
        self._deltas.out.append({"role": "assistant"})
        for field, handler in self._text_fields.items():
            default = defaults.get(field)
            if handler.join is not None and isinstance(default, str):
                handler.send(default)  # a joined field starts from its default
        self._handle(parser.initial_events)
        self.initial_deltas: list[dict] = self._deltas.take()

    # ---- public API
    def feed(self, text: str) -> list[dict]:
        """Feed the next piece of model output; returns the deltas it completes (possibly none)."""
        if self._finished:
            raise RuntimeError("OpenAIStream already finished")
        events = self.parser.feed(text)
        if not events:
            return []
        if len(events) == 1 and events[0]["type"] == "region_chunk":  # the common case: more text
            event = events[0]
            handler = self._chunk_handlers.get(event["field"])
            if handler is not None:
                handler(event["text"])
        else:
            self._handle(events)
        return self._deltas.take()

    def read(self, field: str, text: str) -> list[dict]:
        """The deltas of `text` that the parser's `feed_text` read into `field`'s open region (the
        region_chunk event feed would have returned), for a caller that fed the parser itself."""
        if self._finished:
            raise RuntimeError("OpenAIStream already finished")
        handler = self._chunk_handlers.get(field)
        if handler is not None and text:
            handler(text)
        return self._deltas.take()

    def finish(self, length: bool = False) -> list[dict]:
        """End the stream (`length=True`: the generation hit its token limit). Returns the last
        deltas; `finish_reason` and `message` (the parser's final message) are set afterwards."""
        if self._finished:
            raise RuntimeError("OpenAIStream already finished")
        self._finished = True
        message, events = self.parser.finalize()
        self._handle(events)
        self.message = message
        for field, handler in self._text_fields.items():
            expected = text_of(message.get(field))
            sent = "".join(handler.parts)
            if sent == expected:
                continue
            if not sent and handler.closes == 0:  # a default value that no region replaced
                handler.send(expected)
            elif not _without(sent, handler.inserted) == expected:
                self.divergences.append(
                    f"{field}: the stream sent {sent!r}, the message has {expected!r}"
                )
        if self._tools is not None:
            self._check_calls(message)
        if length:
            self.finish_reason = "length"
        elif self._tools is not None and self._tools.calls:
            self.finish_reason = "tool_calls"
        else:
            self.finish_reason = "stop"
        return self._deltas.take()

    # ---- events
    def _handle(self, events: list[dict]) -> None:
        if not events:
            return
        tools = self._tools
        tool_name = self._tool_field_name
        live_open = -1  # the tool region still open after these events: its captures are current
        if tools is not None:
            for k in range(len(events) - 1, -1, -1):
                event = events[k]
                if event["field"] == tool_name and event["type"] != "region_chunk":
                    if event["type"] == "region_open":
                        live_open = k
                    break
        text_fields = self._text_fields
        for k, event in enumerate(events):
            field = event["field"]
            kind = event["type"]
            handler = text_fields.get(field)
            if handler is not None:
                if kind == "region_chunk":
                    handler.chunk(event["text"])
                elif kind == "region_open":
                    handler.open()
                else:
                    if "error" in event:
                        self.errors.append(
                            {
                                "field": field,
                                "raw": "".join(handler.raw),
                                "error": event["error"],
                                "sent_as": handler.key,
                            }
                        )
                    handler.close(event)
            elif tools is not None and field == tool_name:
                if kind == "region_chunk":
                    tools.chunk(event["text"])
                elif kind == "region_open":
                    captures = None
                    if k == live_open and getattr(self.parser, "current_field", None) == tool_name:
                        captures = getattr(self.parser, "region_captures", None)
                    tools.open(captures)
                else:
                    tools.close(event)

    def _content_raw(self, raw: str) -> None:
        """Raw text of a failed tool-call region: sent as content (outside the content field's strip
        state: the content region is closed while a tool-call region is open)."""
        handler = next((h for h in self._text_fields.values() if h.key == "content"), None)
        if handler is not None:
            handler.insert(raw)
        else:
            self._deltas.text("content", raw)

    def _diverged(self, note: str) -> None:
        self.divergences.append(note)

    def _check_calls(self, message: dict) -> None:
        final = message_tool_calls(message, self.template, self._tool_field_name)
        failed = {index for error in self.errors for index in error.get("calls", ())}
        sent = [call for call in self._tools.calls if call.index not in failed]
        if len(final) != len(sent):
            self.divergences.append(f"{len(sent)} calls were sent, the message has {len(final)}")
            return
        for call, item in zip(sent, final):
            name, arguments, final_id = _call_parts(item)
            if call.name != name or not _loads_to("".join(call.fragments), arguments):
                self.divergences.append(f"call {call.index} differs from the message's")
            elif final_id is not None and final_id != call.id:
                self.divergences.append(
                    f"call {call.index}: id {call.id!r} was sent, the message has {final_id!r}"
                )

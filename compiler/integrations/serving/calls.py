"""A tool-call field's regions turned into call operations: a call started with its name, argument
fragments, the call done, or its region failed.

`ToolCallPlan` reads off the field's facts, once per served template, where a call's name, id and
arguments come from (the field's `transform`: "{content}", "{content.arguments}", "{name}" from an
open-pattern capture, item keys under `transform_each`, literals) and which incremental reader
(`arguments`) its content parser has. `ToolCalls` follows the field's regions through one
generation: each region's reader reports the call's parts as they complete, and each goes out as an
operation of the generation's renderer as soon as it can:

- `call_started(index, name, template_id)` once the call's name is known (and its id, when the
  template gives the call one from its content); calls go out in the order they were written;
- `arguments(index, text)`: `{"k1": v1`, `, "k2": v2`, ..., `}`, each member as soon as its value is
  complete, parsed by the template's own content parser and coerced with the request's tools;
- `call_done(index)` at the region's close, after the reconciliation below;
- `region_failed(...)` for a region that failed to parse (a parser with errors="keep"): its calls
  already announced are closed with the arguments complete so far (always valid JSON), and the
  region's raw text goes out as text of the generation's failed-call key (nothing is lost).

Reconciliation at the region's close, against the parsed value: keys not sent yet are sent; a key
whose final value differs from what was sent (a duplicate key, `merge_duplicates`, a `tools` schema
edited in between) is sent again with the final value, which JSON's last-one-wins rule makes the
value that `json.loads` returns; then `}`. What was sent is therefore always a prefix of a JSON text
that loads to the final arguments, as long as every key sent is a key of the final arguments: that
holds whenever the region parses, except for pathological output the readers cannot predict (the
same call object carrying two `arguments` or `name` keys, several `string_delims` pairs interacting,
lookbehind in an xml `tag_pattern`). Those cases are noted in the generation's `divergences`.
Arguments of an unknown transform shape go out whole at the region's close.
"""

from __future__ import annotations

import weakref
from typing import Any

from rtcompile.runtime.coerce import TYPED, cast_mode, coerce_argument, schema_types
from rtcompile.runtime.content_parsers import CallListReader, make_parser

from .arguments import (
    CallListArguments,
    JsonScanner,
    LineArguments,
    TagArguments,
    delimiter_pairs,
    to_json,
)

MISSING = object()  # a call value without `arguments`


def call_parts(item: Any) -> tuple[str, Any, str | None] | None:
    """(name, arguments or MISSING, id or None) of a call-shaped value, else None."""
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
        function.get("arguments", MISSING),
        call_id if isinstance(call_id, str) and call_id else None,
    )


# ---- where a call's parts come from ---------------------------------------------------------------


class _Source:
    """One part of a call (name, id or arguments): a literal, an open-pattern capture, or a path into
    the parsed content (relative to the list item under transform_each)."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: Any = None):
        self.kind = kind  # "literal" | "capture" | "path" | "unknown"
        self.value = value


def _source(fact: tuple | None) -> _Source:
    """A part's source as the module's facts give it ((kind, value), None when absent)."""
    return _Source("unknown") if fact is None else _Source(*fact)


class ToolCallPlan:
    """What the template says of a tool-call field, read once per served template: where a call's
    name, id and arguments come from, the field's JSON parser (for the values the JSON reader
    reports), and which incremental reader its regions get (`new_reader`)."""

    def __init__(self, facts: Any):
        """`facts`: the field's `FieldFacts` (its content parser and arguments, and where its
        transform takes a call's parts from: `call`, None when the field has no transform)."""
        call = facts.call
        self.each = bool(call and call["each"])
        self.name = _source(call and call["name"])
        self.arguments = _source(call and call["arguments"])
        self.has_id = bool(call) and call["id"] is not None
        self.id = _source(call and call["id"])
        self.content = facts.content
        args = facts.content_args
        self.content_args = args
        self.json_parser = make_parser("json", args if isinstance(args, dict) else {})
        self.cast = cast_mode(self.content, args)  # how the tools' schemas cast its arguments
        self.waits_for_id = self.has_id and self.id.kind == "path"
        # the reader: (class, its arguments after the region) or None (arguments whole at close)
        self.reader: tuple[type, tuple] | None = None
        if self.content == "json" and isinstance(args, dict) and not args.get("allow_non_json"):
            delims = delimiter_pairs(args.get("string_delims", []))
            if delims is not None:
                self.reader = (JsonScanner, (self, delims, bool(args.get("unquoted_keys"))))
        elif (
            self.content == "python-call-list"
            and self.each
            and (self.name.kind, self.name.value) == ("path", ("name",))
            and (self.arguments.kind, self.arguments.value) == ("path", ("arguments",))
            and self.id.kind != "path"
        ):
            self.reader = (CallListArguments, ())
        elif (
            self.content in ("xml-inline", "kv-lines")
            and isinstance(args, dict)
            and "value_parser_by" not in args  # (a value's parser is chosen per tag: sent whole at the close)
            and not self.each
            and (self.arguments.kind, self.arguments.value) == ("path", ())
        ):
            self.reader = (TagArguments if self.content == "xml-inline" else LineArguments, (args,))

    def new_reader(self, region: "ToolRegion") -> Any:
        if self.reader is None:
            return None
        reader_class, arguments = self.reader
        return reader_class(region, *arguments)


# ---- one generation's calls -----------------------------------------------------------------------


class _Call:
    __slots__ = ("slot", "index", "name", "id", "header", "args_open", "sent", "queue", "broken")

    def __init__(self, slot: int):
        self.slot = slot  # its place in the region (transform_each: in the list)
        self.index = -1  # its place in the generation, once announced
        self.name: str | None = None
        self.id: str | None = None  # what the template gives it, if anything
        self.header = False  # announced
        self.args_open = False  # "{" sent
        self.sent: dict[str, str] = {}  # key -> JSON text of the value sent last
        self.queue: list[tuple[str, Any]] = []  # members waiting for the announcement
        self.broken = False  # a member failed to parse: the rest waits for the region's close


class ToolRegion:
    """One open region of the tool-call field: its calls, its reader and its raw text. The reader
    reports to it (`element`, `leaf`, `member`, `named`, `keyword_argument`, `pair`)."""

    def __init__(self, owner: "ToolCalls", captures: dict | None):
        self.owner = weakref.proxy(owner)  # (a back reference: no cycle to wait for the collector)
        self.plan = plan = owner.plan
        self.captures = captures
        self.raw: list[str] = []
        self.calls: dict[int, _Call] = {}
        self.next_header = 0  # calls are announced in slot order
        self.parse_json = plan.json_parser
        self.reader: Any = plan.new_reader(self)
        if not plan.each:
            self.element(0)

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
            self.owner.send_member(call, key, value)
        else:
            call.queue.append((key, value))

    def flush(self) -> None:
        """Announce the calls whose name (and id, when the template gives one) is known, in order."""
        waits_for_id = self.plan.waits_for_id
        while True:
            call = self.calls.get(self.next_header)
            if call is None or call.name is None or (waits_for_id and call.id is None):
                return
            self.owner.announce(call)
            for key, value in call.queue:
                self.owner.send_member(call, key, value)
            call.queue = []
            self.next_header += 1


class ToolCalls:
    """The tool-call field of one generation: its regions (open, chunk, close), turned into the
    renderer's call operations. `generation`: what owns it (the failed text's route, divergences,
    the parser's captures), held weakly: it holds this."""

    def __init__(self, generation: Any, renderer: Any, field: str, plan: ToolCallPlan, tool_params: dict):
        self.generation = weakref.proxy(generation)
        self.renderer = renderer
        self.field = field
        self.plan = plan
        self.tool_params = tool_params
        self.region: ToolRegion | None = None
        self.announced = 0  # calls announced so far: the next call's index
        # A parser reading token ids: once its decoder has defused a control token spelled out
        # with ordinary tokens, region texts (markers stripped, as the interpreter reports them)
        # can show delimiters the final parse does not see (a spelled `<arg_key>`, gemma's
        # `<|"|>`): arguments then go out at the region's close, from its parsed value.
        self.decoder = getattr(generation.parser, "token_decoder", None)

    # ---- the region's events
    def open(self, live: bool) -> None:
        captures = self.generation.parser.region_captures if live else None
        self.region = ToolRegion(self, captures)

    def chunk(self, text: str) -> None:
        region = self.region  # (the open region's side of a chunk, here: most chunks of a call)
        if region is not None:
            region.raw.append(text)
            if region.reader is not None:
                if self.decoder is not None and self.decoder.marked:
                    region.reader = None  # (see __init__: the rest at the close)
                    return
                region.reader.feed(text)

    def close(self, event: dict, finalizing: bool) -> None:
        region, self.region = self.region, None
        if region is None:  # a close without an open seen: nothing was streamed
            region = ToolRegion(self, None)
        renderer = self.renderer
        if "error" in event:
            announced = []
            for call in region.calls.values():
                if call.header:
                    self._close_arguments(call)
                    announced.append(call.index)
            raw = "".join(region.raw)
            renderer.region_failed(self.field, raw, event["error"], self.generation.failed_key, announced)
            self.generation.send_failed_text(raw)
            return
        value = event.get("value")
        items = value if region.plan.each and isinstance(value, list) else [value]
        diverged = self.generation.divergences.append
        for slot, item in enumerate(items):
            call = region.calls.get(slot)
            parts = call_parts(item)
            if parts is None:
                if call is not None and call.header:
                    self._close_arguments(call)
                    renderer.call_done(call.index)
                    diverged(f"call {call.index}: its region's value is not a tool call: {item!r}")
                continue
            name, arguments, final_id = parts
            if call is None:
                call = region.calls[slot] = _Call(slot)
            if not call.header:
                call.name = name
                call.id = final_id
                call.queue = []
                self.announce(call)
            elif call.name != name:
                diverged(f"call {call.index}: name {call.name!r} was sent, the message has {name!r}")
            elif final_id and call.id and final_id != call.id:
                diverged(f"call {call.index}: id {call.id!r} was sent, the message has {final_id!r}")
            self._reconcile(call, {} if arguments is MISSING else arguments)
            renderer.call_done(call.index)
        for slot, call in region.calls.items():
            if slot >= len(items) and call.header:
                self._close_arguments(call)
                renderer.call_done(call.index)
                diverged(f"call {call.index}: announced, but not in the region's value")

    # ---- operations
    def announce(self, call: _Call) -> None:
        call.index = self.announced
        call.header = True
        self.announced += 1
        self.renderer.call_started(call.index, call.name, call.id)

    def send_member(self, call: _Call, key: str, value: Any) -> None:
        value_text = to_json(self._coerce(call.name, key, value))
        lead = ", " if call.args_open else "{"
        call.args_open = True
        call.sent[key] = value_text
        self.renderer.arguments(call.index, lead + to_json(key) + ": " + value_text)

    def _coerce(self, name: str | None, key: str, value: Any) -> Any:
        """coerce_tool_calls for one argument (same rules; never mutates `value`)."""
        cast = self.plan.cast
        properties = self.tool_params.get(name) if name is not None and cast is not None else None
        if not properties or key not in properties:
            return value
        types = schema_types(properties[key])
        if not types:
            return value
        return coerce_argument(value, types, cast == TYPED)

    def _close_arguments(self, call: _Call) -> None:
        self.renderer.arguments(call.index, "}" if call.args_open else "{}")

    def _reconcile(self, call: _Call, arguments: Any) -> None:
        send = self.renderer.arguments
        if not call.args_open:
            send(call.index, to_json(arguments))
            return
        if not isinstance(arguments, dict):
            send(call.index, "}")
            self.generation.divergences.append(
                f"call {call.index}: members were sent, but the arguments are {arguments!r}"
            )
            return
        missing = [key for key in call.sent if key not in arguments]
        if missing:
            self.generation.divergences.append(
                f"call {call.index}: keys {missing} were sent but are not in the arguments"
            )
        for key, value in arguments.items():
            value_text = to_json(value)
            if call.sent.get(key) != value_text:
                call.sent[key] = value_text
                send(call.index, ", " + to_json(key) + ": " + value_text)
        send(call.index, "}")

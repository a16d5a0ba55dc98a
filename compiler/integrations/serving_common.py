"""What every serving integration of rtcompile shares (SGLang's today; vLLM's could switch to it).

An inference server parses a generation with a response template in three steps that do not depend
on the server:

1. find the template: an explicit one, else the tokenizer's `response_template`, else rtcompile's
   bundled template for the model's `model_type`, else one named by an environment variable
   (`resolve_template`);
2. check that every field reaches a client (`served_fields`: `content`, `tool_calls`, and reasoning
   named `reasoning_content`, as transformers' templates say, or `thinking`, as SGLang and vLLM say),
   and derive the template each parser runs on (`verbatim_tool_field`, `every_field_optional`,
   `thinking_named` for the server's own classes);
3. stream: `TemplateStream` feeds rtcompile's compiled parser (errors="keep": nothing raises
   mid-stream, nothing the model wrote is lost) and returns, per chunk, the raw text of each field
   under the key the server routes it to, and tool calls as OpenAI-style entries from
   `rtcompile.integrations.openai_stream.OpenAIStream` (a call's name as soon as it is known, its
   arguments as JSON fragments while they are written).

The server adapters (`rtcompile.integrations.sglang`) only translate `Routed` into the server's own types. Nothing
here imports a server, and the runtime never imports this module.
"""

from __future__ import annotations

import copy
import json
import os
import types
from typing import Any, Callable

import regex

import rtcompile
from rtcompile.integrations.openai_stream import OpenAIStream

__all__ = [
    "CONTENT_FIELD",
    "OPENER_GROUP",
    "REASONING_FIELDS",
    "TOOL_FIELD",
    "Routed",
    "TemplateStream",
    "every_field_optional",
    "last_boundary",
    "model_type_of",
    "resolve_template",
    "served_fields",
    "thinking_named",
    "tokenizer_template",
    "verbatim_tool_field",
]

CONTENT_FIELD = "content"
TOOL_FIELD = "tool_calls"
REASONING_FIELDS = ("reasoning_content", "thinking")
SERVED_FIELDS = frozenset({CONTENT_FIELD, TOOL_FIELD, *REASONING_FIELDS})
# The named group around a tool-call opener pattern whose matched text must be passed on verbatim.
OPENER_GROUP = "rtcompile_opener"


# ---- the template -------------------------------------------------------------------------------


def tokenizer_template(tokenizer: Any) -> Any:
    """The tokenizer's own `response_template` (attribute, else `init_kwargs`), as the servers read
    it; None when it has none."""
    if tokenizer is None:
        return None
    template = getattr(tokenizer, "response_template", None)
    if template is None:
        template = (getattr(tokenizer, "init_kwargs", None) or {}).get("response_template")
    return template


def model_type_of(tokenizer: Any) -> str | None:
    """The model's `model_type`, read from the `config.json` beside the tokenizer (a local
    directory, or the hub cache the server downloaded it to; never the network)."""
    source = getattr(tokenizer, "name_or_path", None)
    if not isinstance(source, str) or not source:
        return None
    path = os.path.join(source, "config.json")
    if not os.path.isfile(path):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(source, "config.json")
        except Exception:  # not a repository id, or no hub client: no model type to go on
            return None
        if not isinstance(cached, str):
            return None
        path = cached
    try:
        with open(path, encoding="utf-8") as file:
            model_type = json.load(file).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return model_type if isinstance(model_type, str) else None


def resolve_template(
    tokenizer: Any,
    template: Any = None,
    *,
    model_type: str | None = None,
    environment_variable: str,
) -> tuple[dict, str]:
    """(the response template, where it came from): `template` if given (a dict, a bundled name or
    model_type, or a path), else the tokenizer's `response_template`, else the bundled template for
    `model_type` (by default read beside the tokenizer), else the one `environment_variable` names.
    Raises `ValueError` naming every place looked at when there is none."""
    if template is not None:
        return as_template(template), "the response_template argument"
    own = tokenizer_template(tokenizer)
    if own is not None:
        if not isinstance(own, dict):
            raise ValueError(
                f"the tokenizer's response_template is a {type(own).__name__}, not a JSON object"
            )
        return own, "the tokenizer's response_template"
    if model_type is None:
        model_type = model_type_of(tokenizer)
    if model_type is not None:
        try:
            return rtcompile.template_for(model_type), f"rtcompile's template for {model_type!r}"
        except rtcompile.UnknownTemplateError:
            pass
    named = os.environ.get(environment_variable)
    if named:
        return as_template(named), f"{environment_variable}={named}"
    raise ValueError(
        "no response template: the tokenizer has no `response_template`, rtcompile bundles none "
        f"for model_type {model_type!r}, and {environment_variable} is not set (a bundled "
        "template's name, e.g. 'qwen3', or a path to a template JSON)"
    )


def as_template(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    if isinstance(value, (str, os.PathLike)):
        from rtcompile import api

        return api.read_template(value)  # a bundled name or model_type, or a path
    raise ValueError(
        f"a response template must be a dict, a name or a path, not {type(value).__name__}"
    )


def served_fields(template: Any) -> str | None:
    """Check that a server can send every field of `template` to a client; return the name of its
    reasoning field (None when it has none). Raises `ValueError` otherwise."""
    if not isinstance(template, dict) or not isinstance(template.get("fields"), dict):
        raise ValueError("response_template has no `fields` object")
    fields = template["fields"]
    unsupported = sorted(
        (set(fields) - SERVED_FIELDS)
        # a default reaches no client either: a stream carries only what the model wrote
        | {f"defaults.{name}" for name in set(template.get("defaults") or {}) - {"role"}}
    )
    if unsupported:
        raise ValueError(
            f"response_template contains fields rtcompile cannot serve: {unsupported}; "
            f"supported fields are {sorted(SERVED_FIELDS)}"
        )
    reasoning = [name for name in REASONING_FIELDS if name in fields]
    if len(reasoning) > 1:
        raise ValueError(
            "response_template has both `reasoning_content` and `thinking` fields; "
            "name one reasoning field"
        )
    return reasoning[0] if reasoning else None


def thinking_named(template: dict) -> dict:
    """A copy of the template whose reasoning field is named `thinking` (the only name SGLang's and
    vLLM's own classes serve); the template itself when it already is."""
    if "reasoning_content" not in template.get("fields", {}):
        return template
    renamed = copy.deepcopy(template)
    fields = renamed["fields"]
    renamed["fields"] = {
        ("thinking" if name == "reasoning_content" else name): spec for name, spec in fields.items()
    }
    return renamed


def has_opener(spec: Any) -> bool:
    return isinstance(spec, dict) and ("open" in spec or "open_pattern" in spec)


def literals(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, str)]
    return []


def every_field_optional(template: dict, *, implicit_content: str | None = None) -> dict:
    """A copy where no field is required (a response need not write any field), with an implicit
    text field named `implicit_content` added for the text outside every region when all fields have
    openers (the servers add one the same way)."""
    served = copy.deepcopy(template)
    fields = served["fields"]
    if implicit_content and implicit_content not in fields:
        if all(has_opener(spec) for spec in fields.values()):
            fields[implicit_content] = {}
    for spec in fields.values():
        if isinstance(spec, dict):
            spec["optional"] = True
    return served


def verbatim_tool_field(tool: dict) -> dict:
    """The tool-call field as plain text with its delimiters, for a parser that hands tool calls on
    as text (to a tool parser, or as content when tool parsing is off). A literal opener or closer
    is known; the text an open pattern matched is captured in `OPENER_GROUP` (a group around the
    pattern; the parser reports captures while the region is open, and the region's value has it
    at its close); what a closer pattern (or a list of closers) matched comes with the region's
    close event from a parser built with `report_closers=True`."""
    plain: dict[str, Any] = {key: tool[key] for key in ("repeats",) if key in tool}
    opener = tool.get("open")
    if isinstance(opener, str):
        plain["open"] = opener
    elif opener is not None or "open_pattern" in tool:
        pattern = tool.get("open_pattern") or "|".join(regex.escape(o) for o in literals(opener))
        plain["open_pattern"] = f"(?P<{OPENER_GROUP}>{pattern})"
        groups = regex.compile(plain["open_pattern"]).groupindex
        # every named group must be used by the transform (the compiler checks)
        plain["transform"] = {"text": "{content}", **{g: "{" + g + "}" for g in groups}}
    close = tool.get("close")
    if isinstance(close, str):
        plain["close"] = close  # sent when its region closes by it (not when the output ends in it)
    else:
        pattern = tool.get("close_pattern") or "|".join(regex.escape(c) for c in literals(close))
        if pattern:
            plain["close_pattern"] = pattern
    return plain


def closers_ending_in_anchor(template: dict) -> dict[str, list[tuple[str, str]]]:
    """Per field, (closer, anchor) pairs of literal closers that end with the next message's start
    anchor: a generation stops before the next message starts, so its last region may miss exactly
    the anchor (the servers complete such a closer at the end of the output)."""
    anchors = literals(template.get("start_anchor"))
    return {
        name: pairs
        for name, spec in template["fields"].items()
        if isinstance(spec, dict)
        and (
            pairs := [
                (closer, anchor)
                for closer in literals(spec.get("close"))
                for anchor in anchors
                if anchor and closer.endswith(anchor) and closer != anchor
            ]
        )
    }


# ---- one generation -----------------------------------------------------------------------------


def pydantic_slot_setters(model: type) -> tuple[Any, Any, Any, Any] | None:
    """The setters of a pydantic model's instance state and slots (`__dict__`, fields set, extra,
    private), to build an instance on a server's hot path without validation: through their
    descriptors, a lookup less each than `object.__setattr__`. None when the installed pydantic
    lays instances out otherwise."""
    state = next(
        (
            vars(klass)["__dict__"]
            for klass in model.__mro__
            if isinstance(vars(klass).get("__dict__"), types.GetSetDescriptorType)
        ),
        None,
    )
    if state is None:
        return None
    try:
        return (
            state.__set__,
            model.__pydantic_fields_set__.__set__,
            model.__pydantic_extra__.__set__,
            model.__pydantic_private__.__set__,
        )
    except AttributeError:
        return None


def same_as_validated(fast: Any, validated: Any) -> bool:
    """Whether a pydantic model instance built without validation (its instance state set
    directly, for a server's hot path) is one its validated constructor would have built: equal,
    with the same state, fields set, extras and private state, serializing alike."""
    return (
        type(fast) is type(validated)
        and fast == validated
        and vars(fast) == vars(validated)
        and fast.model_fields_set == validated.model_fields_set
        and fast.__pydantic_extra__ == validated.__pydantic_extra__
        and fast.__pydantic_private__ == validated.__pydantic_private__
        and fast.model_dump_json(exclude_unset=True) == validated.model_dump_json(exclude_unset=True)
        and fast.model_dump_json() == validated.model_dump_json()
    )


def last_boundary(events: list[dict]) -> int:
    """The position of the last event that opens or closes a region (0 if none does). A region
    opened there is still the parser's open region after these events (its captures are the
    parser's): only its chunks follow it."""
    last = len(events) - 1
    while last > 0 and events[last]["type"] == "region_chunk":
        last -= 1
    return last


def _merged(first: Routed, second: Routed) -> Routed:
    text = dict(first.text)
    for key, value in second.text.items():
        text[key] = text.get(key, "") + value
    return Routed(
        text,
        [*first.calls, *second.calls],
        [*first.failed, *second.failed],
        first.closed + second.closed,
    )


class RecordingParser:
    """The parser as `OpenAIStream` sees it, keeping the events of its last call: the stream builds
    the tool calls from them, the integrations route their text. Events already read can be handed
    to it (`pending`, returned by its next feed instead of feeding again), from an integration
    that fed the parser itself. (Text the parser's feed_text took goes to `OpenAIStream.read`.)"""

    __slots__ = ("parser", "events", "pending")

    def __init__(self, parser: Any) -> None:
        self.parser = parser
        self.events: list[dict] = parser.initial_events
        self.pending: list[dict] | None = None

    @property
    def initial_events(self) -> list[dict]:
        return self.parser.initial_events

    def feed(self, text: str) -> list[dict]:
        events, self.pending = self.pending, None
        if events is None:
            events = self.parser.feed(text)
        self.events = events
        return events

    def finalize(self) -> tuple[dict, list[dict]]:
        message, self.events = self.parser.finalize()
        return message, self.events

    # What OpenAIStream reads when a tool region opens, passed on without __getattr__'s detour.
    @property
    def current_field(self) -> str | None:
        return self.parser.current_field

    @property
    def region_captures(self) -> dict:
        return self.parser.region_captures

    def __getattr__(self, name: str) -> Any:  # errors, tool_parameters, ...
        return getattr(self.parser, name)


class Routed:
    """What one chunk of output gives: `text[key]`, the raw text routed to each key (only keys with
    text); `calls`, OpenAI-style tool-call entries in order, each `{"index", "arguments"}` plus
    `"name"` on a call's first entry; `failed`, the indices of announced calls whose region failed
    to parse (their raw text went out as text under the tool field's fallback key); `closed`, the
    fields a region of which closed. (A plain class with slots: one is built per chunk.)"""

    __slots__ = ("text", "calls", "failed", "closed")

    def __init__(
        self,
        text: dict[str, str] | None = None,
        calls: list[dict] | tuple = (),
        failed: list[int] | tuple = (),
        closed: tuple[str, ...] = (),
    ) -> None:
        self.text = {} if text is None else text
        self.calls = calls
        self.failed = failed
        self.closed = closed

    def __repr__(self) -> str:
        return f"Routed(text={self.text!r}, calls={self.calls!r}, failed={self.failed!r}, closed={self.closed!r})"


_EMPTY: list = []


class _Layout:
    """What a TemplateStream reads off its template, the same for every generation: made once per
    compiled module and routing (a server builds a stream per request)."""

    __slots__ = ("verbatim_spec", "pattern_closed", "closers", "tail_length")

    def __init__(self, template: dict, verbatim_fields: tuple[str, ...], complete_closers: bool):
        self.verbatim_spec = {name: template["fields"][name] for name in verbatim_fields}
        # Verbatim regions closed by a pattern: what the closer matched comes with the close event.
        self.pattern_closed = {
            name for name, spec in self.verbatim_spec.items() if "close_pattern" in spec
        }
        self.closers = closers_ending_in_anchor(template) if complete_closers else {}
        self.tail_length = max(
            (len(closer) for pairs in self.closers.values() for closer, _ in pairs), default=0
        )


_LAYOUTS: dict[tuple, _Layout] = {}


def _layout_for(
    module: Any, template: dict, verbatim_fields: tuple[str, ...], complete_closers: bool
) -> _Layout:
    # (a compiled module is its template's: the module, not the dict, is the key)
    key = (module, verbatim_fields, complete_closers)
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _LAYOUTS.setdefault(key, _Layout(template, verbatim_fields, complete_closers))
    return layout


class TemplateStream:
    """One generation through rtcompile's compiled parser for `template`, routed for a server.

    `text_keys`: {field: key} for fields whose chunks go out raw under `key` (the server's own
    whitespace; a `text` field is not stripped). `verbatim_keys`: {field: key} for fields built with
    `verbatim_tool_field`, whose regions go out with their delimiters under `key`. `tool_field`: the
    field whose regions are tool calls (through `OpenAIStream`); the body text of a call region that
    fails to parse goes out under `failed_key`. `complete_closers`: complete, at the end of the
    output, a closer that only misses the next message's start anchor. `module`: the template's
    compiled module, if the caller has it (what the stream reads off the template is kept per
    module)."""

    def __init__(
        self,
        template: dict,
        *,
        prefix: str = "",
        tools: list | None = None,
        text_keys: dict[str, str],
        verbatim_keys: dict[str, str] | None = None,
        tool_field: str | None = None,
        failed_key: str = CONTENT_FIELD,
        complete_closers: bool = True,
        module: Any = None,
    ) -> None:
        module = module if module is not None else rtcompile.load(template)
        self.text_keys = text_keys
        self.verbatim_keys = verbatim_keys or {}
        layout = _layout_for(module, template, tuple(self.verbatim_keys), complete_closers)
        self._verbatim_spec = layout.verbatim_spec
        self._pattern_closed = layout.pattern_closed
        self.recorder = RecordingParser(
            module.ResponseParser(
                prefix,
                tools=tools or None,
                errors="keep",
                report_closers=bool(self._pattern_closed),
                # A delimiter complete at a chunk's end is committed in that chunk: a call is
                # announced when its opener arrives, not a chunk later (the interpreter waits).
                eager=True,
            )
        )
        self.tool_field = tool_field if tool_field in template["fields"] else None
        self.failed_key = failed_key
        self.stream: OpenAIStream | None = None
        if self.tool_field is not None:
            self.stream = OpenAIStream(
                self.recorder,
                template,
                content_field=None,
                reasoning_field="",
                tool_calls_field=self.tool_field,
                call_id=lambda index: "",  # ids are the server's business
            )
        self._unread_at_end = ""
        self._open_tool_text: list[str] = []
        self._verbatim_pending: list[str] | None = None  # a verbatim region whose opener is unknown
        self.finished = False
        self._closers = layout.closers
        self._tail_length = layout.tail_length
        self._tail = ""
        parser = self.recorder.parser
        self._parser_feed = parser.feed  # (no adapter in between: no calls to build)
        self._feed_declined = parser.feed_declined
        self.reads_text_first = False  # chunks go to read_text first (set below)
        self.read_text = parser.feed_text
        self._failed_seen = 0  # stream.errors already reported
        self._prompt_held = ""  # (set below, once the prefix's own events are routed)
        self._opener_cut = ""
        # What the prefix alone gives: a call it left open may be announced (its name captured by
        # the opener); its text is the prompt's, never sent.
        initial_events = self.recorder.parser.initial_events
        initial_deltas = self.stream.initial_deltas if self.stream is not None else _EMPTY
        routed_fields = {self.tool_field, *self.verbatim_keys}
        if any(event["field"] in routed_fields for event in initial_events) or any(
            "tool_calls" in delta for delta in initial_deltas
        ):
            initial = self._route(initial_events, initial_deltas, live=True)
        else:  # (the usual prefix: at most some text, the prompt's, which is not routed)
            initial = Routed()
        self._verbatim_pending = None  # (an opener in the prompt is not output)
        # Prompt text the parser holds back at the prefix's end (it may start a delimiter) comes
        # out with the first output; it is the prompt's, so it is cut from what is routed.
        self._prompt_held = self.recorder.parser.unread_text
        self.reads_text_first = self._may_read_text_first()
        self._initial: Routed | None = Routed(calls=initial.calls)

    def from_prefix(self) -> Routed:
        """What the prefix gave (once; empty afterwards): only a call the prefix left open and
        whose name it wrote."""
        initial, self._initial = self._initial, None
        return initial if initial is not None else Routed()

    # ---- feeding
    def feed(self, text: str) -> Routed:
        got = self.feed_text(text)
        if type(got) is tuple:
            key, chunk = got
            return Routed({key: chunk}) if chunk else Routed()
        return got

    def feed_text(self, text: str) -> tuple[str, str] | Routed:
        """feed(), with the common chunk (more text of one text field, nothing else) answered as
        (key, text) instead of a Routed: a server's detectors build their own result from it.
        (The text may be empty: a chunk that gives nothing to send, like most of a tool call's.)

        A server's hot path may take the first step itself, while `reads_text_first`: the parser's
        `read_text(text)`; a (field, text read) for a field of `text_keys` is then all there is to
        do with the chunk (nothing here keeps track of a text field's chunks); any other answer
        goes to `after_read(text, answer)`, None (the chunk is unread) to `feed_unread(text)`."""
        if self.reads_text_first:
            taken = self.read_text(text)
            if taken is not None:
                return self.after_read(text, taken)
        return self.feed_unread(text)

    def after_read(self, text: str, taken: tuple[str, str]) -> tuple[str, str] | Routed:
        """feed_text for a chunk `read_text` took: `taken` is its answer, (field, text read)."""
        field, read = taken
        key = self.text_keys.get(field)
        if key is not None:
            return key, read
        if not read:  # (a whitespace run held back: it may start a delimiter)
            return Routed()
        key = self.verbatim_keys.get(field)
        if key is not None and self._verbatim_pending is None:  # (see _verbatim)
            return key, read
        if self.stream is None:
            return self._route([self.recorder.parser.chunk_event(read)], _EMPTY, live=True)
        deltas = self.stream.read(field, read)  # (a chunk fails no region: that is at its close)
        if not deltas and field == self.tool_field:
            self._open_tool_text.append(read)  # (what _route does: a call's most chunks)
            return self.failed_key, ""
        return self._route([self.recorder.parser.chunk_event(read)], deltas, live=True)

    def feed_unread(self, text: str) -> tuple[str, str] | Routed:
        """feed_text for a chunk `read_text` left unread (or was not offered)."""
        if self.finished or not text:
            return Routed()
        recorder = self.recorder
        # While reads_text_first, the chunk was offered to read_text, which declined it: the
        # parser's general path, not its fast paths again.
        feed = self._feed_declined if self.reads_text_first else self._parser_feed
        if self.stream is not None:
            recorder.events = _EMPTY
            recorder.pending = feed(text)
            deltas = self.stream.feed(text)
            events = recorder.events
        else:
            deltas = _EMPTY
            events = feed(text)
        if self._tail_length:
            self._tail = (self._tail + text)[-self._tail_length :]
        if not events and not deltas:
            return Routed()  # all held back (a possible delimiter), or nothing to route
        if (
            not deltas
            and len(events) == 1
            and events[0]["type"] == "region_chunk"
            and not self._prompt_held
        ):
            # The common case: more text of one field, routed as after_read routes it.
            event = events[0]
            field, chunk = event["field"], event["text"]
            key = self.text_keys.get(field)
            if key is not None:
                return key, chunk
            if chunk:
                key = self.verbatim_keys.get(field)
                if key is not None and self._verbatim_pending is None:
                    return key, chunk
                if field == self.tool_field:  # (no deltas: nothing to send yet)
                    self._open_tool_text.append(chunk)
                    return self.failed_key, ""
        return self._route(events, deltas, live=True)

    def _may_read_text_first(self) -> bool:
        """Whether chunks may go to the parser's feed_text first: not while the output's
        tail is kept (a closer cut at the anchor) or the prompt's held-back text is still to be
        cut from the first output."""
        return not self._tail_length and not self._prompt_held

    def finish(self) -> Routed:
        """The end of the output: what the parser held back, and every region closed."""
        if self.finished:
            return Routed()
        self.finished = True
        recorder = self.recorder
        routed = Routed()
        rest = self._closer_rest()
        if rest:  # a closer completed here is a closer the model wrote but for the anchor
            routed = self.feed(rest)
            self.finished = True
        self._unread_at_end = recorder.parser.unread_text
        if self.stream is not None:
            deltas = self.stream.finish()
            events = recorder.events
        else:
            deltas, events = [], recorder.finalize()[1]
        # regions still open end here, without their closers
        return _merged(routed, self._route(events, deltas, live=False, finalizing=True))

    def _closer_rest(self) -> str:
        if not self._tail_length:
            return ""
        for closer, anchor in self._closers.get(self.recorder.current_field, ()):
            for cut in range(len(closer) - 1, len(closer) - len(anchor) - 1, -1):
                if self._tail.endswith(closer[:cut]):
                    return closer[cut:]
        return ""

    # ---- routing
    def _route(
        self, events: list[dict], deltas: list[dict], *, live: bool, finalizing: bool = False
    ) -> Routed:
        pieces: dict[str, list[str]] = {}
        failed: list[int] = []
        closed: list[str] = []
        last = last_boundary(events)  # (a region opened there is open now: see _verbatim)
        for position, event in enumerate(events):
            name = event["field"]
            kind = event["type"]
            if self._prompt_held:
                event = self._without_prompt_text(event)
            if kind == "region_close":
                closed.append(name)
            key = self.text_keys.get(name)
            if key is not None:
                if kind == "region_chunk" and event["text"]:
                    pieces.setdefault(key, []).append(event["text"])
                continue
            key = self.verbatim_keys.get(name)
            if key is not None:
                self._verbatim(
                    event, pieces.setdefault(key, []), live and position == last, finalizing
                )
                continue
            if name == self.tool_field:
                if kind == "region_chunk":
                    self._open_tool_text.append(event["text"])
                elif kind == "region_open":
                    self._open_tool_text = []
                elif "error" in event:  # nothing the model wrote is dropped
                    pieces.setdefault(self.failed_key, []).append("".join(self._open_tool_text))
        calls: list[dict] = []
        for delta in deltas:
            for entry in delta.get("tool_calls", _EMPTY):
                function = entry.get("function") or {}
                arguments = function.get("arguments") or ""
                if "id" in entry:  # a call's first entry
                    name = function.get("name") or ""
                    calls.append({"index": entry["index"], "name": name, "arguments": arguments})
                elif calls and calls[-1]["index"] == entry["index"]:
                    calls[-1]["arguments"] += arguments
                else:
                    calls.append({"index": entry["index"], "arguments": arguments})
        if self.stream is not None:
            while self._failed_seen < len(self.stream.errors):
                failed.extend(self.stream.errors[self._failed_seen].get("calls", ()))
                self._failed_seen += 1
        text = (
            {key: joined for key, parts in pieces.items() if (joined := "".join(parts))}
            if pieces
            else {}
        )
        return Routed(text, calls, failed, tuple(closed))

    def _without_prompt_text(self, event: dict) -> dict:
        """The event with the held-back prompt text cut from its start. The first output after the
        prompt is a chunk that starts with it, or a delimiter match that consumed it, which is not
        routed (or, for a verbatim region, whose captured opener starts with it); a delimiter that
        produces no event may consume it too, so text is cut only where it starts with it."""
        held = self._prompt_held
        self._prompt_held = ""
        self.reads_text_first = self._may_read_text_first()
        if event["type"] == "region_chunk":
            text = event["text"]
            if text.startswith(held):
                return {**event, "text": text[len(held) :]}
        elif event["type"] == "region_open" and event["field"] in self.verbatim_keys:
            self._opener_cut = held
        return event

    def _cut_opener(self, opener: str) -> str:
        cut, self._opener_cut = self._opener_cut, ""
        return opener[len(cut) :] if cut and opener.startswith(cut) else opener

    def _verbatim(self, event: dict, out: list[str], live_open: bool, finalizing: bool) -> None:
        """A verbatim region's text with its delimiters. The opener an open pattern matched is read
        from the parser's captures while the region is open, else from the region's value at its
        close; until then the region's text waits. What a closer pattern matched comes with the
        close event (the parser reports closers for these regions)."""
        spec = self._verbatim_spec[event["field"]]
        kind = event["type"]
        if kind == "region_open":
            if "open" in spec:
                out.append(spec["open"])
                self._verbatim_pending = None
                return
            parser = self.recorder.parser
            live = live_open and parser.current_field == event["field"]
            captures = parser.region_captures if live else {}
            opener = captures.get(OPENER_GROUP)
            if isinstance(opener, str):
                out.append(self._cut_opener(opener))
                self._verbatim_pending = None
            else:
                self._verbatim_pending = []
        elif kind == "region_chunk":
            if self._verbatim_pending is not None:
                self._verbatim_pending.append(event["text"])
            else:
                out.append(event["text"])
        else:
            if self._verbatim_pending is not None:
                value = event.get("value")
                opener = value.get(OPENER_GROUP) if isinstance(value, dict) else None
                out.append(self._cut_opener(opener or "") + "".join(self._verbatim_pending))
                self._verbatim_pending = None
            if event["field"] in self._pattern_closed:  # ("" if the end closed it)
                out.append(event.get("closer", ""))
            elif isinstance(spec.get("close"), str):
                # closed by its closer, or at the end with the closer held back unread
                if not finalizing or self._unread_at_end.startswith(spec["close"]):
                    out.append(spec["close"])

"""One generation through a compiled parser, turned into a renderer's operations.

A server hands the core a generation as it has it: the prompt, then the output chunk by chunk (its
text, and the token ids the model generated where the server has them), then its end. `Generation`
feeds rtcompile's parser (built with errors="keep": nothing raises mid-stream and nothing the model
wrote is lost; eager: a delimiter complete at a chunk's end commits in that chunk) and turns what it
reports into operations on a `Renderer`, which builds the server's own result:

    text(key, text)                          text for an output key (content, reasoning, ...)
    call_started(index, name, template_id)   a tool call, announced as soon as its name is known
    arguments(index, text)                   a fragment of its arguments' JSON
    call_done(index)                         its arguments are complete (the region closed)
    region_failed(field, raw, error, key, calls)
                                             a region that failed to parse: its calls (already
                                             announced) are closed, and `raw` follows as text of `key`
    region_closed(field)                     a region of `field` closed (after its other operations)

then `take()` gives the chunk's result. How each field is routed is the host's one declared
contract, `routes` {field: Route} (a field without a route is not sent):

- `Route.raw(key)`: the region's text as the model wrote it (unstripped) under `key` (vLLM's and
  SGLang's text); a field that repeats with `join` gets the join string between two regions'
  texts, as its value has it; `Route.dropped()`: not sent (vLLM's reasoning, include_reasoning off);
- `Route.message(key)`: the text as the parser's final message has it (stripped at the region's
  edges, `join` separators, blank lines between texts of a field written twice, a default nothing
  replaced, other content parsers' values as text at the close) (OpenAIStream);
- `Route.verbatim(key)`: a field made plain text (`rtcompile.frontend.variants.verbatim_field`),
  passed on with its delimiters as the model wrote them (tool calls as text: tool parsing off, or
  for a server's tool parser to read);
- `Route.calls(failed_key)`: the field whose regions are tool calls (`calls.ToolCalls`, one field
  at most); the text of a region that fails to parse goes out under `failed_key`.

Token ids: a generation built with a tokenizer (`tokenizer=`, the prompt as `prompt_token_ids`), or
around a token parser, parses the ids the model generated, as transformers 5.25.0 does
(`ResponseParser(..., tokenizer=tok)`): a control token is a delimiter only where the model generated
its id; spelled out with ordinary tokens it is text. Hosts hand every chunk the same way,
`feed(delta_text, delta_token_ids)` and `finish(text, token_ids)`; such a generation reads the ids
(one or many per chunk: speculative decoding, a stream interval), one parsing text reads the text.

The common chunk, more text of one region in which no delimiter can start, has one fast path, here
(`feed`), for text and for ids alike: the parser's `feed_text` reads it (decoding the ids first) and
the renderer's `text_maker(key)` makes the server's result straight from the text, with no event and
no operation in between. It is off while text the prompt left held back is not yet resolved. A
closer that misses only the next message's start anchor is completed at the end, as vLLM completes
it, from what the parser holds unread then.

Prompt text is state, not output: what the parser reports of the prompt (prefilled reasoning, an
opener) goes out only where the host asks for it (`send_prompt_text`, OpenAIStream's initial
deltas); a call the prompt left open is announced (its name may be the opener's capture). When the
prompt ends inside a possible delimiter (`...<|chan`) the parser holds that text back; if the output
does not complete a delimiter with it, the parser reports it as text with the output's, and it is cut
here: the host sends only what the model wrote.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable, NamedTuple

from rtcompile.runtime.token_ids import MARKER, TokenIdDecoder
from rtcompile.runtime.token_parser import TokenIds

from .arguments import to_json
from .calls import ToolCalls
from .plan import FieldFacts, ServingPlan

__all__ = ["OPENER_GROUP", "Generation", "Renderer", "Route", "as_id_list", "last_boundary", "text_of", "written_ids"]

logger = logging.getLogger(__name__)

# The named group around a tool-call opener pattern whose matched text is passed on verbatim
# (rtcompile.frontend.variants.verbatim_field writes it).
OPENER_GROUP = "rtcompile_opener"


RAW, DROPPED, MESSAGE, VERBATIM, CALLS = "raw", "dropped", "message", "verbatim", "calls"


class Route(NamedTuple):
    """How one field's regions reach the host (module docstring): `how` (raw, dropped, message,
    verbatim, calls) and the renderer's `key` (for calls: the key of a failed region's text). A
    tuple: hosts build their routes per request."""

    how: str
    key: str | None = None

    @classmethod
    def raw(cls, key: str) -> "Route":
        return cls(RAW, key)

    @classmethod
    def dropped(cls) -> "Route":
        return cls(DROPPED)

    @classmethod
    def message(cls, key: str) -> "Route":
        return cls(MESSAGE, key)

    @classmethod
    def verbatim(cls, key: str) -> "Route":
        return cls(VERBATIM, key)

    @classmethod
    def calls(cls, failed_key: str) -> "Route":
        return cls(CALLS, failed_key)


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
    return to_json(value)


def last_boundary(events: list[dict]) -> int:
    """The position of the last event that opens or closes a region (0 if none does). A region
    opened there is still the parser's open region after these events (its captures are the
    parser's): only its chunks follow it."""
    last = len(events) - 1
    while last > 0 and events[last]["type"] == "region_chunk":
        last -= 1
    return last


class Renderer:
    """What a host makes of a generation's operations (see the module docstring): it collects the
    operations of one chunk and `take()` gives the host's result for them (and starts over).
    `text_maker(key)`: a function making the result of a chunk that is only `text` of `key`, for
    the fast path (None: the operations' way, `text` then `take`); `nothing()`: the result of a
    chunk that gives nothing. The defaults of the optional operations do nothing."""

    def text(self, key: str, text: str) -> None:
        raise NotImplementedError

    def call_started(self, index: int, name: str, template_id: str | None) -> None:
        raise NotImplementedError

    def arguments(self, index: int, text: str) -> None:
        raise NotImplementedError

    def call_done(self, index: int) -> None:
        pass

    def region_failed(self, field: str, raw: str, error: str, key: str, calls: list[int]) -> None:
        pass

    def region_closed(self, field: str) -> None:
        pass

    def take(self) -> Any:
        raise NotImplementedError

    def text_maker(self, key: str) -> Callable[[str], Any] | None:
        return None

    def nothing(self) -> Any:
        return self.take()


# ---- how each field's regions are routed ------------------------------------------------------------
# Each handler takes its field's region events: open(live: the region is still the parser's open
# one, its captures current), chunk(text), close(event, finalizing: closed by the end of the output).


class _RawText:
    """The region's text as the model wrote it, under `key`."""

    __slots__ = ("key", "send")

    def __init__(self, key: str, renderer: Renderer):
        self.key = key
        self.send = renderer.text

    def open(self, live: bool) -> None:
        pass

    def chunk(self, text: str) -> None:
        if text:
            self.send(self.key, text)

    def close(self, event: dict, finalizing: bool) -> None:
        pass


class _JoinedText(_RawText):
    """A field that repeats with `join`: each region's text as the model wrote it, and the join
    string between two regions' (also before an empty one), as the field's value joins them."""

    __slots__ = ("join", "previous", "separator", "maker")

    def __init__(self, key: str, renderer: Renderer, join: str):
        super().__init__(key, renderer)
        self.join = join
        self.previous = False  # a region of the field closed before
        self.separator: str | None = None  # owed before the open region's first text
        self.maker: Callable[[str], Any] = _noop

    def open(self, live: bool) -> None:
        self.separator = self.join if self.previous else None

    def chunk(self, text: str) -> None:
        if text:
            if self.separator is not None:
                text, self.separator = self.separator + text, None
            self.send(self.key, text)

    def fast(self, text: str) -> Any:
        """A common chunk of the region (the fast path)."""
        if self.separator is not None:
            text, self.separator = self.separator + text, None
        return self.maker(text)

    def close(self, event: dict, finalizing: bool) -> None:
        if self.separator is not None:
            self.send(self.key, self.separator)
            self.separator = None
        self.previous = True


class _Dropped(_RawText):
    """A field whose text the host does not send (vLLM's reasoning with include_reasoning off)."""

    def chunk(self, text: str) -> None:
        pass


class _MessageText:
    """A content or reasoning field's text as the parser's final message has it: `text` regions
    stream (stripped like the final value); other content parsers, and text turned into something
    else by a transform, send the value's text at the region's close.

    Separators between the values of successive regions follow the parser: `join` puts its string
    between every two values (also empty ones, and after a default); a parser with errors="keep"
    joins two non-empty texts of a field without `repeats` with a blank line (the interpreter keeps
    only the last). The separator goes out with the next region's first text."""

    def __init__(
        self, generation: "Generation", field: str, key: str, facts: FieldFacts | None, default: Any, keep_mode: bool
    ):
        """`facts`: the field's (None: the template has no such field, only a default for it)."""
        self.generation = weakref.proxy(generation)
        self.field = field
        self.key = key
        self.renderer = generation.renderer
        args = facts.content_args if facts is not None else {}
        # Text streams as it comes, unless a transform makes the value something else than the
        # region's text: then, as for the structured parsers, the value's text goes at the close.
        self.streams = facts is None or (facts.content == "text" and facts.value_is_content)
        self.strip = bool(args.get("strip", True)) if isinstance(args, dict) else True
        self.join = facts.join if facts is not None else None  # (only a field that repeats has one)
        repeats = facts is not None and facts.repeats
        self.has_previous = self.join is not None and default is not None
        self.blank_lines = keep_mode and self.join is None and not repeats
        self.has_text = False  # (blank_lines) the field's value so far is a non-empty string
        self.parts: list[str] = []  # everything sent, for the check at the end
        self.started = False
        self.pending = ""  # trailing whitespace held back
        self.separator: str | None = None  # join: sent even before an empty value
        self.blank_line: str | None = None  # keep mode: sent only before non-empty text
        self.region_text = False
        self.closes = 0
        self.raw: list[str] = []  # region text of a field that does not stream
        self.inserted: list[str] = []  # raw text of failed regions, sent where they occurred
        if self.join is not None and isinstance(default, str):
            self.send(default)  # a joined field starts from its default

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
            self.renderer.text(self.key, text)

    def open(self, live: bool) -> None:
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

    def close(self, event: dict, finalizing: bool) -> None:
        self.closes += 1
        self.pending = ""
        raw, self.raw = "".join(self.raw), []
        if "error" in event:  # errors="keep": the value is lost to the message, not to the stream
            self.separator = self.blank_line = None
            self.renderer.region_failed(self.field, raw, event["error"], self.key, [])
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
        """Raw text of a failed region, sent as this field's text where it occurred."""
        self.inserted.append(raw)
        self.parts.append(raw)
        self.renderer.text(self.key, raw)

    def reconcile(self, value: Any, prompt_text: list[str]) -> None:
        """At the end: a default no region replaced goes out now; a stream that cannot be the
        message's value (see OpenAIStream's contract) is noted in the divergences."""
        expected = text_of(value)
        sent = "".join(self.parts)
        if sent == expected:
            return
        if not sent and self.closes == 0:
            self.send(expected)
        elif _without(sent, self.inserted) not in (expected, _without(expected, prompt_text).strip()):
            self.generation.divergences.append(
                f"{self.field}: the stream sent {sent!r}, the message has {expected!r}"
            )


def _without(text: str, pieces: list[str]) -> str:
    """`text` with each of `pieces` removed once, in order."""
    for piece in pieces:
        position = text.find(piece)
        if position >= 0:
            text = text[:position] + text[position + len(piece) :]
    return text


class _Verbatim:
    """A field made plain text (`verbatim_field`): its regions go out under `key` with their delimiters,
    as the model wrote them. The opener an open pattern matched is read from the parser's captures
    while the region is open, else from the region's value at its close; until then the region's
    text waits. What a closer pattern matched comes with the close event (the parser reports
    closers); a literal closer goes out when the region closed by it (at the end of the output: when
    the parser held it back unread)."""

    __slots__ = ("generation", "key", "opener", "closer", "pattern_closed", "send", "pending", "maker", "nothing")

    def __init__(self, generation: "Generation", key: str, facts: FieldFacts):
        self.generation = weakref.proxy(generation)
        self.key = key
        # a single literal opener (closer) is known; otherwise the parser reports what matched
        self.opener: str | None = facts.open[0] if len(facts.open) == 1 else None
        self.closer: str | None = facts.close[0] if len(facts.close) == 1 else None
        self.pattern_closed = facts.pattern_closed
        self.send = generation.renderer.text
        self.pending: list[str] | None = None  # the region's text while its opener is unknown
        self.maker: Callable[[str], Any] = _noop
        self.nothing: Callable[[], Any] = _noop

    def open(self, live: bool) -> None:
        generation = self.generation
        if self.opener is not None:
            self.pending = None
            self.send(self.key, generation.cut_delimiter(self.opener))
            return
        opener = generation.parser.region_captures.get(OPENER_GROUP) if live else None
        if isinstance(opener, str):
            self.pending = None
            self.send(self.key, generation.cut_delimiter(opener))
        else:
            self.pending = []

    def chunk(self, text: str) -> None:
        if self.pending is not None:
            self.pending.append(text)
        elif text:
            self.send(self.key, text)

    def fast(self, text: str) -> Any:
        """A common chunk of the region (the fast path)."""
        if self.pending is not None:
            self.pending.append(text)
            return self.nothing()
        return self.maker(text)

    def close(self, event: dict, finalizing: bool) -> None:
        generation = self.generation
        key = self.key
        if self.pending is not None:
            value = event.get("value")
            opener = value.get(OPENER_GROUP) if isinstance(value, dict) else None
            text = generation.cut_delimiter(opener or "") + "".join(self.pending)
            self.pending = None
            if text:
                self.send(key, text)
        if self.pattern_closed:  # ("" if the end closed it)
            closer = generation.cut_delimiter(event.get("closer", ""))
        else:
            closer = self.closer
            if closer is None or (finalizing and not generation.unread_at_end.startswith(closer)):
                return  # closed by the end of the output, its closer not written
            closer = generation.cut_delimiter(closer)
        if closer:
            self.send(key, closer)


def _noop(*_: Any) -> None:
    return None


def as_id_list(token_ids: Any) -> list[int]:
    """Token ids as a server hands them, as a list: a list as it is; arrays (numpy, an `array` like
    vLLM's `TokenBuffer`) through `tolist`; any other sequence (a tuple, vLLM's `ConstantList` or
    `TokenIdsView`) copied."""
    if type(token_ids) is list:
        return token_ids
    tolist = getattr(token_ids, "tolist", None)
    return tolist() if callable(tolist) else list(token_ids)


def written_ids(text: str, token_ids: list[int], control_ids: dict[int, str]) -> list[int]:
    """The ids of an output's last chunk that its text shows, for a server whose text leaves out the
    stop token that ended the output (vLLM's detokenizer, unless the request includes it) and shows
    every other control token: a last control token whose spelling the text does not end with is
    that stop token, and is not read."""
    if token_ids:
        spelling = control_ids.get(token_ids[-1])
        if spelling is not None and not text.endswith(spelling):
            return token_ids[:-1]
    return token_ids


def _nothing_maker(renderer: Renderer) -> Callable[[str], Any]:
    nothing = renderer.nothing

    def nothing_for(text: str) -> Any:  # (a field the host does not send)
        return nothing()

    return nothing_for


# ---- the generation ---------------------------------------------------------------------------------


def _new_parser(plan: ServingPlan, prefix: str, tools: list | None, routes: dict, prompt_token_ids: Any, tokenizer: Any) -> Any:
    """The compiled parser of a generation, built with the prompt: it reads token ids with a
    tokenizer (the prompt's ids when given), text otherwise."""
    options: dict[str, Any] = {}
    prompt: Any = prefix
    if tokenizer is not None:
        options["tokenizer"] = tokenizer
        # tokenizers' DecodeStream failing on byte-fallback ids ends no stream here
        options["recover_decode_errors"] = True
        if prompt_token_ids is not None:
            prompt = prompt_token_ids
    return plan.parser_class(
        prompt,
        tools=tools or None,
        errors="keep",
        # what a closer pattern matched, for a verbatim region closed by one
        report_closers=any(field in plan.pattern_closed for field, route in routes.items() if route.how == VERBATIM),
        eager=True,
        **options,
    )


class Generation:
    """One generation through the compiled parser of `plan`, as operations of `renderer` (module
    docstring). Give `parser` (a fresh one, for a host that builds its own: OpenAIStream), or the
    prompt (`prefix`, its text; with `tokenizer`, `prompt_token_ids`) and `tools` for one built here.
    `tokenizer`: a fast transformers tokenizer; the parser built here then reads token ids (a parser
    given reads ids when it was built with one). `tool_parameters`: what arguments are coerced with
    (default: the parser's, from its tools). `complete_closers`: complete at the end a closer that
    misses only the next message's start anchor. `send_prompt_text`: route what the parser reports of
    the prompt like the output (else only a call it left open is announced). `text_omits_stop_token`:
    the last chunk's text, as the server hands it, leaves out the stop token that ended the output
    (vLLM's), which is then not read from its ids either (`written_ids`).

    `initial`: the result for the prompt (taken once built); `feed(text, token_ids)` and
    `finish(text, token_ids)` give each chunk's; `message` is the parser's final message once
    finished; `divergences` notes where the operations could not follow it; `reads_ids` whether the
    parser reads token ids; `has_tool_call` whether a tool-call region opened."""

    def __init__(
        self,
        plan: ServingPlan,
        renderer: Renderer,
        routes: dict[str, Route],
        *,
        prefix: str = "",
        tools: list | None = None,
        parser: Any = None,
        tool_parameters: dict | None = None,
        complete_closers: bool = True,
        send_prompt_text: bool = False,
        prompt_token_ids: Any = None,
        tokenizer: Any = None,
        text_omits_stop_token: bool = False,
    ) -> None:
        """`routes`: per field, how its regions reach the host (`Route`, module docstring)."""
        self.plan = plan
        self.renderer = renderer
        self.divergences: list[str] = []
        self.message: dict | None = None
        self.finished = False
        self.unread_at_end = ""
        self._tool_call_opened = False
        if parser is None:
            parser = _new_parser(plan, prefix, tools, routes, prompt_token_ids, tokenizer)
        self.parser = parser
        self.reads_ids = isinstance(parser, TokenIds)
        if tool_parameters is None:  # (the parser's, from the tools it was built with)
            tool_parameters = getattr(parser, "tool_parameters", None) or {}
        self._handlers = self._new_handlers(routes, tool_parameters)
        self._makers = self._new_makers()
        self._feed = parser.feed
        self._feed_text = getattr(parser, "feed_text", None)
        self._feed_declined = getattr(parser, "feed_declined", parser.feed)
        self._omits_stop_token = text_omits_stop_token
        self._closers = plan.closers if complete_closers else {}
        self._implicit_field = plan.implicit_field
        self._read_prompt(send_prompt_text)

    def _new_handlers(self, routes: dict[str, Route], tool_parameters: dict) -> dict[str, Any]:
        """Per field, what renders its events: raw text, message text, verbatim text, tool calls."""
        plan, renderer = self.plan, self.renderer
        handlers: dict[str, Any] = {}
        self._message_text: dict[str, _MessageText] = {}
        self._tool_calls: ToolCalls | None = None
        self.failed_key = "content"
        for field, route in routes.items():
            facts = plan.fields.get(field)
            if route.how == MESSAGE:
                if facts is not None or field in plan.defaults:  # (a default alone is sent at the end)
                    keep_mode = getattr(self.parser, "errors", "strict") == "keep"
                    handler = _MessageText(self, field, route.key, facts, plan.defaults.get(field), keep_mode)
                    handlers[field] = self._message_text[field] = handler
            elif facts is None:
                continue
            elif route.how == DROPPED:
                handlers[field] = _Dropped("", renderer)
            elif route.how == RAW and facts.join is not None:  # (only a field that repeats has one)
                handlers[field] = _JoinedText(route.key, renderer, facts.join)
            elif route.how == RAW:
                handlers[field] = _RawText(route.key, renderer)
            elif route.how == VERBATIM:
                handlers[field] = _Verbatim(self, route.key, facts)
            elif route.how == CALLS:
                self.failed_key = route.key
                handlers[field] = self._tool_calls = ToolCalls(
                    self, renderer, field, plan.tool_call_plan(field), tool_parameters
                )
            else:
                raise ValueError(f"unknown route for field {field!r}: {route.how!r}")
        return handlers

    def _new_makers(self) -> dict[str, Callable[[str], Any]]:
        """The fast path: per field, what makes the result of a common chunk read in it."""
        renderer = self.renderer
        self._nothing = renderer.nothing
        makers: dict[str, Callable[[str], Any]] = {}
        nothing_for = _nothing_maker(renderer)
        for field in self.plan.fields:
            handler = self._handlers.get(field)
            if handler is None or type(handler) is _Dropped:
                makers[field] = nothing_for
            elif type(handler) is _RawText:
                makers[field] = self._text_maker(handler.key)
            elif type(handler) is _JoinedText:
                handler.maker = self._text_maker(handler.key)
                makers[field] = handler.fast
            elif type(handler) is _Verbatim:
                handler.maker, handler.nothing = self._text_maker(handler.key), renderer.nothing
                makers[field] = handler.fast
            else:  # message text and tool calls: the chunk through its handler
                makers[field] = self._through(handler)
        return makers

    def _read_prompt(self, send_prompt_text: bool) -> None:
        """What the parser reported of the prompt (`initial`), and what it holds back of it: while
        that is not resolved (see _without_prompt_text), the output fed since (its decoded text,
        for ids: `_prompt_decoder`), what was cut, what a delimiter consumed of it. The fast path
        is off until then."""
        self._prompt_held = ""
        self._prompt_fed = 0
        self._prompt_decoder: TokenIdDecoder | None = None
        self._prompt_text_cut: list[str] = []
        self._delimiter_cut = ""
        self._cut_at = -1
        parser, handlers = self.parser, self._handlers
        prompt_handlers = handlers if send_prompt_text else {
            field: handler for field, handler in handlers.items() if handler is self._tool_calls
        }
        initial_events = parser.initial_events
        self._route(initial_events, live=True, handlers=prompt_handlers)
        self.initial = self.renderer.take()
        self._prompt_held = getattr(parser, "unread_text", "")
        if self._prompt_held and self.reads_ids:
            # The parser decodes the output with a decoder of its own; one like it, in the same
            # state (the prompt's text is flushed), gives the length of the text fed since.
            self._prompt_decoder = parser.token_decoder.fresh()
        # Whether a region is open at the prompt's end: then no delimiter can consume the held
        # text without reporting it (a close of a region that never opened reports nothing).
        boundary = last_boundary(initial_events) if initial_events else -1
        self._prompt_region_open = boundary >= 0 and initial_events[boundary]["type"] == "region_open"
        self._fast = self._feed_text is not None and not self._prompt_held

    # ---- the server's side
    def feed(
        self,
        delta_text: str,
        delta_token_ids: Any = None,
        request: Any = None,
        prompt_token_ids: Any = None,
        *,
        finished: bool = False,
    ) -> Any:
        """The result of the next chunk of output, as the server hands it: its text and the token ids
        the model generated for it (read instead of the text when the parser reads ids);
        `finished`: it is the last (`finish`). The signature is vLLM's `parse_delta`'s, so that a
        host's per-chunk entry point can be this method itself (the request and the prompt's ids
        are the generation's already: not read); other hosts call it with the text, and the ids
        where they have them.

        The fast path: the common chunk read by the parser's `feed_text` and made into the host's
        result by its text maker. A token parser's `feed_text` reads the commonest chunk of ids,
        one id whose text needs nothing but itself, with no decoding at all (TokenIds.feed_text)."""
        if self._fast and not finished:
            taken = self._feed_text(delta_token_ids if self.reads_ids else delta_text)
            if taken is not None:
                field, read = taken
                if read:
                    return self._makers[field](read)
                return self._nothing()  # (a whitespace run held back: it may start a delimiter)
            return self._declined(delta_token_ids if self.reads_ids else delta_text)
        if finished:
            return self.finish(delta_text, delta_token_ids)
        chunk = delta_token_ids if self.reads_ids else delta_text
        if self.finished or not len(chunk):
            return self._nothing()
        events = self._feed_slow(chunk)
        if events or self._prompt_held:
            self._route(events, live=True)
        return self.renderer.take()

    def _declined(self, chunk: Any) -> Any:
        """The result of a chunk the fast path declined: the parser's `feed_declined` reads it (even
        an empty one: a token parser keeps the text of ids its `feed_text` decoded and declined for
        it, and the fast path reads the next id's text only with none kept)."""
        events = self._feed_declined(chunk)
        if events or self._prompt_held:
            self._route(events, live=True)
        return self.renderer.take()

    def read(self, field: str, text: str) -> Any:
        """The result of `text` that the parser's `feed_text` read into `field`'s open region, for a
        host that fed the parser itself."""
        if not text:
            return self._nothing()
        maker = self._makers.get(field)
        return maker(text) if maker is not None else self._nothing()

    def finish(self, text: str = "", token_ids: Any = None) -> Any:
        """The result of the output's last chunk (if any: its text and token ids, as `feed` takes
        them) and its end: what the parser held back, every open region closed. The parser's final
        message is `message` afterwards."""
        if self.finished:
            return self._nothing()
        chunk = token_ids if self.reads_ids else text
        if chunk is not None and self.reads_ids and self._omits_stop_token:
            chunk = written_ids(text, as_id_list(chunk), self.parser.token_decoder.profile.control_ids)
        if chunk is not None and len(chunk):
            events = self._feed_slow(chunk)
            if events or self._prompt_held:
                self._route(events, live=True)
        self.finished = True
        self._fast = False
        parser = self.parser
        rest = self._closer_rest()
        if rest:  # a closer the model wrote but for the next message's start anchor
            events = self._feed_slow(rest)
            if events or self._prompt_held:
                self._route(events, live=True)
        self.unread_at_end = getattr(parser, "unread_text", "")
        message, events = parser.finalize()
        self.message = message
        self._route(events, live=False, finalizing=True)
        for field, handler in self._message_text.items():
            handler.reconcile(message.get(field), self._prompt_text_cut)
        for note in self.divergences:
            logger.debug("rtcompile: %s", note)
        return self.renderer.take()

    # ---- the parser's side
    def _feed_slow(self, chunk: Any) -> list[dict]:
        events = self._feed(chunk)
        if self._prompt_held:
            if self._prompt_decoder is not None:
                self._prompt_fed += len(self._prompt_decoder.feed(chunk).replace(MARKER, ""))
            else:
                self._prompt_fed += len(chunk)
        return events

    def _closer_rest(self) -> Any:
        """The rest of a literal closer of the open region the output stopped in, when only the next
        message's start anchor is missing (as vLLM completes it): text, or for a parser reading
        ids the ids that write it. The closer's written part is the end of what the parser holds
        unread (it may be that closer's start). With ids, text a decoder holds back is the start of
        a control token spelled out with ordinary tokens, which no id completes."""
        closers = self._closers.get(getattr(self.parser, "current_field", None))
        if not closers:
            return None
        parser = self.parser
        if self.reads_ids:
            if parser.token_decoder.held_text:
                return None
            unread = parser.unread_decoded_text  # (with the markers of spelled-out tokens)
        else:
            unread = parser.unread_text
        for closer, anchor in closers:
            for cut in range(len(closer) - 1, len(closer) - len(anchor) - 1, -1):
                if unread.endswith(closer[:cut]):
                    rest = closer[cut:]
                    if self.reads_ids:  # (the anchor's control tokens as their ids)
                        return parser.token_decoder.profile.encode(rest)
                    return rest
        return None

    def _route(
        self, events: list[dict], *, live: bool, finalizing: bool = False, handlers: dict | None = None
    ) -> None:
        if self._prompt_held:
            events = self._without_prompt_text(events)
        cut_at, self._cut_at = self._cut_at, -1  # (the event that consumed held prompt text)
        if handlers is None:
            handlers = self._handlers
        last = last_boundary(events) if live else -1
        current = getattr(self.parser, "current_field", None) if live else None
        closed = self.renderer.region_closed
        tool_calls = self._tool_calls
        for position, event in enumerate(events):
            field = event["field"]
            handler = handlers.get(field)
            kind = event["type"]
            if handler is not None:
                if kind == "region_chunk":
                    handler.chunk(event["text"])
                elif kind == "region_open":
                    handler.open(position == last and current == field)
                    if handler is tool_calls:
                        self._tool_call_opened = True
                else:
                    handler.close(event, finalizing)
                    closed(field)
            if position == cut_at:
                self._delimiter_cut = ""

    @property
    def has_tool_call(self) -> bool:
        """Whether a region of the tool-call field opened so far, in the prompt or the output
        (whatever it held, and whether it parsed); False for a generation without `tool_field`."""
        return self._tool_call_opened

    def send_failed_text(self, raw: str) -> None:
        """The text of a tool-call region that failed to parse, under the failed-call key."""
        handler = next((h for h in self._message_text.values() if h.key == self.failed_key), None)
        if handler is not None:
            handler.insert(raw)
        elif raw:
            self.renderer.text(self.failed_key, raw)

    # ---- prompt text held back at the prompt's end
    def _without_prompt_text(self, events: list[dict]) -> list[dict]:
        """The events of the output's first chunks with the prompt's held-back text cut. That text
        is the start of what the parser had unread: its next report is either text starting with
        it (or part of it, then a delimiter), or a delimiter that consumed it (reported or not: a
        close of a region that never opened reports nothing). A region of the field text outside
        every region goes to may open first, with no delimiter: its first text follows."""
        out = []
        for position, event in enumerate(events):
            held = self._prompt_held
            if not held:
                out.extend(events[position:])
                break
            kind = event["type"]
            if kind == "region_chunk":
                text = event["text"]
                if text.startswith(held):
                    self._prompt_resolved(held)
                    event = {**event, "text": text[len(held) :]}
                elif held.startswith(text) and self._prompt_region_open:
                    # all of it the prompt's, the rest of it consumed by the delimiter that follows
                    # (with no region open, the text may be the output's, after a close that
                    # consumed the held text and reported nothing: it is not cut)
                    self._prompt_held = held[len(text) :]
                    self._prompt_text_cut.append(text)
                    event = {**event, "text": ""}
                else:  # a delimiter that reported nothing consumed it
                    self._prompt_resolved("")
            elif not (kind == "region_open" and event["field"] == self._implicit_field):
                self._delimiter_cut = held  # a delimiter consumed it: cut from what it sends
                self._cut_at = position
                self._prompt_resolved("")
            out.append(event)
        if self._prompt_held:
            # Still held only while all of it is unread, with every character of output fed since
            # (and, for ids, what a decoder holds back of it).
            unread = len(getattr(self.parser, "unread_text", ""))
            fed = self._prompt_fed
            if self._prompt_decoder is not None:
                fed += len(self._prompt_decoder.held_text)
            if unread != len(self._prompt_held) + fed:
                self._prompt_resolved("")
        return out

    def _prompt_resolved(self, cut: str) -> None:
        if cut:
            self._prompt_text_cut.append(cut)
        self._prompt_held = ""
        self._prompt_decoder = None
        self._fast = self._feed_text is not None and not self.finished

    def cut_delimiter(self, text: str) -> str:
        """A delimiter's text as a verbatim region sends it: without the prompt's part of it."""
        cut, self._delimiter_cut = self._delimiter_cut, ""
        return text[len(cut) :] if cut and text.startswith(cut) else text

    # ---- the fast path's makers
    def _text_maker(self, key: str) -> Callable[[str], Any]:
        made = self.renderer.text_maker(key)
        if made is not None:
            return made
        send, take = self.renderer.text, self.renderer.take

        def text_result(text: str) -> Any:
            send(key, text)
            return take()

        return text_result

    def _through(self, handler: Any) -> Callable[[str], Any]:
        chunk, take = handler.chunk, self.renderer.take

        def chunk_result(text: str) -> Any:
            chunk(text)
            return take()

        return chunk_result

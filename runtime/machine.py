"""The streaming machine every generated parser runs on.

A generated module subclasses `Machine` and supplies what is specific to its template: one scan
method per parser state (which delimiters are watched there and how they are matched), one finish
function per field (content parser and transform), and a few tables. This class owns what is the
same for every template, written once: the event protocol, chunk boundaries, holding back possibly
partial delimiters, region bookkeeping, `repeats`/`join`, defaults, and finalization. It follows the
transformers 5.25.0 interpreter step for step; comments mark where it must stay so.

Streaming is linear in the output's length: the buffer holds only unread text (plus the few
consumed characters a lookbehind may need, `CONTEXT`), and region text is collected in a list.
"""

from __future__ import annotations

from typing import Any, Callable

from .coerce import TYPED, coerce_tool_calls, tool_parameters
from .content_parsers import MATCH_TIMEOUT
from .errors import MatchTimeoutError, ParserFailedError, ParserLoopError, region_error
from .options import DEFAULT_OPTIONS, ParseOptions
from .token_ids import strip_markers

# Where errors="keep" records what it could not put in its field: a list of
# {"field": name, "raw": the region's text, "error": "ExceptionClass: message"} for regions that
# failed to parse (with "captures": the open delimiter's named groups, when it had any), and
# {"field", "value", "error"} for a value a later region would overwrite.
ERRORS_KEY = "rtcompile_parse_errors"

PREFIX_REQUIRED = (
    "`ResponseParser`/`parse_response` requires `prefix` (the chat prompt sent to the model before "
    "generation), because chat templates often pre-write part of the assistant message (e.g. an "
    "opening `<think>` tag) that the parser must see to parse the output correctly. If the generation "
    'already contains the complete message, pass `prefix=""` to opt out explicitly.'
)

# A scan method takes (buf, pos, eos) and returns (hold, best): `hold` is where still-pending
# delimiter text starts (everything before it may be emitted), `best` is None or the delimiter to
# commit now, as (start, end, field index, is_open, regex match or None).

# The token-id subclass of a parser class (token_parser.token_parser_class, registered by that
# module, which the runtime package imports): what Machine.__new__ builds when given a tokenizer.
_token_parser_class: Callable[[type], type] | None = None


def register_token_parsers(factory: Callable[[type], type]) -> None:
    """Called once by token_parser: this module cannot import it (it imports this one)."""
    global _token_parser_class
    _token_parser_class = factory


# More commits than this in a row without consuming input can only be a cycle: the machine is
# deterministic and its state after a zero-width commit is one of a handful (see _process).
MAX_STALLED_COMMITS = 8


# An option of token-id decoding (refuse_unknown_ids, recover_decode_errors) given without a
# tokenizer: it is about token ids only.
TOKEN_OPTION_WITHOUT_TOKENIZER = "{}=True applies to token ids: give tokenizer= too"


def check_token_options(refuse_unknown_ids: bool, recover_decode_errors: bool) -> None:
    """TypeError for a token-id decoding option given to a parser of text (no tokenizer)."""
    for name, value in (("refuse_unknown_ids", refuse_unknown_ids), ("recover_decode_errors", recover_decode_errors)):
        if value:
            raise TypeError(TOKEN_OPTION_WITHOUT_TOKENIZER.format(name))


class Machine:
    # ---- supplied by the generated subclass -------------------------------------------------
    FIELD_NAMES: tuple[str, ...] = ()
    DIRTY: tuple[bool, ...] = ()  # chunks of structured parsers are raw, unparsed text
    REPEATS: tuple[bool, ...] = ()
    JOINS: tuple[str | None, ...] = ()
    # Per field, how the tool schema casts its values (coerce.cast_mode): ALL, TYPED or None.
    CASTS: tuple[str | None, ...] = ()
    REQUIRED: tuple[str, ...] = ()  # names of fields with optional: false, in template order
    IMPLICIT: int | None = None  # index of the field without an open delimiter
    CONTEXT: int | None = 0  # consumed characters kept for lookbehind; None keeps everything
    # Whether parse_whole may read a whole message in one pass (see there): not when a delimiter's
    # matches depend on where a scan starts (`\G`), since the passes start at different places.
    ONE_PASS: bool = True
    # Whether parse_whole may read the prefix in that pass too: not when a delimiter's match found
    # before the buffer's end may still change as more text arrives (`.*<a` does; see there).
    PREFIX_IN_ONE_PASS: bool = True
    FINISH: tuple[Callable[[str, dict], Any], ...] = ()  # per field: (body, captures) -> value
    STATE_SCANS: tuple[str, ...] = ()  # per field: name of the scan method used inside it
    # Per field, the fast path of feed inside it (see feed), None where it has none: (the name of
    # its method, the one character every watched delimiter starts with or "" where they start
    # with several, the lead characters they may start with before it, whether a trailing run of
    # them is held where it starts); SINK_COMMON is the one outside explicit regions.
    STATE_COMMONS: tuple[tuple[str, str, str, bool] | None, ...] = ()
    SINK_COMMON: tuple[str, str, str, bool] | None = None
    DEFAULT_KEYS: frozenset = frozenset()
    # The start anchor when it is one literal that cannot overlap itself (its last occurrence in
    # a prompt is where the prompt is cut): a token-id prompt is then decoded from its last
    # control token that can start it (token_parser.py).
    START_LITERAL: str | None = None

    # Token ids as input (see token_parser.py): set once the text fed may hold token_ids.MARKER,
    # which values, error records and closers then lose, as the interpreter strips it.
    _markers: bool = False
    # Set by a state's fast path that found the delimiter to commit (see _commit_found), read and
    # cleared by the feed that called it.
    _found: tuple | None = None

    def _scan_sink(self, buf: str, pos: int, eos: bool) -> tuple:  # the implicit/null state
        raise NotImplementedError

    @staticmethod
    def _new_output() -> dict:  # a fresh copy of the template's defaults
        return {}

    @staticmethod
    def _truncate_prefix(prefix: str) -> str:  # the prefix after the last start anchor
        return prefix

    # ---- the interpreter-compatible API -----------------------------------------------------
    def __new__(cls, *args: Any, tokenizer: Any = None, **kwargs: Any):
        """With `tokenizer=`, the parser is fed token ids: an instance of this class's token-id
        subclass (token_parser.token_parser_class), whose __init__ then runs instead."""
        if tokenizer is None:
            return object.__new__(cls)
        return object.__new__(_token_parser_class(cls))

    def __init__(
        self,
        prefix: str | None = None,
        *,
        tools: list | None = None,
        tokenizer: Any = None,
        options: ParseOptions | None = None,
        **option_keywords: Any,
    ):
        """`prefix`: the prompt (required, as in the interpreter); `tools`: the request's tools,
        whose schemas cast arguments. `options`: a ParseOptions (errors, timeout, report_closers,
        eager; by token ids refuse_unknown_ids and recover_decode_errors), or the same options as
        keywords, laid over it. `tokenizer`: a fast transformers tokenizer; `prefix` and `feed`
        then take token ids (see token_parser.TokenIds, whose __init__ runs for such parsers)."""
        options = ParseOptions.of(options, option_keywords)
        if options.by_token_ids:  # (a token-id parser hands its machine the options of text)
            check_token_options(options.refuse_unknown_ids, options.recover_decode_errors)
        if prefix is None:
            raise ValueError(PREFIX_REQUIRED)
        self._keep_errors = options.errors == "keep"
        # Fields closed so far (errors="keep" merges repeats; strict mode never needs it).
        self._closed: set[str] | None = set() if self._keep_errors else None
        self._timeout = options.timeout
        self._report_closers = options.report_closers
        self._eager = options.eager
        self._closer = ""  # what the close being committed matched (see report_closers)
        self._tool_params = tool_parameters(tools) if tools else {}
        self._buf = ""
        self._pos = 0
        self._output = self._new_output()
        self._current = self.IMPLICIT  # field index, or None for the null sink
        # The current state's scan method, as the class's plain function: a bound method stored on the
        # instance is a reference cycle, and the parser (its buffer) would outlive its last use.
        self._scan = type(self)._scan_sink
        self._enter_common(self.SINK_COMMON)
        self._captures: dict = {}
        self._parts: list[str] = []
        self._opened = False
        self._failure: BaseException | None = None
        self._halted = False  # finalized (no _failure then) or failed: feed/finalize refuse
        self._held: list[str] = []  # see _lead_take
        self._lead_held = False
        self._memo_buf: str | None = None  # (and self._memo: see _literal_memo)
        self._found = None  # (see _commit_found)
        # (CPython 3.11 shares one table of attribute names among a class's instances while they
        # are fewer than 30, and reads attributes measurably slower past it, on every chunk of
        # the hot paths. With a carried match's `_carried`, these are 29: add none lightly.)
        self.initial_events: list[dict] = []
        if prefix:
            self._read_prefix(prefix)

    def _read_prefix(self, prefix: str) -> None:
        """Read the prompt: the text after its last start anchor, its events into initial_events."""
        truncated = self._truncate_prefix(prefix)
        if truncated:
            self._buf = truncated
            try:
                self._process(self.initial_events, eos=False)
                self._drop_consumed()
            except BaseException as e:
                self._fail(e)
                raise

    def feed(self, text: str) -> list[dict]:
        """Feed the next piece of model output; returns the events it produced.

        Most chunks can only add to the open region: no delimiter can start in them, or one may
        only be starting at their end (a "<" that may begin "</think>"). The commonest, with none
        of the characters the state's delimiters start with, nothing held and no lead character
        at its end, the generated subclass's feed reads before it comes here. Those without the
        one character the state's delimiters start with are read here (`_read_lead`, where a run
        of lead characters ends them or is held); the current state's fast path (`_common`,
        generated per state from what its delimiters start with) reads the others, and returns
        the text read (the chunk, less what it holds back, plus held text the chunk shows is no
        delimiter); it returns None for any other chunk, which the general path reads
        (`_feed_scanned`: the state's scan decides)."""
        read = self._read_fast(text)
        if read is None:
            found = self._found
            if found is not None:  # (the fast path found the delimiter to commit: see there)
                self._found = None
                return self._commit_found(found)
            return self._feed_scanned(text)
        if not read:
            return []
        if self._opened:
            self._parts.append(read)
            return [{"type": "region_chunk", "field": self._chunk_field, "text": read, "dirty": self._chunk_dirty}]
        events: list[dict] = []
        self._accumulate(events, read)  # (the implicit field opens; the null sink drops it)
        return events

    def _feed_scanned(self, text: str) -> list[dict]:
        """feed() by the general path: the current state's scan decides."""
        if self._halted:
            self._refuse()
        if self._held:
            self._take_held()
        if text:
            self._buf += text
        buf, pos = self._buf, self._pos
        self._lead_held = False  # (a scan that holds back a bare lead run sets it again)
        try:
            hold, best = self._scan(self, buf, pos, False)
            if best is not None:  # a delimiter to commit: the general loop, from this scan
                events: list[dict] = []
                self._process(events, False, (hold, best), read_on=True)
            elif hold <= pos or self._current is None:
                self._pos = hold  # nothing to emit (or the null sink discards it)
                events = []
            else:  # no delimiter: emit everything before the held-back tail
                chunk = buf[pos:hold]
                self._pos = hold
                events = []
                self._accumulate(events, chunk)
            self._drop_consumed()
            return events
        except BaseException as e:
            self._fail(e)
            raise

    def _commit_found(self, found: tuple[str, tuple]) -> list[dict]:
        """feed() for a chunk whose state's fast path found the delimiter the scan would commit
        first: (the unread text with the chunk, the scan's (hold, best)), a match at its start
        that no other delimiter of the state may match at too. Committed as the general path
        commits it; the rest is read in the new state."""
        joined, scanned = found
        self._buf = joined  # (with the chunk and any lead run held in pieces; _pos is 0 here)
        if self._held:
            self._held = []
        self._lead_held = False
        events: list[dict] = []
        try:
            self._process(events, False, scanned, read_on=True)
            self._drop_consumed()
        except BaseException as e:
            self._fail(e)
            raise
        return events

    def feed_declined(self, text: str) -> list[dict]:
        """feed() for a chunk feed_text has just declined (returned None for): the same events, by
        the general path, without trying the fast path again (feed_text tried it)."""
        return self._feed_scanned(text)

    def feed_text(self, text: str) -> tuple[str, str] | None:
        """feed() for a server's common chunk only: when all `text` can do is add to the open
        region, it is read and (field, text read) is returned: feed would have returned one
        region_chunk of that field with that text, or no event where the text read is "". The
        text read is `text`, but for what it holds back as a possible delimiter start (a trailing
        whitespace run, like the \\s* of \\s*<tool_call>, or a "<" that may begin </think>) and
        for held text it now reads (a lead run, or a "<" that this chunk shows starts nothing).
        Any other chunk is left unread and None is returned: feed it with feed_declined() (or
        feed()). Saves building the events of the chunks that make up most of a stream."""
        if not self._opened:
            return None
        if self._trigger not in text and text and not self._buf and text[-1] not in self._lead_chars:
            self._parts.append(text)  # (the commonest chunk, as in feed)
            return self._chunk_field, text
        read = self._read_fast(text)
        if read is None:
            self._found = None  # (the chunk stays unread: feed_declined scans it)
            return None
        if read:
            self._parts.append(read)
        return self._chunk_field, read

    def _read_fast(self, text: str) -> str | None:
        """feed's and feed_text's reading of a chunk without a scan: by _read_lead, else by the
        current state's fast path (`_common`). The text read; None where neither reads it (the
        fast path may have found the delimiter to commit then, in `_found`)."""
        if self._trigger not in text and text and self._opened and (self._lead_held or not self._buf):
            read = self._read_lead(text)
            if read is not None:
                return read
        common = self._common
        if common is None:  # (None once finalized or failed, and in states without one)
            return None
        try:
            return common(self, text)
        except BaseException as e:  # (a regex time bound; no chunk of text raises otherwise)
            self._fail(e)
            raise

    def _read_lead(self, text: str) -> str | None:
        """feed's and feed_text's reading of a chunk in which no delimiter of the state starts (it
        has none of their first characters) but a run of lead characters at its end (held back,
        where the state holds such runs: a possible start of a delimiter like \\s*<tool_call>),
        or a chunk after such a run held (read with it). None for anything else."""
        lead = self._lead_chars
        if not self._buf:
            if not self._lead_hold:
                return None
            run_start = len(text.rstrip(lead))  # (str.rstrip: one C call for the run)
            self._buf = text[run_start:]
            self._lead_held = True
            return text[:run_start]
        if self._lead_held:
            return self._lead_take(text, len(text.rstrip(lead)))
        return None

    def _enter_common(self, common: tuple[str, str, str, bool] | None) -> None:
        """Take the fast path of the state being entered (an entry of STATE_COMMONS), and what a
        region_chunk event of the field it reads names (feed's hot path reads it from here)."""
        index = self._current
        self._chunk_field = None if index is None else self.FIELD_NAMES[index]
        self._chunk_dirty = None if index is None else self.DIRTY[index]
        if common is None:
            self._common = None
            self._trigger = ""  # ("" is in every text: no chunk takes feed's first test)
            self._lead_chars = ""
            self._lead_hold = False
        else:
            # (the class's plain function: a bound method stored on the instance would be a cycle)
            self._common = getattr(type(self), common[0])
            self._trigger, self._lead_chars, self._lead_hold = common[1], common[2], common[3]

    def chunk_event(self, text: str) -> dict:
        """The region_chunk event of `text` in the open region: what feed would have returned for
        text that feed_text read, for a caller that needs the event after all."""
        index = self._current
        return {"type": "region_chunk", "field": self.FIELD_NAMES[index], "text": text, "dirty": self.DIRTY[index]}

    # ---- a held run of lead characters (the fast paths' side of it) ---------------------------
    # A flood of whitespace in a state whose delimiters start with \s* (qwen3's content, say) is
    # held back as a possible delimiter start until something else arrives. Appending each chunk
    # to one string and rescanning it would cost the run's length per chunk; instead, while the
    # unread text is a bare lead run (`_lead_held`), further chunks are kept as pieces in `_held`
    # and the run is joined once, when it ends.

    def _take_held(self) -> None:
        self._buf += "".join(self._held)
        self._held = []

    def _lead_take(self, text: str, run_start: int) -> str:
        """While the unread text is a bare lead run, `text` has no first character of the current
        state's delimiters: hold text[run_start:] with the run held so far; return the text read."""
        self._lead_held = True
        if run_start == 0:
            if self._buf:
                self._held.append(text)
            else:
                self._buf = text
            return ""
        chunk = text[:run_start]
        if self._buf:
            if self._held:  # (a flood of lead characters, kept in pieces)
                chunk = self._buf + "".join(self._held) + chunk
                self._held = []
            else:  # (the common case: one short run held, like the space before a word)
                chunk = self._buf + chunk
        self._buf = text[run_start:]
        return chunk

    def _read_before(self, text: str, hold: int, lead_run: bool = False) -> str:
        """A fast path's answer for `text`, the unread text and the chunk: text[:hold] is read and
        returned, text[hold:] is held back (a bare run of lead characters if `lead_run`)."""
        self._buf = text[hold:]
        if self._held:  # (a run of lead characters kept in pieces, now in `text`)
            self._held = []
        self._lead_held = lead_run
        return text[:hold]

    def _drop_consumed(self) -> None:
        """Keep only unread text, plus the CONTEXT characters before it a lookbehind may read.

        With no lookbehind (CONTEXT 0) the buffer at rest is exactly the held-back text, "" most of
        the time, which is what the generated feed's fast path checks."""
        keep = self.CONTEXT
        if keep is not None:
            cut = self._pos - keep
            if cut > 0:
                self._buf = self._buf[cut:]
                self._pos = keep

    def finalize(self) -> tuple[dict, list[dict]]:
        """End the stream: close what is open, return (message, final events)."""
        if self._halted:
            self._refuse()
        if self._held:
            self._take_held()
        events: list[dict] = []
        try:
            self._process(events, eos=True)
        except BaseException as e:
            self._fail(e)
            raise
        return self._finished_output(), events

    def _finished_output(self) -> dict:
        """The message: required fields checked, empty values dropped (defaults always kept)."""
        message = finished_message(self._output, self.REQUIRED, self.DEFAULT_KEYS)
        self._output = message
        self._halted = True
        self._enter_common(None)  # (feed's fast paths off: feed refuses)
        return message

    def _parse_to_end(self, text: str, head: str = "") -> dict | None:
        """The message for `text` as the rest of the output, in one pass at the end of the stream:
        what feed(text) then finalize() give, or None where the two may differ (see parse_whole).
        `head`: unread text before it (a truncated prefix this machine was not given)."""
        self._buf += head
        self._buf += text
        try:
            if self._process(None, eos=True):  # (no events: only the message is wanted)
                return None
        except ParserLoopError:
            return None
        except BaseException as e:
            self._fail(e)
            raise
        return self._finished_output()

    def _literal_memo(self, buf: str) -> dict:
        """What literal searches learnt about `buf` (see LiteralSearch.find); new for a new buffer.
        (Generated scans read self._memo directly when self._memo_buf is their buffer.)"""
        if self._memo_buf is not buf:
            self._memo_buf = buf
            self._memo = {}
        return self._memo

    @property
    def unread_text(self) -> str:
        """The text fed so far that no event has reported yet: held back as the possible start of
        a delimiter (it is reported once more text, or the end, decides)."""
        return self._buf[self._pos :] + "".join(self._held)

    @property
    def errors(self) -> str:
        """The error mode this parser was made with: "strict" or "keep"."""
        return "keep" if self._keep_errors else "strict"

    @property
    def tool_parameters(self) -> dict:
        """Tool name -> its parameters' JSON-schema properties, from `tools=` (used for coercion)."""
        return self._tool_params

    @property
    def current_field(self) -> str | None:
        """The name of the region the parser is in now (None in the null sink)."""
        return None if self._current is None else self.FIELD_NAMES[self._current]

    @property
    def region_captures(self) -> dict:
        """The named groups captured by the open delimiter of the current region (a copy)."""
        return strip_markers(self._captures) if self._markers else dict(self._captures)

    # ---- the machine --------------------------------------------------------------------------
    def _fail(self, error: BaseException) -> None:
        """Called with whatever stops the machine; raises MatchTimeoutError in place of a bare
        regex TimeoutError. A parse error leaves the machine mid-commit: it refuses to go on
        rather than guess (ParserFailedError.cause is the error that was raised)."""
        self._halted = True
        self._opened = False
        self._enter_common(None)  # (feed's fast paths off: feed refuses)
        if isinstance(error, TimeoutError) and not isinstance(error, MatchTimeoutError):
            self._failure = MatchTimeoutError(self.current_field, self._timeout)
            raise self._failure from error
        self._failure = error

    def _refuse(self) -> None:
        if self._failure is None:  # (halted without a failure: finalized)
            raise RuntimeError("ResponseParser already finalized")
        raise ParserFailedError(self._failure)

    def _process(
        self, events: list[dict] | None, eos: bool, scanned: tuple | None = None, read_on: bool = False
    ) -> bool:
        """Commit delimiters until none is left to commit; `scanned` is the scan of the current
        buffer and position if the caller already made it. True if it stopped at a zero-width
        close of an empty region (below), before the end of what it could read.
        `read_on` (feed's commits): what follows a commit is read by the new state's fast path,
        where it has one, as the next chunk would be (see _read_on), not by its scan."""
        stalled = 0
        while True:
            buf, pos = self._buf, self._pos
            if scanned is None:
                hold, best = self._scan(self, buf, pos, eos)
            else:
                hold, best = scanned
                scanned = None
            if best is not None:
                start, end, index, is_open, match = best
                if start > pos:
                    self._accumulate(events, buf[pos:start])
                self._pos = end
                if end == pos:
                    stalled += 1
                    if stalled > MAX_STALLED_COMMITS:
                        raise ParserLoopError(self.FIELD_NAMES[index], pos)
                else:
                    stalled = 0
                if is_open:
                    self._close_current(events)
                    self._open(events, index, match)
                elif self._commit_close(events, buf[start:end], match):
                    return True
                if read_on and end > pos and end < len(buf) and self._common is not None:
                    scanned = self._read_on(events, buf[end:])
                    if scanned is True:
                        return False
                continue
            if eos:
                if pos < len(buf):
                    self._accumulate(events, buf[pos:])
                    self._pos = len(buf)
                self._close_current(events)
                return False
            # Emit everything before the earliest still-pending delimiter; hold the rest.
            if hold > pos:
                self._accumulate(events, buf[pos:hold])
                self._pos = hold
            return False

    def _commit_close(self, events: list | None, closer: str, match: Any) -> bool:
        """Close the open explicit region, or the implicit one, by `closer` (its `match`); True
        where that was a zero-width close of an empty region, which would fire again at once: the
        pass stops there, as the interpreter does (even at the end of the stream)."""
        had_content = self._opened
        if match is not None and had_content:
            # A close's named groups join the open's captures, and win (5.24.0). (A region that
            # never opened is closed with no value: nothing reads them.)
            for key, value in match.groupdict().items():
                if value is not None:
                    self._captures[key] = value
        self._closer = closer
        self._close_current(events)
        self._closer = ""
        return not had_content and not closer

    def _read_on(self, events: list, rest: str) -> tuple | bool | None:
        """After a commit in feed, `rest` (the text after it, all unread) through the new state's
        fast path, as a chunk fed with nothing held: True when it read it (and held back what it
        holds); otherwise the unread text is `rest` and the answer is _process's next `scanned`:
        the fast path's commit where it found one (_commit_found), else None (the scan decides).
        (A fast path reads a chunk exactly as the scan of the held text and the chunk would:
        tests/codegen/test_fast_paths.py.)"""
        self._buf = ""
        self._pos = 0
        self._lead_held = False
        read = self._common(self, rest)
        if read is None:
            found = self._found
            if found is not None:
                self._found = None
                self._buf, scanned = found  # (the text is `rest`, with nothing held before it)
                return scanned
            self._buf = rest
            return None
        if read:
            if self._opened:
                self._parts.append(read)
                events.append({"type": "region_chunk", "field": self._chunk_field, "text": read, "dirty": self._chunk_dirty})
            else:
                self._accumulate(events, read)  # (the implicit field opens; the null sink drops it)
        return True

    def _accumulate(self, events: list[dict] | None, text: str) -> None:
        index = self._current
        if index is None:  # the null sink: no implicit field, nothing open
            return
        name = self.FIELD_NAMES[index]
        if not self._opened:
            if events is not None:
                events.append({"type": "region_open", "field": name})
            self._opened = True
        self._parts.append(text)
        if events is not None:
            events.append({"type": "region_chunk", "field": name, "text": text, "dirty": self.DIRTY[index]})

    def _open(self, events: list[dict] | None, index: int, match: Any) -> None:
        self._current = index
        self._scan = getattr(type(self), self.STATE_SCANS[index])
        self._enter_common(self.STATE_COMMONS[index])
        if match is not None:
            self._captures = {k: v for k, v in match.groupdict().items() if v is not None}
        else:
            self._captures = {}
        self._parts = []
        self._opened = True
        if events is not None:
            events.append({"type": "region_open", "field": self.FIELD_NAMES[index]})

    def _close_current(self, events: list[dict] | None) -> None:
        index = self._current
        if not self._opened and index == self.IMPLICIT:
            return  # nothing open, nothing collected: already the state a close leaves
        if index is not None and self._opened:
            name = self.FIELD_NAMES[index]
            body = "".join(self._parts)
            join = self.JOINS[index]
            try:
                if self._timeout is None:
                    value = self.FINISH[index](body, self._captures)
                else:  # content parsers (xml-inline's tag_pattern) read the bound from here
                    token = MATCH_TIMEOUT.set(self._timeout)
                    try:
                        value = self.FINISH[index](body, self._captures)
                    finally:
                        MATCH_TIMEOUT.reset(token)
                if self._markers:  # (before the casts, as in the interpreter)
                    value = strip_markers(value)
                if self._tool_params and not isinstance(value, str):  # (text is never a tool call)
                    cast = self.CASTS[index]
                    if cast is not None:
                        value = coerce_tool_calls(value, self._tool_params, cast == TYPED)
                if join is not None and not isinstance(value, str):
                    raise ValueError(
                        f"Field '{name}': 'join' requires each match to parse to a string, "
                        f"got {type(value).__name__}."
                    )
            except TimeoutError:
                raise  # a too slow tag_pattern hit the parser's time bound: never a kept region
            except Exception as e:
                if self._markers:  # (the region's text as the model wrote it)
                    body = strip_markers(body)
                if self._keep_errors:
                    self._keep_failed_region(events, name, body, e)
                    return
                error = region_error(name, body, e)
                if error is e:
                    raise
                raise error from e
            output = self._output
            if join is not None:
                previous = output.get(name)
                output[name] = value if previous is None else previous + join + value
            elif self.REPEATS[index]:
                output.setdefault(name, []).append(value)
            elif self._keep_errors and name in self._closed:
                output[name] = self._keep_both(name, output.get(name), value)
            else:
                output[name] = value
            if self._keep_errors:
                self._closed.add(name)
            if events is not None:
                event = {"type": "region_close", "field": name, "value": value}
                if self._report_closers:
                    event["closer"] = strip_markers(self._closer) if self._markers else self._closer
                events.append(event)
        self._reset_to_implicit()

    def _reset_to_implicit(self) -> None:
        self._current = self.IMPLICIT
        self._scan = type(self)._scan_sink
        self._enter_common(self.SINK_COMMON)
        self._captures = {}
        self._parts = []
        self._opened = False

    def _keep_both(self, name: str, previous: Any, value: Any) -> Any:
        """errors="keep": a field without `repeats` closed again. The interpreter keeps only the
        last value (text before a tool call is lost when more text follows it); here two texts are
        joined by a blank line, and any other earlier value is recorded under ERRORS_KEY."""
        return kept_both(self._output, name, previous, value)

    def _keep_failed_region(self, events: list[dict] | None, name: str, body: str, error: Exception) -> None:
        """errors="keep": record the region's raw text and error instead of a value (with what its
        open delimiter captured, if anything: a tool call's name, say)."""
        record = failed_region_record(name, body, self._captures, error)
        if self._markers:
            record = strip_markers(record)
        self._output.setdefault(ERRORS_KEY, []).append(record)
        if events is not None:
            event = {"type": "region_close", "field": name, "value": None, "error": record["error"]}
            if self._report_closers:
                event["closer"] = strip_markers(self._closer) if self._markers else self._closer
            events.append(event)
        self._reset_to_implicit()


def finished_message(output: dict, required: tuple, default_keys: frozenset) -> dict:
    """The message: required fields checked, empty values dropped (defaults always kept)."""
    if required:
        missing = [name for name in required if name not in output]
        if missing:
            raise ValueError(f"Required response_template fields missing from parsed output: {missing}")
    message = {}
    for key, value in output.items():  # (a plain loop: this runs once per message, keep it cheap)
        if key in default_keys or not (value is None or (isinstance(value, (list, dict, str)) and not value)):
            message[key] = value
    return message


def kept_both(output: dict, name: str, previous: Any, value: Any) -> Any:
    """errors="keep": what a field without `repeats` holds once closed again: two texts joined by a
    blank line; otherwise the new value, the earlier one recorded under ERRORS_KEY in `output`."""
    if isinstance(previous, str) and isinstance(value, str):
        return previous + "\n\n" + value if previous and value else previous or value
    record = {"field": name, "value": previous, "error": "overwritten by a later region of the same field"}
    output.setdefault(ERRORS_KEY, []).append(record)
    return value


def failed_region_record(name: str, body: str, captures: dict, error: Exception) -> dict:
    """errors="keep": the record of a region that failed to parse (with its open delimiter's
    captures, when it captured anything)."""
    record = {"field": name, "raw": body, "error": f"{type(error).__name__}: {error}"}
    if captures:
        record["captures"] = dict(captures)
    return record


def parse_whole(machine_class: type, text: str, prefix: str | None, tools: list | None, options: ParseOptions = DEFAULT_OPTIONS) -> dict:
    """One-shot parse, exactly as the interpreter's parse_response: one feed, then finalize.

    It runs as one pass at the end of the stream instead, which commits the same delimiters in
    the same order: a commit made by feed (a match before anything still pending) is the
    earliest complete match at the end of the stream too, and finalize goes on from where feed
    stopped exactly as the one pass does. Only three things depend on where feed stopped: the
    stop at a zero-width close of an empty region (finalize starts reading again after it), the
    count of zero-width commits in a row (ParserLoopError), and patterns with `\\G` (which match
    only where a search starts: ONE_PASS is false for their templates). When the one pass meets
    either of the first two, the parse is done again as feed then finalize.

    The prefix is read in the same pass where that is the same too (PREFIX_IN_ONE_PASS): where no
    match the constructor commits while reading the prefix, before its end, can change once the
    rest is there. A greedy `.*<a` can: the interpreter commits the last `<a` of the prefix (the
    match survives its check for text leaning on the end), the one pass would take one later."""
    message = None
    if machine_class.ONE_PASS and prefix is not None:
        if machine_class.PREFIX_IN_ONE_PASS or not prefix:
            machine = machine_class("", tools=tools, options=options)
            message = machine._parse_to_end(text, machine_class._truncate_prefix(prefix) if prefix else "")
        else:
            machine = machine_class(prefix, tools=tools, options=options)
            message = machine._parse_to_end(text)
    if message is None:
        machine = machine_class(prefix, tools=tools, options=options)
        machine.feed(text)
        message = machine.finalize()[0]
    return message

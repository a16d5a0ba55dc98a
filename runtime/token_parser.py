"""Generated parsers fed with token ids: transformers 5.25.0's `ResponseParser(..., tokenizer=tok)`.

A generated parser class is a text machine. Its token-id form is a subclass made here once per
class (`token_parser_class`), which `Machine.__new__` picks when a parser is built with
`tokenizer=`: every feed's ids go through a `token_ids.TokenIdDecoder` (the interpreter's decoding,
feed by feed), and the text it returns, markers included, goes to the class's own `feed`; so the
machine scans exactly the text the interpreter's parser scans, and gives its events by construction.
What the interpreter strips markers from, this strips too: region_chunk texts here, closed values
(and errors="keep" records and closers) in the machine, once the decoder has given out a marker at
all; before that there is nothing to strip and no work is done.

    parser = module.ResponseParser(prompt_ids, tools=tools, tokenizer=tokenizer)
    for ids in generated:                  # lists, numpy arrays, torch tensors; one id or many
        handle(parser.feed(ids))
    message, events = parser.finalize()
    parser.defused                         # did the model spell out a control token?

`parse_token_ids` is the one-shot form (`parse_response(ids, ..., tokenizer=tok)`).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

from .machine import Machine, check_token_options, parse_whole, register_token_parsers
from .options import DEFAULT_OPTIONS, ParseOptions
from .token_ids import MARKER, TEXT_FED_TO_TOKEN_PARSER, TokenIdDecoder, profile_for

__all__ = ["TokenIds", "parse_token_ids", "token_parser_class"]


def _strip_chunks(events: list[dict]) -> list[dict]:
    """region_chunk texts without markers (the events are fresh dicts: changed in place)."""
    for event in events:
        if event["type"] == "region_chunk":
            event["text"] = event["text"].replace(MARKER, "")
    return events


def _decode_prefix(decoder: TokenIdDecoder, tokenizer: Any, prefix: Any, anchor: str | None = None) -> str:
    """The prompt's text, as the interpreter's constructor makes it: a str prompt is encoded first
    (added tokens matched, as `encode` does), then decoded, and the decoder is flushed.

    With `anchor` (the parser's start anchor, one literal that cannot overlap itself), a text that
    the parser cuts to the same prompt may come back instead: the text from the last occurrence of
    the anchor on, decoded from the id of the control token it begins with (see
    `TokenizerProfile.anchor_head`), after every id has been checked. A control token ends what
    the decoder holds (pending bytes, a possible spelling), so text decoded from its id on is the
    whole text's end. Where the anchor does not start at one of the last few such ids, the whole
    prompt is decoded."""
    if isinstance(prefix, str):
        prefix = tokenizer.encode(prefix, add_special_tokens=False)
    if anchor is not None and type(prefix) is list and len(prefix) > _DECODED_FROM_ANCHOR_AT:
        text = _decode_from_anchor(decoder, prefix, anchor)
        if text is not None:
            return text
    return decoder.feed(prefix) + decoder.flush()


# Prompts shorter than this are decoded whole: finding the anchor's id costs more than it saves.
_DECODED_FROM_ANCHOR_AT = 64
_ANCHOR_TRIES = 4


def _decode_from_anchor(decoder: TokenIdDecoder, prefix: Any, anchor: str) -> str | None:
    profile = decoder.profile
    head = profile.anchor_head(anchor)
    if head is None or decoder.held_text or decoder.marked:
        return None
    ids = profile.check(prefix, decoder.refuse_unknown_ids)  # (every id, as decoding them would)
    reversed_ids = ids[::-1]
    end = len(ids)
    for _ in range(_ANCHOR_TRIES):
        try:  # (the last `head` before `end`)
            position = len(ids) - 1 - reversed_ids.index(head, len(ids) - end)
        except ValueError:
            return None
        pieces = profile.pieces(ids[position:])
        if pieces is None:
            return None
        # (a fresh decoder's text from here: the one given back keeps its state, as after a feed)
        trial = decoder.fresh()
        text = trial._feed_pieces(pieces) + trial.flush()
        if text.startswith(anchor):
            decoder.marked, decoder.defused = trial.marked, trial.defused
            return text
        end = position
    return None


class TokenIds:
    """The token-id side of a generated parser class (mixed in before it: see token_parser_class).

    Besides the interpreter's API (`initial_events`, `feed(ids)`, `finalize()`), and rtcompile's
    options (errors, timeout, report_closers, eager), it has:

    * `feed_text(ids)` / `feed_declined(ids)`: the servers' fast path, as for text: `feed_text`
      decodes the ids and reads the text when all it can do is add to the open region, returning
      (field, text read); otherwise None, and the decoded text waits for `feed_declined` (or the
      next `feed`), so the ids are decoded once. A server's commonest chunk, one id whose text
      needs nothing but itself, costs no decoding at all (see feed_text).
    * `defused`: whether the model has written a control token with ordinary tokens so far (its
      spelling was defused: it stayed text, as in the interpreter).
    * `unread_text`: text fed so far that no event has reported yet, including what the decoder
      holds back (a possible control token's spelling), markers stripped; `unread_decoded_text`:
      the decoded part of it as the machine reads it, markers kept.
    * `token_decoder`: the `TokenIdDecoder` turning the ids into text (its `profile` knows the
      tokenizer: `control_ids`, `encode`).
    """

    _decoder: TokenIdDecoder
    _declined: str | None
    _clean_texts: dict[int, str]  # the profile's table of ids whose text needs nothing but itself
    # The generated class's own feed_text (set by token_parser_class): the text machine's, which
    # this class's feed_text overrides.
    _machine_feed_text: Callable[[Any, str], tuple[str, str] | None]

    def __init__(
        self,
        prefix: Any = None,
        *,
        tools: list | None = None,
        tokenizer: Any = None,
        options: ParseOptions | None = None,
        **option_keywords: Any,
    ):
        options = ParseOptions.of(options, option_keywords)
        # The machine's own checks first (errors=, then the missing prompt, then the tools), in the
        # interpreter's order; the prompt is read once it is decoded.
        super().__init__(None if prefix is None else "", tools=tools, options=options.of_text())  # type: ignore[call-arg]
        self._declined = None
        self._decoder = decoder = TokenIdDecoder(profile_for(tokenizer), options.refuse_unknown_ids, options.recover_decode_errors)
        self._clean_texts = decoder.profile.clean
        text = _decode_prefix(decoder, tokenizer, prefix)
        if decoder.marked:
            self._markers = True
        if text:
            self._read_prefix(text)  # type: ignore[attr-defined]
            if self._markers:
                _strip_chunks(self.initial_events)

    @property
    def defused(self) -> bool:
        """Whether a control token's spelling has been defused (in the prompt or the output)."""
        return self._decoder.defused

    @property
    def token_decoder(self) -> TokenIdDecoder:
        """The decoder turning this parser's ids into text."""
        return self._decoder

    @property
    def unread_text(self) -> str:
        """The text fed so far that no event has reported yet, markers stripped: the decoded text
        not read yet (`unread_decoded_text`), then what the decoder holds back as the possible
        start of a control token's spelling (`token_decoder.held_text`)."""
        text = self.unread_decoded_text + self._decoder.held_text
        return text.replace(MARKER, "") if self._markers else text

    @property
    def unread_decoded_text(self) -> str:
        """The decoded text fed so far that no event has reported yet, as the text machine reads
        it: a control token the model spelled out with ordinary tokens keeps its markers (MARKER
        between its characters), so a delimiter's spelling at its end is one the model generated
        as ids. Without what the decoder still holds back (`token_decoder.held_text`), which is
        not decoded text yet."""
        return Machine.unread_text.fget(self) + (self._declined or "")  # type: ignore[attr-defined]

    def _decode(self, ids: Any) -> str:
        if isinstance(ids, str):
            raise TypeError(TEXT_FED_TO_TOKEN_PARSER)
        decoder = self._decoder
        text = decoder.feed(ids)
        if decoder.marked and not self._markers:
            self._markers = True
        if self._declined is not None:  # (a chunk feed_text declined and nobody fed since)
            text, self._declined = self._declined + text, None
        return text

    def feed(self, ids: Any) -> list[dict]:  # type: ignore[override]
        """Feed the next generated token ids; returns the events they produced."""
        if self._halted:  # type: ignore[attr-defined]
            self._refuse()  # type: ignore[attr-defined]
        events = super().feed(self._decode(ids))  # type: ignore[misc]
        return _strip_chunks(events) if self._markers else events

    def feed_text(self, ids: Any) -> tuple[str, str] | None:  # type: ignore[override]
        """The text machine's feed_text (Machine.feed_text) for the text of `ids`: (field, text
        read) when all that text can do is add to the open region; None otherwise, and the decoded
        text waits for feed_declined.

        A server's commonest chunk takes a shorter way, with the same result: one id (a list of one
        int) while the decoder holds nothing back and has never given out a marker, and no declined
        text waits, whose text needs nothing but itself (`TokenizerProfile.clean`: whole characters,
        no control token, nothing a control token starts with). The decoder would return exactly
        that text and stay as it is, so the text is read with no decoding at all."""
        decoder = self._decoder
        if (
            type(ids) is list
            and len(ids) == 1
            and decoder._idle  # (`idle`'s slot: no property call per chunk)
            and not decoder.marked
            and self._declined is None
            and type(token_id := ids[0]) is int
            and (text := self._clean_texts.get(token_id)) is not None
        ):
            # Machine.feed_text's commonest chunk, tested here as there (one call per chunk). A
            # halted parser never passes it: it has no region open, or no fast path (trigger "").
            if (
                self._opened  # type: ignore[attr-defined]
                and self._trigger not in text  # type: ignore[attr-defined]
                and not self._buf  # type: ignore[has-type]
                and text[-1] not in self._lead_chars  # type: ignore[attr-defined]
            ):
                self._parts.append(text)  # type: ignore[attr-defined]
                return self._chunk_field, text  # type: ignore[attr-defined]
            if self._halted:  # type: ignore[attr-defined]
                return None  # (feed_declined refuses)
            taken = self._machine_feed_text(text)
            if taken is None:
                self._declined = text
            return taken
        if self._halted:  # type: ignore[attr-defined]
            return None  # (feed_declined refuses)
        text = self._decode(ids)
        # Text with a marker (in the chunk, or held from before) is declined: stripped, the text
        # read could be "" where feed gives a region_chunk event of a text that was only markers,
        # which (field, "") cannot tell.
        if self._markers and (MARKER in text or MARKER in self._buf):  # type: ignore[has-type]
            taken = None
        else:
            taken = self._machine_feed_text(text)
        if taken is None:
            self._declined = text
            return None
        return taken

    def feed_declined(self, ids: Any) -> list[dict]:  # type: ignore[override]
        """feed() for the ids feed_text has just declined: their text, already decoded, is read."""
        text = self._declined
        if text is None:
            return TokenIds.feed(self, ids)
        self._declined = None
        events = super().feed_declined(text)  # type: ignore[misc]
        return _strip_chunks(events) if self._markers else events

    def finalize(self) -> tuple[dict, list[dict]]:  # type: ignore[override]
        """End the stream: what the decoder held back is read, then everything open is closed."""
        if self._halted:  # type: ignore[attr-defined]
            self._refuse()  # type: ignore[attr-defined]
        text = self._decoder.flush()
        if self._decoder.marked:
            self._markers = True
        if self._declined is not None:
            text, self._declined = self._declined + text, None
        if text:
            self._append_unread(text)
        message, events = super().finalize()  # type: ignore[misc]
        return message, (_strip_chunks(events) if self._markers else events)

    def _append_unread(self, text: str) -> None:
        """Add text to what is unread, without reading it (finalize reads it at the end of the
        stream, as the interpreter appends its decoder's flush before its last pass)."""
        if self._held:  # type: ignore[has-type]
            self._take_held()  # type: ignore[attr-defined]
        self._buf += text  # type: ignore[has-type]


_TOKEN_CLASSES: "weakref.WeakKeyDictionary[type, type]" = weakref.WeakKeyDictionary()
_MARKED_CLASSES: "weakref.WeakKeyDictionary[type, type]" = weakref.WeakKeyDictionary()


def token_parser_class(cls: type) -> type:
    """The token-id subclass of a generated parser class (made once per class)."""
    if issubclass(cls, TokenIds):
        return cls
    made = _TOKEN_CLASSES.get(cls)
    if made is None:
        namespace = {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "_machine_feed_text": cls.feed_text,  # (called as a plain function: no super() per chunk)
        }
        made = type(cls.__name__, (TokenIds, cls), namespace)
        made = _TOKEN_CLASSES.setdefault(cls, made)
    return made


register_token_parsers(token_parser_class)


def _marked_class(cls: type) -> type:
    """The text parser class, with markers stripped from values (for one-shot parses of text a
    decoder marked)."""
    made = _MARKED_CLASSES.get(cls)
    if made is None:
        made = type(cls.__name__, (cls,), {"__module__": cls.__module__, "_markers": True})
        made = _MARKED_CLASSES.setdefault(cls, made)
    return made


def parse_message(
    machine_class: type,
    text: Any,
    prefix: Any,
    tools: list | None,
    tokenizer: Any,
    options: ParseOptions,
    read_text: Callable[..., dict] | None,
) -> dict:
    """A generated module's parse_response: one feed, then finalize. Token ids (with a
    tokenizer, or with an option of token ids, which then asks for one) by parse_token_ids; text
    with a time bound by the machine's one pass (its regex searches are the ones bounded); other
    text by the module's one-shot reader `read_text(text, prefix, tools, options)` where it has
    one, else by the one pass."""
    if tokenizer is not None or options.by_token_ids:
        return parse_token_ids(machine_class, text, prefix, tools, tokenizer, options, read_text)
    if read_text is None or options.timeout is not None:
        return parse_whole(machine_class, text, prefix, tools, options)
    return read_text(text, prefix, tools, options)


def parse_token_ids(
    machine_class: type,
    ids: Any,
    prefix: Any,
    tools: list | None,
    tokenizer: Any,
    options: ParseOptions = DEFAULT_OPTIONS,
    read_text: Callable[..., dict] | None = None,
) -> dict:
    """One-shot parse of generated token ids, exactly as the interpreter's
    `parse_response(ids, template, prefix=..., tools=..., tokenizer=...)`: its parser decodes the
    prompt, then the output (one feed), then flushes the decoder at finalize.

    When the flush adds nothing (the output ends with a control token, or with text that cannot
    start one), that is text-mode parse_response on the decoded text, so parse_whole reads it in
    one pass, or by `read_text(text, prompt, tools, options)` (the module's one-shot reader) where
    no control token was defused (then no marker needs stripping) and no time bound is set;
    otherwise the decoded text is fed and the flushed tail read at the end of the stream,
    as the interpreter does. Errors come in the interpreter's order: a missing prompt, the tools,
    the tokenizer, the prompt's ids, a region of the prompt, then the output's ids."""
    # The options, the missing prompt and the tools are checked as a parser's constructor checks them
    if tokenizer is None:  # (the generated parse_response comes here without one only to refuse)
        check_token_options(options.refuse_unknown_ids, options.recover_decode_errors)
        raise TypeError("token ids need a tokenizer: give tokenizer=")
    text_options = options.of_text()
    machine_class(None if prefix is None else "", tools=tools, options=text_options)
    decoder = TokenIdDecoder(profile_for(tokenizer), options.refuse_unknown_ids, options.recover_decode_errors)
    prompt = _decode_prefix(decoder, tokenizer, prefix, machine_class.START_LITERAL)
    try:
        if isinstance(ids, str):
            raise TypeError(TEXT_FED_TO_TOKEN_PARSER)
        text = decoder.feed(ids)
    except Exception:
        machine_class(prompt, tools=tools, options=text_options)  # the prompt's own errors come first
        raise
    tail = decoder.flush()
    parser_class = _marked_class(machine_class) if decoder.marked else machine_class
    if not tail:
        if read_text is not None and not decoder.marked and options.timeout is None:
            return read_text(text, prompt, tools, text_options)
        return parse_whole(parser_class, text, prompt, tools, text_options)
    parser = parser_class(prompt, tools=tools, options=text_options)
    parser.feed(text)
    if parser._held:
        parser._take_held()
    parser._buf += tail
    return parser.finalize()[0]

"""The runtime's interface for servers, on token parsers: what the serving core may use of a parser
built with `tokenizer=` (runtime/TOKEN_IDS.md, "The servers' interface").

* `feed_text([id])` reads a server's commonest chunk, one id whose text needs nothing but itself,
  without decoding it; it must give what the general path gives (the same ids as a tuple take it),
  step by step: what it reads or declines, the events of what it declines, what is left unread,
  the message.
* `token_decoder.idle`, `unread_decoded_text` (markers kept), `token_decoder.profile.encode`.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from token_strategies import token_cases
from tokenizer_pool import AddedSpec, build_tokenizer, ordinary_ids

import rtcompile
from rtcompile.runtime.token_ids import MARKER, TokenIdDecoder, profile_for

# A reasoning region closed by a pattern whose match stays open until a "Y" comes: everything from an
# "X" on is held back unread, spelled-out control tokens included.
HOLDING_TEMPLATE = {
    "start_anchor": "<s>",
    "fields": {
        "reasoning": {"open": "<think>", "close_pattern": "X[^Y]*Y", "content": "text"},
        "content": {"content": "text"},
    },
}
CONTROL = "<|im_end|>"


def _tokenizer(base: str = "bpe"):
    return build_tokenizer(base, [AddedSpec(CONTROL, "special"), AddedSpec("<think>", "template")])


def _ids(text: str, *, base: str = "bpe", byte_wise: bool = False) -> list[int]:
    """`text` as ordinary tokens (a control token in it spelled out, not its id)."""
    return ordinary_ids(base, text, [], byte_wise)


def _think(tokenizer) -> list[int]:
    """The reasoning region's opener, as its id (a control token)."""
    return tokenizer.encode("<think>", add_special_tokens=False)


def _parser(tokenizer, **options):
    return rtcompile.load(HOLDING_TEMPLATE).ResponseParser([], tokenizer=tokenizer, **options)


# ---- feed_text's one-id shortcut is the general path ------------------------------------------------


def _outcome(action):
    """What an action gave, or the exception it raised (class and message)."""
    try:
        return ("ok", action())
    except Exception as error:  # (compared between the two paths, whatever it is)
        return ("raised", type(error).__name__, str(error))


def _state(parser) -> tuple:
    decoder = parser.token_decoder
    return (parser.unread_text, parser.unread_decoded_text, decoder.held_text, decoder.marked, parser.current_field)


def _steps(module, tokenizer, run, ids: list, wrap, declined_at_once: list[bool], keep: bool) -> tuple[list, int]:
    """Every step's outcome and state, feeding one id per feed_text call as `wrap([id])`; a declined
    chunk goes to feed_declined at once, or (`declined_at_once` false) waits under the next feed_text.
    Also how many feeds the shortcut could take (an idle, unmarked decoder, an id of `clean`)."""
    options = {"errors": "keep", "eager": True} if keep else {}
    built = _outcome(lambda: module.ResponseParser(run.prefix, tools=run.tools, tokenizer=tokenizer, **options))
    if built[0] != "ok":
        return [built], 0
    parser = built[1]
    steps: list = [parser.initial_events]
    shortcuts = 0
    waiting = False
    for position, token_id in enumerate(ids):
        decoder = parser.token_decoder
        clean = type(token_id) is int and token_id in decoder.profile.clean
        if clean and not waiting and decoder.idle and not decoder.marked:
            shortcuts += 1
        taken = _outcome(lambda: parser.feed_text(wrap([token_id])))
        steps.append(taken)
        if taken[0] != "ok":
            return steps, shortcuts
        waiting = taken[1] is None
        if waiting and declined_at_once[position]:
            steps.append(_outcome(lambda: parser.feed_declined(wrap([token_id]))))
            waiting = False
        steps.append(_state(parser))
    if waiting:
        steps.append(_outcome(lambda: parser.feed_declined(wrap([]))))
    steps.append(_outcome(parser.finalize))
    return steps, shortcuts


@given(case=token_cases(valid_only=True), data=st.data())
def test_one_id_feed_text_reads_as_the_general_path(case, data):
    tokenizer = case.tokenizer()
    module = rtcompile.load(case.template)
    keep = data.draw(st.booleans(), label="errors='keep'")
    taken = 0
    for run in case.runs:
        ids = [token_id for chunk in run.id_chunks for token_id in chunk]
        at_once = data.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)), label="declined at once")
        shortcut, shortcuts = _steps(module, tokenizer, run, ids, list, at_once, keep)
        general, _ = _steps(module, tokenizer, run, ids, tuple, at_once, keep)  # (a tuple: never the shortcut)
        assert shortcut == general
        taken += shortcuts
    event(f"feeds the shortcut could take: {'some' if taken else 'none'}")


def test_feed_text_reads_a_clean_id_with_no_decoding(monkeypatch):
    tokenizer = _tokenizer()
    parser = _parser(tokenizer, errors="keep", eager=True)
    assert parser.feed(_think(tokenizer)) == [{"type": "region_open", "field": "reasoning"}]
    (word,) = _ids("think")  # (one token)
    parser.feed_text([word])  # (the first sight of an id teaches the profile its text)
    decoder = parser.token_decoder
    text = decoder.profile.clean[word]
    assert decoder.idle and not decoder.marked

    def no_decoding(self, ids):
        raise AssertionError("the shortcut decoded")

    monkeypatch.setattr(TokenIdDecoder, "feed", no_decoding)
    assert parser.feed_text([word]) == ("reasoning", text)
    assert decoder.idle and decoder.held_text == "" and parser.unread_text == ""
    monkeypatch.undo()
    message, _ = parser.finalize()
    assert message["reasoning"] == text + text


def test_the_shortcut_waits_for_declined_text():
    """A chunk feed_text declined is read first, by the next feed_text or by feed_declined: the
    shortcut does not read past it."""
    tokenizer = _tokenizer()
    parser = _parser(tokenizer)
    parser.feed(_think(tokenizer) + _ids("hello "))
    (x,), (y,), (word,) = _ids("X"), _ids("Y"), _ids("think")
    assert parser.feed_text([x]) == ("reasoning", "")  # (held back: the close pattern may start)
    assert parser.feed_text([y]) == ("reasoning", "")  # (a match at the end waits for the next feed)
    assert parser.feed_text([word]) is None  # (the close commits: declined)
    assert parser.feed_text([word]) is None  # (the declined text waits, and this with it)
    assert parser.unread_decoded_text == "XYthinkthink"
    events = parser.feed_declined([word])
    assert events == [
        {"type": "region_close", "field": "reasoning", "value": "hello"},
        {"type": "region_open", "field": "content"},
        {"type": "region_chunk", "field": "content", "text": "thinkthink", "dirty": False},
    ]
    assert parser.unread_text == ""
    assert parser.finalize()[0] == {"reasoning": "hello", "content": "thinkthink"}


def test_a_finalized_parser_reads_nothing_and_keeps_nothing():
    tokenizer = _tokenizer()
    parser = _parser(tokenizer, errors="keep")
    parser.feed(_think(tokenizer) + _ids("hello"))
    (word,) = _ids("think")  # (one token)
    parser.finalize()
    assert parser.feed_text([word]) is None
    assert parser.unread_decoded_text == ""
    with pytest.raises(RuntimeError, match="already finalized"):
        parser.feed_declined([word])


# ---- the decoder's state, the unread text, the profile's encode ---------------------------------------


def test_a_byte_level_decoder_is_idle_while_it_holds_nothing_back():
    tokenizer = _tokenizer()
    decoder = TokenIdDecoder(profile_for(tokenizer))
    assert decoder.idle
    assert decoder.feed(_ids("hello")) and decoder.idle
    assert decoder.feed(_ids("<|")) == "" and decoder.held_text == "<|" and not decoder.idle
    assert decoder.flush() == "<|" and decoder.idle
    first_byte = _ids("é", base="bytes", byte_wise=True)[:1]  # (half a character)
    bytes_decoder = TokenIdDecoder(profile_for(_tokenizer("bytes")))
    assert bytes_decoder.feed(first_byte) == "" and bytes_decoder.held_text == "" and not bytes_decoder.idle
    assert bytes_decoder.flush() == "\ufffd" and bytes_decoder.idle


def test_a_decode_stream_decoder_is_never_idle():
    tokenizer = _tokenizer("sentencepiece")
    decoder = TokenIdDecoder(profile_for(tokenizer))
    assert not decoder.profile.byte_level
    assert not decoder.idle
    decoder.feed(_ids("hello", base="sentencepiece"))
    assert not decoder.idle


def test_an_idle_decoder_gives_a_clean_ids_text_and_stays_as_it_was():
    tokenizer = _tokenizer()
    decoder = TokenIdDecoder(profile_for(tokenizer))
    ids = _ids("hello world, all is well")
    decoder.feed(ids)  # (learns them)
    clean = [token_id for token_id in ids if token_id in decoder.profile.clean]
    assert clean
    for token_id in clean:
        assert decoder.feed([token_id]) == decoder.profile.clean[token_id] == tokenizer.decode([token_id])
        assert decoder.idle and decoder.held_text == "" and not decoder.marked


def test_unread_decoded_text_keeps_the_markers_unread_text_strips():
    tokenizer = _tokenizer()
    parser = _parser(tokenizer)
    for token_id in _think(tokenizer) + _ids("hello X abc") + _ids(CONTROL, byte_wise=True) + _ids(" def"):
        parser.feed([token_id])
    defused = MARKER.join(CONTROL)
    assert parser.current_field == "reasoning"
    assert parser.unread_decoded_text == f"X abc{defused} def"
    assert parser.unread_text == f"X abc{CONTROL} def"
    assert parser.defused


def test_unread_text_adds_what_the_decoder_holds_back():
    tokenizer = _tokenizer()
    parser = _parser(tokenizer)
    parser.feed(_think(tokenizer) + _ids("hello X abc <|im"))
    assert parser.token_decoder.held_text == "<|im"
    assert parser.unread_decoded_text == "X abc "
    assert parser.unread_text == "X abc <|im"


def test_the_profile_encodes_control_tokens_as_their_ids():
    tokenizer = _tokenizer()
    profile = profile_for(tokenizer)
    (control_id,) = (token_id for token_id, spelling in profile.control_ids.items() if spelling == CONTROL)
    text = f"done.{CONTROL}<think>x"
    assert profile.encode(text) == tokenizer.encode(text, add_special_tokens=False)
    assert profile.encode(CONTROL) == [control_id]
    assert tokenizer.decode(profile.encode(text)) == text

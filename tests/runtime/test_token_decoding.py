"""rtcompile's token-id decoding equals transformers 5.25.0's `TokenIdDecoder`, feed by feed.

The parser is a text machine fed with the decoder's text, so equal text per feed (markers, held
back text and all) is what makes token-id parsing equal the interpreter's by construction. The
byte-level decoder does not use DecodeStream at all (a table of each id's bytes and an
incremental UTF-8 decoder), so it is proven equal here:

* every id of every pool tokenizer: the table's bytes decode (lossily) to what the tokenizer
  decodes the id to, and the byte alphabet is `tokenizers`' own;
* any byte string, one byte per token: the lossy UTF-8 decoding equals Rust's `from_utf8_lossy`
  (the tokenizer's decode), invalid sequences, surrogates and truncations included;
* random ids (ordinary, added, control, split multi-byte characters, the marker and U+FFFD
  spelled in bytes) in random feeds (one id at a time, empty feeds, whole): the text of every
  feed and of the flush, and the defusing, equal the interpreter's decoder.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from tokenizers import pre_tokenizers
from token_strategies import Recipe, token_cases, tokenizer_for
from tokenizer_pool import BASE_NAMES, AddedSpec, base_tokenizer
from transformers.utils.chat_parsing import token_ids as reference

from rtcompile.runtime import token_ids
from rtcompile.runtime.token_ids import TokenIdDecoder, TokenIdError, byte_level_token_bytes, profile_for


def test_the_marker_is_the_interpreters():
    assert token_ids.MARKER == reference.MARKER


def test_the_byte_alphabet_is_the_tokenizers_own():
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    assert {chr(code) for code in token_ids._CHARACTER_BYTE} == set(alphabet)
    assert sorted(token_ids._CHARACTER_BYTE.values()) == list(range(256))


@pytest.mark.parametrize("base", [b for b in BASE_NAMES if b != "sentencepiece"])
def test_every_id_of_the_pool_tokenizers_decodes_from_its_table_bytes(base):
    recipe = Recipe(base, (AddedSpec("<|im_end|>", "special"), AddedSpec("<é x>", "plain"), AddedSpec("<Ġa>", "plain")))
    tokenizer = tokenizer_for(recipe)
    backend = tokenizer.backend_tokenizer
    profile = profile_for(tokenizer)
    assert profile.byte_level
    for token_id in range(len(tokenizer)):
        token = backend.id_to_token(token_id)
        data = byte_level_token_bytes(token)
        assert data.decode("utf-8", "replace") == backend.decode([token_id], skip_special_tokens=False), token


def test_a_control_token_that_does_not_decode_to_its_spelling_takes_decode_stream():
    """`<Ġa>` decodes as `< a>` under ByteLevel: the byte table could not hand out its spelling as
    the interpreter does, so such a tokenizer decodes through DecodeStream."""
    tokenizer = tokenizer_for(Recipe("bytes", (AddedSpec("<Ġa>", "special"),)))
    assert not profile_for(tokenizer).byte_level
    tokenizer = tokenizer_for(Recipe("bytes", (AddedSpec("<é x>", "special"),)))
    assert profile_for(tokenizer).byte_level  # (a space: its UTF-8 bytes, its own spelling)


@given(data=st.binary(max_size=40))
def test_lossy_utf8_decoding_equals_the_tokenizers(data):
    backend = base_tokenizer("bytes")
    mapping = {byte: backend.token_to_id(ch) for ch, byte in _alphabet_bytes().items()}
    ids = [mapping[byte] for byte in data]
    assert data.decode("utf-8", "replace") == backend.decode(ids)


def _alphabet_bytes() -> dict[str, int]:
    return {chr(code): byte for code, byte in token_ids._CHARACTER_BYTE.items()}


def _byte_token_ids(tokenizer) -> dict[int, int]:
    """{byte: the id of the token that stands for that byte alone}: the byte alphabet's tokens of a
    byte-level tokenizer, the `<0xNN>` tokens of a byte-fallback one (bytes without one left out)."""
    backend = tokenizer.backend_tokenizer
    if profile_for(tokenizer).byte_level:
        tokens = {b: ch for ch, b in _alphabet_bytes().items()}
    else:
        tokens = {byte: f"<0x{byte:02X}>" for byte in range(256)}
    ids = {byte: backend.token_to_id(token) for byte, token in tokens.items()}
    return {byte: token_id for byte, token_id in ids.items() if token_id is not None}


@st.composite
def raw_byte_ids(draw, tokenizer):
    """Ids of single bytes: invalid and truncated UTF-8, valid bytes before invalid ones, the
    marker and U+FFFD in bytes."""
    byte_ids = _byte_token_ids(tokenizer)
    pieces = draw(
        st.lists(
            st.one_of(
                st.binary(max_size=3),
                st.sampled_from(["\ufdd2", "\ufffd", "é", "中", "😀", "<", "|"]).map(lambda s: s.encode()),
                st.sampled_from([b";\x80", b"a\xe4\xb8", b"\xc3", b" \xff"]),
            ),
            max_size=6,
        )
    )
    return [byte_ids[byte] for piece in pieces for byte in piece if byte in byte_ids]


def _feeds(draw, ids):
    mode = draw(st.sampled_from(["whole", "each", "cuts"]))
    if mode == "whole":
        feeds = [ids]
    elif mode == "each":
        feeds = [[i] for i in ids]
    else:
        cuts = sorted(draw(st.lists(st.integers(0, len(ids)), max_size=6)))
        bounds = [0, *cuts, len(ids)]
        feeds = [ids[a:b] for a, b in zip(bounds, bounds[1:])]
    return feeds


def _outcome(step) -> tuple:
    """("text", what step() returned) or ("raised", the exception)."""
    try:
        return ("text", step())
    except Exception as error:  # (the interpreter's decoder raises tokenizers' bare Exception too)
        return ("raised", error)


def _same_failure(expected: Exception, actual: Exception) -> bool:
    """The interpreter's TypeError for a bad id is rtcompile's TokenIdError (a subclass, with a
    message of its own); any other failure is the same class with the same message."""
    if isinstance(expected, TypeError):
        return isinstance(actual, TokenIdError)
    return type(actual) is type(expected) and str(actual) == str(expected)


@given(case=token_cases(), data=st.data())
def test_decoding_equals_the_interpreters_decoder_feed_by_feed(case, data):
    """Feed by feed, rtcompile's decoder gives the interpreter's text, or fails as it fails (a bad
    id; tokenizers' DecodeStream on byte-fallback ids). With recover_decode_errors, the text is the
    same until DecodeStream fails, and then decoding goes on."""
    tokenizer = case.tokenizer()
    for run in case.runs:
        ids = [i for chunk in run.id_chunks for i in chunk]
        if data.draw(st.booleans()):
            extra = data.draw(raw_byte_ids(tokenizer))
            at = data.draw(st.integers(0, len(ids)))
            ids = ids[:at] + extra + ids[at:]
        feeds = _feeds(data.draw, ids)
        expected_decoder = reference.TokenIdDecoder(tokenizer)
        actual_decoder = TokenIdDecoder(tokenizer)
        recovering = TokenIdDecoder(tokenizer, recover_decode_errors=True)
        given_out = []  # the interpreter's text so far
        for index, feed in enumerate(feeds):
            expected = _outcome(lambda: expected_decoder.feed(list(feed)))
            actual = _outcome(lambda: actual_decoder.feed(feed))
            recovered = _outcome(lambda: recovering.feed(feed))
            if expected[0] == "raised":
                assert actual[0] == "raised" and _same_failure(expected[1], actual[1]), (feeds, feed, actual)
                if isinstance(expected[1], TypeError):
                    assert recovered[0] == "raised" and isinstance(recovered[1], TokenIdError), (feeds, recovered)
                else:
                    event("DecodeStream failed: recovered")
                    assert recovered[0] == "text", (feeds, feed, recovered)
                    for later in feeds[index + 1 :]:
                        recovering.feed(later)
                    recovering.flush()
                break
            assert actual == expected, (feeds, feed)
            assert recovered == expected, (feeds, feed)
            given_out.append(expected[1])
        else:
            expected_tail = expected_decoder.flush()
            assert actual_decoder.flush() == expected_tail, feeds
            assert recovering.flush() == expected_tail, feeds
            given_out.append(expected_tail)
        assert actual_decoder.marked == (token_ids.MARKER in "".join(given_out))


def test_ids_outside_the_vocabulary_are_refused_clearly():
    """The interpreter raises TypeError for ids DecodeStream cannot take; rtcompile raises
    TokenIdError (a TypeError and a ValueError) for them, naming the id and its position, and
    leaves the decoder as it was."""
    tokenizer = tokenizer_for(Recipe("bpe", (AddedSpec("<|im_end|>", "special"),)))
    interpreter = reference.TokenIdDecoder(tokenizer)
    hello = tokenizer.encode("hello", add_special_tokens=False)
    for bad in (-1, 2**32, 2**40, 1.0, 1.5, None, "7", [3]):
        with pytest.raises(TypeError):
            interpreter.feed([*hello, bad])
        decoder = TokenIdDecoder(tokenizer)
        with pytest.raises(TokenIdError, match=f"at position {len(hello)}") as error:
            decoder.feed([*hello, bad])
        assert isinstance(error.value, TypeError) and isinstance(error.value, ValueError)
        assert decoder.feed(hello) + decoder.flush() == "hello"  # nothing of the refused feed was kept


@pytest.mark.parametrize("base", ["bytes", "bpe", "sentencepiece"])
def test_ids_without_a_token_decode_to_nothing_as_the_interpreter_or_are_refused(base):
    """An id below 2**32 that names no token (beyond the vocabulary): the interpreter's decoder
    gives no text for it, feed by feed, and so does rtcompile's by default; `refuse_unknown_ids`
    makes it a TokenIdError naming the id and its position instead."""
    tokenizer = tokenizer_for(Recipe(base, (AddedSpec("<|im_end|>", "special"),)))
    size = len(tokenizer)
    ids = tokenizer.encode("héllo <|im_end|> 中文", add_special_tokens=False)
    for unknown in (size, size + 5, 2**32 - 1):
        for position in (0, 1, len(ids) - 1, len(ids)):
            fed = [*ids[:position], unknown, *ids[position:]]
            for feeds in ([fed], [[token_id] for token_id in fed]):
                assert _decode_all(TokenIdDecoder(tokenizer), feeds) == _decode_all(
                    reference.TokenIdDecoder(tokenizer), feeds
                ), (unknown, position)
        with pytest.raises(TokenIdError, match=f"token id {unknown} at position 1 is outside the tokenizer's vocabulary"):
            TokenIdDecoder(tokenizer, refuse_unknown_ids=True).feed([ids[0], unknown])


def _decode_all(decoder, feeds) -> list[str]:
    return [decoder.feed(list(feed)) for feed in feeds] + [decoder.flush()]


def test_numpy_and_odd_sequences_decode_as_the_interpreter():
    import numpy as np

    tokenizer = tokenizer_for(Recipe("bpe", (AddedSpec("<|im_end|>", "special"),)))
    ids = tokenizer.encode("héllo <|im_end|> 中文", add_special_tokens=False)
    for value in (np.array(ids), np.array(ids, dtype=np.int32), tuple(ids), [np.int64(i) for i in ids], range(3)):
        expected = reference.TokenIdDecoder(tokenizer).feed(_to_py(value))
        assert TokenIdDecoder(tokenizer).feed(value) == expected
    for value in (5, None, np.array([ids, ids])):
        with pytest.raises(TypeError):
            reference.TokenIdDecoder(tokenizer).feed(_to_py(value))
        with pytest.raises(TypeError):
            TokenIdDecoder(tokenizer).feed(value)


def _to_py(value):
    from transformers.utils.generic import to_py_obj

    return to_py_obj(value)

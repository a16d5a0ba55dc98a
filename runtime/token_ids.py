"""Generated token ids as parser input: the exact text transformers' interpreter scans, decoded fast.

transformers 5.25.0 parses token ids (`ResponseParser(template, prefix, tokenizer=tok).feed(ids)`)
so that a control token (a special token, or an added token the chat template writes, or one listed
in `tokenizer.chat_control_tokens`) acts as a delimiter only when the model generated it as its id.
Its `TokenIdDecoder` decodes with `tokenizers.decoders.DecodeStream`; in the text decoded from
ordinary tokens it puts MARKER (U+FDD2) between the characters of every control-token spelling, and
holds back text that could still become one, and ids of an incomplete UTF-8 character, until later
ids decide. The parser scans that text, and strips the markers from what it reports.

`TokenIdDecoder` here returns the same text, feed by feed, so the generated parser (a text machine)
fed with it gives the interpreter's events by construction. It decodes one of two ways, chosen per
tokenizer:

* Byte-level BPE (a `ByteLevel` decoder, the GPT-2 family: Qwen, Llama 3, gpt-oss...): each id's
  bytes come from a table learnt on the id's first sight (the decoder's own rule: a token's
  characters mapped back to bytes, or its UTF-8 when a character is outside the byte alphabet), and
  an incremental UTF-8 decoder with the replacement rule of Rust's `from_utf8_lossy`. Text comes
  out when DecodeStream would let it out: when what is pending decodes to something that does not
  end in U+FFFD. `tests/runtime/test_token_decoding.py` proves it equal to DecodeStream.
* Any other decoder (Metaspace, byte fallback...): DecodeStream itself, as the interpreter does,
  failures included: `recover_decode_errors=True` goes on past the one DecodeStream has on
  byte-fallback ids (see _ReferenceStream).

Defusing is the interpreter's `_defuse`, step for step, skipped where it provably does nothing: text
with no character a control token starts with, and nothing held back before it. An id that decodes
on its own to such text (valid UTF-8, no U+FDD2, not ending in U+FFFD, not a control token) is
remembered with its text, so a one-id feed of it in the usual state (nothing held back) costs two
dictionary lookups: no byte joining, no UTF-8 decoding, no defusing scan.

`tokenizers` is imported only when a tokenizer needs DecodeStream; transformers never (the
tokenizer object is asked for what it knows: its chat templates, control tokens and added tokens).
"""

from __future__ import annotations

import codecs
from array import array
import operator
from operator import itemgetter
import re
import sys
import threading
import weakref
from itertools import groupby
from typing import Any

__all__ = [
    "MARKER",
    "TEXT_FED_TO_TOKEN_PARSER",
    "TOKEN_ID_RELEASES",
    "TokenIdDecoder",
    "TokenIdError",
    "TokenizerProfile",
    "UnsupportedTransformersError",
    "as_token_ids",
    "profile_for",
    "strip_markers",
]

# Put between the characters of spelled-out control tokens, so no delimiter can match them, and
# stripped from what the parser reports. A noncharacter: Unicode reserves it for internal use.
MARKER = "\ufdd2"

# The interpreter's message, word for word.
TEXT_FED_TO_TOKEN_PARSER = "This parser was created with a `tokenizer`, so `feed` takes token ids, not text."

# DecodeStream takes ids as Rust u32: anything else is a TypeError there.
_ID_LIMIT = 2**32


def strip_markers(value: Any) -> Any:
    """MARKER removed from a string, and recursively from lists and dicts (their keys too): what the
    interpreter does to every closed region's value in token mode. Other values are returned as they are."""
    if isinstance(value, str):
        return value.replace(MARKER, "")
    if isinstance(value, list):
        return [strip_markers(item) for item in value]
    if isinstance(value, dict):
        return {strip_markers(key): strip_markers(item) for key, item in value.items()}
    return value


# The transformers releases (major.minor, first and last) whose tokenizers give the control tokens
# transformers 5.25.0's token-id parsing reads: `_get_control_tokens` over the chat templates is
# the same method from 5.20 to 5.25 (5.19 has none). Tokenizers of other releases are refused.
TOKEN_ID_RELEASES = ((5, 20), (5, 25))


class UnsupportedTransformersError(RuntimeError):
    """The installed transformers is not a release a feature of rtcompile supports; the message is
    one line naming both (rtcompile.releases says which release each feature needs)."""


def _check_tokenizer_release(tokenizer: Any) -> None:
    """Refuse a transformers tokenizer of a release outside TOKEN_ID_RELEASES, with one line."""
    if not any(klass.__module__.startswith("transformers.") for klass in type(tokenizer).__mro__):
        return  # (not transformers' own: it answers for its control tokens itself)
    version = str(getattr(sys.modules.get("transformers"), "__version__", "unknown"))
    found = re.match(r"(\d+)\.(\d+)", version)
    (first, last) = TOKEN_ID_RELEASES
    if found and first <= (int(found[1]), int(found[2])) <= last:
        return
    raise UnsupportedTransformersError(
        f"parsing token ids needs a tokenizer of transformers {first[0]}.{first[1]} to "
        f"{last[0]}.{last[1]}, but transformers {version} is installed: install "
        "transformers==5.25.0, or parse the decoded text"
    )


class TokenIdError(TypeError, ValueError):
    """A token id that is not an integer of the tokenizer's vocabulary.

    A TypeError, the interpreter's class for ids DecodeStream cannot take (negative, 2**32 or more,
    not integers). Ids in that range but outside the vocabulary are silently skipped by the
    interpreter; they raise this too (a ValueError as well): a model cannot have generated them."""


def as_token_ids(ids: Any) -> Any:
    """One feed's ids as transformers' `to_py_obj` sees them: numpy arrays and torch tensors (and
    anything else with `tolist`) become lists, lists and tuples of them become lists of lists;
    other values are left for the decoder to iterate (or to fail on, as the interpreter does)."""
    if isinstance(ids, (list, tuple)):
        if all(type(item) is int for item in ids):
            return list(ids)
        return [as_token_ids(item) for item in ids]  # (numpy scalars become ints, arrays lists)
    if isinstance(ids, (int, float, dict)):
        return ids
    tolist = getattr(ids, "tolist", None)
    return tolist() if callable(tolist) else ids


# ---- what a tokenizer decodes to ---------------------------------------------------------------


def _byte_level_alphabet() -> dict[int, int]:
    """The GPT-2 byte-to-character mapping that `ByteLevel` uses, as {character: byte}."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    characters = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return dict(zip(characters, printable))


_CHARACTER_BYTE = _byte_level_alphabet()
# str.translate table: a character of the byte alphabet becomes the latin-1 character of its byte;
# every other character below U+0144 becomes one that latin-1 cannot encode (characters above are
# such already), so `.encode("latin-1")` succeeds exactly when every character is in the alphabet.
_TO_LATIN1 = {
    code: chr(_CHARACTER_BYTE[code]) if code in _CHARACTER_BYTE else "\u0100" for code in range(0x144)
}


def byte_level_token_bytes(token: str) -> bytes:
    """The bytes `tokenizers`' ByteLevel decoder gives a token: its characters mapped back through the
    byte alphabet, or, when any character is outside it (an added token with a space, say), the
    token's own UTF-8."""
    try:
        return token.translate(_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:
        return token.encode("utf-8")


class TokenizerProfile:
    """What decoding needs to know about one tokenizer, worked out once and shared by its parsers:
    the control tokens and their ids, the defusing patterns, and what each id decodes to (learnt on
    its first sight)."""

    def __init__(self, backend: Any, control_tokens: tuple[str, ...], control_ids: dict[int, str]):
        self.backend = backend
        self.control_tokens = control_tokens  # sorted, as the interpreter builds them
        self.control_ids = control_ids  # id -> spelling
        # The interpreter's patterns (chat_template_utils._get_control_token_patterns): longest first.
        longest_first = sorted(control_tokens, key=len, reverse=True)
        self.control_re = re.compile("|".join(map(re.escape, longest_first)) or "(?!)")
        self.prefixes = frozenset(token[:length] for token in control_tokens for length in range(1, len(token)))
        self.longest_prefix = max(map(len, self.prefixes), default=0)
        self.starts = frozenset(token[0] for token in control_tokens if token)
        # Many distinct first characters (tokenizers with thousands of special tokens): one regex
        # search instead of a containment test per character.
        self._start_search = (
            re.compile("[" + "".join(map(re.escape, sorted(self.starts))) + "]").search
            if len(self.starts) > 4
            else None
        )
        self.byte_level = type(getattr(backend, "decoder", None)).__name__ == "ByteLevel" and all(
            self._spells_itself(token_id, spelling) for token_id, spelling in control_ids.items()
        )
        # What each id seen so far decodes to, as lists indexed by id (None: not seen, or not
        # applicable), so that a whole message's ids are looked up by C loops (operator.itemgetter).
        size = backend.get_vocab_size(with_added_tokens=True)
        self.valid: list[Any] = [None] * size  # True for ids of the vocabulary
        self.token_bytes: list[Any] = [None] * size  # an id's bytes (byte level)
        # An ordinary id's text when its bytes are valid UTF-8 (and hold no sentinel character),
        # a control id's sentinel: joined, a message's ids become its text with each control
        # token as one sentinel character, split again by one regex call (see pieces).
        self.texts: list[Any] = [None] * size
        self.sentinels = {
            token_id: chr(_SENTINEL_BASE + index)
            for index, token_id in enumerate(sorted(control_ids)[:_SENTINEL_COUNT])
        }
        self.spelling_of_sentinel = {sentinel: control_ids[token_id] for token_id, sentinel in self.sentinels.items()}
        self.clean: dict[int, str] = {}  # id -> its text, for ids that need nothing but that (see module doc)
        self._anchor_heads: dict[str, int | None] = {}
        self._learning = threading.Lock()

    def encode(self, text: str) -> list[int]:
        """The ids the tokenizer encodes `text` to, as a model writes it: an added token's spelling
        (a control token's) is matched as its id, and no special token is added around it
        (`add_special_tokens=False`)."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def _spells_itself(self, token_id: int, spelling: str) -> bool:
        """Whether a control token decodes, on its own and after any pending bytes, to its spelling
        and nothing else, so that the byte-level decoder can hand out the spelling directly (as the
        interpreter appends it): its bytes are its UTF-8 (which starts no continuation of pending
        bytes), and it does not end in U+FFFD (on which DecodeStream would hold it back)."""
        token = self.backend.id_to_token(token_id)
        return (
            token is not None
            and byte_level_token_bytes(token) == spelling.encode("utf-8")
            and not spelling.endswith("\ufffd")
        )

    def anchor_head(self, anchor: str) -> int | None:
        """The id of the control token a start-anchor literal begins with, when every occurrence of
        the anchor in decoded text begins where that id was decoded; else None.

        In decoded text a control token's spelling stands whole only where its id was decoded: text
        from ordinary tokens has every complete spelling defused (MARKER between its characters). So
        the anchor, which begins with the spelling S of control token c, occurs only at c's ids, as
        long as no occurrence can straddle a piece's edge: S overlaps itself nowhere (no proper
        suffix is a prefix of it) and overlaps no other control token's spelling T in any way (S in
        T, T in S, a proper suffix of one beginning the other). Checked once per anchor."""
        if anchor in self._anchor_heads:
            return self._anchor_heads[anchor]
        head = None
        starting = [token_id for token_id, spelling in self.control_ids.items() if spelling and anchor.startswith(spelling)]
        if len(starting) == 1:
            spelling = self.control_ids[starting[0]]
            others = [token for token in self.control_tokens if token != spelling]
            if (
                self.byte_level
                and list(self.control_ids.values()).count(spelling) == 1
                and not _borders(spelling, spelling)
                and not any(spelling in other or other in spelling for other in others)
                and not any(_borders(spelling, other) or _borders(other, spelling) for other in others)
            ):
                head = starting[0]
        self._anchor_heads[anchor] = head
        return head

    def has_start(self, text: str) -> bool:
        """Whether `text` contains a character some control token starts with."""
        if self._start_search is not None:
            return self._start_search(text) is not None
        for start in self.starts:
            if start in text:
                return True
        return False

    def check(self, ids: Any, refuse_unknown: bool = False) -> list[int]:
        """`ids` as a list of valid ids (Python ints), or TokenIdError naming the first bad one.
        Learns ids seen for the first time.

        An id below 2**32 that names no token of the vocabulary decodes to nothing, as DecodeStream
        decodes it (the interpreter skips it): it is left out of the list a byte-level profile
        decodes from (DecodeStream, for other decoders, gets it and skips it itself), or, with
        `refuse_unknown`, it is a TokenIdError too."""
        if type(ids) is list and ids:
            try:  # (C loops: every id is a non-negative integer that was seen before)
                array("L", ids)
                if None not in _lookup(self.valid, ids):
                    return ids
            except (TypeError, OverflowError, IndexError):
                pass
        checked = []
        for position, token_id in enumerate(ids):
            if type(token_id) is not int:
                try:
                    token_id = operator.index(token_id)  # numpy integers, bools, as DecodeStream takes them
                except TypeError:
                    raise TokenIdError(
                        f"token ids must be integers; got {type(token_id).__name__} {token_id!r} "
                        f"at position {position}"
                    ) from None
            if not 0 <= token_id < len(self.valid) or self.valid[token_id] is None:
                if not self._learn(token_id, position, refuse_unknown) and self.byte_level:
                    continue  # (no token: no bytes, as DecodeStream decodes it)
            checked.append(token_id)
        return checked

    def pieces(self, ids: list) -> list[str] | None:
        """A feed of known ids, from an idle decoder, as [run text, control sentinel, run text, ...]
        (runs of ordinary ids between control tokens, each as DecodeStream gives it out: the texts
        of its ids joined), or None where that does not hold (an unknown or negative id, bytes of
        a character split between ids, a run ending in U+FFFD, a control token without a
        sentinel). C loops only: a whole message costs a few tens of nanoseconds per id."""
        try:
            array("L", ids)  # (integers, none negative: a negative index would read the table's end)
            text = "".join(_lookup(self.texts, ids))
        except (TypeError, OverflowError, IndexError):
            return None
        pieces = _split_at_sentinels(text)
        for run in pieces[::2]:
            if run and run[-1] == "\ufffd":
                return None
        return pieces

    def joined(self, ids: list) -> str | None:
        """The text of several ids that are all known, ordinary, and valid UTF-8 one by one, when it
        does not end in U+FFFD: what DecodeStream gives out for them as one run from an idle state
        (the bytes of each decode on their own, so the text is the texts joined). None otherwise.
        C-level loops only: a whole message's ids cost a few tens of nanoseconds each."""
        try:
            text = "".join(_lookup(self.texts, ids))
        except TypeError:  # (an id without such a text)
            return None
        if _SENTINEL_RE.search(text):  # (a control token's sentinel: not one run)
            return None
        return text if text and text[-1] != "\ufffd" else None

    def _learn(self, token_id: int, position: int, refuse_unknown: bool = False) -> bool:
        """Learn what an id decodes to; False for an id below 2**32 without a token (it decodes to
        nothing), unless `refuse_unknown` makes that a TokenIdError."""
        if not 0 <= token_id < _ID_LIMIT:
            raise TokenIdError(f"token id {token_id} at position {position} is outside the tokenizer's vocabulary")
        token = self.backend.id_to_token(token_id)
        if token is None:
            if not refuse_unknown:
                return False
            raise TokenIdError(
                f"token id {token_id} at position {position} is outside the tokenizer's vocabulary "
                f"({self.backend.get_vocab_size(with_added_tokens=True)} tokens)"
            )
        with self._learning:
            if token_id >= len(self.valid):  # (an added token beyond the vocabulary size: holes)
                grow = [None] * (token_id + 1 - len(self.valid))
                for table in (self.valid, self.token_bytes, self.texts):
                    table.extend(grow)
            if not self.byte_level:
                self.valid[token_id] = True
                return True
            data = byte_level_token_bytes(token)
            if token_id in self.control_ids:
                self.texts[token_id] = self.sentinels.get(token_id)
            else:
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    text = ""
                if text and not _SENTINEL_RE.search(text):
                    self.texts[token_id] = text
                if text and text[-1] != "\ufffd" and MARKER not in text and not self.has_start(text):
                    self.clean[token_id] = text
            self.token_bytes[token_id] = data
            self.valid[token_id] = True
        return True


# Control tokens stand for themselves in joined text as characters of the Private Use Area (of
# the Basic Multilingual Plane, so that joined text stays two bytes a character where the model's
# text is); ordinary tokens that contain such characters are never joined (they take the general
# path), so a sentinel in joined text always is a control token. (Control tokens beyond the
# area's 6,400 characters have none: a feed with one takes the general path.)
_SENTINEL_BASE = 0xE000
_SENTINEL_COUNT = 0xF8FF + 1 - _SENTINEL_BASE
_SENTINEL_RE = re.compile("[\ue000-\uf8ff]")
_split_at_sentinels = re.compile("([\ue000-\uf8ff])").split


def _borders(left: str, right: str) -> bool:
    """Whether a proper, non-empty suffix of `left` is a prefix of `right`."""
    return any(right.startswith(left[position:]) for position in range(1, len(left)))


def _lookup(table: list, ids: list) -> tuple:
    """table[id] for every id, by one C loop."""
    return itemgetter(*ids)(table) if len(ids) > 1 else (table[ids[0]],)


_PROFILES: "weakref.WeakKeyDictionary[Any, tuple[tuple, TokenizerProfile]]" = weakref.WeakKeyDictionary()
_PROFILES_LOCK = threading.Lock()


def _control_tokens(tokenizer: Any) -> tuple[str, ...]:
    """The interpreter's control tokens: `tokenizer._get_control_tokens` over every chat template
    the tokenizer has (none, one, or several named ones), sorted. A tokenizer of a transformers
    release that may compute them otherwise is refused (TOKEN_ID_RELEASES)."""
    _check_tokenizer_release(tokenizer)
    chat_template = tokenizer.chat_template
    templates = list(chat_template.values()) if isinstance(chat_template, dict) else [chat_template or ""]
    return tuple(sorted({token for template in templates for token in tokenizer._get_control_tokens(template)}))


def profile_for(tokenizer: Any) -> TokenizerProfile:
    """The profile of a (fast) transformers tokenizer, cached on the tokenizer object.

    A cached profile is used again while the backend tokenizer, its vocabulary size (added tokens
    included), the chat templates and `chat_control_tokens` are unchanged: everything the control
    tokens are computed from, but for flipping the `special` flag of an existing added token in
    place (call `forget(tokenizer)` after that)."""
    chat_template = tokenizer.chat_template
    listed = getattr(tokenizer, "chat_control_tokens", None)
    backend = tokenizer.backend_tokenizer
    try:
        entry = _PROFILES.get(tokenizer)
    except TypeError:  # (a tokenizer that cannot be weakly referenced: no cache)
        entry = None
    key = None
    if entry is not None or _cacheable(tokenizer):
        key = (
            id(backend),
            backend.get_vocab_size(with_added_tokens=True),
            chat_template if not isinstance(chat_template, dict) else tuple(chat_template.items()),
            None if listed is None else tuple(listed),
        )
        if entry is not None and entry[0] == key and entry[1].backend is backend:
            return entry[1]
    control_tokens = _control_tokens(tokenizer)
    control_ids = {
        token_id: added.content
        for token_id, added in tokenizer.added_tokens_decoder.items()
        if added.content in control_tokens
    }
    profile = TokenizerProfile(backend, control_tokens, control_ids)
    if key is not None:
        with _PROFILES_LOCK:
            _PROFILES[tokenizer] = (key, profile)
    return profile


def _cacheable(tokenizer: Any) -> bool:
    try:
        weakref.ref(tokenizer)
    except TypeError:
        return False
    return True


def forget(tokenizer: Any) -> None:
    """Drop the cached profile of `tokenizer` (see `profile_for`)."""
    with _PROFILES_LOCK:
        _PROFILES.pop(tokenizer, None)


# ---- decoding streams --------------------------------------------------------------------------


class _ByteLevelStream:
    """DecodeStream for a byte-level tokenizer: pending bytes decode as Rust's `from_utf8_lossy`
    (Python's "replace" error handler substitutes the same maximal subparts), and text comes out
    once what is pending decodes to text that does not end in U+FFFD."""

    __slots__ = ("_profile", "_utf8", "_held")

    def __init__(self, profile: TokenizerProfile):
        self._profile = profile
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""  # decoded text not given out yet (it ends in U+FFFD)

    def idle(self) -> bool:
        return not self._held and not self._utf8.getstate()[0]

    def step(self, run: list[int]) -> str | None:
        data = b"".join(_lookup(self._profile.token_bytes, run))
        if not self._held and not self._utf8.getstate()[0]:
            try:  # (from an idle state, valid UTF-8 decodes to itself: one C call)
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = ""
            if text and text[-1] != "\ufffd":
                return text
        text = self._held + self._utf8.decode(data)
        if not text or text[-1] == "\ufffd" or self._utf8.getstate()[0]:
            self._held = text  # (an incomplete character decodes to U+FFFD in DecodeStream's view)
            return None
        self._held = ""
        return text

    def release(self, token_id: int) -> str:
        """A control token's step: the pending text it releases (before its spelling)."""
        return self.flush()

    def flush(self) -> str:
        text = self._held + self._utf8.decode(b"", final=True)
        self._utf8.reset()
        self._held = ""
        return text


class _ReferenceStream:
    """The interpreter's use of DecodeStream, unchanged: for decoders other than byte level.

    With `recover`, one failure of DecodeStream's is recovered from instead of raised. A
    byte-fallback decoder (`ByteFallback`) decodes a run of byte tokens as one group, and when the
    group is not valid UTF-8 it gives U+FFFD for every byte of it, valid ones included: bytes
    already given out as text (`;` of `<0x3B>`) are taken back when an invalid byte follows
    (`<0x80>`), and DecodeStream raises `Exception("Invalid prefix encountered while decoding
    stream...")` at the next id. The interpreter raises it (parity keeps it so). Recovering, the
    text given out stands and the ids not given out yet are decoded by a fresh DecodeStream: the
    invalid bytes come out as U+FFFD and nothing else is lost, as vLLM's detokenizer recovers."""

    __slots__ = ("_backend", "_decode_stream", "_stream", "_pending", "_control_ids", "_recover")

    def __init__(self, profile: TokenizerProfile, recover: bool = False):
        from tokenizers.decoders import DecodeStream

        self._backend = profile.backend
        self._control_ids = profile.control_ids
        self._decode_stream = DecodeStream
        self._stream = DecodeStream(skip_special_tokens=False)
        self._pending: list[int] = []  # ids DecodeStream holds back as an incomplete character
        self._recover = recover

    def idle(self) -> bool:
        return False

    def step(self, run: list[int]) -> str | None:
        try:
            decoded = self._stream.step(self._backend, run)
        except Exception as error:
            decoded = self._recovered(error, run)
        if decoded is None:
            self._pending += run
            return None
        self._pending = []
        return decoded

    def release(self, token_id: int) -> str:
        try:
            decoded = self._stream.step(self._backend, token_id) or ""
        except Exception as error:
            decoded = self._recovered(error, [token_id]) or ""
        self._pending = []
        return decoded.removesuffix(self._control_ids[token_id])

    def flush(self) -> str:
        pending = self._pending
        text = self._backend.decode(pending, skip_special_tokens=False) if pending else ""
        self._stream, self._pending = self._decode_stream(skip_special_tokens=False), []
        return text

    def _recovered(self, error: Exception, run: list[int]) -> str | None:
        """What a fresh stream gives for the ids not given out yet (see the class doc), or `error`
        raised again when it is not DecodeStream's invalid prefix or recovery is off. Those ids
        begin with the byte that broke the group (a valid byte is given out as it comes), never
        with a space a decoder would strip at the start, so a fresh stream decodes them as in the
        middle of the text; and a stream's first step has no prefix to fail on."""
        if not (self._recover and str(error).startswith(_INVALID_PREFIX)):
            raise error
        self._stream = self._decode_stream(skip_special_tokens=False)
        # (self._pending stays: the caller updates it as after any step)
        return self._stream.step(self._backend, self._pending + run)


# How tokenizers' DecodeStream words the failure _ReferenceStream recovers from.
_INVALID_PREFIX = "Invalid prefix encountered while decoding stream"


class TokenIdDecoder:
    """Incrementally decodes generated token ids into the text the interpreter's parser scans
    (transformers' `chat_parsing.token_ids.TokenIdDecoder`, feed by feed).

    `marked` turns true once a MARKER has been given out (a spelled-out control token was defused,
    or the model wrote U+FDD2 itself): from then on the parser strips markers. `defused` is true
    once a control token's spelling was defused: the model wrote a control token with ordinary
    tokens, which therefore did not act as a delimiter. `idle`: nothing is held back (see there).
    Read them; the decoder sets them."""

    __slots__ = (
        "_profile",
        "_stream",
        "_tail",
        "_idle",
        "marked",
        "defused",
        "refuse_unknown_ids",
        "_recover_decode_errors",
    )

    def __init__(
        self, tokenizer_or_profile: Any, refuse_unknown_ids: bool = False, recover_decode_errors: bool = False
    ):
        profile = (
            tokenizer_or_profile
            if isinstance(tokenizer_or_profile, TokenizerProfile)
            else profile_for(tokenizer_or_profile)
        )
        self._profile = profile
        # recover_decode_errors: go on past DecodeStream's "Invalid prefix" failure on byte-fallback
        # ids, which the interpreter raises (see _ReferenceStream); byte-level decoding has none.
        self._stream = (
            _ByteLevelStream(profile) if profile.byte_level else _ReferenceStream(profile, recover_decode_errors)
        )
        self._tail = ""  # text held back as a possible control-token spelling
        self._idle = profile.byte_level  # nothing held back anywhere (the one-id fast path may run)
        self.marked = False
        self.defused = False
        # Ids below 2**32 that name no token: decoded to nothing, as the interpreter does, or
        # (True) refused with TokenIdError, since no model generates them.
        self.refuse_unknown_ids = refuse_unknown_ids
        self._recover_decode_errors = recover_decode_errors

    def fresh(self) -> "TokenIdDecoder":
        """A new decoder of the same tokenizer with the same options, in the initial state."""
        return TokenIdDecoder(self._profile, self.refuse_unknown_ids, self._recover_decode_errors)

    @property
    def recover_decode_errors(self) -> bool:
        """Whether DecodeStream's failure on byte-fallback ids is recovered from (as built)."""
        return self._recover_decode_errors

    @property
    def profile(self) -> TokenizerProfile:
        return self._profile

    @property
    def idle(self) -> bool:
        """Whether nothing is held back anywhere (no bytes of an incomplete character, no possible
        start of a control token's spelling) on a byte-level tokenizer: then a feed of one id of
        `profile.clean` returns that id's text there and leaves the decoder as it was. (Never for
        other decoders: DecodeStream keeps state of its own.)"""
        return self._idle

    @property
    def held_text(self) -> str:
        """Decoded text held back as the possible start of a control token's spelling."""
        return self._tail

    def feed(self, ids: Any) -> str:
        """Decode the next ids; return the text they add for the parser (it can be "" while text is
        held back). Bad ids raise TokenIdError before anything changes."""
        if type(ids) is not list:
            ids = as_token_ids(ids)
        if self._idle and type(ids) is list and len(ids) == 1:
            token_id = ids[0]
            if type(token_id) is int:
                text = self._profile.clean.get(token_id)
                if text is not None:
                    return text
        if self._idle and type(ids) is list and len(ids) > 1:
            pieces = self._profile.pieces(ids)
            if pieces is not None:
                return self._feed_pieces(pieces)
        return self._feed(self._profile.check(ids, self.refuse_unknown_ids))

    def _feed_pieces(self, pieces: list[str]) -> str:
        """_feed for a feed that `TokenizerProfile.pieces` split: the same steps, from the texts
        (the stream stays idle: every run's text comes out whole, a control token releases
        nothing)."""
        spelling_of = self._profile.spelling_of_sentinel
        new_text = []
        for index, piece in enumerate(pieces):
            if index % 2:
                new_text.append(self._defuse("", final=True) + spelling_of[piece])
            elif piece:
                new_text.append(self._defuse(piece))
        text = "".join(new_text)
        if not self.marked and MARKER in text:
            self.marked = True
        self._idle = not self._tail
        return text

    def _feed(self, ids: list[int]) -> str:
        control_ids = self._profile.control_ids
        stream = self._stream
        new_text = []
        for is_control, run in groupby(ids, control_ids.__contains__):
            if is_control:
                for token_id in run:
                    # A control token also releases any incomplete character held back before it
                    new_text.append(self._defuse(stream.release(token_id), final=True) + control_ids[token_id])
                continue
            run = list(run)
            decoded = self._profile.joined(run) if stream.idle() else None
            if decoded is None:
                decoded = stream.step(run)
            if decoded is not None:
                new_text.append(self._defuse(decoded))
        text = "".join(new_text)
        if not self.marked and MARKER in text:
            self.marked = True
        self._idle = not self._tail and stream.idle()
        return text

    def flush(self) -> str:
        """All the text held back; the next ids decode as a new sequence (like `decode` does for a
        generation without its prompt)."""
        text = self._defuse(self._stream.flush(), final=True)
        if not self.marked and MARKER in text:
            self.marked = True
        self._idle = self._profile.byte_level
        return text

    def _defuse(self, text: str, final: bool = False) -> str:
        """The interpreter's `_defuse`: control-token spellings in `text` (after what was held back)
        get MARKER between their characters; unless `final`, a tail that could still become one is
        held back (never cut through a complete spelling, so it is defused whole once it resolves)."""
        text, self._tail = self._tail + text, ""
        profile = self._profile
        if not text or not profile.has_start(text):
            return text  # (nothing to hold back, nothing to defuse)
        if not final:
            longest, starts, prefixes = profile.longest_prefix, profile.starts, profile.prefixes
            held = 0
            # The longest suffix that is a proper prefix of a control token (one starts with a start)
            for position in range(max(0, len(text) - longest), len(text)):
                if text[position] in starts and text[position:] in prefixes:
                    held = len(text) - position
                    break
            cut = len(text) - held
            if held:
                for match in profile.control_re.finditer(text, max(0, cut - longest)):
                    if match.start() < cut < match.end():
                        cut = match.start()
                        break
            text, self._tail = text[:cut], text[cut:]
        text, count = profile.control_re.subn(_defused, text)
        if count:
            self.defused = True
        return text


def _defused(match: re.Match) -> str:
    return MARKER.join(match.group())

"""A delimiter pattern's partial match, carried from one chunk to the next.

While a pattern delimiter is being written (qwen3.5's `<tool_call>\\n<function=get_weather>`,
gpt-oss's call header), every chunk leaves it matching from the start of the unread text, and the
state's fast path holds the chunk whole (see Machine.feed). Asking the `regex` module's partial
search again each chunk reads all the held text again and costs one regex call (about 1 µs). A
`CarriedMatch` reads only the new chunk instead: the pattern as an automaton, built lazily (one
state per set of pattern positions met), whose state after the held text is kept with that text.

The question it answers is the fast path's: would `pattern.search(joined, partial=True)` return
a match that starts at 0 and runs into the end of `joined`? With no complete match anywhere in
`joined`, the search reports the leftmost partial match, and there is one at 0 exactly when some
way through the pattern from 0 reads all of `joined` (the engine backtracks through every way
before it gives up on a position). So a state tracks two sets of pattern positions: the ways
started at 0 (`anchored`), and the ways started anywhere so far (`anywhere`, to see a complete
match wherever one ends). A state is `held` while some way from 0 is alive and no way has reached
the end of the pattern; `dead` once none from 0 is alive (no extension of the text changes that:
the scan decides); `unknown` once a complete match exists somewhere (the regex decides, as
before). Only patterns whose meaning is plain sets of strings are taken (`carried_match` says
None otherwise): characters, sets of literals, ranges and `\\s`, `.`, groups, alternation,
greedy repeats; no anchors, lookarounds, back references, atomic groups, lazy or possessive
repeats (`regex` reports partial matches of `a[bc]*?d` where the text has left the pattern) or
flags, and no pattern that matches the empty string. tests/codegen/test_carried_match.py compares
it with the `regex` module on generated patterns, texts and chunkings.
"""

from __future__ import annotations

import functools
import re

from .regex_syntax import (
    REGEX_WHITESPACE,
    Alternation,
    AnyChar,
    Category,
    Char,
    CharSet,
    Group,
    NotChar,
    Range,
    Repeat,
    Seq,
    parse,
)

__all__ = ["CarriedMatch", "carried_match"]

# Beyond these the automaton is not built: a repeat count is unrolled into copies of its body, a
# range into its characters, and states are made as texts reach them (past MAX_STATES a step
# answers `unknown`, and the regex decides, so memory stays bounded whatever the text).
MAX_COUNT = 16
MAX_RANGE = 512
MAX_POSITIONS = 2000
MAX_STATES = 1000

_ALLOWED_FLAGS = int(re.DOTALL | re.UNICODE)


@functools.lru_cache(maxsize=None)
def carried_match(source: str) -> CarriedMatch | None:
    """The automaton of `source` (compiled with regex.DOTALL), or None where the pattern is not
    made of plain sets of strings only (see the module's doc)."""
    syntax = parse(source, re.DOTALL)
    if syntax is None or syntax.flags & ~_ALLOWED_FLAGS:
        return None
    if syntax.root.width()[0] == 0:
        return None  # (an empty match everywhere: never partial from the start)
    try:
        positions = _Positions()
        start = positions.build(syntax.root, positions.accept)
    except _NotPlain:
        return None
    return CarriedMatch(source, positions, start)


class _NotPlain(Exception):
    """The pattern has a part that is not a plain set of strings (or is too big unrolled)."""


def _member_class(member) -> tuple[frozenset, bool]:
    """(characters, negated) of one member of a CharSet."""
    if isinstance(member, Char):
        return frozenset(member.char), False
    if isinstance(member, Range):
        low, high = ord(member.low), ord(member.high)
        if high - low >= MAX_RANGE:
            raise _NotPlain
        return frozenset(map(chr, range(low, high + 1))), False
    if member == Category("space"):
        return frozenset(REGEX_WHITESPACE), False
    if member == Category("not_space"):
        return frozenset(REGEX_WHITESPACE), True
    raise _NotPlain  # (\d, \w: Unicode tables the engines read differently)


def _union(a: tuple[frozenset, bool], b: tuple[frozenset, bool]) -> tuple[frozenset, bool]:
    (chars_a, neg_a), (chars_b, neg_b) = a, b
    if not neg_a and not neg_b:
        return chars_a | chars_b, False
    if neg_a and neg_b:
        return chars_a & chars_b, True
    return (chars_a - chars_b, True) if neg_a else (chars_b - chars_a, True)


def _node_class(node) -> tuple[frozenset, bool]:
    """(characters, negated) of a node that matches one character."""
    if isinstance(node, Char):
        return frozenset(node.char), False
    if isinstance(node, NotChar):
        return frozenset(node.char), True
    if isinstance(node, AnyChar):
        return frozenset(), True  # (always DOTALL here)
    chars: tuple[frozenset, bool] = (frozenset(), False)
    for member in node.items:
        chars = _union(chars, _member_class(member))
    return (chars[0], not chars[1]) if node.negated else chars


class _Positions:
    """The pattern as positions: each either reads one character of a class and goes on to one
    next position, or goes on to several without reading (alternation, repeats)."""

    def __init__(self) -> None:
        self.classes: list[tuple[frozenset, bool] | None] = []  # None: reads nothing
        self.next: list[list[int]] = []
        self.accept = self._new(None)  # the end of the pattern

    def _new(self, chars: tuple[frozenset, bool] | None) -> int:
        if len(self.classes) >= MAX_POSITIONS:
            raise _NotPlain
        self.classes.append(chars)
        self.next.append([])
        return len(self.classes) - 1

    def build(self, node, after: int) -> int:
        """The position where `node` starts, going on to `after` once it has matched."""
        if isinstance(node, Seq):
            for item in reversed(node.items):
                after = self.build(item, after)
            return after
        if isinstance(node, (Char, NotChar, AnyChar, CharSet)):
            position = self._new(_node_class(node))
            self.next[position].append(after)
            return position
        if isinstance(node, Group):
            if node.add_flags or node.del_flags:
                raise _NotPlain
            return self.build(node.body, after)
        if isinstance(node, Alternation):
            fork = self._new(None)
            self.next[fork].extend(self.build(branch, after) for branch in node.branches)
            return fork
        if isinstance(node, Repeat):
            return self._repeat(node, after)
        raise _NotPlain  # anchors, lookarounds, back references, conditionals, atomic groups

    def _repeat(self, node: Repeat, after: int) -> int:
        # (lazy repeats: `regex` reports partial matches of `a[bc]*?d` where the text left the
        # pattern, `aa`; its partial search is the reference, so they are not taken)
        if node.mode != "greedy" or node.min > MAX_COUNT or (node.max is not None and node.max > MAX_COUNT):
            raise _NotPlain
        if node.max is None:  # a loop: the body again, or on
            loop = self._new(None)
            self.next[loop].extend((self.build(node.body, loop), after))
            start = loop
        else:  # the optional copies, innermost last
            start = after
            for _ in range(node.max - node.min):
                optional = self._new(None)
                self.next[optional].extend((self.build(node.body, start), after))
                start = optional
        for _ in range(node.min):
            start = self.build(node.body, start)
        return start

    def closure(self, positions) -> frozenset:
        """The positions that read a character (and the accept) reachable without reading."""
        seen: set[int] = set()
        found: set[int] = set()
        stack = list(positions)
        while stack:
            position = stack.pop()
            if position in seen:
                continue
            seen.add(position)
            if self.classes[position] is None and position != self.accept:
                stack.extend(self.next[position])
            else:
                found.add(position)
        return frozenset(found)


class CarriedState:
    """Where the pattern stands after some text: see the module's doc. `next` is filled as texts
    reach the states after it (per character class of the pattern's alphabet)."""

    __slots__ = ("anchored", "anywhere", "held", "unknown", "settled", "next")

    def __init__(self, anchored: frozenset, anywhere: frozenset, unknown: bool, width: int):
        self.anchored = anchored
        self.anywhere = anywhere
        self.unknown = unknown
        self.held = bool(anchored) and not unknown
        self.settled = not self.held  # (dead or unknown: no later text changes the answer)
        self.next: list[CarriedState | None] = [None] * width


class CarriedMatch:
    """A pattern's automaton (see the module's doc): `advance(state, text)` is the state after
    `text` read from `state`; `start` is the state before any text."""

    __slots__ = ("source", "start", "_positions", "_index", "_members", "_states", "_unknown", "_begin")

    def __init__(self, source: str, positions: _Positions, start: int):
        self.source = source
        self._positions = positions
        # The alphabet: characters every class of the pattern treats alike share an index; index
        # 0 is every character no class names.
        classes = [chars for chars in positions.classes if chars is not None]
        named = sorted(set().union(*(chars for chars, _ in classes)))
        signatures: dict[tuple, int] = {tuple(negated for _, negated in classes): 0}
        self._index: dict[str, int] = {}
        for char in named:
            signature = tuple((char in chars) != negated for chars, negated in classes)
            self._index[char] = signatures.setdefault(signature, len(signatures))
        # Per position that reads a character: the set of alphabet indices it accepts.
        self._members: dict[int, frozenset] = {}
        for position, chars in enumerate(positions.classes):
            if chars is not None:
                accepted = {index for char, index in self._index.items() if (char in chars[0]) != chars[1]}
                if chars[1]:
                    accepted.add(0)
                self._members[position] = frozenset(accepted)
        self._begin = positions.closure((start,))
        self._states: dict[tuple, CarriedState] = {}
        self._unknown = CarriedState(frozenset(), frozenset(), True, 0)
        self.start = self._state(self._begin, self._begin)

    def _state(self, anchored: frozenset, anywhere: frozenset) -> CarriedState:
        key = (anchored, anywhere)
        state = self._states.get(key)
        if state is None:
            if len(self._states) >= MAX_STATES:
                return self._unknown
            accept = self._positions.accept
            unknown = accept in anywhere or accept in anchored
            state = self._states[key] = CarriedState(anchored, anywhere, unknown, len(set(self._index.values())) + 1)
        return state

    def _step(self, state: CarriedState, index: int) -> CarriedState:
        """The state after one character of alphabet `index` (then remembered in state.next)."""
        members, following = self._members, self._positions.next
        anchored = self._positions.closure(
            following[p][0] for p in state.anchored if p in members and index in members[p]
        )
        anywhere = self._positions.closure(
            following[p][0] for p in state.anywhere if p in members and index in members[p]
        )
        after = self._state(anchored, anywhere | self._begin)  # (and a match may start after it)
        if after is not self._unknown:
            state.next[index] = after
        return after

    def advance(self, state: CarriedState, text: str) -> CarriedState:
        """The state after `text`, read from `state` (a settled state stays as it is)."""
        index = self._index
        for char in text:
            if state.settled:
                break
            k = index.get(char, 0)
            following = state.next[k]
            state = following if following is not None else self._step(state, k)
        return state

    def __repr__(self) -> str:
        return f"CarriedMatch({self.source!r})"

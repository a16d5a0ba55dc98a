"""Small automata over patterns and formats, for three questions text alone cannot settle.

Can a closer's match start inside the region it closes? The parser ends a region where a search
for its closer first finds a match: the leftmost start wins. The grammar keeps the closer's fixed
text (its blocking literals) out of the content, so no match lies wholly inside it; but a match can
start inside the content and run on into the closer the grammar writes. `a.*?<a>` matches from the
`a` of `{"name": ...}` to the written `<a>`, and the region closes inside the call. `starts_inside`
runs the closer's automaton over a content's end (at least one character of text that holds no
blocking literal), then beside the written closer's (the product of the two); a match that ends in
the written closer, or could end after it, starts inside. A match that takes only whitespace from
the content is allowed: at most the content's trailing whitespace moves into the closer
(`\\s*</tool_call>`).

Does what the grammar writes satisfy a lookahead it left out? An opener's `(?=\\{\\s*"name"\\s*:)`
holds only if the content starts that way, in every layout and key order it may be written in.
`always_holds` follows the written text's automaton with the set of states the lookahead's can be
in; text that leaves the set empty, or ends before the lookahead is satisfied, is a counterexample.

Can a call's pieces spell its closer across them? An xml-inline tag ends with `>` and its value may
be `a`: together they spell the closer `>a`, though neither holds it. `spells` reads the format the
grammar writes (constants, regexes, free pieces that keep the closer out of themselves, control
tokens by id, which are no text) while following which end of the text could still grow into a
closer.

Where a pattern holds what an automaton cannot follow exactly (lookarounds and anchors, back
references, long counted repeats), the closer and the written text are read as matching more,
and a lookahead is not trusted: both answers err on the side of refusing. Two classes are tried
on their own characters, their neighbours and cases, and a sample for the categories (`\\s`, `\\w`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from rtcompile.runtime import regex_syntax as rs

# Characters every pair of classes is also tried on (categories have no characters of their own).
_SAMPLES = " \t\n\r\x0b\xa0\u3000a_zAZ09\u0663\u00e9\u00c9<>{}[]\"'`|/\\:,.-"
# Counted repeats are followed exactly up to this count (beyond it: any number).
_COUNT_CAP = 16
_FLAGS = re.IGNORECASE | re.DOTALL | re.ASCII


@dataclass(frozen=True, eq=False)  # (one label per node and flags: compared by identity)
class _Label:
    """One character's class: its `re` and the characters worth trying against another class."""

    matcher: re.Pattern
    chars: frozenset[str]

    def meets(self, other: "_Label") -> bool:
        matches = self.matcher.fullmatch, other.matcher.fullmatch
        return any(matches[0](c) and matches[1](c) for c in self.chars | other.chars)


# A free piece's first character and the ones after it, and a control token written by its id
# (no text).
_FIRST = _Label(re.compile("(?s:.)"), frozenset())
_ANY = _Label(re.compile("(?s:.)"), frozenset())
_BREAK = _Label(re.compile("(?!)"), frozenset())


class _Automaton:
    """A Thompson automaton of a pattern: per state, its character edges and its empty ones."""

    def __init__(self, root: rs.Seq, flags: int):
        self.edges: list[list[tuple[_Label, int]]] = []
        self.empty: list[list[int]] = []
        self.start = self._state()
        self.accept = self._seq(root, self.start, flags)

    def _state(self) -> int:
        self.edges.append([])
        self.empty.append([])
        return len(self.edges) - 1

    def _seq(self, seq: rs.Seq, at: int, flags: int) -> int:
        for node in seq.items:
            at = self._node(node, at, flags)
        return at

    def _node(self, node, at: int, flags: int) -> int:
        if isinstance(node, (rs.Char, rs.NotChar, rs.AnyChar, rs.CharSet, rs.Category)):
            end = self._state()
            self.edges[at].append((_label(node, flags & _FLAGS), end))
            return end
        if isinstance(node, rs.Group):
            return self._seq(node.body, at, (flags | node.add_flags) & ~node.del_flags)
        if isinstance(node, rs.Atomic):
            return self._seq(node.body, at, flags)
        if isinstance(node, (rs.Alternation, rs.Conditional)):
            branches = node.branches if isinstance(node, rs.Alternation) else (node.yes, node.no or rs.Seq())
            end = self._state()
            for branch in branches:
                self.empty[self._seq(branch, at, flags)].append(end)
            return end
        if isinstance(node, rs.Repeat):
            return self._repeat(node, at, flags)
        if isinstance(node, rs.Backref):  # (any text: more than it matches)
            return self._repeat(rs.Repeat(0, None, "greedy", rs.Seq((rs.AnyChar(),))), at, flags | re.DOTALL)
        return at  # (lookarounds and anchors: read as always holding)

    def _format(self, fmt: dict, at: int) -> int:
        """The text a structural-tag format writes (see `spells`)."""
        kind = fmt.get("type")
        if kind == "const_string":
            return self._seq(rs.Seq(tuple(rs.Char(c) for c in fmt["value"])), at, 0)
        if kind == "regex":
            syntax = _parsed(fmt["pattern"])
            return self._free(at) if syntax is None else self._seq(syntax.root, at, syntax.flags)
        if kind == "token":
            end = self._state()
            self.edges[at].append((_BREAK, end))
            return end
        if kind == "sequence":
            for element in fmt["elements"]:
                at = self._format(element, at)
            return at
        if kind == "or":
            end = self._state()
            for element in fmt["elements"]:
                self.empty[self._format(element, at)].append(end)
            return end
        if kind in ("optional", "star", "plus", "repeat"):
            low, high = {"optional": (0, 1), "star": (0, -1), "plus": (1, -1)}.get(kind) or (fmt["min"], fmt["max"])
            for _ in range(min(low, 2)):  # (more than two: read as fewer, which writes more)
                at = self._format(fmt["content"], at)
            end = self._state()
            self.empty[at].append(end)
            if high == -1 or high - min(low, 2) > 2:  # (many: read as any number)
                self.empty[self._format(fmt["content"], end)].append(end)
                return end
            for _ in range(high - min(low, 2)):
                at = self._format(fmt["content"], at)
                self.empty[at].append(end)
            return end
        return self._free(at)  # (free text, a JSON value, an EBNF rule)

    def _free(self, at: int) -> int:
        """A free piece: its first character (`_FIRST`), then any more (`_ANY`), or none."""
        loop, end = self._state(), self._state()
        self.edges[at].append((_FIRST, loop))
        self.edges[loop].append((_ANY, loop))
        self.empty[loop].append(end)
        self.empty[at].append(end)
        return end

    def _repeat(self, node: rs.Repeat, at: int, flags: int) -> int:
        for _ in range(min(node.min, _COUNT_CAP)):
            at = self._seq(node.body, at, flags)
        if node.max is None or node.max > _COUNT_CAP:
            loop = self._state()
            self.empty[at].append(loop)
            self.empty[self._seq(node.body, loop, flags)].append(loop)
            return loop
        end = self._state()
        self.empty[at].append(end)
        for _ in range(node.max - min(node.min, _COUNT_CAP)):
            at = self._seq(node.body, at, flags)
            self.empty[at].append(end)
        return end

    def closure(self, states) -> frozenset[int]:
        out, stack = set(states), list(states)
        while stack:
            for target in self.empty[stack.pop()]:
                if target not in out:
                    out.add(target)
                    stack.append(target)
        return frozenset(out)

    def moves(self, states):
        """(label, next state) for every character edge out of `states`."""
        return [(label, target) for state in states for label, target in self.edges[state]]

    def can_finish(self, state: int) -> bool:
        """Whether some text leads from `state` to the accepting state."""
        seen = {state}
        stack = [state]
        while stack:
            current = stack.pop()
            if current == self.accept:
                return True
            for target in [t for _, t in self.edges[current]] + self.empty[current]:
                if target not in seen:
                    seen.add(target)
                    stack.append(target)
        return False


@lru_cache(maxsize=1024)
def _parsed(source: str) -> rs.Syntax | None:
    return rs.parse(source)


def _automaton(source: str) -> _Automaton:
    syntax = _parsed(source)
    if syntax is None:  # (never: the grammar's own patterns, and delimiters it has read)
        raise ValueError(f"unreadable pattern {source!r}")
    return _Automaton(syntax.root, syntax.flags)


@lru_cache(maxsize=4096)
def _label(node: rs.Node, flags: int) -> _Label:
    """The label of a one-character node: tried on the characters it names, their neighbours
    (the first ones in or out of a range or a negated set) and their cases, and the samples."""
    named = []
    for item in node.items if isinstance(node, rs.CharSet) else (node,):
        if isinstance(item, (rs.Char, rs.NotChar)):
            named.append(item.char)
        elif isinstance(item, rs.Range):
            named.extend((item.low, item.high))
    chars = set(_SAMPLES)
    for char in named:
        for near in (char, chr(max(ord(char) - 1, 0)), chr(min(ord(char) + 1, 0x10FFFF))):
            chars.update((near, near.lower(), near.upper()))
    return _Label(re.compile(rs.to_source(node), flags), frozenset(chars))


@lru_cache(maxsize=1024)
def starts_inside(closer: str, written: str, blocking: tuple[str, ...]) -> bool:
    """Whether a match of the pattern `closer` can start inside a region's content (text holding
    none of the `blocking` literals) and end in (or after) the closer written as `written` (a
    pattern of what the grammar writes)."""
    pattern = _automaton(closer)
    writer = _automaton(written)
    inside = _after_content(pattern, blocking)
    start = writer.closure([writer.start])
    seen = {(state, start) for state in inside}
    stack = list(seen)
    while stack:
        state, writing = stack.pop()
        for label, target in pattern.moves(pattern.closure([state])):
            for written_label, written_target in writer.moves(writing):
                if not label.meets(written_label):
                    continue
                after = writer.closure([written_target])
                reached = pattern.closure([target])
                if pattern.accept in reached or (writer.accept in after and pattern.can_finish(target)):
                    return True
                if (target, after) not in seen:
                    seen.add((target, after))
                    stack.append((target, after))
    return False


def _after_content(pattern: _Automaton, blocking: tuple[str, ...]) -> set[int]:
    """The states a match can be in after reading at least one character, one of them not
    whitespace, of a content: any text that holds none of the `blocking` literals."""
    seen: set[tuple[int, str, bool]] = set()
    stack = [(state, "", False) for state in pattern.closure([pattern.start])]
    while stack:
        state, held, solid = stack.pop()
        for label, target in pattern.moves([state]):
            for char in label.chars:
                if not label.matcher.fullmatch(char):
                    continue
                now = _held(held + char, blocking)
                if now is None:
                    continue
                for reached in pattern.closure([target]):
                    step = (reached, now, solid or not char.isspace())
                    if step not in seen:
                        seen.add(step)
                        stack.append(step)
    return {state for state, _, solid in seen if solid}


@lru_cache(maxsize=8192)
def _held(text: str, blocking: tuple[str, ...]) -> str | None:
    """The end of the content that may still grow into a blocking literal (None: `text` ends
    with one, which the content never holds)."""
    if any(text.endswith(literal) for literal in blocking):
        return None
    for start in range(len(text)):
        if any(literal.startswith(text[start:]) for literal in blocking):
            return text[start:]
    return ""


@lru_cache(maxsize=1024)
def always_holds(look: str, written: str) -> bool:
    """Whether every text the pattern `written` matches starts with a match of the pattern `look`
    (a text it matches only in part, the rest unknown, must already hold one). An unreadable
    pattern holds nothing for sure."""
    syntax = _parsed(look)
    if syntax is None or not _exact(syntax.root) or _parsed(written) is None:
        return False
    pattern = _automaton(look)
    writer = _automaton(written)
    start = (writer.start, pattern.closure([pattern.start]))
    seen = {start}
    stack = [start]
    while stack:
        state, looking = stack.pop()
        if pattern.accept in looking:
            continue  # (this text satisfies it, whatever follows)
        reached = writer.closure([state])
        if writer.accept in reached:
            return False  # (the written text may end here, short of the lookahead)
        for label, target in writer.moves(reached):
            chars = label.chars.union(*(other.chars for other, _ in pattern.moves(looking)))
            for char in chars:
                if not label.matcher.fullmatch(char):
                    continue
                after = pattern.closure([t for other, t in pattern.moves(looking) if other.matcher.fullmatch(char)])
                if not after:
                    return False
                if (target, after) not in seen:
                    seen.add((target, after))
                    stack.append((target, after))
    return True


def _exact(root: rs.Seq) -> bool:
    """Whether the automaton of `root` matches what the pattern matches, no more."""
    for node in rs.walk(root):
        if isinstance(node, (rs.Look, rs.Anchor, rs.Backref, rs.Conditional)):
            return False
        if isinstance(node, rs.Repeat) and (node.min > _COUNT_CAP or (node.max or 0) > _COUNT_CAP):
            return False
    return True


# ---- text a format writes ----------------------------------------------------------------------

def spells(content: dict, blocking: tuple[str, ...]) -> str | None:
    """Which of the `blocking` literals the text the format `content` writes can hold across its
    pieces (a tag's `>` then a value's `a` spell `>a`), or inside a fixed piece. A
    free piece (free text, a JSON value, an EBNF rule) holds none of them on its own, and may
    start and end with anything; a control token written by its id is no text."""
    return _spells(json.dumps(content), blocking)


@lru_cache(maxsize=1024)
def _spells(content: str, blocking: tuple[str, ...]) -> str | None:
    automaton = _Automaton(rs.Seq(), 0)
    automaton.accept = automaton._format(json.loads(content), automaton.start)
    named = frozenset().union(*blocking)  # (any other character only ends what is held)
    tried = {}
    start = (automaton.start, "", 0)
    seen = {start}
    stack = [start]
    while stack:
        state, held, free = stack.pop()
        for reached in automaton.closure([state]):
            for label, target in automaton.edges[reached]:
                if label is _BREAK:
                    steps = [(target, "", 0)]
                else:
                    steps = []
                    if label not in tried:
                        tried[label] = _tried(label, named)
                    # (how many of the characters held are the current free piece's)
                    inside = 1 if label is _FIRST else free + 1 if label is _ANY else 0
                    for char in tried[label]:
                        grown = held + char
                        whole = next((literal for literal in blocking if grown.endswith(literal)), None)
                        if whole is not None:
                            if inside >= len(whole):
                                continue  # (wholly inside a free piece, which keeps it out)
                            return whole
                        now = _held(grown, blocking)
                        steps.append((target, now, min(inside, len(now))))
                for step in steps:
                    if step not in seen:
                        seen.add(step)
                        stack.append(step)
    return None


def _tried(label: _Label, named: frozenset[str]) -> list[str]:
    """The characters worth reading on `label` when only `named` ones can grow a literal: those it
    matches, and one other it matches (which ends what is held)."""
    if label is _ANY or label is _FIRST:
        return [*named, next(c for c in _SAMPLES + "\x00\ue000" if c not in named)]
    matching = [c for c in label.chars | named if label.matcher.fullmatch(c)]
    inside = [c for c in matching if c in named]
    other = next((c for c in matching if c not in named), None)
    return inside + ([other] if other is not None else [])

"""Delimiters written by the grammar: literal lists and patterns, with captures filled in.

A literal delimiter is written as one of its literals. A pattern is written as what it matches:
its characters, classes, groups, alternatives and repeats become formats (a repeated class one
regex format, `\\s` written as layout whitespace), and the named groups a tool call reads (the
call's name) are written as their value:

    <\\|tool_call>call:(?P<name>[^{<\\s]+)     with name=get_weather
    ->  token(<|tool_call>) "call:get_weather"

A value is written only where the pattern provably captures exactly it: the value matches the
group's own pattern, and after a greedy class (`[^{<\\s]+`) the next character the grammar writes
is outside that class (`Written.tail` carries the class to whatever follows the delimiter).
Lookarounds are not written (what follows must satisfy them: the tests parse what the grammar
accepts); a `^` or `\\A` at a pattern's start makes the delimiter one that only matches where the
parser's text starts (`Written.at_start`), or, a MULTILINE `^`, where a line starts too
(`Written.at_line_start`: a closer is written after a newline). A lazy repeat writes none of the
first character of the fixed text after it (so the match ends there); a greedy one that could run
over that text is refused. Anything else (back references,
conditionals, `$`, `\\b`, classes that cannot be written exactly) is a GrammarError naming the
delimiter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import regex

from rtcompile.frontend import ir
from rtcompile.runtime import regex_syntax as rs

from . import charclass as C
from . import formats as F
from .errors import GrammarError
from .spelling import Speller


@dataclass(frozen=True)
class Written:
    """How the grammar writes one delimiter."""

    format: F.Format
    # The pattern starts with ^ or \A: it only matches where the parser's text starts.
    at_start: bool = False
    # ... or, that ^ under MULTILINE, right after a newline too.
    at_line_start: bool = False
    # A greedy capture ends the delimiter: what the grammar writes next must start outside it.
    tail: C.CharClass | None = None
    # Lookaheads were left out: the literal text each requires next ("" if none is known); what
    # follows must satisfy them.
    assumes: tuple[str, ...] = field(default=())
    # ... and each requires exactly that text (a lookahead of characters only).
    assumes_exactly: bool = True
    # The positive lookaheads, each with what must satisfy it (`Lookahead`).
    looks: tuple["Lookahead", ...] = ()


@dataclass(frozen=True)
class Lookahead:
    """A positive lookahead left out of a written delimiter: `pattern` must match at the start of
    the text that `rest` (the pattern of the delimiter's rest after it), then whatever follows the
    delimiter, writes. `source`: the lookahead as the template spells it."""

    pattern: str
    rest: str
    source: str


def write_delimiter(
    delimiter: ir.Delimiter, speller: Speller, where: str, captures: dict | None = None, *, checked: bool = True
) -> Written:
    """How to write `delimiter`; `captures`: group name -> the text it must capture. `checked=False`:
    only its shape is wanted (its first pieces), not text to write."""
    if delimiter.literals is not None:
        return Written(F.choice(*(speller.write(literal) for literal in delimiter.literals)))
    return write_pattern(delimiter.pattern, speller, where, captures, checked=checked)


def write_pattern(
    source: str, speller: Speller, where: str, captures: dict | None = None, layout: str = C.LAYOUT_WHITESPACE, *, checked: bool = True
) -> Written:
    """How to write what `source` matches; `captures`: group name -> the text it must capture, or
    a function of the value's terminator returning the format that writes the value (a lazy
    `(?P<value>.*?)` group, as in xml-inline tag patterns)."""
    converter = _Converter(speller, captures or {}, parse(source, where), where, layout)
    converter.checked = checked
    return converter.written()


def parse(source: str, where: str) -> rs.Syntax:
    syntax = _parsed(source)
    if syntax is None:
        raise GrammarError(where, "a pattern in a syntax only the regex module reads cannot be written")
    return syntax


@lru_cache(maxsize=1024)
def _parsed(source: str) -> rs.Syntax | None:
    """(Each tool's patterns are the template's with its name filled in: read once per process.)"""
    return rs.parse(source, regex.DOTALL)


def blocking_literals(delimiter: ir.Delimiter, where: str) -> tuple[str, ...]:
    """Literals such that text holding none of them holds no match of `delimiter` (every match
    holds one of them): what the text of a region must not contain so it does not close early."""
    if delimiter.literals is not None:
        return delimiter.literals
    found = _blocking(parse(delimiter.pattern, where).root)
    if found is None:
        raise GrammarError(where, "the pattern can match without any fixed text: text before it cannot avoid it")
    return tuple(dict.fromkeys(found))


def _blocking(seq: rs.Seq) -> list[str] | None:
    """One literal per way the sequence can match (the longest run of characters it must hold)."""
    runs: list[str] = []
    current: list[str] = []
    alternatives: list[list[str]] = []
    for node in _mandatory_items(seq):  # (None: a break between runs)
        if isinstance(node, rs.Char):
            current.append(node.char)
            continue
        if current:
            runs.append("".join(current))
            current = []
        if isinstance(node, rs.Alternation):
            branches = [_blocking(b) for b in node.branches]
            if all(b is not None for b in branches):
                alternatives.append([literal for b in branches for literal in b])
    if current:
        runs.append("".join(current))
    if runs:
        return [max(runs, key=len)]
    if alternatives:
        return min(alternatives, key=len)
    return None


def _mandatory_items(seq: rs.Seq) -> list:
    """The sequence's items with mandatory groups (and positive lookaheads) opened up."""
    out = []
    for node in unfactored(seq.items):
        if isinstance(node, rs.Group):
            out.extend(_mandatory_items(node.body))
        elif isinstance(node, rs.Look) and not node.behind and not node.negated:
            out.extend(_mandatory_items(node.body))
        elif isinstance(node, rs.Repeat) and node.min >= 1:
            out.extend(_mandatory_items(node.body))
            out.append(None)  # (what repeats may come again: a run ends here)
        else:
            out.append(node)
    return out


def name_of(converter: "_Converter", node: rs.Group) -> str:
    return converter.names.get(node.index, "")


class _Converter:
    """Writes a parsed pattern. Each sequence is converted knowing what follows it in the
    enclosing groups (`follow`), so a greedy capture is checked against the first characters of
    everything that may come next; an alternative that fails the check is left out."""

    def __init__(self, speller: Speller, captures: dict, syntax: rs.Syntax, where: str, layout: str = C.LAYOUT_WHITESPACE):
        self.speller = speller
        self.layout = C.CharClass(frozenset(layout))  # (what `\\s` is written as)
        self.checked = True
        self.captures = captures
        self.root = syntax.root
        self.names = syntax.group_names
        self.flags = syntax.flags
        self.dotall = bool(syntax.flags & regex.DOTALL)
        self.where = where
        self.assumes: list[str] = []
        self.assumes_exactly = True
        self.looks: list[Lookahead] = []
        self.tails: list[C.CharClass] = []

    def written(self) -> Written:
        items = list(self.root.items)
        anchors = set()
        while items and isinstance(items[0], rs.Anchor) and items[0].kind in ("start", "start_string"):
            anchors.add(items.pop(0).kind)
        at_line_start = anchors == {"start"} and bool(self.flags & regex.MULTILINE)
        body = self.sequence(items, [])
        tail = C.union(self.tails, False, self.where) if self.tails else None
        return Written(body, bool(anchors), at_line_start, tail=tail, assumes=tuple(self.assumes), assumes_exactly=self.assumes_exactly, looks=tuple(self.looks))

    def sequence(self, items: list, follow: list, before: str = "") -> F.Format:
        """`before`: the text known to precede the sequence right before it ("" if unknown), which
        a lookbehind is checked against."""
        items = _optional_literals_distributed(unfactored(items))
        out: list[F.Format] = []
        text: list[str] = []
        known = before
        for index, node in enumerate(items):
            rest = list(items[index + 1 :]) + follow
            writer = self._capture_writer(node)
            if writer is not None:
                if text:
                    out.append(self.speller.write("".join(text)))
                    text = []
                out.append(writer(self._terminator(node, rest)))
                known = ""
                continue
            value = self._capture_value(node)
            if isinstance(node, rs.Char) or value is not None:
                text.append(node.char if value is None else value)
                known += node.char if value is None else value
                if value is not None and _is_lazy_any(node.body):
                    terminator = self._terminator(node, rest)
                    if (value + terminator).find(terminator) != len(value):
                        raise GrammarError(self.where, f"the {name_of(self, node)!r} group cannot capture {value!r}")
                elif value is not None:
                    self._check_follow(self._greedy_tail(node.body), rest)
                continue
            if isinstance(node, rs.Look) and not node.behind and not node.negated:
                self._look(node, rest, items[:index])
            written = self.node(node, rest, known)
            if written == F.EMPTY and isinstance(node, rs.Look):
                continue  # (a lookaround writes nothing: the known text stands)
            if text:
                out.append(self.speller.write("".join(text)))
                text = []
            out.append(written)
            known = ""
        if text:
            out.append(self.speller.write("".join(text)))
        for index, element in enumerate(out if self.checked else ()):  # (text no control token may straddle)
            if element.get("type") == "const_string":
                before = out[index - 1] if index else None
                # (what the rest of the sequence may write, as one regex: a control token may
                # straddle several pieces, `<a>` `\w+` `<a>` writing `<a>a<a>`)
                following = _as_regex(out[index + 1 :])
                after = {"type": "regex", "pattern": following} if following else None
                self.speller.check_edges(before, element["value"], after, self.where)
        return F.sequence(*out)

    def _look(self, node: rs.Look, rest: list, before: list) -> None:
        """Keep a positive lookahead as a pattern of its own, with the pattern of what follows it
        in the delimiter. A whitespace run right before it (`\\s*(?=\\{)`) takes the whitespace
        the text after the delimiter starts with: the lookahead then holds after that."""
        body = node.body.items
        if _ends_in_whitespace_run(before):
            body = (rs.Repeat(0, None, "greedy", rs.Seq((rs.CharSet((rs.Category("space"),)),))),) + body
        following = rs.Group(None, None, rs.Seq(tuple(rest)), self.flags & _SCOPED_FLAGS)
        self.looks.append(Lookahead(rs.to_source(rs.Syntax(rs.Seq(body), self.flags, {}, 0)), rs.to_source(following), rs.to_source(node)))

    def _check_follow(self, tail: C.CharClass | None, rest: list) -> None:
        if tail is None:
            return
        firsts, nullable = _firsts(rest, self.captures, self.names, self.dotall, self.where)
        if any(not first.disjoint(tail) for first in firsts):
            raise GrammarError(self.where, "a capture is followed by text its pattern could go on matching")
        if nullable:
            self.tails.append(tail)

    def _capture_writer(self, node):
        """A capture written by a function of its terminator (an xml-inline value), else None."""
        if not isinstance(node, rs.Group) or node.index is None:
            return None
        writer = self.captures.get(self.names.get(node.index))
        return writer if callable(writer) else None

    def _terminator(self, node: rs.Group, rest: list) -> str:
        """The literal that ends a lazily captured value: the first text every continuation starts
        with (optional characters before it skipped), which the value must not contain."""
        name = self.names.get(node.index)
        if not _is_lazy_any(node.body):
            raise GrammarError(self.where, f"the {name!r} group must be a lazy '.*?' to hold a written value")
        literal = []
        for item in rest:
            if isinstance(item, rs.Char):
                literal.append(item.char)
                continue
            if literal:
                break
            if _firsts([item], self.captures, self.names, self.dotall, self.where)[1]:
                continue  # (a nullable item before the terminator: `\n?`)
            break
        terminator = "".join(literal)
        if not terminator or _has_border(terminator):
            raise GrammarError(self.where, f"nothing after the {name!r} group ends its value unambiguously")
        return terminator

    def _capture_value(self, node) -> str | None:
        if not isinstance(node, rs.Group) or node.index is None:
            return None
        name = self.names.get(node.index)
        if name not in self.captures:
            return None
        value = self.captures[name]
        if not value or regex.fullmatch(rs.to_source(node.body), value, regex.DOTALL) is None:
            raise GrammarError(self.where, f"the {name!r} group cannot capture {value!r}")
        if not _is_lazy_any(node.body) and not _captures_exactly(node.body):
            raise GrammarError(self.where, f"the {name!r} group's pattern cannot be written with a fixed value")
        return value

    def _greedy_tail(self, body: rs.Seq) -> C.CharClass | None:
        items = body.items
        if len(items) == 1 and isinstance(items[0], rs.Repeat):
            return C.of_node(items[0].body.items[0], self.dotall, self.where)
        return None

    def node(self, node, follow: list, known: str = "") -> F.Format:
        if isinstance(node, rs.Group):
            return self.sequence(list(node.body.items), follow, known)
        if isinstance(node, rs.Alternation):
            return self.alternation(node, follow, known)
        if isinstance(node, rs.Repeat):
            return self.repeat(node, follow)
        if isinstance(node, rs.Look):
            if node.behind:
                literal = "".join(n.char for n in node.body.items) if all(isinstance(n, rs.Char) for n in node.body.items) else None
                if literal is not None and _behind_holds(literal, known) is (not node.negated):
                    return F.EMPTY  # (what the grammar wrote right before decides it)
                raise GrammarError(self.where, "a lookbehind that what is written before does not decide cannot be written")
            self.assumes.append(rs.literal_prefix(rs.Seq(tuple(unfactored(list(node.body.items))))) if not node.negated else "")
            self.assumes_exactly &= not node.negated and all(isinstance(item, rs.Char) for item in node.body.items)
            return F.EMPTY
        if isinstance(node, (rs.Anchor, rs.Backref, rs.Conditional, rs.Atomic)):
            raise GrammarError(self.where, f"{rs.to_source(node)!r} in a pattern cannot be written")
        return F.regex(C.of_node(node, self.dotall, self.where).source())

    def alternation(self, node: rs.Alternation, follow: list, known: str = "") -> F.Format:
        written: list[F.Format] = []
        first_error: GrammarError | None = None
        for branch in node.branches:
            tails, assumes, looks = len(self.tails), len(self.assumes), len(self.looks)
            try:
                written.append(self.sequence(list(branch.items), follow, known))
            except GrammarError as error:  # (another alternative may do)
                del self.tails[tails:], self.assumes[assumes:], self.looks[looks:]
                first_error = first_error or error
        if not written:
            raise first_error
        return F.choice(*written)

    def repeat(self, node: rs.Repeat, follow: list) -> F.Format:
        items = node.body.items
        if len(items) == 1 and _is_single_char(items[0]):
            cls = C.of_node(items[0], self.dotall, self.where)
            if cls == C.WHITESPACE:
                cls = self.layout
                if cls.is_empty():
                    return F.EMPTY if node.min == 0 else _refuse(self.where, "whitespace the region's closer is made of")
            if node.max != node.min:
                cls, high = self._repeat_bounded_by(cls, node, follow)
                return F.regex(cls.source() + _quantifier(node.min, high)) if high != 0 else F.EMPTY
            return F.regex(cls.source() + _quantifier(node.min, node.max))
        # (a repeated body is followed by itself, then by what follows the repeat)
        body = self.sequence(list(items), [node] + follow)
        if (node.min, node.max) == (0, 1):
            return F.optional(body)
        if (node.min, node.max) == (0, None):
            return F.star(body)
        if (node.min, node.max) == (1, None):
            return F.plus(body)
        return F.repeat(body, node.min, node.max)


    def _repeat_bounded_by(self, cls: C.CharClass, node: rs.Repeat, follow: list) -> tuple[C.CharClass, int | None]:
        """What a repeated class may write, and how many times at most, so that the pattern's
        match ends where the grammar writes it. A lazy repeat stops at the first place the text
        after it matches: it writes none of that text's first character (`<a>.*?<a>` is written
        `<a>`, text without `<`, `<a>`), or, with nothing after it, only its minimum. A greedy
        one that could run over the text after it would find a later one in what follows."""
        after = rs.literal_prefix(rs.Seq(tuple(follow))) if follow else ""
        if node.mode == "lazy":
            if not follow:
                return cls, node.min
            if not after:
                raise GrammarError(self.where, "a lazy repeat before text that is not fixed cannot be written")
            if cls.contains(after[0]):
                if cls.negated:
                    cls = C.CharClass(cls.chars | {after[0]}, cls.ranges, True)
                elif not cls.ranges:
                    cls = cls.without(after[0])
                else:
                    raise GrammarError(self.where, f"a lazy repeat that could hold {after[0]!r} cannot be written")
            return cls, node.max
        if node.max is None and after and all(cls.contains(char) for char in after):
            raise GrammarError(self.where, f"a repeat that could run over the {after!r} after it cannot be written")
        return cls, node.max


# (the flags a group may set for its own body)
_SCOPED_FLAGS = regex.IGNORECASE | regex.MULTILINE | regex.DOTALL


def opener_firsts(delimiter: ir.Delimiter, where: str) -> list[C.CharClass]:
    """The classes of the first characters an anchored opener matches after its leading
    whitespace, positive lookaheads read as what follows."""
    root = parse(delimiter.pattern, where).root
    items = [n for n in root.items if not (isinstance(n, rs.Anchor) and n.kind in ("start", "start_string"))]
    while items and isinstance(items[0], rs.Repeat) and items[0].min == 0 and _only_whitespace(items[0]):
        items.pop(0)
    opened = []
    for node in items:
        if isinstance(node, rs.Look) and not node.behind and not node.negated:
            opened.extend(node.body.items)
        else:
            opened.append(node)
    return _firsts(opened, {}, {}, True, where)[0]


def _only_whitespace(node: rs.Repeat) -> bool:
    items = node.body.items
    if len(items) == 1 and isinstance(items[0], rs.CharSet) and not items[0].negated and len(items[0].items) == 1:
        items = items[0].items
    return len(items) == 1 and isinstance(items[0], rs.Category) and items[0].name == "space"


def _ends_in_whitespace_run(items: list) -> bool:
    """Whether every match of the items ends with an unbounded whitespace repeat (`^\\s*`, then
    an optional `(?:<a>\\s*)?`)."""
    if not items:
        return False
    last = items[-1]
    if isinstance(last, rs.Repeat) and last.max is None and _only_whitespace(last):
        return True
    if isinstance(last, rs.Repeat) and (last.min, last.max) == (0, 1):
        return _ends_in_whitespace_run(list(last.body.items)) and _ends_in_whitespace_run(items[:-1])
    if isinstance(last, rs.Group):
        return _ends_in_whitespace_run(list(last.body.items))
    return False


def _optional_literals_distributed(items: list) -> list:
    """`(?:L)?X`, where X holds a lookbehind, as `(?:LX|X)`: each alternative then knows the text
    the lookbehind looks at (Mistral's `(?:\\[CALL_ID\\])?(?P<id>(?<=\\[CALL_ID\\])...|)`)."""
    out: list = []
    index = 0
    while index < len(items):
        node = items[index]
        following = items[index + 1] if index + 1 < len(items) else None
        if (
            isinstance(node, rs.Repeat)
            and (node.min, node.max) == (0, 1)
            and node.body.items
            and all(isinstance(n, rs.Char) for n in node.body.items)
            and following is not None
            and any(isinstance(n, rs.Look) and n.behind for n in rs.walk(following))
        ):
            out.append(rs.Alternation((rs.Seq(node.body.items + (following,)), rs.Seq((following,)))))
            index += 2
            continue
        out.append(node)
        index += 1
    return out


def unfactored(items) -> list:
    """Items with the characters right before an alternative moved into each of its branches.

    Python's parser factors a common prefix out of alternatives (`<\\|a\\|>|<\\|b\\|>` becomes
    `<\\|(?:a\\|>|b\\|>)`); a control token must be whole to be written by its id."""
    out: list = []
    for node in items:
        if isinstance(node, rs.Alternation):
            run: list = []
            while out and isinstance(out[-1], rs.Char):
                run.insert(0, out.pop())
            if run:
                node = rs.Alternation(tuple(rs.Seq(tuple(run) + branch.items) for branch in node.branches))
        out.append(node)
    return out


def _as_regex(formats: list) -> str:
    """A regex of what the formats write in a row as text, as far as they can be read as one
    (a control token by id, or a format of another kind, ends it)."""
    out = []
    for fmt in formats:
        kind = fmt.get("type")
        if kind == "const_string":
            out.append(regex.escape(fmt["value"]))
        elif kind == "regex":
            out.append(f"(?:{fmt['pattern']})")
        elif kind in ("optional", "star", "plus") and _as_regex([fmt["content"]]):
            out.append(f"(?:{_as_regex([fmt['content']])})" + {"optional": "?", "star": "*", "plus": "+"}[kind])
        elif kind == "sequence" and _as_regex(fmt["elements"]):
            out.append(_as_regex(fmt["elements"]))
        else:
            break
    return "".join(out)


def _refuse(where: str, what: str) -> F.Format:
    raise GrammarError(where, f"the pattern needs {what}")


def _behind_holds(literal: str, known: str) -> bool | None:
    """Whether the text before a point ends with `literal`, where `known` is the text the grammar
    wrote right before it (what came earlier, before the delimiter or a free capture, is not
    known): None when that earlier text decides (`known` is a proper suffix of `literal`)."""
    if len(known) >= len(literal):
        return known.endswith(literal)
    return False if not literal.endswith(known) else None


def _quantifier(low: int, high: int | None) -> str:
    if (low, high) == (0, None):
        return "*"
    if (low, high) == (1, None):
        return "+"
    if (low, high) == (0, 1):
        return "?"
    return "{%d,%s}" % (low, "" if high is None else high)


def _is_single_char(node) -> bool:
    return isinstance(node, (rs.Char, rs.NotChar, rs.AnyChar, rs.CharSet, rs.Category))


def _is_lazy_any(body: rs.Seq) -> bool:
    items = body.items
    return (
        len(items) == 1
        and isinstance(items[0], rs.Repeat)
        and items[0].mode == "lazy"
        and items[0].min == 0
        and items[0].max is None
        and len(items[0].body.items) == 1
        and isinstance(items[0].body.items[0], rs.AnyChar)
    )


def _has_border(text: str) -> bool:
    """Whether a proper prefix of `text` is also its suffix (then a value ending in that prefix
    would move where the terminator is found)."""
    return any(text[:size] == text[-size:] for size in range(1, len(text)))


def _captures_exactly(body: rs.Seq) -> bool:
    """Whether a group's pattern, given a value it matches in full, captures exactly that value
    when followed by a character outside its class: one repeated class (greedy), or literals."""
    items = body.items
    if all(isinstance(item, rs.Char) for item in items):
        return True
    return len(items) == 1 and isinstance(items[0], rs.Repeat) and _is_single_char(items[0].body.items[0]) and (
        len(items[0].body.items) == 1 and items[0].mode != "lazy"
    )


def _firsts(items: list, captures: dict, names: dict, dotall: bool, where: str) -> tuple[list[C.CharClass], bool]:
    """The classes the text of `items` can start with, and whether it can be empty."""
    out: list[C.CharClass] = []
    for node in items:
        classes, nullable = _node_firsts(node, captures, names, dotall, where)
        out.extend(classes)
        if not nullable:
            return out, False
    return out, True


def _node_firsts(node, captures: dict, names: dict, dotall: bool, where: str) -> tuple[list[C.CharClass], bool]:
    if isinstance(node, rs.Group):
        name = names.get(node.index) if node.index is not None else None
        if name in captures and captures[name]:
            return [C.of_char(captures[name][0])], False
        return _firsts(list(node.body.items), captures, names, dotall, where)
    if isinstance(node, rs.Alternation):
        out: list[C.CharClass] = []
        nullable = False
        for branch in node.branches:
            if branch.items and isinstance(branch.items[0], rs.Look) and branch.items[0].behind:
                continue  # (never written; a lookbehind of what the grammar writes cannot hold there)
            classes, empty = _firsts(list(branch.items), captures, names, dotall, where)
            out.extend(classes)
            nullable |= empty
        return out, nullable
    if isinstance(node, rs.Repeat):
        classes, empty = _firsts(list(node.body.items), captures, names, dotall, where)
        return classes, empty or node.min == 0
    if isinstance(node, (rs.Look, rs.Anchor)):
        return [], True
    if _is_single_char(node):
        return [C.of_node(node, dotall, where)], False
    return [C.ANY], False  # (anything else is refused when written)

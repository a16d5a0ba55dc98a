"""The structure of a regex pattern as typed nodes: the one reader of Python's own regex parser.

Delimiter analysis (compiler/frontend/patterns.py), the one-shot reader's keys, the xml-inline tag
reader (tags.py), stdlib twins (twin.py) and the servers' tag arguments all ask what a pattern is
made of. They ask here: `parse` reads the pattern with `re`'s parser (`re._parser`, a private
module, read by no other module of rtcompile) and gives a tree of frozen dataclasses.

    parse(r"\\s*<tool_call>").root ==
        Seq((Repeat(0, None, "greedy", Seq((CharSet((Category("space"),), False),))),
             Char("<"), Char("t"), ..., Char(">")))

The tree is sre's own, node for node: `\\s` is a one-item CharSet, `[^c]` a NotChar, `a|b` a
CharSet, `ab|ac` a Char then a CharSet, and plain non-capturing groups are opened up (`(?:ab)c` is
three Chars); a group survives only when it captures or sets flags.

A pattern `re` cannot read (syntax only `regex` knows: `\\G`, `\\p{L}`, `(?|...)`) or warns about (a
possible nested set, which `regex` reads as a POSIX class or a set operation) is not read at all
(None): the two engines may disagree on what it means. Nor is a negated set of a class and its
complement (`[^\\s\\S]`: nothing to `re`, any character to `regex`). `regex` allows one name on
several groups, `re` does not: names are kept per group index, so they may repeat. Case folding,
`\\d`, `\\w` and `\\b` mean slightly different things to the two engines; the tree records them,
and a caller that needs the engines to agree checks for them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Iterator, Union

try:  # Python 3.11+
    from re import _constants as sre
    from re import _parser as sre_parse
except ImportError:  # Python 3.10
    import sre_constants as sre  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

__all__ = [
    "REGEX_WHITESPACE",
    "AnyChar",
    "Alternation",
    "Anchor",
    "Atomic",
    "Backref",
    "Category",
    "Char",
    "CharSet",
    "Conditional",
    "Group",
    "Look",
    "Node",
    "NotChar",
    "Range",
    "Repeat",
    "Seq",
    "Syntax",
    "children",
    "literal_prefix",
    "literal_suffix",
    "parse",
    "to_source",
    "walk",
]

# What `regex` matches with \s (Unicode White_Space). tests/runtime/test_twin.py checks it against
# the installed module over every code point (`re` adds U+001C..U+001F).
REGEX_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


# ---- nodes ---------------------------------------------------------------------------------------


class Node:
    """A part of a pattern."""

    __slots__ = ()

    def width(self) -> tuple[int, int | None]:
        """The shortest and longest text the node matches (None: no bound), as sre's getwidth()
        gives them: `a(?=bc)d*` is (1, None), `(a)\\1` (2, 2)."""
        low, high = _seq_width((self,) if not isinstance(self, Seq) else self.items)
        return low, None if high >= sre.MAXREPEAT else high


@dataclass(frozen=True)
class Seq(Node):
    """Items matched one after the other: the body of every compound node, and the root."""

    items: tuple[Node, ...] = ()


@dataclass(frozen=True)
class Char(Node):
    """One literal character (also a member of a CharSet)."""

    char: str


@dataclass(frozen=True)
class NotChar(Node):
    """Any character but one: `[^c]`."""

    char: str


@dataclass(frozen=True)
class AnyChar(Node):
    """`.`: any character but a newline, or any at all under DOTALL (see Syntax.flags)."""


@dataclass(frozen=True)
class Range:
    """`a-z` in a CharSet: the characters from `low` to `high`, both included."""

    low: str
    high: str


@dataclass(frozen=True)
class Category(Node):
    """`\\s` and its kin: "space", "not_space", "digit", "not_digit", "word", "not_word". parse
    gives them as CharSet members (`\\s` is a CharSet of one)."""

    name: str


SetItem = Union[Char, Range, Category]


@dataclass(frozen=True)
class CharSet(Node):
    """`[...]`: one character that is (or, negated, is not) one of the items."""

    items: tuple[SetItem, ...]
    negated: bool = False


@dataclass(frozen=True)
class Group(Node):
    """`(...)` (index set; name for `(?P<name>...)`), or `(?flags-flags:...)` (index None). The
    flags are re's constants (re.IGNORECASE, ...)."""

    index: int | None
    name: str | None
    body: Seq
    add_flags: int = 0
    del_flags: int = 0


@dataclass(frozen=True)
class Alternation(Node):
    """`a|b|c`: the branches in the order the engine tries them."""

    branches: tuple[Seq, ...]


@dataclass(frozen=True)
class Repeat(Node):
    """`x*`, `x+?`, `x{2,5}+`...: max None is no bound; mode "greedy", "lazy" or "possessive"."""

    min: int
    max: int | None
    mode: str
    body: Seq


@dataclass(frozen=True)
class Look(Node):
    """`(?=...)`, `(?!...)`, `(?<=...)`, `(?<!...)`."""

    behind: bool
    negated: bool
    body: Seq


@dataclass(frozen=True)
class Anchor(Node):
    """`^` "start", `\\A` "start_string", `$` "end", `\\Z` "end_string", `\\b` "boundary", `\\B`
    "not_boundary" (`^` and `$` at lines too under MULTILINE)."""

    kind: str


@dataclass(frozen=True)
class Backref(Node):
    """`\\1` or `(?P=name)`: the text group `index` matched. `group_width` is that group's width
    (parse sets it, so that width() is getwidth()'s; it takes no part in comparisons)."""

    index: int
    group_width: tuple[int, int | None] = field(default=(0, None), compare=False)


@dataclass(frozen=True)
class Conditional(Node):
    """`(?(1)yes|no)`: `yes` if group `index` took part in the match, else `no` (None: nothing)."""

    index: int
    yes: Seq
    no: Seq | None = None


@dataclass(frozen=True)
class Atomic(Node):
    """`(?>...)`: the body's first match, never given back."""

    body: Seq


@dataclass(frozen=True)
class Syntax:
    """A whole pattern: its tree, the global flags in effect (inline ones included, as re's
    constants; re.UNICODE is always set for a text pattern), and its capture groups."""

    root: Seq
    flags: int
    group_names: dict[int, str]  # group index -> name (one name may be on several groups)
    groups: int  # how many capture groups


# ---- parsing ---------------------------------------------------------------------------------------


def parse(source: str, flags: int = 0) -> Syntax | None:
    """The pattern's structure, or None when Python's parser cannot read it (regex-only syntax, a
    group name that is no identifier, a condition on a group's name) or warns, or where `regex`
    reads it otherwise without a warning (`[^\\s\\S]`). `flags` are given as the callers compile
    with them (regex.DOTALL is re.DOTALL)."""
    renamed, names = _rename_groups(source)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (a warning: `regex` may read the pattern otherwise)
            parsed = sre_parse.parse(renamed, flags)
            group_names = _group_names(parsed.state.groupdict, names)
            if group_names is None:
                return None
            root = _seq(parsed, _Reading(group_names, parsed.state.groupwidths))
    except Exception:  # re.error, RecursionError, OverflowError...: don't guess
        return None
    return Syntax(root, parsed.state.flags, group_names, parsed.state.groups - 1)


def _rename_groups(source: str) -> tuple[str, dict[str, str] | None]:
    """The pattern with each `(?P<name>` renamed to a placeholder, which `re` accepts even where a
    name repeats, and each placeholder's name. Patterns that refer back to a name are left as they
    are (placeholders None): `re` reads them only with unique names. Escapes and `[...]` sets are
    skipped: `[(?P<a>]` is a set."""
    if "(?P=" in source or "(?&" in source:
        return source, None
    stem = "rtcompile_group_"
    while stem in source:  # (so that no name the pattern refers to is a placeholder)
        stem += "_"
    out: list[str] = []
    names: dict[str, str] = {}
    i, n, in_set = 0, len(source), False
    while i < n:
        char = source[i]
        if char == "\\":
            out.append(source[i : i + 2])
            i += 2
            continue
        if in_set:
            in_set = char != "]"
        elif char == "[":
            in_set = True
            i = _set_start(source, i + 1, out)
            continue
        elif source.startswith("(?P<", i) and (close := source.find(">", i)) > 0:
            placeholder = f"{stem}{len(names)}"
            names[placeholder] = source[i + 4 : close]
            out.append(f"(?P<{placeholder}>")
            i = close + 1
            continue
        out.append(char)
        i += 1
    return "".join(out), names


def _set_start(source: str, i: int, out: list[str]) -> int:
    """Copy `[` and what cannot end the set right after it: `^`, then a `]` (a member there)."""
    out.append("[")
    if source.startswith("^", i):
        out.append("^")
        i += 1
    if source.startswith("]", i):
        out.append("]")
        i += 1
    return i


def _group_names(groupdict: dict[str, int], names: dict[str, str] | None) -> dict[int, str] | None:
    """Group index -> the name the pattern gave it; None if a name is no identifier."""
    if names is None:  # (read with the pattern's own names)
        return {index: name for name, index in groupdict.items()}
    out = {index: names[placeholder] for placeholder, index in sorted(groupdict.items(), key=lambda item: item[1])}
    return out if all(name.isidentifier() for name in out.values()) else None


@dataclass(frozen=True)
class _Reading:
    group_names: dict[int, str]
    group_widths: list


_REPEAT_MODES = {sre.MAX_REPEAT: "greedy", sre.MIN_REPEAT: "lazy"}
if hasattr(sre, "POSSESSIVE_REPEAT"):
    _REPEAT_MODES[sre.POSSESSIVE_REPEAT] = "possessive"
_ANCHORS = {
    sre.AT_BEGINNING: "start",
    sre.AT_BEGINNING_STRING: "start_string",
    sre.AT_END: "end",
    sre.AT_END_STRING: "end_string",
    sre.AT_BOUNDARY: "boundary",
    sre.AT_NON_BOUNDARY: "not_boundary",
}
_CATEGORIES = {
    sre.CATEGORY_SPACE: "space",
    sre.CATEGORY_NOT_SPACE: "not_space",
    sre.CATEGORY_DIGIT: "digit",
    sre.CATEGORY_NOT_DIGIT: "not_digit",
    sre.CATEGORY_WORD: "word",
    sre.CATEGORY_NOT_WORD: "not_word",
}


def _seq(items, reading: _Reading) -> Seq:
    return Seq(tuple(_node(op, av, reading) for op, av in items))


def _node(op, av, reading: _Reading) -> Node:
    """One sre item (opcode, argument) as a node."""
    if op is sre.LITERAL:
        return Char(chr(av))
    if op is sre.NOT_LITERAL:
        return NotChar(chr(av))
    if op is sre.ANY:
        return AnyChar()
    if op is sre.IN:
        return _charset(av)
    if op is sre.AT:
        return Anchor(_ANCHORS[av])
    if op is sre.GROUPREF:
        low, high = reading.group_widths[av]
        return Backref(av, (low, None if high >= sre.MAXREPEAT else high))
    return _compound(op, av, reading)


def _compound(op, av, reading: _Reading) -> Node:
    if op in _REPEAT_MODES:
        low, high, body = av
        return Repeat(low, None if high == sre.MAXREPEAT else high, _REPEAT_MODES[op], _seq(body, reading))
    if op is sre.SUBPATTERN:
        index, add_flags, del_flags, body = av
        return Group(index, reading.group_names.get(index), _seq(body, reading), add_flags, del_flags)
    if op is sre.BRANCH:
        return Alternation(tuple(_seq(branch, reading) for branch in av[1]))
    if op is sre.ASSERT or op is sre.ASSERT_NOT:
        direction, body = av
        return Look(direction < 0, op is sre.ASSERT_NOT, _seq(body, reading))
    if op is sre.GROUPREF_EXISTS:
        index, yes, no = av
        return Conditional(index, _seq(yes, reading), None if no is None else _seq(no, reading))
    if op is getattr(sre, "ATOMIC_GROUP", None):
        return Atomic(_seq(av, reading))
    raise ValueError(f"unknown regex item {op}")


def _charset(members) -> CharSet:
    negated = bool(members) and members[0][0] is sre.NEGATE
    items: list[SetItem] = []
    for op, av in members[1:] if negated else members:
        if op is sre.LITERAL:
            items.append(Char(chr(av)))
        elif op is sre.RANGE:
            items.append(Range(chr(av[0]), chr(av[1])))
        elif op is sre.CATEGORY:
            items.append(Category(_CATEGORIES[av]))
        else:
            raise ValueError(f"unknown set item {op}")
    categories = {item.name for item in items if isinstance(item, Category)}
    if negated and any(pair <= categories for pair in _COMPLEMENTS):
        # `[^\\s\\S]` matches nothing in `re`, and every character in `regex`
        raise ValueError("a negated set of a class and its complement: the engines disagree")
    return CharSet(tuple(items), negated)


_COMPLEMENTS = {frozenset(("space", "not_space")), frozenset(("digit", "not_digit")), frozenset(("word", "not_word"))}


# ---- walking ---------------------------------------------------------------------------------------


def children(node: Node) -> tuple[Node, ...]:
    """The nodes directly inside `node`: a Seq's items, a compound node's Seqs (a Conditional's
    `no` when there is one); none for characters, sets, anchors and back references."""
    if isinstance(node, Seq):
        return node.items
    if isinstance(node, (Group, Repeat, Look, Atomic)):
        return (node.body,)
    if isinstance(node, Alternation):
        return node.branches
    if isinstance(node, Conditional):
        return (node.yes,) if node.no is None else (node.yes, node.no)
    return ()


def walk(node: Node) -> Iterator[Node]:
    """`node` and every node inside it, parents before children (a CharSet's members are not
    nodes of the pattern, and are not visited)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


def literal_prefix(node: Node) -> str:
    """The Chars a sequence starts with: text every match starts with (`<a>.*` gives "<a>"). Only
    the sequence's own items count: `(<a>)b` gives ""."""
    return "".join(_leading_chars(node.items if isinstance(node, Seq) else (node,)))


def literal_suffix(node: Node) -> str:
    """The Chars a sequence ends with: text every match ends with (`.*</a>` gives "</a>"). Only
    the sequence's own items count: `a(</a>)` gives ""."""
    items = node.items if isinstance(node, Seq) else (node,)
    return "".join(reversed(_leading_chars(items[::-1])))


def _leading_chars(items) -> list[str]:
    chars = []
    for item in items:
        if not isinstance(item, Char):
            break
        chars.append(item.char)
    return chars


# ---- width (sre's getwidth, over the nodes) ---------------------------------------------------------

# sre caps a width at MAXWIDTH where it has one (newer releases), else at MAXREPEAT.
_LOW_CAP = getattr(sre_parse, "MAXWIDTH", sre.MAXREPEAT - 1)
_HIGH_CAP = getattr(sre_parse, "MAXWIDTH", sre.MAXREPEAT)
_ONE_CHARACTER = (Char, NotChar, AnyChar, CharSet, Category)


def _seq_width(items) -> tuple[int, int]:
    """(low, high) of a sequence, as sre's SubPattern.getwidth computes it (caps included)."""
    low = high = 0
    for item in items:
        if isinstance(item, Repeat):
            inner_low, inner_high = _seq_width(item.body.items)
            low += inner_low * item.min
            if item.max is None:
                high = _HIGH_CAP if inner_high else high
            else:
                high += inner_high * item.max
            continue
        item_low, item_high = _item_width(item)
        low, high = low + item_low, high + item_high
    return min(low, _LOW_CAP), min(high, _HIGH_CAP)


def _item_width(item: Node) -> tuple[int, int]:
    if isinstance(item, _ONE_CHARACTER):
        return 1, 1
    if isinstance(item, (Group, Atomic)):
        return _seq_width(item.body.items)
    if isinstance(item, Alternation):
        widths = [_seq_width(branch.items) for branch in item.branches]
        return min(low for low, _ in widths), max(high for _, high in widths)
    if isinstance(item, Backref):
        low, high = item.group_width
        return low, _HIGH_CAP if high is None else high
    if isinstance(item, Conditional):
        low, high = _seq_width(item.yes.items)
        if item.no is None:
            return 0, high
        no_low, no_high = _seq_width(item.no.items)
        return min(low, no_low), max(high, no_high)
    if isinstance(item, Seq):
        return _seq_width(item.items)
    return 0, 0  # lookarounds and anchors match where they are


# ---- back to a pattern ------------------------------------------------------------------------------


def to_source(node: Node | Syntax, *, spell_space: str | None = None) -> str:
    """A pattern that matches exactly as the node does, read alike by `re` and `regex` (which
    compile it with the flags the node was parsed under; a Syntax starts with its own global flags,
    `(?s)`...). `spell_space`: the characters `\\s` stands for, spelled out as a set (`re` and
    `regex` disagree on \\s: twin.py spells it as `regex` reads it).

        to_source(parse(r"(?:a|b)c+?(?P<n>\\x3c)").root) == "[ab]c+?(?P<n><)"
    """
    spelling = _Spelling(spell_space)
    if isinstance(node, Syntax):
        return _global_flags(node.flags) + spelling.seq(node.root, bare=True)
    if isinstance(node, Seq):
        return spelling.seq(node, bare=True)
    return spelling.item(node)


# Flags as inline letters; VERBOSE is never written (the tree holds no whitespace or comments to
# skip, and spaces in it are literal), UNICODE is every text pattern's default.
_FLAG_LETTERS = (
    (sre.SRE_FLAG_ASCII, "a"),
    (sre.SRE_FLAG_IGNORECASE, "i"),
    (sre.SRE_FLAG_LOCALE, "L"),
    (sre.SRE_FLAG_MULTILINE, "m"),
    (sre.SRE_FLAG_DOTALL, "s"),
)


def _flag_letters(flags: int) -> str:
    return "".join(letter for flag, letter in _FLAG_LETTERS if flags & flag)


def _global_flags(flags: int) -> str:
    letters = _flag_letters(flags)
    return f"(?{letters})" if letters else ""


_ANCHOR_SOURCES = {
    "start": "^", "start_string": "\\A", "end": "$", "end_string": "\\Z", "boundary": "\\b", "not_boundary": "\\B"
}
_CATEGORY_SOURCES = {
    "space": "\\s", "not_space": "\\S", "digit": "\\d", "not_digit": "\\D", "word": "\\w", "not_word": "\\W"
}
_REPEAT_SUFFIXES = {"greedy": "", "lazy": "?", "possessive": "+"}
# What a quantifier may follow without a group around it.
_ATOMS = (Char, NotChar, AnyChar, CharSet, Category, Group, Backref)
# Characters escaped outside sets and inside them (`&`, `~`, `|`, `-`, `[` pairs are set
# operations or nested sets to `regex`).
_SPECIAL = frozenset(".^$*+?{}[]\\|()")
_SET_SPECIAL = frozenset("\\]^-[&~|")


def _escape(char: str, special: frozenset) -> str:
    if char in special:
        return "\\" + char
    if char.isprintable() or char in "\t\n\r":
        return {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(char, char)
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


@dataclass(frozen=True)
class _Spelling:
    """to_source's writer: `space` spelled out, or None for `\\s`."""

    space: str | None

    def seq(self, seq: Seq, bare: bool) -> str:
        """A sequence; an alternation in it gets a group unless it is all there is and `bare`."""
        pieces: list[str] = []
        for index, item in enumerate(seq.items):
            piece = self.item(item)
            if isinstance(item, Alternation) and not (bare and len(seq.items) == 1):
                piece = f"(?:{piece})"
            if index and isinstance(seq.items[index - 1], Backref) and piece[:1].isdigit():
                pieces[-1] = f"(?:{pieces[-1]})"  # (`\\1` then `2` is not `\\12`)
            pieces.append(piece)
        return "".join(pieces)

    def item(self, node: Node) -> str:
        if isinstance(node, Char):
            return _escape(node.char, _SPECIAL)
        if isinstance(node, NotChar):
            return f"[^{_escape(node.char, _SET_SPECIAL)}]"
        if isinstance(node, AnyChar):
            return "."
        if isinstance(node, (CharSet, Category)):
            return self.charset(node if isinstance(node, CharSet) else CharSet((node,)))
        if isinstance(node, Anchor):
            return _ANCHOR_SOURCES[node.kind]
        if isinstance(node, Backref):
            if node.index > 99:
                raise ValueError(f"group {node.index} cannot be referred to by number")
            return f"\\{node.index}"
        if isinstance(node, Seq):
            return self.seq(node, bare=False)
        return self.compound(node)

    def compound(self, node: Node) -> str:
        if isinstance(node, Repeat):
            return self.repeat(node)
        if isinstance(node, Group):
            return self.group_opener(node) + self.seq(node.body, bare=True) + ")"
        if isinstance(node, Alternation):
            return "|".join(self.seq(branch, bare=False) for branch in node.branches)
        if isinstance(node, Look):
            opener = ("(?<" if node.behind else "(?") + ("!" if node.negated else "=")
            return opener + self.seq(node.body, bare=True) + ")"
        if isinstance(node, Atomic):
            return "(?>" + self.seq(node.body, bare=True) + ")"
        if isinstance(node, Conditional):
            no = "" if node.no is None else "|" + self.seq(node.no, bare=False)
            return f"(?({node.index}){self.seq(node.yes, bare=False)}{no})"
        raise TypeError(f"not a regex node: {node!r}")

    def repeat(self, node: Repeat) -> str:
        items = node.body.items
        body = self.seq(node.body, bare=True)
        if len(items) != 1 or not isinstance(items[0], _ATOMS):
            body = f"(?:{body})"
        low, high = node.min, node.max
        if high is None:
            count = "*" if low == 0 else "+" if low == 1 else f"{{{low},}}"
        elif low == high:
            count = f"{{{low}}}"
        else:
            count = "?" if (low, high) == (0, 1) else f"{{{low},{high}}}"
        return body + count + _REPEAT_SUFFIXES[node.mode]

    @staticmethod
    def group_opener(node: Group) -> str:
        if node.index is not None:
            return "(" if node.name is None else f"(?P<{node.name}>"
        added = _flag_letters(node.add_flags)
        removed = _flag_letters(node.del_flags)
        return f"(?{added}-{removed}:" if removed else f"(?{added}:"

    def charset(self, node: CharSet) -> str:
        if self.space is not None and Category("not_space") in node.items:
            return self.not_space_set(node)
        only = node.items[0] if len(node.items) == 1 else None
        if isinstance(only, Category) and not node.negated and not (self.space is not None and only.name == "space"):
            return _CATEGORY_SOURCES[only.name]  # (`\\d`, not `[\\d]`)
        return "[" + "^" * node.negated + "".join(map(self.member, node.items)) + "]"

    def member(self, item: SetItem) -> str:
        if isinstance(item, Char):
            return _escape(item.char, _SET_SPECIAL)
        if isinstance(item, Range):
            return _escape(item.low, _SET_SPECIAL) + "-" + _escape(item.high, _SET_SPECIAL)
        if item.name == "space" and self.space is not None:
            if not self.space:
                raise ValueError("spell_space must name at least one character")
            return "".join(_escape(char, _SET_SPECIAL) for char in self.space)
        return _CATEGORY_SOURCES[item.name]

    def not_space_set(self, node: CharSet) -> str:
        """A set with `\\S`, \\s spelled out as S: `[^S]`, or with other members `(?:[^S]|[others])`
        (negated: `(?:(?![others])[S])`), one character either way."""
        spaces = self.member(Category("space"))
        rest = tuple(item for item in node.items if item != Category("not_space"))
        if not rest:
            return f"[{spaces}]" if node.negated else f"[^{spaces}]"
        others = self.charset(CharSet(rest))
        return f"(?:(?!{others})[{spaces}])" if node.negated else f"(?:[^{spaces}]|{others})"

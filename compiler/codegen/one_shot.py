"""The one-shot reader: how a finished message is read without the streaming machine, and when not.

`parse_response` on a finished text needs none of the machine's work: no events, nothing held
back, no partial matches. The machine's own one pass at the end of the stream (`parse_whole`)
commits, in each state, the delimiter match that starts first (then the longest, then the first
in the interpreter's order: opens before closes, by field name). The generated reader finds
that match with one search per state and commits it in straight-line code.

Each delimiter a state watches is searched by a *key*, what every one of its matches contains at
a known place:

* `literal`: a literal delimiter's literals (the longest first: the interpreter's alternation
  takes the longest at one place); the match is the key's occurrence.
* `run`: a pattern that is a run of lead characters, then literals (ir.LiteralRun, qwen's
  `\\s*<tool_call>`): the key is the literals, the match starts where the run before them starts.
* `prefix`: a pattern whose matches start (after an optional run of lead characters) with a
  literal prefix (`\\s*<tool_call>\\s*<function=...>`): the key is the prefix; where it occurs, the
  pattern is matched from the start of the run before it (and the search goes on if it fails).
* `pattern`: any other pattern: the key is the pattern itself, found where its matches start.

A state with one literal key is searched with `str.find`; with literal keys only, by one
ungrouped alternation of their literals (the literal found names its key: groups would cost `re`
its skip to first characters); with a pattern key among them, by one `regex` alternation with a
group per key (`lastindex` names it). The search finds the first place any key occurs, which is
where the state's first match starts, or where its key sits after a run of lead characters. That
is exact when no key can start with a character such a run may hold (else the run could reach back
over an earlier key's place): where one may, the state's patterns are all searched whole instead
(no key is walked back from). A key that is not the one reported at a place may occur there too
only where one literal is a prefix of another, or a pattern may match where a literal starts
(decided here by a partial match of the literal); those are tried at that place as well, and the
interpreter's order picks among them.

Delimiters that match the empty string are read as the machine reads them, but where the machine
stops (an empty region closed by an empty match, after which its finalize reads again) or could
go round in circles (two empty matches in a row at one place): there the reader hands the message
to parse_whole (ReadAgain), which settles it. The interpreter never commits a match that starts at
the very end of the text (only an empty one can), and neither does the reader.

A template keeps the machine's pass (ONE_SHOT = False, and the reason by JSON path) when a
delimiter uses `\\G` (it matches where a search starts, and the reader searches from elsewhere), or
when a state with several delimiters has a pattern that cannot be one alternative of its search
(inline global flags, back references, syntax only `regex` reads).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rtcompile.frontend import ir
from rtcompile.frontend.patterns import min_width
from rtcompile.runtime.regex_syntax import Backref, Conditional, Group, Seq, parse, walk

LITERAL, RUN, PREFIX, PATTERN = "literal", "run", "prefix", "pattern"
# Inline flags a key pattern may carry and still be one alternative among others: the search is
# compiled with DOTALL (as the interpreter compiles every delimiter) and Unicode matching anyway.
_HARMLESS_FLAGS = int(re.DOTALL | re.UNICODE)


@dataclass
class Key:
    """One delimiter of a state, as the one-shot reader finds it."""

    watch: Any  # codegen.Watch: the delimiter, its field, open or close, its rank in the state
    form: str  # LITERAL, RUN, PREFIX or PATTERN
    literals: tuple[str, ...] = ()  # the key's literals in the engine's order (not for PATTERN)
    lead: str = ""  # characters the match may start with before the key (walked back over)
    full: str = ""  # the constant holding the delimiter's own pattern (PREFIX, PATTERN)
    source: str | None = ""  # the key's pattern, as one alternative of the state's search
    groups: int = 0  # groups inside that alternative (a PATTERN key's own, unnamed)
    group: int = 0  # the index of the key's group in the state's search
    firsts: frozenset | None = None  # characters a key occurrence may start with (None: any)
    ties: list["Key"] = field(default_factory=list)  # later keys that may occur at the same place
    # A PATTERN key whose match is the state search's own (its named groups are no other key's):
    # no second match at its place is needed.
    direct: bool = False

    @property
    def groups_always_match(self) -> bool:
        """Whether every named group takes part in every match of the delimiter, so that its match's
        groupdict() holds no None to drop (not for a direct key: the search's match has the other
        keys' groups too)."""
        return self.captures and not self.direct and _named_groups_always_match(self.watch.delimiter.pattern)

    @property
    def literal(self) -> str:
        return self.literals[0]

    @property
    def captures(self) -> bool:
        """Whether the match's named groups are read (an open's captures, a close's additions)."""
        return bool(self.watch.delimiter.group_names)


@dataclass
class ReadState:
    """A parser state's reader: one function in the generated module."""

    name: str  # the function's name
    doc: str
    field: ir.Field | None  # the explicit field it reads inside; None: outside explicit regions
    keys: list[Key]
    # "find" (one literal), "pattern" (one PATTERN key), "literals" (literal keys only),
    # "alternatives" (pattern keys among them) or "none" (nothing watched: the text runs to its end)
    search: str
    const: str = ""  # the constant holding the state's search pattern ("literals", "alternatives")
    source: str = ""
    literal_keys: dict = field(default_factory=dict)  # "literals": literal -> its key's number

    @property
    def may_miss(self) -> bool:
        """Whether a key the search found may turn out not to be its delimiter's match (a prefix
        key whose pattern fails there, a pattern key matched again): the search then goes on."""
        return any(key.form == PREFIX or (key.form == PATTERN and not key.direct) for key in self.keys)


@dataclass
class Plan:
    reason: str | None  # why the template is not read this way; None: it is
    # Whether a delimiter may match the empty string (or cannot be analysed): the reader then
    # hands a message back to the machine's pass where the machine would stop at such a match.
    zero_width: bool
    states: list[ReadState]
    fulls: dict[str, str]  # constant name -> a delimiter's pattern, matched at a key's place
    searches: dict[str, tuple[str, bool]]  # constant name -> (a state's search pattern, twin first)


def delimiter_path(watch: Any) -> str:
    """The JSON path of a watched delimiter, by field index (never the template's own text)."""
    key = watch.kind + ("" if watch.delimiter.literals is not None else "_pattern")
    return f"fields[{watch.field.index}].{key}"


def plan(template: ir.Template, states: list[Any], field_methods: tuple[str, ...]) -> Plan:
    """The one-shot reader of `template`, from the code generator's scan states (states[0] is the
    one outside explicit regions, then one per explicit field in order)."""
    reason = _template_reason(template)
    if reason is not None:
        return Plan(reason, False, [], {}, {})
    read_states: list[ReadState] = []
    fulls: dict[str, str] = {}
    searches: dict[str, tuple[str, bool]] = {}
    explicit = [f for f in template.fields if f.open is not None]
    for state, f in zip(states, [None, *explicit]):
        keys = _state_keys(state)
        if isinstance(keys, str):
            return Plan(keys, False, [], {}, {})
        name, doc = _reader_name(f, field_methods)
        read = ReadState(name, doc, f, keys, _search_kind(keys))
        read.const = f"SEARCH_{name.upper().lstrip('_')}"
        _plan_search(read, searches)
        _plan_ties(read, fulls)
        read_states.append(read)
    zero_width = any(
        min_width(d.pattern) in (0, None) for f in template.fields for d in (f.open, f.close) if d is not None and d.pattern is not None
    )
    return Plan(None, zero_width, read_states, fulls, searches)


def _state_keys(state: Any) -> list[Key] | str:
    """The keys of a state's delimiters, in the interpreter's order; or why the state cannot be
    read by one search."""
    keys = [_key(watch) for watch in sorted(state.watches, key=lambda w: w.rank)]
    if _runs_reach_back(keys):
        # A run of lead characters may hold where another key starts: each pattern is then
        # searched whole, where its matches start (no key is walked back from).
        keys = [key if key.form == LITERAL else _pattern_key(key.watch) for key in keys]
    if len(keys) > 1:
        for key in keys:
            if key.form == PATTERN and key.source is None:
                return (
                    f"{delimiter_path(key.watch)}: its pattern cannot be one alternative of its "
                    "state's search (back references, global flags, or syntax only `regex` reads)"
                )
    return keys


def _reader_name(f: ir.Field | None, field_methods: tuple[str, ...]) -> tuple[str, str]:
    """The name and docstring of a state's reader function (f: its field; None outside regions)."""
    if f is None:
        return "_read_outside", (
            "Outside explicit regions: the implicit field's text up to the next open (closing the "
            "implicit field at its own close on the way). Returns (field opened, where its text "
            "starts, what its open captured), or None at the end of the text."
        )
    return "_read" + field_methods[f.index][len("_scan") :], (
        f"Inside field {f.index} ({f.name!r}): its text up to its close, or to the end. "
        "Returns where the text goes on (-1: the end)."
    )


def _plan_search(read: ReadState, searches: dict[str, tuple[str, bool]]) -> None:
    """The state's one search for all its keys (a module constant), with the number naming each
    key in what it finds."""
    keys = read.keys
    if read.search == "literals":
        # One alternation of every key's literals, ungrouped (groups would cost `re` its skip
        # to the places where a literal's first character is); the literal found names its key.
        read.source = "|".join(key.source for key in keys)
        for number, key in enumerate(keys, 1):
            key.group = number
            for literal in key.literals:
                read.literal_keys.setdefault(literal, number)
        searches[read.const] = (read.source, True)
    elif read.search == "alternatives":
        # Each key in a group of its own, `lastindex` names it; the `regex` engine, which keeps
        # its skip to first characters through groups (`re` tries every place then).
        group = 1
        pieces = []
        names = [name for key in keys for name in key.watch.delimiter.group_names]
        for key in keys:
            key.group = group
            group += 1 + key.groups
            pieces.append(f"({key.source})")
            if key.form == PATTERN:
                own = key.watch.delimiter.group_names
                key.direct = not any(names.count(name) > own.count(name) for name in own)
        read.source = "|".join(pieces)
        searches[read.const] = (read.source, False)


def _plan_ties(read: ReadState, fulls: dict[str, str]) -> None:
    """Which later keys may occur where each key is found (the interpreter's order picks), and the
    delimiter patterns matched where their keys are (module constants)."""
    keys = read.keys
    for index, key in enumerate(keys):
        key.ties = [other for other in keys[index + 1 :] if _may_tie(key, other)] if read.search in ("literals", "alternatives") else []
        if key.form in (PREFIX, PATTERN):
            key.full = f"FULL_{key.watch.const}"
    for key in keys:  # (the delimiters matched where their keys are: not a direct key's, but as a tie)
        if key.form == PREFIX or (key.form == PATTERN and (not key.direct or any(key in k.ties for k in keys))):
            fulls[key.full] = key.watch.delimiter.pattern


def _template_reason(template: ir.Template) -> str | None:
    for f in template.fields:
        for kind, d in (("open", f.open), ("close", f.close)):
            if d is not None and d.search_anchored:
                return f"fields[{f.index}].{kind}_pattern: \\G matches where a search starts, and the one-shot reader searches elsewhere"
    return None


def _key(watch: Any) -> Key:
    d = watch.delimiter
    if d.literals is not None:
        literals = tuple(sorted(d.literals, key=len, reverse=True))
        return Key(watch, LITERAL, literals, source=_alternation(literals), firsts=frozenset(s[0] for s in literals))
    if d.literal_run is not None:
        literals = d.literal_run.literals
        return Key(watch, RUN, literals, d.literal_run.lead, source=_alternation(literals), firsts=frozenset(s[0] for s in literals))
    charsets = d.charsets
    if charsets is not None and charsets.prefix and (charsets.lead_run or not charsets.lead):
        prefix = charsets.prefix
        lead = "".join(sorted(charsets.lead)) if charsets.lead_run else ""
        return Key(watch, PREFIX, (prefix,), lead, source=re.escape(prefix), firsts=frozenset(prefix[0]))
    return _pattern_key(watch)


def _pattern_key(watch: Any) -> Key:
    """The delimiter's pattern as its own key (source None: it cannot be one alternative of a
    larger pattern, and is searched only alone)."""
    d = watch.delimiter
    charsets = d.charsets
    firsts = None if charsets is None else frozenset(charsets.first | charsets.lead)
    syntax = parse(d.pattern)
    if syntax is None or syntax.flags & ~_HARMLESS_FLAGS or _refers_back(syntax.root):
        return Key(watch, PATTERN, source=None, firsts=firsts)
    # (its own names kept: the `regex` engine searches alternations, and reads duplicate names)
    return Key(watch, PATTERN, source=f"(?:{d.pattern})", groups=syntax.groups, firsts=firsts)


def _named_groups_always_match(source: str) -> bool:
    """Whether each named group of the pattern sits on its main path (only groups around it), so
    that every match sets it. False when unsure (duplicate names, regex-only syntax)."""
    syntax = parse(source, re.DOTALL)
    if syntax is None or len(set(syntax.group_names.values())) < len(syntax.group_names):
        return False
    return set(syntax.group_names) <= _groups_on_main_path(syntax.root)


def _groups_on_main_path(root: Seq) -> set[int]:
    """The groups reached from the top through groups alone: `(?P<a>x(?P<b>y))` gives both,
    `(?P<a>x)?` and `(?P<a>x)|y` neither."""
    found: set[int] = set()
    items = list(root.items)
    while items:
        item = items.pop()
        if isinstance(item, Group):
            if item.index is not None:
                found.add(item.index)
            items.extend(item.body.items)
    return found


def _alternation(literals: tuple[str, ...]) -> str:
    return "|".join(re.escape(literal) for literal in literals)


def _refers_back(root: Seq) -> bool:
    """Whether the pattern refers to a group: a back reference, or a condition on one."""
    return any(isinstance(node, (Backref, Conditional)) for node in walk(root))


def _runs_reach_back(keys: list[Key]) -> bool:
    """Whether a run of lead characters that a key is walked back over may hold a character that
    another key (or a pattern key's match) starts with: one search would then see that other key
    first, though the walked-back match starts earlier (see the module doc)."""
    for walker in keys:
        for key in keys if walker.lead else ():
            if key.firsts is None or key.firsts & set(walker.lead):
                return True
    return False


def _search_kind(keys: list[Key]) -> str:
    if not keys:
        return "none"
    if len(keys) == 1:
        key = keys[0]
        if key.form == PATTERN:
            return "pattern"
        if len(key.literals) == 1:
            return "find"
    if all(key.form != PATTERN for key in keys):
        return "literals"
    return "alternatives"


def _may_tie(key: Key, other: Key) -> bool:
    """Whether `other` may occur at a place where `key` is the first key the search reports."""
    if key.form != PATTERN and other.form != PATTERN:
        return any(a.startswith(b) or b.startswith(a) for a in key.literals for b in other.literals)
    if key.form != PATTERN or other.form != PATTERN:
        literal, pattern = (key, other) if key.form != PATTERN else (other, key)
        return any(_may_match_at(pattern.watch.delimiter, text) for text in literal.literals)
    if key.firsts is None or other.firsts is None:
        return True
    return bool(key.firsts & other.firsts)


def _may_match_at(delimiter: ir.Delimiter, literal: str) -> bool:
    """Whether the pattern may match at a place where `literal` starts: unless the engine, given
    `literal` alone, finds neither a match within it nor a start of one it runs out in (a partial
    match). What the text holds before that place is not seen: a pattern that reads it
    (lookbehind, \\b, ^ in multiline mode) may always match there."""
    if delimiter.context != 0:
        return True
    import regex

    return regex.compile(delimiter.pattern, regex.DOTALL).match(literal, partial=True) is not None

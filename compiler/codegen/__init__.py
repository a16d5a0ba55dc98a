"""Code generator: IR -> the source of a generated parser module.

The module is rendered from the jinja2 templates in `compiler/codegen/`, formatted with black and
compiled with `compile()` before anyone sees it, so a generator bug fails here, loudly, with the
template's hash in the message.

Safety rule: template text reaches the generated source only through `py_literal` (the `py` filter)
or as an identifier we built ourselves (the `ident` filter). The jinja2 environment enforces it:
`finalize` refuses any value that did not come out of one of those two filters (or out of a code
fragment built here from such pieces), and undefined names are errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from rtcompile.frontend import canonical, facts, ir
from rtcompile.frontend.patterns import WHITESPACE
from rtcompile.runtime import regex_syntax
from rtcompile.runtime.carry import carried_match
from rtcompile.runtime.coerce import TYPED, cast_mode
from rtcompile.version import INTERPRETER_RELEASE, __version__

from . import one_shot

RUNTIME_ABI = 15  # must equal rtcompile.runtime.RUNTIME_ABI (checked by a test)
# Sets of first characters up to this size are checked with chained str.find; larger ones with
# one character-class search.
MAX_FIND_CHAIN = 2
# A start literal's key: its first characters, which tell it from the region's own text where its
# first character alone does not (the `<` of `</function>` begins every `<parameter=...>` and
# `</parameter>` inside a call; `</f` begins neither). Up to this many keys are tested with
# chained `in`; more with one alternation search.
KEY_LENGTH = 3
MAX_KEY_CHAIN = 4
# The generated feed tests held text with a chunk for keys only while the held text is this short
# (a start literal's first characters, after a short lead run): longer, it almost always holds a
# key already, and the test would only delay the state's fast path.
HELD_FOR_KEYS = KEY_LENGTH + 1


class Code(str):
    """A fragment of generated Python that the generator built itself: safe to emit as is."""


def py_literal(value: Any) -> Code:
    """A Python literal for `value` (canonical.py_literal: reprs of plain data only)."""
    return Code(canonical.py_literal(value))


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def ident(name: str) -> Code:
    """An identifier built by the generator (never template text): checked, then emitted."""
    if not isinstance(name, str) or not _IDENT.match(name) or name.startswith("__"):
        raise ValueError(f"not a safe generated identifier: {name!r}")
    return Code(name)


def slug(name: str, limit: int = 24) -> str:
    """A readable, ASCII-only hint of a field's name for function names (uniqueness comes from the
    field's index, which always precedes it)."""
    text = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return text[:limit].rstrip("_")


def _finalize(value: Any) -> Any:
    if isinstance(value, Code):
        return value
    raise TypeError(f"refusing to emit {type(value).__name__} {value!r} without the py or ident filter")


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent)),
    undefined=jinja2.StrictUndefined,
    finalize=_finalize,
    autoescape=False,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["py"] = py_literal
_ENV.filters["ident"] = ident


def _region_chunk(field: ir.Field, text: str) -> Code:
    """The region_chunk event of the open region `field`, of the text in variable `text`."""
    name, dirty = py_literal(field.name), py_literal(field.dirty)
    return Code(f'{{"type": "region_chunk", "field": {name}, "text": {ident(text)}, "dirty": {dirty}}}')


_ENV.globals["region_chunk"] = _region_chunk


def may_start(literals: tuple[str, ...], lead: str) -> Code:
    """scanning.may_start_at_front(joined, literals, lead) written out (a call per guard is a
    third of the test): after the run of `lead` characters (the constant named `lead`, "" for
    none), one of `literals` begins, or what is left is a proper prefix of one (or nothing)."""
    rest = f"(unled := joined.lstrip({ident(lead)}))" if lead else "joined"
    after = "unled" if lead else "joined"
    partial = " or ".join(f"{py_literal(literal)}.startswith({after})" for literal in literals)
    return Code(f"({rest}.startswith({py_literal(tuple(literals))}) or {partial})")


_ENV.globals["may_start"] = may_start


# ---- the model the templates render ------------------------------------------------------------


@dataclass
class Watch:
    """One delimiter watched in one parser state."""

    kind: str  # ir.OPEN or ir.CLOSE
    field: ir.Field
    delimiter: ir.Delimiter
    rank: int  # tie-break order among equal (start, length): opens first, then by field name
    const: str  # name of the module-level constant holding its pattern or literals
    # For a pattern the state's fast path matches at the start of the unread text: per other
    # delimiter of the state, (its start literals, the constant of its lead characters or ""),
    # which tell that it cannot match there too; then a complete match there is the scan's commit
    # (see _commit_guards). None where that cannot be told.
    commit_guards: tuple[tuple[tuple[str, ...], str], ...] | None = None

    @property
    def is_open(self) -> bool:
        return self.kind == ir.OPEN

    @property
    def wants_match(self) -> bool:
        """Named groups are read: an open's become the region's captures, and a close's join them
        (winning over the open's, as in transformers 5.24.0)."""
        return bool(self.delimiter.group_names)

    @property
    def rechecks_before_edge(self) -> bool:
        """A complete match ending before the buffer's end is re-checked (may it still change?):
        not when no text appended can change it (patterns.match_is_final)."""
        return self.delimiter.reads_past_match and not self.delimiter.final

    @property
    def searched_as_literals(self) -> bool:
        """Literal delimiters, and patterns that are a lead run then a literal (ir.LiteralRun)."""
        return self.delimiter.literals is not None or self.delimiter.literal_run is not None

    @property
    def windowed(self) -> bool:
        return not self.searched_as_literals and self.delimiter.charsets is not None

    @property
    def has_lead(self) -> bool:
        """A literal run with lead characters: the match starts at the run before the literal."""
        run = self.delimiter.literal_run
        return run is not None and bool(run.lead)

    @property
    def window(self) -> str:
        """The constant holding a windowed pattern's PatternWindow."""
        return f"{self.const}_WINDOW"

    @property
    def holds_at_end(self) -> bool:
        """A complete match ending at the buffer's end is held (it may grow): literal lists where
        one literal extends another, and every pattern (as the interpreter assumes)."""
        return self.delimiter.literals is None or self.delimiter.can_extend

    @property
    def eager_at_edge(self) -> bool:
        """A pattern's complete match ending at the buffer's end, held where the interpreter holds
        it, is committed there when the parser is eager (no text appended can change it)."""
        return self.delimiter.pattern is not None and self.delimiter.final_at_edge

    @property
    def partial_from_start(self) -> Code:
        """The expression of its match in `joined` that the state's scan would find (a partial
        search: the leftmost complete match anywhere, else the leftmost partial one), as far as
        a match starting at the start of `joined` goes. Where every match starts with a run of
        lead characters then the literal prefix, a complete match starting later would need that
        prefix again after the one the match at the start has: where it occurs at most once, a
        match anchored at the start (which need not try every later place) gives the same."""
        charsets = self.delimiter.charsets
        # (the compiled pattern, once the LazyRegex has it: no call to ask for it)
        compiled = f"({self.const}.compiled_or_none or {self.const}.compiled())"
        search = f"{compiled}.search(joined, partial=True, timeout=self._timeout)"
        if not charsets.prefix or (charsets.lead and not charsets.lead_run):
            return Code(search)
        match = f"{compiled}.match(joined, partial=True, timeout=self._timeout)"
        return Code(f"({match} if joined.count({py_literal(charsets.prefix)}) < 2 else {search})")

    @property
    def complete_from_start(self) -> Code:
        """The expression of its complete match at the start of `joined` (None if none, or where
        time is bounded): the stdlib twin's, where one exists (LazyRegex.plain). Where there is
        one, the regex's partial search (partial_from_start) answers the same: it looks for a
        complete match first, and one at the start is the leftmost."""
        return Code(f"({self.const}.plain().match(joined) if self._timeout is None else None)")

    @property
    def carried(self) -> bool:
        """Whether the state's fast path carries its partial match from chunk to chunk
        (runtime/carry.py) instead of asking `partial_from_start` again each chunk. Only where
        every match ends with literal text (`<function=NAME>`): one that may end in a repeat
        (`call:NAME`) is complete, not partial, while it is being written, and then the regex
        decides after the automaton anyway."""
        pattern = self.delimiter.pattern
        if pattern is None or carried_match(pattern) is None:
            return False
        syntax = regex_syntax.parse(pattern, re.DOTALL)
        return syntax is not None and bool(regex_syntax.literal_suffix(syntax.root))

    @property
    def automaton(self) -> Code:
        """The expression of its automaton (carry.CarriedMatch), built on first use."""
        return Code(f"({self.const}.carry_or_none or {self.const}.carried())")

    @property
    def holds_from_start(self) -> Code:
        """True when its match `m`, found by `scan` in `joined` (the unread text and a chunk),
        starts at the start and is held there, as the state's scan would hold it: then the scan
        holds everything, whatever the other delimiters find (see Machine.feed)."""
        return Code(f"m is not None and m.start() == 0 and (m.partial or {self.at_edge})")

    @property
    def at_edge(self) -> Code:
        """True when its complete match `m` in `joined` ends at the end, where the scan holds it."""
        return Code("m.end() == len(joined)" + (" and not self._eager" if self.eager_at_edge else ""))

    @property
    def match_expr(self) -> Code:
        return Code("m" if self.wants_match else "None")

    @property
    def preferred_literals(self) -> list[str]:
        """In the order the engine prefers them at one position: longest first for literal lists
        (the interpreter's alternation), the pattern's own order for a literal run."""
        return _preferred_literals(self.delimiter)

    @property
    def longest(self) -> int:
        return max(map(len, self.preferred_literals))


def _preferred_literals(delimiter: ir.Delimiter) -> list[str]:
    if delimiter.literal_run is not None:
        return list(delimiter.literal_run.literals)
    return sorted(delimiter.literals, key=len, reverse=True)


@dataclass
class State:
    method: str  # its scan method
    doc: str
    watches: list[Watch]
    quick: QuickCheck | None
    common: str | None = None  # its fast path for feed and feed_text (see Machine.feed), if any
    common_doc: str = ""
    shared_const: str | None = None  # the constant of its one search for literals (shared_search)
    # Where the state's fast path has no start literals (a pattern without a literal prefix) but
    # its literal delimiters' literals tell where one of them is still being matched: those, with
    # their lead characters, for the one search (a StartLiterals).
    literal_starts: tuple[tuple[str, str], ...] | None = None
    literal_commits: list = field(default_factory=list)  # (LiteralCommit: see _literal_commits)

    @property
    def uses_memo(self) -> bool:
        """Whether its scans of long buffers remember literal searches (Machine._literal_memo)."""
        return any(w.searched_as_literals or (w.windowed and w.delimiter.charsets.prefix) for w in self.watches)

    @property
    def literal_watches(self) -> list[Watch]:
        return [w for w in self.watches if w.searched_as_literals]

    @property
    def shared_search(self) -> bool:
        """Whether one search finds the first occurrence of all its literal delimiters' literals.

        The first place any of them occurs decides: a literal occurring later cannot start a match
        sooner, since the run of lead characters before it cannot reach back across that place...
        unless a literal starts with one of those lead characters. Then each is searched alone."""
        watches = self.literal_watches
        leads = set().union(*(w.delimiter.literal_run.lead for w in watches if w.has_lead))
        return len(watches) > 1 and not any(lit[0] in leads for lit in self.all_literals)

    @property
    def literals_const(self) -> str:
        return "LITERALS" + self.method.upper()

    @property
    def all_literals(self) -> tuple[str, ...]:
        """Every literal of its literal delimiters, each once (for the state's one search)."""
        return tuple(dict.fromkeys(lit for w in self.literal_watches for lit in w.preferred_literals))


class Leads:
    """The module's constants of lead characters (see ir.CharSets), one per distinct set."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # characters -> constant name

    def name(self, chars) -> str:
        text = "".join(sorted(chars))
        if text not in self.names:
            self.names[text] = "WHITESPACE" if frozenset(text) == WHITESPACE else f"LEAD_{len(self.names)}"
        return self.names[text]


def _state(method: str, doc: str, watches: list[Watch], triggers: dict, leads: Leads) -> State:
    for rank, watch in enumerate(sorted(watches, key=lambda w: (0 if w.is_open else 1, w.field.name))):
        watch.rank = rank
    # Literal searches first: once a match is known, later regex searches only need to look at
    # text before it (PatternWindow), instead of running on to the end of a long buffer.
    ordered = sorted(watches, key=lambda w: not w.searched_as_literals)
    state = State(method, doc, ordered, _quick_check(method, watches, triggers, leads))
    quick = state.quick
    if quick is not None:
        for watch in quick.patterns:
            watch.commit_guards = _commit_guards(watch, watches, leads)
        state.literal_commits = _literal_commits(watches, quick, leads)
    if quick is not None and quick.starts is None and quick.patterns and state.shared_search:
        # (its literal delimiters alone: where none occurs whole, which is still being matched)
        starts = _start_literals(state.literal_watches)
        if _tail_is_exact(state.literal_watches, starts):
            state.literal_starts = tuple((s, leads.name(c) if c else "") for s, c in starts)
    return state


@dataclass
class LiteralCommit:
    """A literal delimiter whose literal at the start of the unread text the state's fast path
    commits (see _literal_commits)."""

    watch: Watch
    guards: tuple  # as Watch.commit_guards: the other delimiters' start literals and leads
    dead_guard: bool  # and the state's one carried pattern must not match there (its automaton)


def _literal_commits(watches: list[Watch], quick: QuickCheck, leads: Leads) -> list[LiteralCommit]:
    """The literal delimiters of a state whose literal, where the unread text starts with it, is
    the scan's commit when no other delimiter may match there: those none of whose literals
    extends another (a complete match is committed even at the end of the text; one literal
    at the start, then). The other delimiters are told apart by their start literals
    (_start_guard), or, for the state's one carried pattern without them, by its automaton: not
    matching from the start at all (neither held nor complete somewhere)."""
    carried = [w for w in quick.patterns if w.carried]
    found = []
    for watch in watches:
        if watch.delimiter.literals is None or watch.delimiter.can_extend:
            continue
        guards, dead_guard = [], False
        for other in watches:
            if other is watch:
                continue
            guard = _start_guard(other, leads)
            if guard is None and len(quick.patterns) == 1 and carried == [other]:
                dead_guard = True
            elif guard is None:
                break
            else:
                guards.append(guard)
        else:
            found.append(LiteralCommit(watch, tuple(guards), dead_guard))
    return found


def _start_guard(other: Watch, leads: Leads) -> tuple[tuple[str, ...], str] | None:
    """(its start literals, the constant of its lead characters or ""): what tells that `other`
    cannot match, whole or partly, at the start of a text (may_start_at_front); None where its
    matches do not all start with known literals right after one run of lead characters."""
    charsets = other.delimiter.charsets
    if other.delimiter.pattern is not None and other.delimiter.literal_run is None:
        if charsets.lead and not charsets.lead_run:
            return None  # (lead characters that need not form one run before the literal)
    starts = _start_literals([other])
    if starts is None:
        return None
    lead = starts[0][1]
    if any(literal[0] in lead for literal, _ in starts):
        return None  # (a literal may begin inside the run)
    return tuple(literal for literal, _ in starts), leads.name(lead) if lead else ""


def _commit_guards(watch: Watch, watches: list[Watch], leads: Leads) -> tuple | None:
    """What tells, at the start of the unread text, that no delimiter of the state but `watch` (a
    pattern) may match there, whole or partly (Watch.commit_guards); None where a delimiter's
    matches do not all start with known literals after a run of lead characters.

    The scan commits the leftmost complete match, the longest then the first ranked at one
    place, unless a match that may still grow starts at or before it: a complete match of
    `watch` at the start, with no other delimiter matching there, is what it commits (once
    moved_by_more says it is final, where the scan asks that too)."""
    guards = []
    for other in watches:
        if other is watch:
            continue
        guard = _start_guard(other, leads)
        if guard is None:
            return None
        guards.append(guard)
    return tuple(guards)


@dataclass
class QuickCheck:
    """How a state decides, without a regex call, that text holds no delimiter (in the scan, and
    in the state's fast path: see Machine.feed)."""

    first: frozenset[str]  # the characters the watched delimiters' matches start with
    first_const: str | None  # a stdlib `re` class of them, where str.find chains would be long
    lead: str | None  # constant holding the lead characters (a trailing run of them may be held)
    lead_hold: bool  # with no first character, a trailing lead run is exactly what to hold
    # (literal, constant of its lead characters or "") per literal that every match of a watched
    # delimiter starts with after its lead run (see _start_literals); None if one has none.
    starts: tuple[tuple[str, str], ...] | None
    starts_const: str  # the constant holding them (a StartLiterals)
    # Whether the one place a delimiter may still start, where no start literal occurs whole, is
    # exactly where the scan holds text back (StartLiterals.hold); see _tail_is_exact.
    tail: bool
    # The watched delimiters that are patterns (not literal runs): a chunk that leaves one of them
    # matching from the start of the unread text, partly or up to its end, is held whole.
    patterns: tuple[Watch, ...] = ()

    @property
    def carried(self) -> tuple[Watch, ...]:
        """Those of `patterns` whose partial match the fast path carries from chunk to chunk."""
        return tuple(w for w in self.patterns if w.carried)

    def absent(self, target: str, start: str = "") -> Code:
        """True when no first character occurs in `target` (from `start`, as the scans read)."""
        if self.first_const is not None:
            return Code(f"{self.first_const}.search({target}{', ' + start if start else ''}) is None")
        if start:  # (the scan methods must start at pos, hence find)
            return Code(" and ".join(f"{target}.find({py_literal(c)}, {start}) < 0" for c in sorted(self.first)))
        # (`c not in s` is the cheapest test)
        return Code(" and ".join(f"{py_literal(c)} not in {target}" for c in sorted(self.first)))

    @property
    def keys(self) -> tuple[str, ...]:
        """Each start literal's key, its first KEY_LENGTH characters (all of a shorter one), less
        those in which another occurs: a text in which none occurs holds no start literal whole,
        nor a proper prefix of one of KEY_LENGTH characters or more. () without start literals."""
        keys = self._every_key
        return tuple(key for key in keys if not any(other != key and other in key for other in keys))

    @property
    def _every_key(self) -> tuple[str, ...]:
        return () if self.starts is None else tuple(sorted({literal[:KEY_LENGTH] for literal, _ in self.starts}))

    @property
    def key_prefixes(self) -> tuple[str, ...]:
        """Every start literal's key's proper prefixes (those of keys left out of `keys` too):
        what a text without a key may end with where a start literal is still being written."""
        return tuple(sorted({key[:end] for key in self._every_key for end in range(1, len(key))}))

    def keys_absent(self, target: str) -> Code:
        """True when no key occurs in `target` (see keys)."""
        if self.keys_const is not None:
            return Code(f"{self.keys_const}.search({target}) is None")
        return Code(" and ".join(f"{py_literal(key)} not in {target}" for key in self.keys))

    @property
    def keys_const(self) -> str | None:
        """The constant of the keys' alternation (a stdlib `re`), where they are many."""
        return "KEYS" + self.starts_const[len("STARTS") :] if len(self.keys) > MAX_KEY_CHAIN else None

    @property
    def keys_pattern(self) -> str:
        return "|".join(re.escape(key) for key in self.keys)

    def no_start(self, target: str) -> Code:
        """True when no delimiter can start in `target` (bar a trailing lead run): no first
        character, or no key and no proper prefix of one at the end. That is StartLiterals.
        starts_nowhere where no key occurs; where one does, False (an exact search decides)."""
        if self.starts is None:
            return self.absent(target)
        ends = f" and not {target}.endswith({py_literal(self.key_prefixes)})" if self.key_prefixes else ""
        return Code(f"({self.absent(target)} or ({self.keys_absent(target)}{ends}))")


def _quick_check(method: str, watches: list[Watch], triggers: dict, leads: Leads) -> QuickCheck | None:
    if not watches or any(w.delimiter.charsets is None for w in watches):
        return None
    charsets = [w.delimiter.charsets for w in watches]
    first = frozenset().union(*(c.first for c in charsets))
    lead = frozenset().union(*(c.lead for c in charsets))
    tag = method.upper().lstrip("_")
    first_const = None
    if len(first) > MAX_FIND_CHAIN:
        first_const = f"FIRST_CHARS_{tag}"
        triggers[first_const] = _char_class(first)
    starts = _start_literals(watches)
    tail = starts is not None and _tail_is_exact(watches, starts)
    return QuickCheck(
        first=first,
        first_const=first_const,
        lead=leads.name(lead) if lead else None,
        lead_hold=bool(lead) and all(c.lead_run and c.lead == lead for c in charsets if c.lead),
        # (without the tail, only starts_nowhere is asked, which no lead changes)
        starts=None if starts is None else tuple((s, leads.name(c) if c and tail else "") for s, c in starts),
        starts_const=f"STARTS_{tag}",
        tail=tail,
        patterns=tuple(w for w in watches if w.delimiter.pattern is not None and w.delimiter.literal_run is None),
    )


def _start_literals(watches: list[Watch]) -> tuple[tuple[str, frozenset[str]], ...] | None:
    """The literals every match of the watched delimiters starts with after its lead run (a literal
    delimiter's literals, a literal run's, a pattern's literal prefix), each with its delimiter's
    lead characters; None if a delimiter has no such literals."""
    starts: dict[tuple[str, frozenset[str]], None] = {}
    for w in watches:
        d = w.delimiter
        if d.literals is not None:
            literals, lead = d.literals, frozenset()
        elif d.literal_run is not None:
            literals, lead = d.literal_run.literals, frozenset(d.literal_run.lead)
        elif d.charsets is not None and d.charsets.prefix:
            literals, lead = (d.charsets.prefix,), d.charsets.lead
        else:
            return None
        starts.update(dict.fromkeys((literal, lead) for literal in literals))
    return tuple(starts)


def _tail_is_exact(watches: list[Watch], starts: tuple[tuple[str, frozenset[str]], ...]) -> bool:
    """Whether, in a text where no start literal occurs whole, the scan holds text back exactly from
    the leftmost proper prefix of a start literal running to the text's end, walked back over the
    lead characters of that literal's delimiters (the widest of them): StartLiterals.hold.

    For literal delimiters and literal runs that is how they are searched. A pattern with a literal
    prefix has a partial match there only if it spells the prefix out right after its `[lead]*`
    (charsets.lead_run) or has no lead characters at all. A walk back over lead characters must
    not pass the place where a start literal begins (none begins with a lead character), and
    where literals of delimiters with different leads share a prefix, one lead must hold the other."""
    for w in watches:
        charsets = w.delimiter.charsets
        if w.delimiter.pattern is not None and w.delimiter.literal_run is None:
            if charsets.lead and not charsets.lead_run:
                return False
    lead_chars = frozenset().union(*(lead for _, lead in starts))
    if any(literal[0] in lead_chars for literal, _ in starts):
        return False
    by_prefix: dict[str, set[frozenset[str]]] = {}
    for literal, lead in starts:
        for end in range(1, len(literal) + 1):
            by_prefix.setdefault(literal[:end], set()).add(lead)
    return all(any(all(widest >= lead for lead in found) for widest in found) for found in by_prefix.values())


def _char_class(chars: frozenset[str]) -> str:
    """A stdlib `re` character class matching exactly `chars`."""
    return "[" + "".join(re.escape(c) for c in sorted(chars)) + "]"


def _transform_expr(node: ir.TransformNode, each: bool) -> Code:
    if isinstance(node, ir.Literal):
        return py_literal(node.value)
    if isinstance(node, ir.DictNode):
        return Code("{%s}" % ", ".join(f"{py_literal(k)}: {_transform_expr(v, each)}" for k, v in node.items))
    if isinstance(node, ir.ListNode):
        return Code("[%s]" % ", ".join(_transform_expr(v, each) for v in node.items))
    if not each and node.root == "content" and not node.keys:
        return Code("content")  # always defined: the parsed value itself
    keys = f", {py_literal(node.keys)}" if node.keys else ""
    if not each and node.root != "content" and not node.keys:
        # A capture, read where it is; resolve (and its scope) only for the error when it is missing.
        root = py_literal(node.root)
        return Code(
            f"(captures[{root}] if {root} in captures else "
            f'resolve({{**captures, "content": content}}, {py_literal(node.path)}, {root}))'
        )
    return Code(f"resolve(scope, {py_literal(node.path)}, {py_literal(node.root)}{keys})")


def _needs_scope(node: ir.TransformNode) -> bool:
    if isinstance(node, ir.Placeholder):
        return bool(node.keys)  # (a bare capture is read from the captures themselves)
    if isinstance(node, ir.DictNode):
        return any(_needs_scope(v) for _, v in node.items)
    if isinstance(node, ir.ListNode):
        return any(_needs_scope(v) for v in node.items)
    return False


def _inline_scalar(field: ir.Field) -> Code | None:
    """Direct code for text/int/float/bool with well-formed args; None means call make_parser."""
    args = field.content.args
    if not isinstance(args, dict):
        return None
    body = "body.strip()" if args.get("strip", True) else "body"
    return {
        "text": Code(body),
        "int": Code(f"int({body})"),
        "float": Code(f"float({body})"),
        "bool": Code(f'{body}.lower() in ("true", "1")'),
    }.get(field.content.parser)


def _border_free(literal: str) -> bool:
    return not any(literal[:k] == literal[-k:] for k in range(1, len(literal)))


def _scan_states(template: ir.Template, triggers: dict, leads: Leads) -> tuple[list[State], list[str]]:
    """The parser states (outside explicit regions, then one per explicit field) and the name of
    each field's scan method."""
    fields = template.fields
    watches_in_sink: list[Watch] = []
    for f in fields:
        if f.open is not None:
            watches_in_sink.append(Watch(ir.OPEN, f, f.open, 0, f"OPEN_{f.index}"))
    if template.implicit is not None and fields[template.implicit].close is not None:
        f = fields[template.implicit]
        watches_in_sink.append(Watch(ir.CLOSE, f, f.close, 0, f"CLOSE_{f.index}"))
    states = [
        _state(
            "_scan_sink",
            "Outside explicit regions (the implicit field or the null sink): every open, and the "
            "implicit field's close.",
            watches_in_sink,
            triggers,
            leads,
        )
    ]
    field_methods = []
    for f in fields:
        method = f"_scan_in_{f.index}" + (f"_{slug(f.name)}" if slug(f.name) else "")
        field_methods.append(method)
        if f.open is None:
            continue  # the implicit field is scanned by the sink state
        watches = [Watch(ir.CLOSE, f, f.close, 0, f"CLOSE_{f.index}")] if f.close is not None else []
        doc = f"Inside field {f.index} ({f.name!r}): " + ("watch its close." if watches else "no close; runs to the end.")
        states.append(_state(method, doc, watches, triggers, leads))
    if template.context == 0:  # (the fast paths keep no consumed text: no lookbehind may need it)
        for state, f in zip(states, [None, *[f for f in fields if f.open is not None]]):
            if state.quick is not None:
                state.common = "_common" + state.method[len("_scan") :]
                where = "Outside explicit regions" if f is None else f"Inside field {f.index} ({f.name!r})"
                state.common_doc = (
                    f"{where}: feed's fast path (see Machine.feed). The text a chunk adds to the "
                    "region, read without a scan; None for the scan."
                )
    return states, field_methods


def one_shot_fallback(template: ir.Template) -> str | None:
    """Why `parse_response` of the template's module stays on the streaming machine's pass (a
    JSON path by field index and a reason), or None when it has the one-shot reader."""
    states, field_methods = _scan_states(template, {}, Leads())
    return one_shot.plan(template, states, tuple(field_methods)).reason


def render(template: ir.Template, *, origin: str = "a response template") -> str:
    """The generated module's source, before formatting."""
    fields = template.fields
    triggers: dict[str, str] = {}  # constant name -> character class (stdlib re) of first characters
    leads = Leads()  # characters a match may start with before those
    states, field_methods = _scan_states(template, triggers, leads)
    consts = {w.const: w.delimiter for state in states for w in state.watches}
    finishers = [_finisher(f) for f in fields]
    commons = {f.index: _common_entry(state) for f, state in zip([f for f in fields if f.open is not None], states[1:])}
    stores = [_store(f, finisher) for f, finisher in zip(fields, finishers)]
    # (every constant of lead characters is named before the module's list of them is taken)
    literal_searches = _literal_searches(states, consts, leads)
    lead_names = _lead_names(consts, leads)
    return _ENV.get_template("module.py.jinja").render(
        version=__version__,
        interpreter_release=INTERPRETER_RELEASE,
        abi=RUNTIME_ABI,
        origin=origin,
        template=template,
        fields=fields,
        consts=consts,
        triggers=triggers,
        literal_searches=literal_searches,
        leads={name: chars for chars, name in leads.names.items()},
        lead_names=lead_names,
        first_classes={
            name: _char_class(d.charsets.first)
            for name, d in consts.items()
            if d.pattern is not None and d.literal_run is None and d.charsets is not None
        },
        states=states,
        field_methods=tuple(field_methods),
        state_commons=Code("(%s,)" % ", ".join(commons.get(f.index, Code("None")) for f in fields)),
        hot_states=_hot_states(template, states),
        held_for_keys=HELD_FOR_KEYS,
        key_states=[(index, state) for index, state in _hot_states(template, states) if state.quick.keys],
        carried_states=_carried_states(template, states),
        literal_states=_literal_states(template, states),
        sink_common=_common_entry(states[0]),
        **_field_tables(template),
        finishers=finishers,
        context=template.context,
        one_shot=one_shot.plan(template, states, tuple(field_methods)),
        stores=stores,
        pads=(Code(""), Code("    ")),
        store_names={store["field"].index: store["name"] for store in stores},
        implicit=template.implicit,
        implicit_close=template.implicit is not None and fields[template.implicit].close is not None,
        implicit_close_captures=template.implicit is not None
        and fields[template.implicit].close is not None
        and bool(fields[template.implicit].close.group_names),
        **_anchor(template.start_anchor),
    )


def _field_tables(template: ir.Template) -> dict:
    """The module's per-field tables and the facts it carries for the serving plan."""
    fields = template.fields
    return {
        "names": tuple(f.name for f in fields),
        "dirty": tuple(f.dirty for f in fields),
        "repeats": tuple(f.repeats for f in fields),
        "joins": tuple(f.join for f in fields),
        "casts": tuple(cast_mode(f.content.parser, f.content.args) for f in fields),
        "default_keys": tuple(template.defaults),
        "required": tuple(f.name for f in fields if not f.optional),
        "field_facts": facts.field_facts(template),
        "template_facts": facts.template_facts(template),
        "closers_ending_in_anchor": facts.closers_ending_in_anchor(template),
    }


def _carried_states(template: ir.Template, states: list[State]) -> list[tuple[int | None, tuple[str, ...]]]:
    """(the parser's `_current` in the state: a field index, None for the null sink; the constants
    of the patterns its fast path carries) for the states that carry a match (QuickCheck.carried):
    the generated feed reads a chunk on from a carried match itself."""
    pairs = [(template.implicit, states[0])]
    pairs += zip([f.index for f in template.fields if f.open is not None], states[1:])
    return [
        (index, tuple(w.const for w in state.quick.carried))
        for index, state in pairs
        if state.common is not None and state.quick is not None and state.quick.carried
    ]


def _literal_states(template: ir.Template, states: list[State]) -> list[tuple[int | None, tuple[str, ...]]]:
    """(the parser's `_current` in the state, as in _carried_states; the literals of its literal
    delimiters and literal runs) for the states with a fast path: unread text that, with a chunk,
    is still a proper prefix of one of them is that delimiter's partial match at its start, which
    the scan holds whole whatever the other delimiters find (the generated feed holds it). Not
    for a delimiter one of whose literals occurs in a proper prefix of another (`<x>` and
    `<x>tail`): its search then finds that complete match instead."""
    pairs = [(template.implicit, states[0])]
    pairs += zip([f.index for f in template.fields if f.open is not None], states[1:])
    found = []
    for index, state in pairs:
        if state.common is None:
            continue
        literals: dict[str, None] = {}
        for watch in state.literal_watches:
            own = watch.preferred_literals
            if any(other != literal and other in literal[:-1] for literal in own for other in own):
                continue
            literals.update(dict.fromkeys(literal for literal in own if len(literal) > 1))
        if literals:
            found.append((index, tuple(literals)))
    return found


def _hot_states(template: ir.Template, states: list[State]) -> list[tuple[int, State]]:
    """(field index, state) for the fields whose state has a fast path, in field order: the
    generated feed tests the commonest chunk of each with its own characters and names (cheaper
    than Machine.feed's test of the same from the state's table, by a few attribute reads)."""
    by_field = {}
    if template.implicit is not None:
        by_field[template.implicit] = states[0]
    for f, state in zip([f for f in template.fields if f.open is not None], states[1:]):
        by_field[f.index] = state
    return [(index, by_field[index]) for index in sorted(by_field) if by_field[index].common is not None]


def _common_entry(state: State) -> Code:
    """A state's entry in STATE_COMMONS (see Machine.STATE_COMMONS): its fast path's method, the
    one character its delimiters start with ("" for several), their lead characters, and whether
    a trailing run of them is held."""
    if state.common is None:
        return Code("None")
    quick = state.quick
    trigger = next(iter(quick.first)) if len(quick.first) == 1 else ""
    lead = quick.lead or py_literal("")
    return Code(f"({py_literal(state.common)}, {py_literal(trigger)}, {lead}, {py_literal(quick.lead_hold)})")


def _anchor(anchor: ir.Delimiter) -> dict:
    """How the module finds the start anchor: one literal that cannot overlap itself (str.rfind),
    else literals as a stdlib `re` alternation (the same matches, and it compiles faster), else
    the pattern."""
    single = anchor.literals[0] if anchor.literals is not None and len(anchor.literals) == 1 else None
    return {
        "anchor_border_free": single if single is not None and _border_free(single) else None,
        "anchor_literals": (
            "|".join(re.escape(lit) for lit in _preferred_literals(anchor)) if anchor.literals is not None else None
        ),
    }


def _finisher(f: ir.Field) -> dict:
    """A field's finish function: its content parser (inlined where it is a scalar), then its
    transform compiled to a direct construction of the output."""
    return {
        "field": f,
        "name": f"_finish_{f.index}" + (f"_{slug(f.name)}" if slug(f.name) else ""),
        "doc": f"Field {f.index} ({f.name!r}): {f.content.parser} content"
        + (", transform on each element." if f.transform_each else ", transform." if f.transform is not None else "."),
        "inline": _inline_scalar(f),
        "call": Code(f"CONTENT_{f.index}(body)"),
        "transform": None if f.transform is None else _transform_expr(f.transform, f.transform_each),
        "scope": f.transform is not None and not f.transform_each and _needs_scope(f.transform),
    }


def _store(f: ir.Field, finisher: dict) -> dict:
    """A field's store function in the one-shot reader: its finish function's value, cast to the
    tools' types, into the message."""
    scalar = finisher["inline"] is not None and f.transform is None  # (a cast never changes it)
    cast = cast_mode(f.content.parser, f.content.args)  # (as Machine.CASTS)
    return {
        "field": f,
        "name": f"_close_{f.index}" + (f"_{slug(f.name)}" if slug(f.name) else ""),
        "doc": f"Field {f.index} ({f.name!r}): its region's value goes into the message.",
        "finish": finisher["name"],
        "casts": not scalar and cast is not None,
        "typed": cast == TYPED,
    }


def _lead_names(consts: dict[str, ir.Delimiter], leads: Leads) -> dict[str, Code]:
    """Delimiter constant -> the constant holding the lead characters its matches start with."""
    names = {}
    for name, d in consts.items():
        if d.literal_run is not None:
            chars = d.literal_run.lead
        else:
            chars = d.charsets.lead if d.pattern is not None and d.charsets is not None else ""
        if chars:
            names[name] = Code(leads.name(chars))
    return names


def _delimiters_as_starts(states: list[State]) -> dict[str, tuple[tuple[str, str], ...]]:
    """The literal delimiters whose literals are also all their state's start literals (a state
    watching one literal delimiter, say `</think>`): their constant serves the state's fast path
    too (it becomes the state's starts_const), so the module does not hold the literals twice.
    Constant name -> its (literal, lead constant) pairs, in the delimiter's own order."""
    shared = {}
    for state in states:
        quick = state.quick
        if quick is None or quick.starts is None or len(state.watches) != 1:
            continue
        watch = state.watches[0]
        if not watch.searched_as_literals:
            continue
        leads = dict(quick.starts)
        literals = _preferred_literals(watch.delimiter)
        if set(literals) == set(leads) and len(literals) == len(quick.starts):
            # (a StartLiterals is a LiteralSearch: the scan's searches are unchanged)
            if len(set(leads.values())) == 1:
                shared[watch.const] = tuple((literal, leads[literal]) for literal in literals)
                quick.starts_const = watch.const
    return shared


def _leads_argument(starts: tuple[tuple[str, str], ...]) -> str:
    """StartLiterals' second argument: per literal, the constant of its lead characters ("" where
    none has any: the default)."""
    if not any(lead for _, lead in starts):
        return ""
    leads = ", ".join(lead or '""' for _, lead in starts)
    return f", ({leads},)" if len(starts) == 1 else f", ({leads})"


def _literal_searches(states: list[State], consts: dict[str, ir.Delimiter], leads: Leads) -> dict[str, Code]:
    """The module's literal searches, constant name -> its construction: each literal delimiter's
    (and literal run's), each state's one search for all its literal delimiters' literals, and
    each state's start literals (StartLiterals). A search the module already has is not built
    twice: a second name for it refers to the first, and a state whose start literals are its
    literal delimiters' literals uses its StartLiterals for that search too."""
    built: dict[tuple, str] = {}  # what a constant holds -> its name
    searches: dict[str, Code] = {}

    def add(name: str, key: tuple, construction: str) -> None:
        if key in built:
            searches[name] = Code(built[key])
        else:
            built[key] = name
            searches[name] = Code(construction)

    starting = _delimiters_as_starts(states)
    searched = {}  # literal delimiter's constant -> (its literals, their lead)
    for name, d in consts.items():
        if d.literals is not None or d.literal_run is not None:
            lead = leads.name(d.literal_run.lead) if d.literal_run is not None and d.literal_run.lead else ""
            searched[name] = (tuple(_preferred_literals(d)), lead)
    # (a search that is also a state's start literals is a StartLiterals: with the leads)
    as_starts = {searched[name]: pairs for name, pairs in starting.items()}
    for name, (literals, lead) in searched.items():
        if (literals, lead) in as_starts:
            add(name, (literals, lead), f"StartLiterals({py_literal(literals)}{_leads_argument(as_starts[literals, lead])})")
        else:
            add(name, (literals, lead), f"LiteralSearch({py_literal(literals)}{', ' + lead if lead else ''})")
    for state in states:
        quick = state.quick
        if quick is not None and quick.starts is not None and quick.starts_const not in consts:
            literals = tuple(literal for literal, _ in quick.starts)
            if state.shared_search and set(literals) == set(state.all_literals) and len(literals) == len(state.all_literals):
                state.shared_const = quick.starts_const  # (the same literals: one search)
            add(quick.starts_const, ("starts", quick.starts), f"StartLiterals({py_literal(literals)}{_leads_argument(quick.starts)})")
        if state.literal_starts is not None:
            state.shared_const = state.literals_const
            literals = tuple(literal for literal, _ in state.literal_starts)
            construction = f"StartLiterals({py_literal(literals)}{_leads_argument(state.literal_starts)})"
            add(state.literals_const, ("starts", state.literal_starts), construction)
        elif state.shared_search and state.shared_const is None:
            state.shared_const = state.literals_const
            literals = state.all_literals
            add(state.literals_const, (literals, ""), f"LiteralSearch({py_literal(literals)})")
    return searches


class CodegenError(RuntimeError):
    """The generator produced invalid Python: a bug in rtcompile, never in the template."""


def generate(template: ir.Template, *, origin: str | None = None) -> str:
    """The formatted, compile-checked module source for a lowered template."""
    import black  # imported on a cache miss only: a hit never formats anything

    label = f"<rtcompile {template.sha256[:16]}>"
    raw = render(template, origin=origin or f"response template sha256:{template.sha256[:16]}")
    _check_compiles(raw, label, "unformatted")
    source = black.format_str(raw, mode=black.Mode(line_length=100))
    _check_compiles(source, label, "formatted")
    return source


def _check_compiles(source: str, label: str, stage: str) -> None:
    try:
        compile(source, label, "exec")
    except SyntaxError as e:
        raise CodegenError(f"rtcompile generated invalid Python ({stage}) for {label}: {e}") from e

"""Matching helpers for generated scanners: literal searches, windowed regex searches, partial
matches at the buffer's end, and start-anchor truncation.

The semantics are those of the `regex` module's partial search, which the interpreter uses: a
search reports the leftmost complete match if there is one anywhere, else the leftmost partial
match (one that runs into the end of the buffer). Equivalently, trying `pattern.match` at each
start position in turn: the first complete match wins, else the first partial one.
"""

from __future__ import annotations

import re
from typing import Any

# Below this many unread characters one regex search (a single C call) is cheaper than trying only
# the candidate start positions (PatternWindow); above it, skipping to candidates wins, and
# increasingly so for patterns with a leading \s* that the engine tries at every space.
SHORT_BUFFER = 256
# Up to this many characters, a literal search is one regex search (one C call); beyond it, the
# jumps between occurrences of the literals' first character (str.find, at memchr speed) win when
# that character is rare, as it is in long reasoning text.
SHORT_SEARCH = 2048
# From this many unread characters on, a scan's literal searches are remembered for the later
# scans of the same buffer (LiteralSearch.find's memo). Below it, searching again costs less than
# the bookkeeping, and at most this much is searched again per scan, so parsing stays linear.
MEMO_BUFFER = 2048


def literal_partial_start(buf: str, pos: int, literals: tuple[str, ...], longest: int) -> int:
    """Where a possibly partial literal starts at the end of `buf` (len(buf) if nowhere).

    That is the leftmost p >= pos such that buf[p:] is a proper prefix of one of `literals`: what
    a partial search reports when no literal matches completely."""
    n = len(buf)
    low = max(pos, n - longest + 1)
    best = n
    for literal in literals:
        # Only where the literal's first character is (usually nowhere in these few characters).
        p = buf.find(literal[0], low, best)
        while p >= 0:
            if literal.startswith(buf[p:]):
                best = p
                break
            p = buf.find(literal[0], p + 1, best)
    return best


def may_start_at_front(text: str, literals: tuple[str, ...], lead: str) -> bool:
    """Whether a delimiter whose matches are a run of `lead` characters then one of `literals` (and
    the rest) may match at the start of `text`, whole or partly: after the run, one of them occurs
    or a proper prefix of one runs to the end. (None of `literals` starts with a lead character, so
    after the longest run is the only place one can begin.)"""
    run = len(text) - len(text.lstrip(lead)) if lead else 0
    if run == len(text):
        return True  # (all lead characters: a match may still be starting)
    for literal in literals:
        if text.startswith(literal, run) or literal.startswith(text[run:]):
            return True
    return False


def run_start(buf: str, floor: int, end: int, chars: str) -> int:
    """Where the run of `chars` that ends at `end` starts, not before `floor` (the run of lead
    characters a match may start with, before its first character)."""
    while end > floor and buf[end - 1] in chars:
        end -= 1
    return end


def trailing_run(buf: str, pos: int, chars: str) -> int:
    """Where the run of `chars` at the end of buf[pos:] starts."""
    return run_start(buf, pos, len(buf), chars)


class LazyRegex:
    """A pattern compiled with the `regex` module (DOTALL) the first time it is used.

    Compiling a delimiter or tag pattern costs up to a millisecond or more (gpt-oss's call opener);
    done at import, it would be most of the cost of loading a parser from the cache. Deferred, a
    parser loads in well under a millisecond, and only patterns actually needed are compiled (each
    once per process). The methods are the compiled pattern's."""

    __slots__ = ("source", "compiled_or_none", "carry_or_none", "_plain")

    def __init__(self, source: str):
        self.source = source
        # The compiled pattern once compile() has run (a generated fast path reads it directly:
        # `P.compiled_or_none or P.compiled()` costs no call once compiled).
        self.compiled_or_none: Any = None
        # Its carry.CarriedMatch once carried() has run (read the same way).
        self.carry_or_none: Any = None
        self._plain: Any = None

    def compiled(self) -> Any:
        compiled = self.compiled_or_none
        if compiled is None:
            import regex

            compiled = self.compiled_or_none = regex.compile(self.source, regex.DOTALL)
        return compiled

    def carried(self) -> Any:
        """The pattern's automaton for a fast path that carries its partial match from chunk to
        chunk (carry.py). Only called for patterns the code generator saw it exists for."""
        carry = self.carry_or_none
        if carry is None:
            from .carry import carried_match

            carry = self.carry_or_none = carried_match(self.source)
            if carry is None:
                raise ValueError(f"no carried match for {self.source!r}: regenerate the parser")
        return carry

    def plain(self) -> Any:
        """The pattern for complete matches without a time bound: its stdlib twin where one exists
        (the faster engine, see twin.py), else the `regex` pattern. No `partial=`, no `timeout=`."""
        plain = self._plain
        if plain is None:
            from .twin import stdlib_twin

            plain = self._plain = stdlib_twin(self.source) or self.compiled()
        return plain

    def scan(self, buf: str, pos: int, eos: bool, timeout: float | None) -> Any:
        """A scanner's search: partial while the stream goes on, complete at its end."""
        if eos and timeout is None:
            return self.plain().search(buf, pos)
        return self.compiled().search(buf, pos, partial=not eos, timeout=timeout)

    def search(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled().search(*args, **kwargs)

    def match(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled().match(*args, **kwargs)

    def finditer(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled().finditer(*args, **kwargs)

    def fullmatch(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled().fullmatch(*args, **kwargs)

    def sub(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled().sub(*args, **kwargs)

    def __repr__(self) -> str:
        return f"LazyRegex({self.source!r})"


class LiteralSearch:
    """Finds literals in long buffers (a whole message) for the generated scanners: a literal
    delimiter's literals, those of a pattern that is a lead run then literals (ir.LiteralRun), or
    the literal text every match of a pattern starts with (PatternWindow).

    `literals` are in the order the engine prefers them at one position; `lead` are the characters
    a match may start with before the literal (a pattern's leading `\\s*`), "" for none.

    `find` remembers what it learnt in a per-buffer `memo` (Machine._literal_memo), so that the
    scans of one buffer, one after each commit, do not read the same text again.
    """

    __slots__ = ("literals", "longest", "lead", "_first", "_single", "_alternation", "_prefixes")

    def __init__(self, literals: tuple[str, ...], lead: str = ""):
        self.literals = tuple(literals)
        self.longest = max(map(len, self.literals))
        self.lead = lead
        firsts = {literal[0] for literal in self.literals}
        self._first = firsts.pop() if len(firsts) == 1 else None
        self._single = self.literals[0] if len(self.literals) == 1 else None
        self._alternation = None  # compiled when first needed (most searches never need it)
        # Every prefix of a literal -> the lead characters a match may start with before it (built
        # when first needed, see _tail_start: importing a parser builds none).
        self._prefixes: dict[str, str] | None = None

    def find(self, memo: dict | None, buf: str, pos: int, bound: int | None = None) -> tuple[int, int]:
        """(start, end) of the leftmost occurrence of a literal in buf[pos:]; (-1, -1) if none.

        Given `bound` (where the caller already has a match), only as far as an occurrence could
        still start a match at or before `bound` (after the run of lead characters at `bound`):
        (-2, -2) means "none that early", and the rest of a long buffer is not read for nothing.
        A partial occurrence at the buffer's end cannot start that early either then (the caller
        skips that check): the run of lead characters at `bound` ends more than `longest` before
        the end."""
        n = len(buf)
        if memo is None:
            known = None
            if bound is None:  # (the common case in streaming: a short buffer, no bound)
                found = self._search(buf, pos, n)
                return (-1, -1) if found is None else found
        else:
            known = memo.get(self)
            if known is not None and known[0] >= pos >= known[2]:
                return known[0], known[1]  # the next occurrence, found by an earlier scan
        limit = n  # the last start wanted
        if bound is not None and bound < n:
            limit = bound
            lead = self.lead
            while limit < n and buf[limit] in lead:
                limit += 1
        origin = pos  # (no occurrence starts in [origin, pos))
        if known is not None and known[0] < 0 and known[2] <= pos:
            clear = known[3]  # no occurrence starts in [known[2], clear)
            if limit < clear:
                return (-1, -1) if clear > n else (-2, -2)
            if pos < clear:
                origin, pos = known[2], clear
        stop = n if limit + self.longest >= n else limit + self.longest
        found = self._search(buf, pos, stop)
        if found is not None and (stop == n or found[0] <= limit):
            if memo is not None:
                memo[self] = (found[0], found[1], origin, found[0])
            return found
        # (a later occurrence found in a cut-off window may not be the leftmost one: not kept)
        if memo is not None:
            memo[self] = (-1, -1, origin, n + 1 if stop == n else limit + 1)
        return (-1, -1) if stop == n else (-2, -2)

    def pending(self, buf: str, pos: int, found: int) -> int:
        """Where a partial match of these literals at the end of `buf` starts (len(buf): none),
        for a scan that found the first literal of its state at `found` (-1: none at all), and
        none of these there. That is the regex partial search's answer when no literal of these
        occurs completely; one starting after `found` does not matter (the match at `found`
        comes first)."""
        n = len(buf)
        if 0 <= found <= n - self.longest:
            return n  # a partial literal starts after `found`, and so does its lead run
        start = self.partial_start(buf, pos)
        if found >= 0 and (start > found or self._search(buf, found + 1, n) is not None):
            return n
        return start

    def _prefix_leads(self) -> dict[str, str]:
        """Every prefix of a literal -> the lead characters a match may start with before it."""
        lead = self.lead
        return {literal[:end]: lead for literal in self.literals for end in range(1, len(literal) + 1)}

    def partial_start(self, buf: str, pos: int) -> int:
        """Where a match that runs into the end of `buf` starts (len(buf) if none): a proper
        prefix of a literal at the very end, or a run of lead characters reaching the end, with
        the run of lead characters before it."""
        start = self._tail_start(buf, pos)
        return run_start(buf, pos, len(buf), self.lead) if start == len(buf) else start

    def _tail_start(self, text: str, pos: int) -> int:
        """Where the leftmost prefix of a literal that runs to the end of text[pos:] starts, with the
        run of lead characters before it; len(text) if none. (What literal_partial_start finds,
        looking only where a literal's first character is, near the end.)"""
        n = len(text)
        prefixes = self._prefixes
        if prefixes is None:
            prefixes = self._prefixes = self._prefix_leads()
        first = self._first
        at = max(pos, n - self.longest + 1)  # (a whole literal of the longest is no partial)
        if first is not None:
            at = text.find(first, at)
            while at >= 0:
                lead = prefixes.get(text[at:])
                if lead is not None:
                    return run_start(text, pos, at, lead) if lead else at
                at = text.find(first, at + 1)
            return n
        for at in range(at, n):
            lead = prefixes.get(text[at:])
            if lead is not None:
                return run_start(text, pos, at, lead) if lead else at
        return n

    def _search(self, buf: str, pos: int, stop: int) -> tuple[int, int] | None:
        """The leftmost occurrence within buf[pos:stop]."""
        first = self._first
        if first is not None and stop - pos > SHORT_SEARCH:
            # Jump from one place the shared first character occurs to the next: str.find runs at
            # memchr speed, and a step costs about what the regex engine takes to read ~500
            # characters (~1000 of ASCII-only text, which it reads twice as fast). While those
            # places are rarer than that this wins; where they turn out dense, the engine goes on.
            single = self._single
            origin, tries = pos, 0
            q = buf.find(first, pos, stop)
            while q >= 0:
                if single is not None:
                    if buf.startswith(single, q, stop):
                        return q, q + len(single)
                else:
                    for literal in self.literals:
                        if buf.startswith(literal, q, stop):
                            return q, q + len(literal)
                tries += 1
                if tries & 7 == 0 and q - origin < tries * (1000 if buf.isascii() else 500):
                    pos = q + 1
                    break
                q = buf.find(first, q + 1, stop)
            else:
                return None
        alternation = self._alternation
        if alternation is None:
            alternation = self._alternation = re.compile("|".join(re.escape(lit) for lit in self.literals))
        m = alternation.search(buf, pos, stop)
        return None if m is None else m.span()


class StartLiterals(LiteralSearch):
    """What the delimiters watched in one parser state start with, for the state's fast path (the
    generated `_common_*` method, see Machine.feed): every match of each of them is a run of its
    lead characters, then one of its literals (a literal delimiter's, a literal run's, a pattern's
    literal prefix, which the pattern spells out right after its leading `[lead]*`), then the
    rest; and no literal starts with a lead character.

    So in a chunk where no literal occurs whole (`occurs`), no delimiter matches completely, and
    a match may still be starting in one place only: a proper prefix of a literal that runs to the
    chunk's end, with the run of lead characters before it (`hold`). That is where the scan would
    hold the text back (the regex partial search's leftmost partial match), found with no regex
    call and no scan. Where these are also the state's literal delimiters' literals, the scan's
    one search for them (LiteralSearch.find) is this object's too.

    `leads`: per literal, the lead characters its delimiter's matches may start with before it
    ("" for none). Where literals of several delimiters share a prefix, the scan holds from the
    earliest of their partial matches: the one whose lead run reaches furthest back, a lead that is
    a superset of the others' (the code generator builds a StartLiterals only where there is one).
    """

    __slots__ = ("leads",)

    def __init__(self, literals: tuple[str, ...], leads: tuple[str, ...] | None = None):
        # (where every literal has the same lead, that is its lead as a LiteralSearch: one
        # constant then serves a literal delimiter's scan and its state's fast path)
        super().__init__(literals, leads[0] if leads and len(set(leads)) == 1 else "")
        self.leads = tuple(leads or ("",) * len(self.literals))

    def _prefix_leads(self) -> dict[str, str]:
        """Every prefix of a literal -> the lead characters walked back over from it: the widest of
        its literals' leads."""
        prefixes: dict[str, str] = {}
        for literal, lead in zip(self.literals, self.leads):
            for end in range(1, len(literal) + 1):
                known = prefixes.setdefault(literal[:end], lead)
                if not set(known) >= set(lead):
                    if not set(lead) >= set(known):
                        raise ValueError(f"the leads {known!r} and {lead!r} of one prefix are not nested")
                    prefixes[literal[:end]] = lead
        return prefixes

    def occurs(self, text: str, pos: int = 0) -> bool:
        """Whether one of the literals occurs whole in text[pos:]."""
        alternation = self._alternation
        if alternation is None:
            alternation = self._alternation = re.compile("|".join(map(re.escape, self.literals)))
        return alternation.search(text, pos) is not None

    def starts_at(self, text: str, pos: int = 0) -> int:
        """-1 where one of the literals occurs whole in text[pos:]; otherwise `hold`: where a
        delimiter may still be starting at the end (len(text) where none may). (occurs, then hold,
        in one call: a fast path asks both of most chunks that have a first character.)"""
        alternation = self._alternation
        if alternation is None:
            alternation = self._alternation = re.compile("|".join(map(re.escape, self.literals)))
        if alternation.search(text, pos) is not None:
            return -1
        return self._tail_start(text, pos)

    def hold(self, text: str, pos: int = 0) -> int:
        """Where a proper prefix of a literal that runs to the end of `text` starts (not before
        `pos`), with the run of lead characters before it; len(text) if none does. (For a text in
        which none occurs whole.)"""
        return self._tail_start(text, pos)

    def starts_nowhere(self, text: str) -> bool:
        """Whether no position of `text` starts one of the literals, nor, at its end, a proper
        prefix of one: then no delimiter can start in `text`."""
        return not self.occurs(text) and self.hold(text) == len(text)


class PatternWindow:
    """Searches a regex delimiter for a scanner that only cares about a match starting at or before
    a bound (where it already has another match): `pattern.search(buf, pos, partial=not eos)` when
    that starts at or before the bound, None when it starts later.

    `pattern` is a LazyRegex. Every match starts with a run of `lead` characters and then a
    character of `first` (a character class), followed by `prefix` if that is not ""
    (ir.CharSets). So only those places are tried, with anchored matches that read no further
    than a match can reach (`tail` characters after the lead run, None: unbounded), and the
    required `prefix` is found with a LiteralSearch. Partial matches (ones that run into the end
    of the buffer) are looked for only near the end.
    """

    __slots__ = ("pattern", "_first", "_lead", "_tail", "_lead_run", "_prefix_search")

    def __init__(self, pattern: Any, first: str, lead: str, tail: int | None, lead_run: bool, prefix: str = ""):
        self.pattern = pattern
        self._first = re.compile(first)
        self._lead = lead
        self._tail = tail
        self._lead_run = lead_run
        self._prefix_search = LiteralSearch((prefix,), lead) if prefix else None

    def search(self, buf: str, pos: int, eos: bool, bound: int, timeout: float | None = None, memo: dict | None = None) -> Any:
        if eos:  # complete matches only: the plain engine unless time is bounded (see LazyRegex.plain)
            pattern = self.pattern.plain() if timeout is None else self.pattern.compiled()
            complete = self._leftmost_complete(pattern, buf, pos, bound, timeout, memo)[0]
            return complete if complete is not None and complete.start() <= bound else None
        pattern = self.pattern.compiled()
        complete, later = self._leftmost_complete(pattern, buf, pos, bound, timeout, memo)
        if complete is not None:
            return complete if complete.start() <= bound else None
        floor = _partial_floor(buf, pos, len(buf), self._tail, self._lead if self._lead_run else "")
        partial = self._leftmost_partial(pattern, buf, pos, bound, floor, timeout, memo)
        if partial is None or (later >= 0 and pattern.search(buf, later, timeout=timeout) is not None):
            return None  # (a complete match after the window would be the answer: not ours)
        return partial

    def _leftmost_complete(
        self, pattern: Any, buf: str, pos: int, bound: int, timeout: float | None, memo: dict | None
    ) -> tuple[Any, int]:
        """(the leftmost complete match, or None; where candidates after the window start, or -1
        when no match exists at all). `pattern` is compiled by either engine: with no time bound
        it is called without `timeout=`, which `re` does not take."""
        lead, prefix_search = self._lead, self._prefix_search
        match = pattern.match
        n = len(buf)
        tried = pos
        tries = 0
        while True:
            if prefix_search is not None:
                q = prefix_search.find(memo, buf, tried, bound)[0]
                if q < 0:
                    # -2: none that could start a match by the bound; any later match starts after it
                    return None, (-1 if q == -1 else bound + 1)
            else:
                hit = self._first.search(buf, tried)
                if hit is None:
                    return None, -1
                q = hit.start()
            start = run_start(buf, tried, q, lead)
            if start > bound:
                return None, start
            for p in range(start, q + 1):
                reach = _reach(buf, p, n, self._tail, lead, self._lead_run)
                m = match(buf, p, reach) if timeout is None else match(buf, p, reach, timeout=timeout)
                if m is not None:
                    return m, -1
            tried = q + 1
            tries += 1
            if tries >= 8 and not lead and prefix_search is None:
                # Many candidates that do not match: the engine's own search is faster from here.
                # (Not with a lead: the engine would try every lead character, slowly.)
                return (pattern.search(buf, tried) if timeout is None else pattern.search(buf, tried, timeout=timeout)), -1

    def _leftmost_partial(
        self, pattern: Any, buf: str, pos: int, bound: int, floor: int, timeout: float | None, memo: dict | None
    ) -> Any:
        lead, prefix_search = self._lead, self._prefix_search
        n = len(buf)
        tried = max(pos, floor)
        while tried <= bound and tried < n:
            if prefix_search is not None:
                # Where the whole prefix occurs, else where a part of it runs into the end.
                q = prefix_search.find(memo, buf, tried, bound)[0]
                if q == -2:
                    return None  # none that could start a match by the bound (see LiteralSearch.find)
                if q < 0:
                    q = literal_partial_start(buf, tried, prefix_search.literals, prefix_search.longest)
            else:
                hit = self._first.search(buf, tried)
                q = n if hit is None else hit.start()
            start = run_start(buf, tried, q, lead)
            for p in range(start, min(q + 1, n, bound + 1)):
                m = pattern.match(buf, p, partial=True, timeout=timeout)
                if m is not None and m.partial:
                    return m
            tried = q + 1
        return None


def _reach(buf: str, p: int, n: int, tail: int | None, lead: str, lead_run: bool) -> int:
    """How far a match starting at p can read: its leading lead run, then `tail` characters."""
    if tail is None:
        return n
    end = p
    if lead_run:
        while end < n and buf[end] in lead:
            end += 1
    return min(n, end + tail)


def _partial_floor(buf: str, pos: int, n: int, tail: int | None, run_chars: str) -> int:
    """The earliest place a partial match (one that reaches the end) can start."""
    if tail is None:
        return pos
    return run_start(buf, pos, max(pos, n - tail), run_chars)


def moved_by_more(pattern: Any, buf: str, m: Any, timeout: float | None = None) -> bool:
    """Whether a complete match `m` of `pattern` (a LazyRegex) that ends before the end of `buf`
    may still change as text arrives, so that it must be held rather than committed.

    transformers 5.24.0's rule for regex delimiters (literals keep the old one: final once their
    last character is in): a `$` also matches before a trailing newline and a `\\Z` can sit in a
    lookahead, so the match is tried again on the buffer extended by one character that is neither
    a newline nor the end ("\\x00"); if it moves, vanishes or captures otherwise, it was leaning on
    the buffer's end. The code generator calls this only for patterns where that is possible
    (patterns.reads_past_match)."""
    extended = pattern.match(buf + "\x00", m.start(), timeout=timeout)
    return extended is None or extended.span() != m.span() or extended.groupdict() != m.groupdict()


def truncate_after_last(prefix: str, anchor: Any, border_free_literal: str | None = None) -> str:
    """The prefix after the end of the last start-anchor match (non-overlapping, left to right).

    A single literal that cannot overlap itself ends its last non-overlapping match where its last
    occurrence ends, so `str.rfind` gives the same answer as scanning every match."""
    if border_free_literal is not None:
        found = prefix.rfind(border_free_literal)
        last_end = None if found < 0 else found + len(border_free_literal)
    else:
        last_end = None
        for match in anchor.finditer(prefix):
            last_end = match.end()
    if last_end is None:
        import logging  # only on this rare path: importing logging costs milliseconds at startup

        logging.getLogger("rtcompile").info("start anchor not found in the prefix; parsing the entire prefix instead")
        return prefix
    return prefix[last_end:]

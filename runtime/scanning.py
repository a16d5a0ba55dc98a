"""Matching helpers for generated scanners: literal partial matches, windowed regex search, and
start-anchor truncation.

The semantics are those of the `regex` module's partial search, which the interpreter uses: a
search reports the leftmost complete match if there is one anywhere, else the leftmost partial
match (one that runs into the end of the buffer). Equivalently, trying `pattern.match` at each
start position in turn: the first complete match wins, else the first partial one.
"""

from __future__ import annotations

from typing import Any

# Below this many unread characters one regex search (a single C call) is cheaper than trying only
# the candidate start positions (search_window); above it, skipping to candidates wins, and
# increasingly so for patterns with a leading \s* that the engine tries at every space.
SHORT_BUFFER = 256


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


def find_literals(
    memo: dict, buf: str, pos: int, alternation: Any, bound: int | None = None, longest: int = 0, lead: str = ""
) -> tuple[int, int]:
    """(start, end) of the leftmost occurrence in buf[pos:] of a literal delimiter's alternation,
    searched in one pass (faster than str.find per literal on non-ASCII text); (-1, -1) if none.

    Given `bound` (where the caller already has a match), an occurrence is only looked for as far as
    it could still start a match at or before `bound` (from the end of the run of `lead` characters
    at `bound`, which the match may begin with), and the rest of a long buffer is not read for
    nothing: (-2, -2) means "none that early". `longest` is the longest literal's length. (A
    partial match at the buffer's end then cannot start before `bound` either: see the caller.)

    What was learnt is kept in `memo` for later scans of the same buffer (pos only grows there): an
    occurrence stays the answer until pos passes it, and "none starts before x" stays true."""
    n = len(buf)
    limit = n  # the last start wanted
    if bound is not None:
        limit = bound
        while limit < n and buf[limit] in lead:
            limit += 1
    known = memo.get(alternation)
    if known is not None:
        start, end, clear = known  # clear: no occurrence starts before it (from that search's pos)
        if start >= pos:
            return start, end
        if start < 0:
            if limit < clear:
                return (-1, -1) if clear > n else (-2, -2)
            pos = max(pos, clear)
    stop = min(n, limit + longest)  # an occurrence starting at `limit` ends by here
    m = alternation.search(buf, pos, stop)
    if m is not None and (stop == n or m.start() <= limit):
        memo[alternation] = (m.start(), m.end(), m.start())
        return m.span()
    # (a later occurrence found in a cut-off window may not be the leftmost one: not kept)
    if stop == n:
        memo[alternation] = (-1, -1, n + 1)
        return -1, -1
    memo[alternation] = (-1, -1, limit + 1)
    return -2, -2


def trailing_run(buf: str, pos: int, chars: str) -> int:
    """Where the run of `chars` at the end of buf[pos:] starts."""
    p = len(buf)
    while p > pos and buf[p - 1] in chars:
        p -= 1
    return p


def search_window(
    pattern: Any,
    buf: str,
    pos: int,
    eos: bool,
    bound: int,
    first: Any,
    lead: str,
    tail: int | None,
    lead_run: bool,
    timeout: float | None = None,
    prefix: str = "",
) -> Any:
    """`pattern.search(buf, pos, partial=not eos)` for a caller that only cares about a result
    starting at or before `bound`: the same match when it does, None when it starts later.

    A partial search reports the leftmost complete match if there is one, else the leftmost
    partial match (one that runs into the end of the buffer). Every match starts with a run of
    `lead` characters then a character `first` finds (ir.CharSets), so only those places are
    looked at, and the second kind only near the end."""
    complete, later = _leftmost_complete(pattern, buf, pos, bound, first, lead, tail, lead_run, timeout, prefix)
    if complete is not None:
        return complete if complete.start() <= bound else None
    if eos:
        return None
    floor = _partial_floor(buf, pos, len(buf), tail, lead if lead_run else "")
    partial = _leftmost_partial(pattern, buf, pos, bound, first, lead, floor, timeout, prefix)
    if partial is None or (later >= 0 and pattern.search(buf, later, timeout=timeout) is not None):
        return None  # (a complete match after the window would be the answer: not ours)
    return partial


def _leftmost_complete(
    pattern: Any,
    buf: str,
    pos: int,
    bound: int,
    first: Any,
    lead: str,
    tail: int | None,
    lead_run: bool,
    timeout: float | None,
    prefix: str,
) -> tuple[Any, int]:
    """(the leftmost complete match, or None; where candidates after the window start, or -1
    when no match at all exists)."""
    if not lead:
        # Matches start right at a first character: the engine's own search skips ahead fast.
        hit = first.search(buf, pos)
        if hit is None or hit.start() > bound:
            return None, (-1 if hit is None else hit.start())
        return pattern.search(buf, hit.start(), timeout=timeout), -1
    # With a lead (a leading \s*, say) the engine tries every lead character, slowly: try only
    # candidate starts, each reading no further than a match can reach (else the engine scans to
    # the end of the buffer for a required literal on every call).
    n = len(buf)
    tried = pos
    while True:
        hit = first.search(buf, tried)
        if hit is None:
            return None, -1
        q = hit.start()
        start = q
        while start > tried and buf[start - 1] in lead:
            start -= 1
        if start > bound:
            return None, start
        if prefix and not buf.startswith(prefix, q):
            tried = q + 1  # no match continues with this character
            continue
        for p in range(start, q + 1):
            m = pattern.match(buf, p, _reach(buf, p, n, tail, lead, lead_run), timeout=timeout)
            if m is not None:
                return m, -1
        tried = q + 1


def _leftmost_partial(
    pattern: Any, buf: str, pos: int, bound: int, first: Any, lead: str, floor: int, timeout: float | None, prefix: str = ""
) -> Any:
    n = len(buf)
    tried = max(pos, floor)
    while tried <= bound and tried < n:
        hit = first.search(buf, tried)
        q = n if hit is None else hit.start()
        start = q
        while start > tried and buf[start - 1] in lead:
            start -= 1
        if prefix and q < n and not (buf.startswith(prefix, q) or prefix.startswith(buf[q : q + len(prefix)])):
            tried = q + 1  # diverges from the required text before the end: not even partial
            continue
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
    floor = max(pos, n - tail)
    while floor > pos and buf[floor - 1] in run_chars:
        floor -= 1
    return floor


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

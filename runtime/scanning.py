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
    for p in range(max(pos, n - longest + 1), n):
        tail = buf[p:]
        for literal in literals:
            if literal.startswith(tail):
                return p
    return n


def trailing_run(buf: str, pos: int, chars: str) -> int:
    """Where the run of `chars` at the end of buf[pos:] starts."""
    p = len(buf)
    while p > pos and buf[p - 1] in chars:
        p -= 1
    return p


def search_window(
    pattern: Any, buf: str, pos: int, eos: bool, bound: int, first: Any, lead: str, timeout: float | None = None
) -> Any:
    """`pattern.search(buf, pos, partial=not eos)` for a caller that only cares about a result
    starting at or before `bound`: the same match when it does, None when it starts later.

    Instead of letting the regex engine run to the end of a long buffer, only the positions where a
    match can start are tried: every match starts with a run of `lead` characters followed by a
    character that `first` (a compiled character class) finds; see `ir.CharSets`."""
    n = len(buf)
    partial = not eos
    tried = pos  # every position before this one has been tried
    pending = None  # the leftmost partial match so far (a complete match anywhere beats it)
    while True:
        hit = first.search(buf, tried)
        q = n if hit is None else hit.start()
        start = q
        while start > tried and buf[start - 1] in lead:
            start -= 1
        stop = q + 1 if hit is not None else (n if partial else start)
        for p in range(start, stop):
            if pending is None and p > bound:
                return None
            m = pattern.match(buf, p, partial=partial, timeout=timeout)
            if m is not None:
                if not m.partial:
                    return m if p <= bound else None
                if pending is None:
                    pending = m
        if hit is None:
            return pending
        tried = q + 1


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

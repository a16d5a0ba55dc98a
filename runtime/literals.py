"""Helpers for literal delimiters and start anchors."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("rtcompile")


def literal_partial_start(buf: str, pos: int, literals: tuple[str, ...], longest: int) -> int:
    """Where a possibly partial literal starts at the end of `buf` (len(buf) if nowhere).

    That is the leftmost p >= pos such that buf[p:] is a proper prefix of one of `literals`: what
    the `regex` module's partial search reports when no literal matches completely."""
    n = len(buf)
    for p in range(max(pos, n - longest + 1), n):
        tail = buf[p:]
        for literal in literals:
            if literal.startswith(tail):
                return p
    return n


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
        logger.info("start anchor not found in the prefix; parsing the entire prefix instead")
        return prefix
    return prefix[last_end:]

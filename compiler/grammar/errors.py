"""The grammar backend's one exception."""

from __future__ import annotations


class GrammarError(ValueError):
    """A template (or a request) that no constrained-decoding grammar can express: one line naming
    where (a field, a tool, a request argument) and why. `where` keeps the first part."""

    def __init__(self, where: str, reason: str):
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}" if where else reason)

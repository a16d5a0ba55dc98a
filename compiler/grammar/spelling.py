"""How the grammar writes delimiter text: control tokens by their ids, everything else as text.

With a tokenizer, a control token (the interpreter's: special tokens and the added tokens the chat
template writes, `rtcompile.runtime.token_ids`) is a delimiter only when the model generated its
id; so every control-token spelling inside a delimiter becomes a `token` format, and the same
spelling in text the grammar writes is never a `const_string` (which xgrammar's matcher would also
accept spelled out in ordinary tokens). Without a tokenizer every delimiter is text.

Stop tokens end the output: xgrammar allows them wherever the grammar may end and never as an
element, so a delimiter that is only a stop token is never written; the grammar ends there.
"""

from __future__ import annotations

from typing import Any

import regex

from . import formats as F
from .errors import GrammarError


class Speller:
    """`control`: control-token spelling -> id; `stops`: the spellings of the stop tokens."""

    def __init__(self, control: dict[str, int], stops: frozenset[str]):
        self.control = control
        self.stops = stops
        ordered = sorted(control, key=len, reverse=True)
        self._split = regex.compile("(" + "|".join(map(regex.escape, ordered)) + ")") if ordered else None

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, stop_tokens: Any = None) -> "Speller":
        if tokenizer is None:
            stops = frozenset(s for s in (stop_tokens or ()) if isinstance(s, str))
            return cls({}, stops)
        from rtcompile.runtime.token_ids import profile_for

        profile = profile_for(tokenizer)
        # (a one-character control token cannot be spelled out any other way: the parser reads the
        # ordinary token of that character as the delimiter too, so it is text to the grammar)
        control = {spelling: token_id for token_id, spelling in profile.control_ids.items() if len(spelling) > 1}
        for spelling in control:
            reads_as_text = all(c.isalnum() or c == "_" or c.isspace() for c in spelling)
            if len(spelling) > 1 and (reads_as_text or spelling != spelling.strip()):
                # (written out with ordinary tokens, it reaches the parser defused, U+FDD2 between
                # its characters: in whitespace, names or JSON syntax that text no longer parses,
                # and a delimiter written around it no longer matches)
                raise GrammarError("tokenizer", f"the control token {spelling!r} looks like ordinary text the grammar writes")
        return cls(control, _stop_spellings(tokenizer, stop_tokens))

    def pieces(self, text: str) -> list[str | int]:
        """`text` cut into text pieces and control-token ids, in order."""
        if self._split is None:
            return [text] if text else []
        out: list[str | int] = []
        for index, part in enumerate(self._split.split(text)):
            if index % 2:
                out.append(self.control[part])
            elif part:
                out.append(part)
        return out

    def write(self, text: str) -> F.Format:
        """The format that writes exactly `text` as the parser must see it."""
        return F.sequence(*(F.token(p) if isinstance(p, int) else F.const(p) for p in self.pieces(text)))

    def check_edges(self, before: F.Format | None, text: str, after: F.Format | None, where: str) -> None:
        """Refuse delimiter text a control token could straddle with the regex beside it (`<` then
        `[a-z]+`, where `<a` is a control token): the parser would read the token defused (U+FDD2
        inside) and the delimiter would no longer match."""
        import regex

        for spelling in self.control:
            for size in range(1, len(spelling)):
                head, rest = spelling[:size], spelling[size:]
                if after is not None and text.endswith(head) and after.get("type") == "regex":
                    if regex.fullmatch(after["pattern"], rest, partial=True):
                        raise GrammarError(where, f"the control token {spelling!r} could be spelled across {text!r}")
                if before is not None and text.startswith(rest) and before.get("type") == "regex":
                    if regex.fullmatch(before["pattern"], head):
                        raise GrammarError(where, f"the control token {spelling!r} could be spelled across {text!r}")

    def first_id(self, text: str) -> int | None:
        """The id of the control token `text` starts with, if any."""
        pieces = self.pieces(text)
        return pieces[0] if pieces and isinstance(pieces[0], int) else None

    def is_stop(self, text: str) -> bool:
        return text in self.stops

    def excluded_ids(self, literals: list[str]) -> list[int] | None:
        """Ids that keep free text from forming any of `literals` when free text is written as
        tokens (each literal holds a control token: excluding its id is enough), else None."""
        ids = []
        for literal in literals:
            first = next((p for p in self.pieces(literal) if isinstance(p, int)), None)
            if first is None:
                return None
            ids.append(first)
            # (and every control token that holds the literal: its id alone would write it)
            ids.extend(token_id for spelling, token_id in self.control.items() if literal in spelling)
        return ids


def _stop_spellings(tokenizer: Any, stop_tokens: Any) -> frozenset[str]:
    """The spellings of the stop tokens: those given (ids or spellings), else the tokenizer's
    end-of-sequence token."""
    if stop_tokens is None:
        stop_tokens = [tokenizer.eos_token_id] if getattr(tokenizer, "eos_token_id", None) is not None else []
    out = set()
    for stop in stop_tokens:
        if isinstance(stop, str):
            out.add(stop)
        elif isinstance(stop, int):
            spelling = tokenizer.convert_ids_to_tokens(stop)
            if isinstance(spelling, str):
                out.add(spelling)
    return frozenset(out)

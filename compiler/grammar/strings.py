"""Strings that hold none of a set of words, as EBNF: what a string argument may be so that the
region it stands in is not closed early (its closer, written inside the string, would close it).

A regex cannot say "no `<tool_call|>` anywhere" but a small automaton can: one rule per state, a
state being the longest prefix of a word that the text so far ends with (Aho-Corasick over the
words). Every character outside the words' alphabet goes back to the empty state; a character that
would complete a word has no transition. So `a < b`, `</think` and `<tool_call` stay writable where
`<tool_call|>` is excluded.

    string_rules("str", ["<x|>"], quote='"')  ->  str ::= "\\"" str_0
                                                  str_0 ::= "\\"" | [^"\\\\<\\u0000-\\u001f] str_0 | ...
"""

from __future__ import annotations

import json
from functools import lru_cache

from .charclass import class_source


def string_rules(name: str, words: list[str], quote: str | None, *, opening: str = "", closing: str = "", excluded: str = "") -> list[str]:
    """EBNF rules for rule `name`: a string between `opening` and `closing` (EBNF fragments; for
    a `quote`, the quote itself and JSON's escapes), whose text holds none of `words` nor any
    character of `excluded`."""
    return list(_string_rules(name, tuple(sorted({w for w in words if w})), quote, opening, closing, excluded))


@lru_cache(maxsize=256)
def _string_rules(name: str, words: tuple[str, ...], quote: str | None, opening: str, closing: str, excluded: str) -> tuple[str, ...]:
    """(A tag writes the same strings for every argument of every tool: built once.)"""
    if quote is not None:
        opening = opening or json.dumps(quote)
        closing = closing or json.dumps(quote)
        excluded += quote + "\\"
    singles = {w for w in words if len(w) == 1}
    longer = [w for w in words if len(w) > 1]
    states = sorted({"", *(w[:size] for w in longer for size in range(len(w)))}, key=lambda s: (len(s), s))
    index = {state: number for number, state in enumerate(states)}
    alphabet = sorted({c for w in longer for c in w} - set(excluded) - singles)
    control = [("\x00", "\x1f")] if quote else []
    escapes = class_source((quote or "") + "\\/bfnrt")  # (what may follow a backslash)
    rules = [f"{name} ::= {opening} {name}_0"]
    for state in states:
        choices = [closing]
        moves: dict[str, str] = {}  # char -> next state's rule, for moves that keep a partial match
        forbidden = ""  # chars that would complete a word here
        for char in alphabet:
            following = _next(state, char, longer)
            if following is None:
                forbidden += char
            elif following:
                moves[char] = f"{name}_{index[following]}"
        # Every other character goes back to the empty state: one class.
        others = class_source(excluded + "".join(singles) + forbidden + "".join(moves), control, negated=True)
        choices.append(f"{others} {name}_0")
        if quote is not None:
            choices.append(f'"\\\\" {escapes} {name}_0')
        choices.extend(f"{class_source(char)} {rule}" for char, rule in moves.items())
        rules.append(f"{name}_{index[state]} ::= " + " | ".join(choices))
    return tuple(rules)


def _next(state: str, char: str, words: list[str]) -> str | None:
    """The automaton's next state: the longest suffix of state+char that a word starts with (None
    when state+char completes a word)."""
    text = state + char
    if any(text.endswith(w) for w in words):
        return None
    for start in range(len(text) + 1):
        suffix = text[start:]
        if any(w.startswith(suffix) and w != suffix for w in words):
            return suffix
    return ""

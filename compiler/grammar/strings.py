"""Strings that hold none of a set of words, as EBNF: what a string argument may be so that the
region it stands in is not closed early (its closer, written inside the string, would close it).

A regex cannot say "no `<tool_call|>` anywhere" but a small automaton can: one rule per state, a
state being the longest prefix of a word that the text so far ends with (Aho-Corasick over the
words). A character that would complete a word has no transition. So `a < b`, `</think` and
`<tool_call` stay writable where `<tool_call|>` is excluded.

Every character outside the words' alphabet goes back to the empty state, from every state: that
move is one rule (`str_o`) all states share, and each state names only the few characters of the
alphabet. xgrammar precomputes a token mask per grammar position, each a pass over the vocabulary
that is costly where a broad class lets most tokens in: shared, the broad class is one position
instead of one a state (qwen3's `</tool_call>`, 12 states: its tag compiled 1.7x faster on a 32K
vocabulary; bench/README.md).

A JSON escape is two characters of the text the parser searches (`\\n`: a backslash, then `n`),
read by the automaton like any other: where no word holds a backslash, the escapes lead from every
state where the escaped character alone leads, one rule (`str_e`) all states share.

    string_rules("str", ["<x|>"], quote='"')  ->  str ::= "\\"" str_0
                                                  str_o ::= [^"\\\\<x|\\u0000-\\u001f] str_0
                                                  str_e ::= "\\\\" ["/\\\\bfnrt] str_0
                                                  str_0 ::= "\\"" | str_e | str_o | [x|] str_0 | [<] str_1
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
    control = [("\x00", "\x1f")] if quote else []
    # (a quoted string holds no raw control character, so a word's newline is never matched in one)
    alphabet = sorted({c for w in longer for c in w if not (control and c < " ")} - set(excluded) - singles)
    rules = [f"{name} ::= {opening} {name}_0"]
    # (the move every state shares: a character outside the alphabet, back to the empty state)
    shared = f"{name}_o"
    rules.append(f"{shared} ::= {class_source(excluded + ''.join(singles) + ''.join(alphabet), control, negated=True)} {name}_0")
    # (escapes lead where the escaped character alone does, the same from every state, unless a
    # word holds a backslash)
    shared_escapes = quote is not None and not any("\\" in word for word in words)
    escapes = _escapes(name, "", quote, singles, longer, index) if shared_escapes else None
    if escapes is not None:
        rules.append(f"{name}_e ::= {escapes}")
    for state in states:
        choices = [closing]
        if escapes is not None:
            choices.append(f"{name}_e")
        elif quote is not None and not shared_escapes:
            choices.extend(filter(None, [_escapes(name, state, quote, singles, longer, index)]))
        choices.append(shared)
        targets: dict[str, str] = {}  # the alphabet's characters by the state they move to
        for char in alphabet:
            following = _next(state, char, longer)
            if following is not None:  # (None: the character would complete a word)
                targets[following] = targets.get(following, "") + char
        choices.extend(f"{class_source(chars)} {name}_{index[following]}" for following, chars in targets.items())
        rules.append(f"{name}_{index[state]} ::= " + " | ".join(choices))
    return tuple(rules)


def _escapes(name: str, state: str, quote: str, singles: set, longer: list[str], index: dict) -> str | None:
    """The escapes from `state` (`\\n` is a backslash and an `n` in the text the parser
    searches: both read by the automaton), an escape that would complete a word left out; None
    where there is none."""
    after_backslash = None if "\\" in singles else _next(state, "\\", longer)
    if after_backslash is None:
        return None
    targets: dict[str, str] = {}
    for char in quote + "\\/bfnrt":
        following = None if char in singles else _next(after_backslash, char, longer)
        if following is not None:
            targets[following] = targets.get(following, "") + char
    return " | ".join(f'"\\\\" {class_source(chars)} {name}_{index[following]}' for following, chars in targets.items()) or None


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

"""The string automaton (compiler/grammar/strings.py), read by xgrammar itself: a string is
accepted exactly when it is a string of its kind whose text holds none of the excluded words."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st
from xgrammar.testing import _is_grammar_accept_string as xgrammar_accepts
import xgrammar as xgr

from rtcompile.grammar.strings import string_rules

ALPHABET = '<>/|abnt"\\\n\té中'
words = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=5), max_size=3)


def _grammar(name: str, rules: list[str]):
    return xgr.Grammar.from_ebnf("\n".join([f"root ::= {name}", *rules]))


def _json_text(text: str) -> str | None:
    """What a JSON string means, or None where it is no JSON string."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


@given(excluded=words, body=st.text(alphabet=ALPHABET, max_size=12), escaped=st.booleans())
@example(excluded=["a\nb"], body="a\nx", escaped=False)  # (a word's newline is no raw newline to write)
@example(excluded=["nx"], body="\nx", escaped=True)  # (the escape `\n` writes an `n` the parser reads)
@example(excluded=["\\"], body="\\", escaped=True)  # (a backslash word: no escape)
def test_a_json_string_is_accepted_exactly_when_its_text_holds_no_word(excluded, body, escaped):
    written = json.dumps(body, ensure_ascii=False) if escaped else f'"{body}"'
    meaning = _json_text(written)
    # (raw text between the quotes, as the parser sees it before JSON decoding)
    raw = written[1:-1]
    expected = meaning is not None and not any(word in raw for word in excluded)
    assert xgrammar_accepts(_grammar("dq", string_rules("dq", excluded, '"')), written) is expected, (excluded, written)


@given(excluded=words, body=st.text(alphabet=ALPHABET, max_size=12))
def test_a_delimited_string_is_accepted_exactly_when_it_holds_no_word_nor_its_closer(excluded, body):
    rules = string_rules("ds", [*excluded, "%>"], None, opening='"<%"', closing='"%>"')
    expected = not any(word in body for word in [*excluded, "%>"])
    assert xgrammar_accepts(_grammar("ds", rules), f"<%{body}%>") is expected, (excluded, body)


def test_every_state_shares_one_broad_class():
    """(the cost the shape avoids: one broad class per state is one vocabulary pass per state)"""
    rules = string_rules("dq", ["</tool_call>"], '"')
    broad = [rule for rule in rules if "[^" in rule]
    assert broad == ['dq_o ::= [^"/<>\\\\_aclot\\u0000-\\u001f] dq_0'], broad

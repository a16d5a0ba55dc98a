"""What the model's own chat template renders is accepted by the grammar, token by token.

Every assistant turn of the round-trip cases (real chat templates from `template_cases/`, rendered
for answers, reasoning, one and parallel calls, nested arguments and tricky text, after three kinds
of history) is encoded with a tokenizer holding the family's control tokens and fed to xgrammar's
matcher under the template's grammar: `auto` always, and `required` for turns that make calls. The
rendered layout (whitespace, key order, quoting, call sections) is the model's native one: the
grammar must accept it, not a JSON substitute.

Call objects carry keys the template's transform does not read (Command R7B's "tool_call_id"
first, Mistral Nemo's "id" last): the grammar writes members under such keys around the read ones.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import jsonschema
import pytest

import rtcompile
from grammar_walk import Walker, family_tokenizer
from rtcompile.grammar.values import standard_schema

def _round_trips():
    """The round-trip cases' module (tests/templates is no package: loaded by its path)."""
    path = Path(__file__).resolve().parents[1] / "templates" / "test_templates_roundtrip.py"
    spec = importlib.util.spec_from_file_location("_template_round_trips", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


_CASES = _round_trips()
FAMILIES, ROUNDTRIP_PARAMS, TOOLS, rendered_case = _CASES.FAMILIES, _CASES.ROUNDTRIP_PARAMS, _CASES.TOOLS, _CASES.rendered_case

@functools.lru_cache(maxsize=None)
def _family(family_name: str):
    family = FAMILIES[family_name]
    template = rtcompile.template_for(family.template)
    tokenizer, stops = family_tokenizer(template, tuple(family.stop_tokens))
    return template, tokenizer, stops, Walker(tokenizer, stops)


def _valid_calls(message: dict) -> bool:
    """Whether the rendered turn's calls are valid calls of the tools."""
    schemas = {t["function"]["name"]: standard_schema(t["function"]["parameters"]) for t in TOOLS}
    for call in message.get("tool_calls") or []:
        try:
            jsonschema.validate(call["function"]["arguments"], schemas[call["function"]["name"]])
        except jsonschema.ValidationError:
            return False
    return True


# Cases whose call is no valid call of the tools (the grammar writes only valid ones): a
# one-argument note leaves out the required "title".
INVALID_CALLS = {"one_argument_tricky_call"}
PARAMS = [p for p in ROUNDTRIP_PARAMS if p.values[1] not in INVALID_CALLS]


@pytest.mark.parametrize(("family_name", "case", "shape"), PARAMS)
def test_the_grammar_accepts_what_the_chat_template_renders(family_name, case, shape):
    prefix, generation, expected = rendered_case(family_name, case, shape)
    assert _valid_calls(expected)
    template, tokenizer, stops, walker = _family(family_name)
    prefix_ids = tokenizer.encode(prefix, add_special_tokens=False)
    ids = tokenizer.encode(generation, add_special_tokens=False)
    if ids and ids[-1] in stops:
        ids = ids[:-1]  # (the stop token ends the grammar: the matcher takes it where it may end)
    choices = ["auto"] + (["required"] if expected.get("tool_calls") else [])
    for choice in choices:
        tag = rtcompile.structural_tag(template, TOOLS, tool_choice=choice, prefix=prefix_ids, tokenizer=tokenizer, stop_tokens=stops)
        accepted, position = walker.accepts(walker.compile(tag), ids)
        where = f"{choice}: refused at {tokenizer.decode(ids[:position])[-60:]!r} + {tokenizer.decode(ids[position:position + 4])!r}"
        assert accepted, where

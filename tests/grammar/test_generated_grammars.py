"""Property: on generated templates, tools and requests, whatever the grammar lets a model write
parses into calls the request allows.

Templates are drawn as the differential tests draw them (tests/strategies.py, with a tool-call
field shaped like real ones: named openers, json objects and lists, xml-inline, kv-lines, python
call lists), tokenizers from the local pool with the templates' delimiters as control tokens
(tests/token_strategies.py), tool schemas with enums, nested objects, arrays, numbers, booleans,
optional keys and no parameters, and every tool_choice with and without parallel calls. Either
the backend refuses the template with GrammarError (what it cannot express), or every walk through
its grammar (xgrammar's matcher, control tokens favoured and sometimes spelled out) parses, by the
transformers 5.25.0 interpreter in token-id mode (or text mode without a tokenizer), into a message
whose calls satisfy the request.
"""

from __future__ import annotations

import random
from functools import lru_cache

from hypothesis import event, given, note
from hypothesis import strategies as st
from transformers.utils.chat_parsing import parse_response as interpreter_parse

import rtcompile
from grammar_walk import END_OF_OUTPUT, Walker, check_calls, text_of
from parity import InterpreterLoop, loop_guarded_interpreter
from strategies import TOOL_NAMES, fresh_tree, prefixes, template_plans
from token_strategies import Recipe, recipes, tokenizer_for
from tokenizer_pool import AddedSpec

KEYS = ("a", "b", "n", "flag", "x_1")
WORDS = st.text(alphabet="abc xyz-é", min_size=1, max_size=6)

scalar_schemas = st.one_of(
    st.just({"type": "string"}),
    st.just({"type": "integer"}),
    st.just({"type": "number"}),
    st.just({"type": "boolean"}),
    st.lists(WORDS, min_size=1, max_size=3, unique=True).map(lambda values: {"type": "string", "enum": values}),
)


def _object_schemas(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.dictionaries(st.sampled_from(KEYS), values, max_size=3).flatmap(
        lambda properties: st.lists(st.sampled_from(sorted(properties)), unique=True).map(
            lambda required: {"type": "object", "properties": properties, "required": required}
        )
        if properties
        else st.just({"type": "object", "properties": {}})
    )


value_schemas = st.recursive(
    scalar_schemas,
    lambda inner: st.one_of(st.builds(lambda items: {"type": "array", "items": items}, inner), _object_schemas(inner)),
    max_leaves=4,
)


@st.composite
def tool_lists(draw) -> list[dict]:
    names = draw(st.lists(st.sampled_from(TOOL_NAMES), min_size=1, max_size=3, unique=True))
    tools = []
    for name in names:
        function: dict = {"name": name}
        if draw(st.integers(0, 4)):
            function["parameters"] = draw(_object_schemas(value_schemas))
        tools.append({"type": "function", "function": function})
    return tools


def _calls_named_tool_calls(template: dict) -> dict:
    """The template with its tool-call shaped field (a transform building a "function") named
    "tool_calls", the message key the grammar writes calls under (the strategies name fields at
    random)."""
    fields = template["fields"]
    shaped = [name for name, spec in fields.items() if isinstance(spec.get("transform"), dict) and "function" in spec["transform"]]
    if not shaped or "tool_calls" in fields:
        return template
    template["fields"] = {("tool_calls" if name == shaped[0] else name): spec for name, spec in fields.items()}
    return template


@lru_cache(maxsize=32)
def _walker(recipe: Recipe) -> tuple:
    tokenizer = tokenizer_for(recipe)
    stop = tokenizer.convert_tokens_to_ids(END_OF_OUTPUT)
    return tokenizer, stop, Walker(tokenizer, [stop])


@given(data=st.data())
def test_every_walk_parses_into_calls_the_request_allows(data):
    plan = data.draw(template_plans(tool_call=True, valid_only=True))
    template = _calls_named_tool_calls(fresh_tree(plan.template))
    # (defaults that pre-fill the message's calls are the template's, not the model's: left out)
    template.get("defaults", {}).pop("tool_calls", None)
    drawn = data.draw(recipes(plan))
    recipe = Recipe(drawn.base, (*drawn.added, AddedSpec(END_OF_OUTPUT, "special")), drawn.named_templates, drawn.listed_mode)
    tokenizer, stop, walker = _walker(recipe)
    tools = data.draw(tool_lists())
    names = [t["function"]["name"] for t in tools]
    choice = data.draw(st.sampled_from(["auto", "required", "none", {"type": "function", "function": {"name": names[0]}}]))
    parallel = data.draw(st.booleans())
    by_ids = data.draw(st.booleans())
    prefix = data.draw(prefixes(plan))
    # (a lone surrogate is no text a tokenizer encodes)
    prefix = "".join(ch for ch in (prefix or "") if not "\ud800" <= ch <= "\udfff")
    options = {"tokenizer": tokenizer} if by_ids else {}
    grammar_prefix = tokenizer.encode(prefix, add_special_tokens=False) if by_ids else prefix
    note(f"template={template!r}\ntools={tools!r}\nprefix={prefix!r} added={recipe.added!r}")
    note(f"choice={choice!r} parallel={parallel} by_ids={by_ids}")
    try:
        tag = rtcompile.structural_tag(
            template, tools, tool_choice=choice, parallel_tool_calls=parallel, prefix=grammar_prefix,
            stop_tokens=[stop] if by_ids else [END_OF_OUTPUT], **options,
        )
    except rtcompile.GrammarError as error:
        event(f"refused: {error.reason[:60]}")
        return
    grammar = walker.compile(tag)
    rng = random.Random(data.draw(st.integers(0, 2**16)))
    for _ in range(3):
        ids, ended = walker.walk(grammar, rng, max_tokens=200)
        if not ended:
            event("a walk did not end")
            continue
        note(f"walked: {text_of(tokenizer, ids)!r}")
        with loop_guarded_interpreter():
            try:
                if by_ids:
                    message = interpreter_parse(ids, template, prefix=grammar_prefix, tools=tools, tokenizer=tokenizer)
                else:
                    message = interpreter_parse(text_of(tokenizer, ids), template, prefix=prefix, tools=tools)
            except InterpreterLoop:
                raise AssertionError("the grammar accepted an output the interpreter loops on") from None
        assert not check_calls(message, tools, choice, parallel), message
        event("walk checked")


def test_a_walk_is_read_as_a_server_decodes_it_after_the_prompt():
    """A sentencepiece decoder drops the space the first token of a text starts with; after a
    prompt that space is the output's own. A call opener that starts with a space, walked as the
    first token, is the opener the interpreter reads (decoding the walk alone would lose it and,
    with it, the forced call)."""
    template = {
        "fields": {"tool_calls": {"open": " >", "close": "<a>", "content": "json", "repeats": True,
                                  "transform": {"type": "function", "function": "{content}"}}},
        "start_anchor": "<|a|>",
    }
    recipe = Recipe("sentencepiece", (AddedSpec(" >", "special"), AddedSpec(END_OF_OUTPUT, "special")), False, False)
    tokenizer, _, walker = _walker(recipe)
    tools = [{"type": "function", "function": {"name": "a"}}]
    opener = tokenizer.convert_tokens_to_ids(" >")
    assert tokenizer.decode([opener], skip_special_tokens=False) == ">"  # (what decoding alone gives)
    grammar = walker.compile(rtcompile.structural_tag(template, tools, tool_choice="required", prefix="<|a|>", stop_tokens=[END_OF_OUTPUT]))
    rng = random.Random(0)
    checked = 0
    for _ in range(20):
        ids, ended = walker.walk(grammar, rng, max_tokens=200)
        if ended and ids[0] == opener:
            message = interpreter_parse(text_of(tokenizer, ids), template, prefix="<|a|>", tools=tools)
            assert not check_calls(message, tools, "required", True), message
            checked += 1
    assert checked

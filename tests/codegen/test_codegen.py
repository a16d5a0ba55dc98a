"""The generator: literal emission, identifier safety, determinism, and the checked-in goldens."""

import ast
import difflib
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rtcompile
from rtcompile import codegen
from rtcompile import regenerate as bundled

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_py_literal_evaluates_back_to_the_value(value):
    rebuilt = eval(codegen.py_literal(value), {"__builtins__": {"float": float}})
    # NaN != NaN, so compare through JSON, which spells it NaN on both sides.
    assert json.dumps(rebuilt, sort_keys=False) == json.dumps(value, sort_keys=False)


def test_py_literal_spells_non_finite_floats_as_calls():
    assert codegen.py_literal(math.inf) == 'float("inf")'
    assert codegen.py_literal([math.nan]) == '[float("nan")]'


@pytest.mark.parametrize("value", [object(), b"bytes", {1j}, type])
def test_py_literal_refuses_other_types(value):
    with pytest.raises(TypeError):
        codegen.py_literal(value)


@pytest.mark.parametrize("name", ["a b", "__class__", "1x", "x;y", "é", "", None])
def test_ident_refuses_anything_but_plain_names(name):
    with pytest.raises(ValueError):
        codegen.ident(name)


def test_templates_cannot_print_a_value_without_an_escaping_filter():
    env = codegen._ENV
    with pytest.raises(TypeError, match="without the py or ident filter"):
        env.from_string("{{ value }}").render(value="__import__('os')")
    assert env.from_string("{{ value|py }}").render(value="it's\n") == repr("it's\n")
    with pytest.raises(Exception):
        env.from_string("{{ missing|py }}").render()  # StrictUndefined


def test_slug_is_ascii_and_bounded():
    assert codegen.slug("Tool Calls!") == "tool_calls"
    assert codegen.slug("ünïcode") == "n_code"
    assert len(codegen.slug("x" * 100)) <= 24


def test_field_names_appear_only_as_escaped_literals():
    template = {
        "start_anchor": "@",
        "fields": {
            "a\nb'\"\"\"\u2028": {"open": "<a>\n# not a comment", "close": "</a>"},
            "content": {"close": "<end>"},
        },
    }
    source = rtcompile.compile_template(template)
    constants = {node.value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Constant)}
    assert "a\nb'\"\"\"\u2028" in constants  # the name is a string literal in the code
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            assert "not a comment" not in stripped
    assert rtcompile.parse_response("<a>\n# not a commentX</a>", template, prefix="") == {"a\nb'\"\"\"\u2028": "X"}


def test_generation_is_deterministic():
    template = rtcompile.template_for("gpt_oss")
    assert rtcompile.compile_template(template) == rtcompile.compile_template(json.loads(json.dumps(template)))


def test_generated_module_exposes_its_template_hash_and_version():
    module = rtcompile.load(rtcompile.template_for("qwen3"))
    assert module.TEMPLATE == rtcompile.template_for("qwen3")
    assert module.__rtcompile_version__ == rtcompile.__version__
    assert len(module.TEMPLATE_SHA256) == 64


def test_one_scan_method_per_state():
    source = rtcompile.compile_template(rtcompile.template_for("qwen3"))
    assert source.count("def _scan_sink(") == 1
    assert source.count("def _scan_in_") == 2  # reasoning_content and tool_calls; content is implicit


def test_checked_in_parsers_match_the_compiler():
    """generated/ is the golden output: a change to the generator shows up as a diff there."""
    expected = bundled.expected_sources()
    directory = bundled.generated_dir()
    problems = []
    for name, source in expected.items():
        path = directory / f"{name}.py"
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != source:
            diff = difflib.unified_diff(current.splitlines(True), source.splitlines(True), f"generated/{name}.py", "compiler output")
            problems.append("".join(list(diff)[:60]))
    assert not problems, "stale generated parsers; run: python -m rtcompile regenerate\n" + "\n".join(problems)
    assert sorted(p.stem for p in directory.glob("*.py") if p.stem != "__init__") == sorted(expected)

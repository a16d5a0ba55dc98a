"""Tool-argument casting (`rtcompile.runtime.coerce`) against transformers' interpreter.

The interpreter's helpers are private (`_schema_types`, `_coerce`, `ResponseParser._coerce_tool_calls`
and the tools loop in `ResponseParser.__init__`); the differential tests call them directly and require
the same result (compared by `repr`, so 1, 1.0 and True differ, and NaN equals itself), the same
in-place mutation and object identity, or the same exception class and arguments.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtcompile.runtime.coerce import ALL, TYPED, cast_mode, coerce_tool_calls, coerce_value, schema_types, tool_parameters
from rtcompile.runtime.tool_schema import DocstringParsingException

from examples import scaled

transformers_parser = pytest.importorskip("transformers.utils.chat_parsing.response_parser")

# The smallest template the interpreter accepts; only its tools handling is exercised here.
MINIMAL_TEMPLATE = {"start_anchor": "<start>", "fields": {"content": {"content": "text"}}}

JSON_TYPE_NAMES = ["integer", "number", "boolean", "null", "object", "array", "string"]
# Names a hand-written schema could plausibly contain that the interpreter does not know.
ODD_TYPE_NAMES = ["Integer", "int", "float", "", "any", "image"]


def outcome(function, *args):
    """What a call did: its result's repr, or the class name and arguments of what it raised."""
    try:
        return ("returned", repr(function(*args)))
    except Exception as error:  # noqa: BLE001 - the class is part of what is compared
        return ("raised", type(error).__name__, repr(error.args))


def interpreter_with_tools(tools):
    return transformers_parser.ResponseParser(MINIMAL_TEMPLATE, prefix="", tools=tools)


# ---------------------------------------------------------------------------------------------------
# Strategies


type_names = st.sampled_from(JSON_TYPE_NAMES + ODD_TYPE_NAMES)
non_string_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.floats(allow_nan=False),
    st.just({}),
    st.just(()),
)

schemas = st.recursive(
    st.one_of(
        st.fixed_dictionaries({}, optional={"type": type_names, "nullable": st.booleans()}),
        st.fixed_dictionaries(
            {"type": st.lists(st.one_of(type_names, non_string_junk), max_size=4)},
            optional={
                "nullable": st.one_of(st.booleans(), st.sampled_from([0, 1, "yes", "", None]))
            },
        ),
        st.fixed_dictionaries({"type": non_string_junk}),
        # Not schemas at all
        st.one_of(st.none(), type_names, st.integers(), st.lists(type_names, max_size=2)),
    ),
    lambda children: st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "type": st.one_of(type_names, st.lists(type_names, max_size=3)),
                "anyOf": st.lists(children, max_size=3),
                "oneOf": st.lists(children, max_size=3),
                "nullable": st.booleans(),
                "description": st.text(max_size=5),
            },
        ),
        # Union keywords holding something other than a list: iterated as-is (or failing) by both
        st.builds(
            lambda keyword, choices, declared: {keyword: choices, **declared},
            st.sampled_from(["anyOf", "oneOf"]),
            st.one_of(
                st.none(),
                st.just(0),
                st.just(5),
                st.text(max_size=4),
                st.dictionaries(type_names, children, max_size=2),
                st.tuples(children, children),
            ),
            st.one_of(st.just({}), type_names.map(lambda name: {"type": name})),
        ),
    ),
    max_leaves=8,
)

INTERESTING_RAW_TEXTS = [
    "7",
    "-7",
    "+7",
    " 7 ",
    "7\n",
    "007",
    "7_000",
    "1_0.5",
    "٣",
    "0x10",
    "1/2",
    "7.",
    ".5",
    "3.0",
    "3.5",
    "-0.0",
    "0.0",
    "1e3",
    "1E3",
    "1e-3",
    "2.5e1",
    "1e400",
    "-1e400",
    "1e308",
    "9007199254740993",
    "9007199254740993.0",
    "12345678901234567890.0",
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-inf",
    "Infinity",
    "-Infinity",
    "infinity",
    "true",
    "True",
    " TRUE ",
    "false",
    "False\t",
    "0",
    "1",
    " 1 ",
    "01",
    "yes",
    "no",
    "t",
    "None",
    "null",
    " null ",
    "none",
    "NULL",
    "Null",
    "None\n",
    "{}",
    '{"a": 1}',
    ' {"a": [1, 2]} ',
    "[]",
    "[1, 2]",
    "[NaN]",
    "[Infinity]",
    '"s"',
    "'s'",
    "[1,",
    '{"a":',
    "\ufeff[]",
    "{'a': 1}",
    "[1] x",
    "",
    " ",
    "\n",
    "string with words",
]

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=5),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=6,
)

whitespace = st.sampled_from(["", "", " ", "\t", "\n", "  \n"])

raw_texts = st.one_of(
    st.sampled_from(INTERESTING_RAW_TEXTS),
    st.integers().map(str),
    st.floats().map(repr),
    st.floats().map(lambda number: format(number, "e")),
    json_values.map(json.dumps),
    st.text(max_size=12),
    st.text(alphabet="0123456789.eE+-_ nainfINF", max_size=8),
).flatmap(lambda text: st.tuples(whitespace, st.just(text), whitespace).map("".join))

type_tuples = st.lists(type_names, max_size=4).map(tuple)

tool_names = st.sampled_from(["search", "add", "weather", "noop"])
argument_keys = st.sampled_from(["x", "y", "query", "items", "flag", "extra"])

argument_values = st.one_of(
    raw_texts,
    st.lists(st.one_of(raw_texts, st.integers(), st.none()), max_size=3),  # merge_duplicates lists
    st.integers(),
    st.none(),
    st.booleans(),
    st.dictionaries(st.text(max_size=2), raw_texts, max_size=2),
)

tool_call_values = st.recursive(
    st.one_of(
        # Well-formed calls
        st.fixed_dictionaries(
            {
                "type": st.just("function"),
                "function": st.fixed_dictionaries(
                    {
                        "name": tool_names,
                        "arguments": st.dictionaries(argument_keys, argument_values, max_size=5),
                    }
                ),
            }
        ),
        # Calls whose parts have the wrong shape
        st.fixed_dictionaries(
            {
                "function": st.fixed_dictionaries(
                    {},
                    optional={
                        "name": st.one_of(tool_names, st.integers(), st.none()),
                        "arguments": st.one_of(
                            st.dictionaries(argument_keys, argument_values, max_size=3),
                            raw_texts,
                            st.lists(raw_texts, max_size=2),
                            st.none(),
                        ),
                    },
                )
            }
        ),
        st.fixed_dictionaries({"function": st.one_of(st.none(), raw_texts, st.lists(raw_texts))}),
        st.dictionaries(argument_keys, argument_values, max_size=2),
        # Values of non-tool fields, which the parser also passes through
        raw_texts,
        st.integers(),
        st.none(),
    ),
    lambda children: st.lists(children, max_size=3),
    max_leaves=6,
)

property_maps = st.dictionaries(argument_keys, schemas, max_size=5)
tool_params_maps = st.dictionaries(tool_names, property_maps, max_size=4)


def documented_add(x: int, y: float | None = None) -> int:
    """Add two numbers.

    Args:
        x: The first number.
        y: The second number, if any.
    """
    return x


def undocumented(x: int):
    return x


class Calculator:
    def scale(self, factor: float, mode: str = "fast") -> float:
        """Scale the current value.

        Args:
            factor: How much to scale by.
            mode: Which algorithm (choices: ["fast", "exact"])
        """
        return factor


tool_entries = st.one_of(
    # Bare function schemas and wrapped ones
    st.fixed_dictionaries(
        {"name": st.one_of(tool_names, st.integers())},
        optional={
            "parameters": st.one_of(
                st.fixed_dictionaries({"type": st.just("object"), "properties": property_maps}),
                st.fixed_dictionaries({"properties": st.one_of(st.none(), st.lists(type_names))}),
                st.none(),
                st.text(max_size=3),
            ),
            "description": st.text(max_size=5),
        },
    ).flatmap(
        lambda function: st.sampled_from(
            [function, {"type": "function", "function": function}, {"function": function}]
        )
    ),
    st.fixed_dictionaries({"function": st.one_of(st.none(), st.text(max_size=3), st.integers())}),
    st.just({}),
    # Neither a function nor a dict
    st.sampled_from(["search", 3, None, ("search",), len, Calculator]),
    st.sampled_from([documented_add, Calculator().scale, Calculator.scale, undocumented]),
)

tools_arguments = st.one_of(
    st.none(),
    st.just([]),
    st.lists(tool_entries, max_size=5),
    st.lists(tool_entries, max_size=3).map(tuple),
)


# ---------------------------------------------------------------------------------------------------
# Differential properties


@settings(max_examples=scaled(400), deadline=None)
@given(schemas)
def test_schema_types_matches_interpreter(schema):
    assert outcome(schema_types, schema) == outcome(transformers_parser._schema_types, schema)


@settings(max_examples=scaled(600), deadline=None)
@given(raw_texts, type_tuples)
def test_coerce_value_matches_interpreter(raw, types):
    ours = outcome(coerce_value, raw, types)
    assert ours == outcome(transformers_parser._coerce, raw, types)


@settings(max_examples=scaled(300), deadline=None)
@given(raw_texts, schemas)
def test_coerce_value_with_schema_types_matches_interpreter(raw, schema):
    """The pair as the parser uses it: the types come from a schema."""
    try:
        types = transformers_parser._schema_types(schema)
    except Exception:  # noqa: BLE001 - malformed schemas are covered by the schema_types property
        return
    assert outcome(coerce_value, raw, schema_types(schema)) == outcome(
        transformers_parser._coerce, raw, types
    )


def _input_property_dicts(tools) -> list[dict]:
    """The `properties` dicts present in a tools argument, which both sides must keep by reference."""
    found = []
    for tool in tools or []:
        if isinstance(tool, dict):
            function = tool.get("function", tool)
            if isinstance(function, dict) and isinstance(function.get("parameters"), dict):
                found.append(function["parameters"].get("properties"))
    return found


@settings(max_examples=scaled(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tools_arguments)
def test_tool_parameters_matches_interpreter(tools):
    ours = outcome(tool_parameters, tools)
    try:
        theirs = interpreter_with_tools(tools)._tool_params
    except Exception as error:  # noqa: BLE001
        assert ours == ("raised", type(error).__name__, repr(error.args))
        return
    assert ours == ("returned", repr(theirs))
    # Caller-owned properties dicts are shared, not copied: later edits to a schema are seen by both.
    ours_params = tool_parameters(tools)
    input_properties = _input_property_dicts(tools)
    for name, properties in theirs.items():
        from_input = any(properties is candidate for candidate in input_properties)
        assert (ours_params[name] is properties) == from_input


def identity_shape(result, original):
    """Which parts of `result` are the very objects of `original` (lists are rebuilt, dicts kept)."""
    if isinstance(result, list) and isinstance(original, list):
        return (
            "list",
            result is original,
            [identity_shape(r, o) for r, o in zip(result, original)],
        )
    return result is original


def run_coercion(function, value):
    """Call a coercion on `value`; report the result, how `value` was mutated and what is shared."""
    try:
        result = function(value)
    except Exception as error:  # noqa: BLE001
        return ("raised", type(error).__name__, repr(error.args), repr(value))
    return ("returned", repr(result), repr(value), identity_shape(result, value))


@settings(max_examples=scaled(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool_params_maps, tool_call_values, st.booleans())
def test_coerce_tool_calls_matches_interpreter(params, value, typed):
    """Both cast modes: `typed` (json and python-call-list content) leaves an argument whose schema
    allows a string as the model wrote it."""
    tools = [
        {"name": name, "parameters": {"properties": properties}}
        for name, properties in params.items()
    ]
    interpreter = interpreter_with_tools(tools)
    ours_params = tool_parameters(tools)

    ours = run_coercion(lambda v: coerce_tool_calls(v, ours_params, typed), copy.deepcopy(value))
    theirs = run_coercion(lambda v: interpreter._coerce_tool_calls(v, typed=typed), copy.deepcopy(value))
    assert ours == theirs


@pytest.mark.parametrize(
    ("content", "content_args", "mode"),
    [
        ("json", {}, TYPED),
        ("python-call-list", None, TYPED),
        ("xml-inline", {"tag_pattern": "x"}, ALL),
        ("kv-lines", {}, ALL),
        ("xml-inline", {"tag_pattern": "x", "value_parser_by": None}, None),  # the key alone
        ("json", {"value_parser_by": {"group": "t", "parsers": {}}}, None),
    ],
)
def test_cast_mode_follows_the_content_parser(content, content_args, mode):
    assert cast_mode(content, content_args) == mode


def test_typed_formats_keep_string_unions_as_written():
    """Under ["integer", "string"], "5" stays "5" in json and python-call-list content; a list stays a
    list; an integer-only parameter is still cast."""
    tools = [{"name": "f", "parameters": {"properties": {"a": {"type": ["integer", "string"]}, "b": {"type": "integer"}}}}]
    params = tool_parameters(tools)
    call = {"function": {"name": "f", "arguments": {"a": "5", "b": "6"}}}
    assert coerce_tool_calls(copy.deepcopy(call), params, typed=True)["function"]["arguments"] == {"a": "5", "b": 6}
    assert coerce_tool_calls(copy.deepcopy(call), params)["function"]["arguments"] == {"a": 5, "b": 6}


# ---------------------------------------------------------------------------------------------------
# Documented behaviour, by hand


@pytest.mark.parametrize(
    ("raw", "types", "expected"),
    [
        ("7", ("integer",), 7),
        ("7", ("string",), "7"),
        # "string" never casts, so it does not stop a later type from casting, whatever the order
        ("7", ("string", "integer"), 7),
        ("7", ("integer", "string"), 7),
        ("1", ("boolean", "integer"), True),  # the first type that casts wins
        ("1", ("integer", "boolean"), 1),
        ("3.0", ("integer",), 3),
        ("1e3", ("integer",), 1000),
        ("3.5", ("integer",), "3.5"),
        ("3.5", ("integer", "number"), 3.5),
        ("7", ("number",), 7),
        ("7.0", ("number",), 7.0),
        ("1e3", ("number",), 1000),  # whole and written without "." stays an int
        ("nan", ("number",), "nan"),
        ("inf", ("integer", "number"), "inf"),
        (" true ", ("boolean",), True),
        ("FALSE", ("boolean",), False),
        ("1", ("boolean",), True),
        ("0", ("boolean",), False),
        ("yes", ("boolean",), "yes"),
        ("None", ("null",), None),
        (" null ", ("null",), None),
        ("none", ("null",), "none"),
        ('{"a": 1}', ("object",), {"a": 1}),
        ('{"a": 1}', ("array",), '{"a": 1}'),
        ("[1, 2]", ("array",), [1, 2]),
        ("[1, 2", ("array",), "[1, 2"),
        ("7", ("image",), "7"),
        ("7", (), "7"),
    ],
)
def test_coerce_value_documented_cases(raw, types, expected):
    result = coerce_value(raw, types)
    assert type(result) is type(expected)
    assert result == expected


def test_nullable_optional_gets_null_after_its_own_types():
    assert schema_types({"type": "integer", "nullable": True}) == ("integer", "null")
    assert schema_types({"type": ["null", "integer"], "nullable": True}) == ("null", "integer")
    assert schema_types({"anyOf": [{"type": "integer"}, {"oneOf": [{"type": "boolean"}]}]}) == (
        "integer",
        "boolean",
    )


def test_cyclic_schema_fails_like_the_interpreter():
    schema = {"type": "integer"}
    schema["anyOf"] = [schema]
    assert outcome(schema_types, schema)[:2] == ("raised", "RecursionError")
    assert outcome(transformers_parser._schema_types, schema)[:2] == ("raised", "RecursionError")


def test_tool_calls_cast_in_place_and_lists_rebuilt():
    params = tool_parameters(
        [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "x": {"type": "integer"},
                            "tags": {"type": "array"},
                            "scores": {"type": "number"},
                            "note": {"type": "string"},
                        },
                    },
                },
            }
        ]
    )
    call = {
        "type": "function",
        "function": {
            "name": "add",
            "arguments": {
                "x": "3",
                "tags": '["a"]',
                "scores": ["1.5", "2", 4],  # duplicates gathered by merge_duplicates
                "note": "3",
                "unknown": "3",
            },
        },
    }
    calls = [call, "not a call"]
    result = coerce_tool_calls(calls, params)
    assert result is not calls and result[0] is call and result[1] == "not a call"
    assert call["function"]["arguments"] == {
        "x": 3,
        "tags": ["a"],
        "scores": [1.5, 2, 4],
        "note": "3",
        "unknown": "3",
    }


def test_list_argument_of_an_array_parameter_is_left_alone():
    params = {"f": {"values": {"type": ["array", "integer"]}}}
    call = {"function": {"name": "f", "arguments": {"values": ["1", "2"]}}}
    coerce_tool_calls(call, params)
    assert call["function"]["arguments"]["values"] == ["1", "2"]


def test_function_tools_are_converted_and_methods_lose_self():
    params = tool_parameters([documented_add, Calculator().scale])
    assert params["documented_add"]["y"] == {
        "type": "number",
        "nullable": True,
        "description": "The second number, if any.",
    }
    assert set(params["scale"]) == {"factor", "mode"}
    call = {"function": {"name": "documented_add", "arguments": {"x": "2.0", "y": "None"}}}
    coerce_tool_calls(call, params)
    assert call["function"]["arguments"] == {"x": 2, "y": None}


def test_undocumented_function_tool_raises_docstring_error():
    with pytest.raises(DocstringParsingException, match="has no docstring"):
        tool_parameters([undocumented])


def test_schema_edited_after_setup_is_used():
    properties = {"x": {"type": "string"}}
    params = tool_parameters([{"name": "f", "parameters": {"properties": properties}}])
    properties["x"]["type"] = "integer"
    call = {"function": {"name": "f", "arguments": {"x": "5"}}}
    coerce_tool_calls(call, params)
    assert call["function"]["arguments"]["x"] == 5


def test_unusable_tools_give_no_parameters():
    assert tool_parameters(None) == {}
    assert tool_parameters([3, "f", {"name": 1}, {"function": None}, Calculator]) == {}
    assert tool_parameters([{"name": "f"}, {"name": "g", "parameters": {"properties": []}}]) == {
        "f": {},
        "g": {},
    }


def test_no_types_no_cast_even_for_numbers_in_text():
    params = {"f": {"x": {"description": "untyped"}, "y": {"type": 7}}}
    call = {"function": {"name": "f", "arguments": {"x": "1", "y": "2"}}}
    coerce_tool_calls(call, params)
    assert call["function"]["arguments"] == {"x": "1", "y": "2"}
    assert math.isnan(coerce_value("[NaN]", ("array",))[0])

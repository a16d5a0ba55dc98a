"""`function_schema` against transformers' `get_json_schema`.

Hypothesis builds whole Python functions (type hints, defaults, parameter kinds, Google docstrings with
and without the sections and descriptions the schema needs) and requires the same schema, key order
included, or the same exception class and arguments. Hand-written tests pin the documented behaviours.
"""

from __future__ import annotations

import collections.abc
import enum
import functools
import importlib.metadata
import operator
import sys
import types
import typing
from typing import Annotated, Any, Literal, Optional, Union

from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rtcompile.runtime import tool_schema
from rtcompile.runtime.tool_schema import (
    DocstringParsingException,
    TypeHintParsingException,
    function_schema,
    parse_google_docstring,
)

from examples import scaled

chat_template_utils = pytest.importorskip("transformers.utils.chat_template_utils")
get_json_schema = chat_template_utils.get_json_schema


def outcome(function, *args):
    """What a call did: its result's repr (key order included), or the exception class name and args."""
    try:
        return ("returned", repr(function(*args)))
    except Exception as error:  # noqa: BLE001 - the class is part of what is compared
        return ("raised", type(error).__name__, repr(error.args))


def assert_same_as_transformers(func):
    ours = outcome(function_schema, func)
    assert ours == outcome(get_json_schema, func)
    return ours


# ---------------------------------------------------------------------------------------------------
# Hint strategy


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mixed(enum.Enum):
    A = 1
    B = "b"
    C = None
    D = 2.5
    E = True


class Nothing(enum.Enum):
    pass


class NotScalar(enum.Enum):
    PAIR = (1, 2)


class Named(str, enum.Enum):
    ALPHA = "alpha"


class Custom:
    pass


# Hints with a JSON schema, and hints that make get_json_schema (or get_type_hints) raise
CONVERTIBLE_LEAF_HINTS = [
    int, float, str, bool, type(None), list, tuple, dict, Any, typing.List, typing.Dict, typing.Tuple,
    Colour, Level, Mixed, Named, Literal["a", "b"], Literal[1, True, None, 2.5], Literal["solo"],
    "int", "list[str]",
]  # fmt: skip
FAILING_LEAF_HINTS = [
    bytes, set, Custom, complex, Nothing, NotScalar, Literal[b"raw"], Literal[Colour.RED],
    "NotDefinedAnywhere",
]  # fmt: skip
leaf_hints = st.one_of(
    st.sampled_from(CONVERTIBLE_LEAF_HINTS),
    st.sampled_from(CONVERTIBLE_LEAF_HINTS),
    st.sampled_from(CONVERTIBLE_LEAF_HINTS),
    st.sampled_from(FAILING_LEAF_HINTS),
)


def union_of(members):
    try:
        return Union[tuple(members)]
    except TypeError:
        return members[0]


def pipe_union_of(members):
    # `a | b` exists only for classes and typing objects; other hints fall back to typing.Union
    try:
        return functools.reduce(operator.or_, members)
    except TypeError:
        return union_of(members)


def compound_hints(children, *, convertible):
    """Hints built from `children`; with `convertible`, only shapes that have a JSON schema."""
    failing = st.one_of(
        children.map(lambda hint: tuple[hint]),
        children.map(lambda hint: tuple[hint, ...]),
        children.map(lambda hint: set[hint]),
        children.map(lambda hint: collections.abc.Sequence[hint]),
    )
    return st.one_of(
        children.map(lambda hint: Optional[hint]),
        st.lists(children, min_size=2, max_size=4).map(union_of),
        st.lists(children, min_size=2, max_size=3).map(pipe_union_of),
        children.map(lambda hint: list[hint]),
        children.map(lambda hint: typing.List[hint]),
        st.lists(children, min_size=2, max_size=3).map(lambda hints: tuple[tuple(hints)]),
        children.map(lambda hint: dict[str, hint]),
        children.map(lambda hint: dict[hint]),
        children.map(lambda hint: typing.Dict[str, hint]),
        children.map(lambda hint: Annotated[hint, "metadata"]),
        st.just(tuple[()]),
        *([] if convertible else [failing]),
    )


type_hints = st.recursive(
    leaf_hints, lambda children: compound_hints(children, convertible=False), max_leaves=4
)
convertible_type_hints = st.recursive(
    st.sampled_from(CONVERTIBLE_LEAF_HINTS),
    lambda children: compound_hints(children, convertible=True),
    max_leaves=4,
)


# ---------------------------------------------------------------------------------------------------
# Function strategy

PARAMETER_NAMES = ["self", "cls", "x", "y", "query", "count", "flag", "options", "mode", "args"]

description_words = st.lists(
    st.sampled_from(
        ["The", "value", "to", "use", "x:", "Args:", "e.g.", "(see", "below)", "—", "42"]
    ),
    min_size=0,
    max_size=5,
).map(" ".join)

# Choices that decode to something iterable (a string or dict is iterated too), then broken ones
VALID_CHOICES = [
    "",
    "",
    "",
    ' (choices: ["tea", "coffee"])',
    " (choices: [1, 2.5, null, true])",
    ' (Choices: [" padded ", "x"])',
    ' (choices: ["a"])   ',
    " (choices: [])",
    ' (choices: "abc")',
    ' (choices: {"a": 1})',
    ' (choices: ["a"]) trailing text',
]
BROKEN_CHOICES = [
    " (choices: ['single', 'quotes'])",
    " (choices: 5)",
    ' (choices: ["a"]) x (choices: [1])',
]


@st.composite
def argument_entries(draw, name, *, complete):
    """The lines documenting one argument; unless `complete`, possibly unparseable or with bad choices."""
    choices = st.sampled_from(VALID_CHOICES if complete else VALID_CHOICES + BROKEN_CHOICES)
    indent = draw(st.sampled_from(["    ", "        ", "\t", "  "]))
    separator = draw(st.sampled_from([": ", ":", ":  "] + ([] if complete else [" (int): "])))
    # Lines are joined, so in a complete entry only the last line may end with a choices list
    continuations = draw(st.integers(0, 2))
    first_line = draw(description_words) + ("" if complete and continuations else draw(choices))
    lines = [f"{indent}{name}{separator}{first_line}"]
    for number in range(continuations):
        # A continuation at the entry's own indentation may start another entry ("x: ..." text)
        deeper = draw(st.sampled_from(["    ", "  "] + ([] if complete else [""])))
        last = number == continuations - 1
        suffix = draw(choices) if last or not complete else ""
        lines.append(indent + deeper + draw(description_words) + suffix)
    if draw(st.booleans()):
        lines.append("")  # blank line inside the section
    return lines


@st.composite
def docstrings(draw, parameter_names, *, complete=False):
    """A Google docstring; if `complete`, one that documents every parameter in a parseable way."""
    if not complete and draw(st.integers(0, 10)) == 0:
        return draw(st.sampled_from([None, "", "   \n  "]))
    # Without a summary the docstring would start with "Args:", which is then not read as a section
    summary = draw(description_words)
    lines = [summary or "Summary." if complete else summary]
    if draw(st.booleans()):
        lines += ["", draw(description_words)]
    if complete or draw(st.integers(0, 5)) > 0:
        lines += [
            "",
            "Args:" if complete else draw(st.sampled_from(["Args:", "Args: ", "Arguments:"])),
        ]
        documented = draw(st.lists(st.sampled_from(parameter_names + ["extra"]), unique=True))
        if complete or draw(st.booleans()):
            documented = list(dict.fromkeys(parameter_names + documented))
        for name in documented:
            lines += draw(argument_entries(name, complete=complete))
    if draw(st.booleans()):
        lines += ["", "Returns:", "    " + draw(description_words)]
        if draw(st.booleans()):
            lines.append("        " + draw(description_words))
    if draw(st.booleans()):
        lines += ["", "Raises:", "    ValueError: " + draw(description_words)]
    indent = draw(st.sampled_from(["", "    "]))
    text = "\n".join(indent + line if line else line for line in lines)
    return draw(st.sampled_from(["", "\n"])) + text + draw(st.sampled_from(["", "\n", "\n    "]))


@st.composite
def generated_functions(draw):
    """A function with generated parameters, hints, defaults and docstring, possibly made a method.

    Half of them are "sound" (convertible hints everywhere, complete docstrings) so that successful
    conversions are common; the others mix in every way of failing.
    """
    sound = draw(st.booleans())
    hints = convertible_type_hints if sound else type_hints
    names = draw(st.lists(st.sampled_from(PARAMETER_NAMES), unique=True, max_size=5))
    namespace: dict[str, Any] = {}
    positional, keyword_only, star_args = [], [], []
    for index, name in enumerate(names):
        annotation = ""
        # `self`/`cls` are often left unannotated, as the implicit receiver of a method
        if name in ("self", "cls"):
            annotate = draw(st.booleans())
        else:
            annotate = sound or draw(st.integers(0, 8)) > 0
        if annotate:
            namespace[f"Hint{index}"] = draw(hints)
            annotation = f": Hint{index}"
        if name == "args" and draw(st.booleans()):
            star_args = [f"*args{annotation}"]
            continue
        is_keyword_only = draw(st.integers(0, 3)) == 0
        # A positional parameter after one with a default needs a default too
        needs_default = not is_keyword_only and any("=" in parameter for parameter in positional)
        default = ""
        if needs_default or draw(st.booleans()):
            namespace[f"default{index}"] = draw(st.sampled_from([None, 0, "text", [], 1.5]))
            default = f" = default{index}"
        (keyword_only if is_keyword_only else positional).append(f"{name}{annotation}{default}")
    separator = star_args or (["*"] if keyword_only else [])
    parameters = positional + separator + keyword_only
    documented_names = list(names)
    if draw(st.booleans()):
        parameters.append("**kwargs: int")
        documented_names.append("kwargs")
    returns = ""
    if draw(st.booleans()):
        # A return hint that fails to convert is left out; one that breaks the lookup is not
        namespace["ReturnHint"] = draw(st.one_of(type_hints, st.just([int])))
        returns = " -> ReturnHint"
    source = f"def generated_tool({', '.join(parameters)}){returns}:\n    pass\n"
    exec(compile(source, "<generated tool>", "exec"), namespace)  # noqa: S102 - test input
    function = namespace["generated_tool"]
    function.__doc__ = draw(docstrings(documented_names, complete=sound))

    wrapping = draw(
        st.sampled_from(["function", "function", "bound", "class_attribute", "classmethod"])
    )
    if wrapping == "function" or (
        wrapping != "class_attribute" and not positional and not star_args
    ):
        return function  # (binding needs a positional parameter to bind to)
    holder = type("Holder", (), {"generated_tool": function})
    if wrapping == "bound":
        return holder().generated_tool
    if wrapping == "classmethod":
        holder.generated_tool = classmethod(function)
    return holder.generated_tool  # as a class attribute a plain function stays unbound


@settings(max_examples=scaled(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated_functions())
def test_function_schema_matches_get_json_schema(func):
    assert_same_as_transformers(func)


@settings(max_examples=scaled(300), deadline=None)
@given(type_hints)
def test_single_hint_schema_matches(hint):
    namespace = {"Hint": hint}
    exec(
        "def tool(value: Hint):\n    '''Tool.\n\n    Args:\n        value: A value.\n    '''\n",
        namespace,
    )
    assert_same_as_transformers(namespace["tool"])


docstring_alphabet = st.sampled_from(
    [
        "\n",
        " ",
        "\t",
        "    ",
        "Args:",
        "Returns:",
        "Raises:",
        "x",
        "y:",
        "name:",
        "desc",
        ":",
        "(",
        ")",
        "é",
    ]
)


@settings(max_examples=scaled(500), deadline=None)
@given(st.one_of(st.lists(docstring_alphabet, max_size=25).map("".join), st.text(max_size=40)))
def test_docstring_parsing_matches_on_arbitrary_text(text):
    ours = outcome(parse_google_docstring, text)
    assert ours == outcome(chat_template_utils.parse_google_format_docstring, text)


@settings(max_examples=scaled(300), deadline=None)
@given(docstrings(["x", "y", "query"]))
def test_docstring_parsing_matches_on_google_docstrings(text):
    assume(text is not None)
    ours = outcome(parse_google_docstring, text)
    assert ours == outcome(chat_template_utils.parse_google_format_docstring, text)


# ---------------------------------------------------------------------------------------------------
# Hand-written functions covering the documented behaviours


def multiply(x: float, y: float):
    """
    A function that multiplies two numbers

    Args:
        x: The first number to multiply
        y: The second number to multiply
    """
    return x * y


def drink(beverage: str, sugar: int = 0) -> bool:
    """Drink something.

    Args:
        beverage: The beverage to drink (choices: ["tea", "coffee"])
        sugar: Spoons of sugar, between 0 and 3,
            more is unwise.

    Returns:
        Whether it was good.

    Raises:
        ValueError: never.
    """
    return True


def optional_things(
    limit: Optional[int],
    tags: list[str] | None = None,
    either: Union[int, str] = 1,
    many: Union[list[int], dict[str, float], None] = None,
    pair: tuple[int, str] = (1, "a"),
    mode: Literal["fast", "slow"] = "fast",
    colour: Colour = Colour.RED,
    anything: Any = None,
    plain_list: list = (),
    plain_dict: dict = (),
):
    """Every supported hint shape.

    Args:
        limit: A limit.
        tags: Tags.
        either: Int or str.
        many: Containers.
        pair: A pair.
        mode: The mode.
        colour: A colour.
        anything: Anything at all.
        plain_list: A list.
        plain_dict: A dict.
    """


def returns_custom(x: int) -> Custom:
    """Returns something unconvertible, which is dropped.

    Args:
        x: A number.

    Returns:
        A custom object.
    """


def unhashable_return(x: int) -> [int]:
    """Only TypeHintParsingException is forgiven on the return hint, not this TypeError.

    Args:
        x: A number.
    """


def no_docstring(x: int):
    pass


def missing_argument_description(x: int, y: int):
    """Only x is documented.

    Args:
        x: A number.
    """


def missing_hint(x, y: int):
    """Missing hint.

    Args:
        x: A.
        y: B.
    """


def custom_class_argument(x: Custom):
    """Custom.

    Args:
        x: A custom object.
    """


def single_tuple(x: tuple[int]):
    """Tuple of one.

    Args:
        x: A tuple.
    """


def ellipsis_tuple(x: tuple[int, ...]):
    """Variable tuple.

    Args:
        x: A tuple.
    """


def bad_choices(x: str):
    """Bad choices.

    Args:
        x: Pick one (choices: [tea, coffee])
    """


class Toolbox:
    def method(self, x: int) -> int:
        """A method.

        Args:
            x: A number.
        """
        return x

    @classmethod
    def class_method(cls, query: str):
        """A class method.

        Args:
            query: What to look for.
        """

    @staticmethod
    def static_method(self: int):
        """An annotated `self` is an ordinary argument.

        Args:
            self: A number called self.
        """


class CallableTool:
    """A callable object.

    Args:
        x: A number.
    """

    def __call__(self, x: int) -> int:
        return x


HAND_WRITTEN = [
    multiply,
    drink,
    optional_things,
    returns_custom,
    unhashable_return,
    no_docstring,
    missing_argument_description,
    missing_hint,
    custom_class_argument,
    single_tuple,
    ellipsis_tuple,
    bad_choices,
    Toolbox().method,
    Toolbox.method,
    Toolbox.class_method,
    Toolbox.static_method,
    lambda x: x,
    # Callables that are not functions: only reachable through function_schema itself
    functools.partial(multiply, 2.0),
    Toolbox,
    len,
    CallableTool(),
]


@pytest.mark.parametrize(
    "func", HAND_WRITTEN, ids=lambda func: getattr(func, "__qualname__", "func")
)
def test_hand_written_functions_match_get_json_schema(func):
    assert_same_as_transformers(func)


def test_multiply_schema():
    assert function_schema(multiply) == {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "A function that multiplies two numbers",
            "parameters": {
                "type": "object",
                "properties": {
                    "x": {"type": "number", "description": "The first number to multiply"},
                    "y": {"type": "number", "description": "The second number to multiply"},
                },
                "required": ["x", "y"],
            },
        },
    }


def test_choices_returns_and_multiline_descriptions():
    function = function_schema(drink)["function"]
    assert function["parameters"]["properties"] == {
        "beverage": {
            "type": "string",
            "enum": ["tea", "coffee"],
            "description": "The beverage to drink",
        },
        "sugar": {
            "type": "integer",
            "description": "Spoons of sugar, between 0 and 3, more is unwise.",
        },
    }
    assert function["parameters"]["required"] == ["beverage"]
    assert function["return"] == {"type": "boolean", "description": "Whether it was good."}


def test_optional_union_literal_enum_shapes():
    properties = function_schema(optional_things)["function"]["parameters"]["properties"]
    assert properties["limit"] == {"type": "integer", "nullable": True, "description": "A limit."}
    assert properties["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "nullable": True,
        "description": "Tags.",
    }
    assert properties["either"] == {"type": ["integer", "string"], "description": "Int or str."}
    assert properties["many"]["anyOf"] == [
        {"type": "array", "items": {"type": "integer"}},
        {"type": "object", "additionalProperties": {"type": "number"}},
    ]
    assert properties["many"]["nullable"] is True
    assert properties["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]
    assert properties["mode"] == {
        "type": "string",
        "enum": ["fast", "slow"],
        "description": "The mode.",
    }
    assert properties["colour"] == {
        "type": "string",
        "enum": ["red", "green"],
        "description": "A colour.",
    }
    assert properties["anything"] == {"description": "Anything at all."}


def test_unconvertible_return_hint_is_dropped():
    assert "return" not in function_schema(returns_custom)["function"]


@pytest.mark.parametrize(
    ("func", "exception", "message"),
    [
        (no_docstring, DocstringParsingException, "no_docstring because it has no docstring!"),
        (
            missing_argument_description,
            DocstringParsingException,
            "no description for the argument 'y'",
        ),
        (
            missing_hint,
            TypeHintParsingException,
            "Argument x is missing a type hint in function missing_hint",
        ),
        (custom_class_argument, TypeHintParsingException, "likely because it is a custom class"),
        (single_tuple, TypeHintParsingException, r"tuple\[int\] is a Tuple with a single element"),
        (ellipsis_tuple, TypeHintParsingException, r"Conversion of '...' is not supported"),
    ],
)
def test_documented_errors(func, exception, message):
    with pytest.raises(exception, match=message):
        function_schema(func)


def test_exception_classes_mirror_transformers_hierarchy():
    for ours, theirs in [
        (TypeHintParsingException, chat_template_utils.TypeHintParsingException),
        (DocstringParsingException, chat_template_utils.DocstringParsingException),
    ]:
        assert ours.__name__ == theirs.__name__
        assert ours.__bases__ == theirs.__bases__


class Weather:
    def forecast(self: "Weather", city: str, days: int = 3) -> str:
        """The forecast for a city.

        Args:
            city: Where.
            days: How many days ahead.
        """
        return city

    @classmethod
    def lookup(cls: "type[Weather]", code: int):
        """Look a station up.

        Args:
            code: The station's code.
        """


def test_bound_methods_with_an_annotated_receiver_match_get_json_schema():
    """A bound method's signature omits its receiver; its annotation in the type hints is not an
    argument either (`self: Weather`, `cls: type[Weather]`)."""
    for tool in (Weather().forecast, Weather.lookup):
        ours = function_schema(tool)
        assert ours == get_json_schema(tool)
        assert set(ours["function"]["parameters"]["properties"]) <= {"city", "days", "code"}
    # unbound, `self` is an ordinary, annotated argument: both describe it (or fail) alike
    assert outcome(function_schema, Weather.forecast) == outcome(get_json_schema, Weather.forecast)


def test_methods_drop_only_an_unannotated_receiver():
    assert "self" not in function_schema(Toolbox().method)["function"]["parameters"]["properties"]
    assert "self" not in function_schema(Toolbox.method)["function"]["parameters"]["properties"]
    assert list(function_schema(Toolbox.class_method)["function"]["parameters"]["properties"]) == [
        "query"
    ]
    assert function_schema(Toolbox.static_method)["function"]["parameters"]["required"] == ["self"]


@pytest.mark.parametrize(
    "torch_version",
    ["2.6.0", "2.6", "2.5.1", "2.6.0a0", "2.6.0rc1", "2.6.0.dev20250101", "2.7.0+cu124", "2.6.0.post1",
     "2.6.0.0", "10.0", "1.13.1", "not a version"],
)  # fmt: skip
def test_torch_version_gate_matches_packaging(torch_version):
    """Tensor hints map to "audio" only with torch >= 2.6 (transformers compares with `packaging`)."""
    packaging_version = pytest.importorskip("packaging.version")
    try:
        expected = packaging_version.parse(torch_version) >= packaging_version.parse("2.6.0")
    except packaging_version.InvalidVersion:
        expected = False
    fake_torch = types.SimpleNamespace(__version__=torch_version, Tensor=type("Tensor", (), {}))
    with mock.patch(
        "importlib.metadata.version", side_effect=importlib.metadata.PackageNotFoundError
    ):
        assert tool_schema._torch_is_supported(fake_torch) is expected


def test_pil_image_and_torch_tensor_hints(monkeypatch):
    """Their classes can only appear in a hint once their library is imported, so `sys.modules` decides."""
    pil_image = types.ModuleType("PIL.Image")
    pil_image.Image = type("Image", (), {})
    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (), {})
    torch.__version__ = "2.7.0"
    monkeypatch.setitem(sys.modules, "PIL.Image", pil_image)
    monkeypatch.setitem(sys.modules, "torch", torch)

    def describe(picture, sound):
        """Describe media.

        Args:
            picture: A picture.
            sound: A sound.
        """

    # Set directly: this file's postponed annotations could not see the local fake modules
    describe.__annotations__ = {"picture": pil_image.Image, "sound": Optional[torch.Tensor]}

    with mock.patch(
        "importlib.metadata.version", side_effect=importlib.metadata.PackageNotFoundError
    ):
        properties = function_schema(describe)["function"]["parameters"]["properties"]
    assert properties == {
        "picture": {"type": "image", "description": "A picture."},
        "sound": {"type": "audio", "nullable": True, "description": "A sound."},
    }


def test_errors_are_also_transformers_classes_once_transformers_is_loaded():
    """Drop-in: an `except` written for the interpreter's exception catches rtcompile's too."""
    import transformers.utils.chat_template_utils as reference

    from rtcompile.runtime.tool_schema import DocstringParsingException, function_schema

    def undocumented(x: int):
        return x

    try:
        function_schema(undocumented)
    except reference.DocstringParsingException as error:
        assert isinstance(error, DocstringParsingException)
        assert "no docstring" in str(error)
    else:
        raise AssertionError("no exception")

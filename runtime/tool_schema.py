"""JSON schema of a Python function passed as a tool, as transformers' `get_json_schema` builds it.

Parsers accept `tools=[...]` in the same format as `apply_chat_template`: JSON schema dicts or plain
Python functions. A function is turned into its schema here, from its type hints (the argument types)
and its Google-style docstring (the summary, each argument's description, optional `(choices: [...])`
enums and an optional `Returns:` section). The output, the exception classes and their messages match
transformers 5.25.0 exactly, so a tool that works (or fails) with the interpreter does the same here.

Standard library only: this module is imported at parse time by generated parsers.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import sys
import types
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

__all__ = [
    "DocstringParsingException",
    "TypeHintParsingException",
    "function_schema",
    "parse_google_docstring",
]


class TypeHintParsingException(Exception):
    """A type hint is missing or has no JSON schema equivalent."""


class DocstringParsingException(Exception):
    """The docstring lacks what the schema needs (the docstring itself, or an argument's description)."""


# JSON type names of the Python scalars that can be written as JSON values (and so appear in an "enum").
_SCALAR_JSON_TYPES = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    type(None): "null",
}

# Schemas of the bare (unsubscripted) hints with a direct JSON counterpart. `Any` constrains nothing.
# Looked up with a dict so a hint matches by hash and equality, the way transformers looks it up.
_BARE_HINT_SCHEMAS: dict[Any, dict] = {
    **{python_type: {"type": json_type} for python_type, json_type in _SCALAR_JSON_TYPES.items()},
    list: {"type": "array"},
    tuple: {"type": "array"},
    dict: {"type": "object"},
    Any: {},
}

# Google docstring sections. The summary runs up to the first section header (or the end); the `Args:`
# and `Returns:` headers count only at the start of a line and must end their line.
_SUMMARY_RE = re.compile(r"^(.*?)\s*(?:Args:|Returns:|Raises:|\Z)", re.DOTALL)
_ARGS_SECTION_RE = re.compile(r"\n\s*Args:\n(.*?)\s*(?:Returns:|Raises:|\Z)", re.DOTALL)
_RETURNS_SECTION_RE = re.compile(r"\n\s*Returns:\n\s*(.*?)\s*(?:Raises:|\Z)", re.DOTALL)
# One `name: description` entry of the Args section, or `name (type): description` (the type in
# parentheses is skipped, as since transformers 5.24.0). The description may continue over following
# lines; it ends where another such entry starts that is not indented deeper than this entry's line.
_ARG_ENTRY_RE = re.compile(
    r"""
    (?: ^ | \n )
    (?P<indent> [ \t]* ) (?P<name> \w+ ) (?: [ \t]* \( [^()\n]* \) )? : \s*
    (?P<text> .*? ) \s*
    (?= \n (?! (?P=indent) [ \t] ) [ \t]* \w+ (?: [ \t]* \( [^()\n]* \) )? : | \Z )
    """,
    re.DOTALL | re.VERBOSE,
)
_LINE_BREAKS_RE = re.compile(r"\s*\n+\s*")
# A trailing `(choices: <JSON list>)` on an argument description becomes the schema's "enum".
_CHOICES_RE = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)

_TUPLE_OF_ONE_MESSAGE = (
    "The type hint {hint} is a Tuple with a single element, which we do not automatically convert to JSON "
    "schema as it is rarely necessary. If this input can contain more than one element, we recommend using a "
    "list[] type instead, or if it really is a single element, remove the tuple[] wrapper and just pass the "
    "element directly."
)
_CUSTOM_CLASS_MESSAGE = (
    "Couldn't convert the type hint {hint!r} to a JSON schema, likely because it is a custom class or object. "
    "Supported type hints are basic types like int, float, str and bool, Enum classes, typing.Literal, and "
    "list, tuple, dict and Union types containing those. If you need a more complex schema than that, you can "
    "write the JSON schema for your tool by hand and pass that instead of the function."
)


def function_schema(func: Callable) -> dict:
    """The tool schema of `func`; see _function_schema. When transformers is loaded, its errors are
    also instances of transformers' own exception classes, so `except` clauses written for the
    interpreter still catch them (transformers itself is never imported here)."""
    try:
        return _function_schema(func)
    except (TypeHintParsingException, DocstringParsingException) as error:
        compatible = _transformers_compatible(error)
        if compatible is error:
            raise
        raise compatible.with_traceback(error.__traceback__) from error.__cause__


def _transformers_compatible(error: Exception) -> Exception:
    theirs = getattr(sys.modules.get("transformers.utils.chat_template_utils"), type(error).__name__, None)
    if not isinstance(theirs, type) or not issubclass(theirs, BaseException) or isinstance(error, theirs):
        return error
    return _dual_class(type(error), theirs)(*error.args)


@functools.lru_cache(maxsize=None)
def _dual_class(ours: type, theirs: type) -> type:
    return type(ours.__name__, (ours, theirs), {"__module__": ours.__module__, "__doc__": ours.__doc__})


def _function_schema(func: Callable) -> dict:
    """The tool schema of `func`: `{"type": "function", "function": {name, description, parameters[, return]}}`.

    Same result as transformers' `get_json_schema(func)`. Raises `DocstringParsingException` when `func` has
    no docstring or an argument has no description in it, and `TypeHintParsingException` when an argument
    has no type hint or one without a JSON equivalent. A malformed `(choices: ...)` list raises what
    `json.loads` raises. The implicit `self`/`cls` of a method is skipped.
    """
    docstring = inspect.getdoc(func)
    name = getattr(func, "__name__", "operation")
    if not docstring:
        raise DocstringParsingException(
            f"Cannot generate JSON schema for {name} because it has no docstring!"
        )
    summary, argument_docs, returns_doc = parse_google_docstring(docstring.strip())

    parameters = _parameters_schema(func)
    # The return hint was parsed with the arguments (when it converts); it is reported on its own.
    return_schema = parameters["properties"].pop("return", None)
    if return_schema is not None and returns_doc is not None:
        return_schema["description"] = returns_doc
    for argument, schema in parameters["properties"].items():
        if argument not in argument_docs:
            raise DocstringParsingException(
                f"Cannot generate JSON schema for {name} because the docstring has no description for the "
                f"argument '{argument}'"
            )
        description = argument_docs[argument]
        choices = _CHOICES_RE.search(description)
        if choices:
            schema["enum"] = [
                choice.strip() if isinstance(choice, str) else choice
                for choice in json.loads(choices.group(1))
            ]
            description = description[: choices.start()].strip()
        schema["description"] = description

    function = {"name": name, "description": summary, "parameters": parameters}
    if return_schema is not None:
        function["return"] = return_schema
    return {"type": "function", "function": function}


def parse_google_docstring(docstring: str) -> tuple[str | None, dict[str, str], str | None]:
    """Split a Google-style docstring into `(summary, {argument: description}, returns description)`.

    Multi-line argument descriptions are joined into one line; the returns part is None without a
    `Returns:` section. Same as transformers' `parse_google_format_docstring`.
    """
    summary_match = _SUMMARY_RE.search(docstring)
    args_match = _ARGS_SECTION_RE.search(docstring)
    returns_match = _RETURNS_SECTION_RE.search(docstring)

    summary = summary_match.group(1).strip() if summary_match else None
    returns = returns_match.group(1).strip() if returns_match else None
    argument_docs: dict[str, str] = {}
    if args_match:
        # Blank lines would otherwise end an entry early: the entry pattern looks line by line.
        args_block = "\n".join(line for line in args_match.group(1).split("\n") if line.strip())
        for entry in _ARG_ENTRY_RE.finditer(args_block):
            argument_docs[entry["name"]] = _LINE_BREAKS_RE.sub(" ", entry["text"].strip())
    return summary, argument_docs, returns


def _parameters_schema(func: Callable) -> dict:
    """The "parameters" object schema of `func` from its type hints, with a "return" property if the
    return hint converts (the caller moves it out)."""
    hints = get_type_hints(func)
    signature = inspect.signature(func)
    name = getattr(func, "__name__", "operation")
    # An unannotated first `self`/`cls` is the implicit receiver of a method, not something the model passes.
    first = next(iter(signature.parameters), None)
    receiver = None
    if (
        first in {"self", "cls"}
        and signature.parameters[first].annotation == inspect.Parameter.empty
    ):
        receiver = first

    required = []
    for parameter_name, parameter in signature.parameters.items():
        if parameter_name == receiver:
            continue
        if parameter.annotation == inspect.Parameter.empty:
            raise TypeHintParsingException(
                f"Argument {parameter.name} is missing a type hint in function {name}"
            )
        if parameter.default == inspect.Parameter.empty:
            required.append(parameter_name)

    properties = {}
    for hint_name, hint in hints.items():
        if hint_name == receiver:
            continue
        if hint_name == "return":
            # The model never writes the return value, so an unconvertible return hint must not make the
            # tool unusable: it is just left out.
            try:
                properties[hint_name] = _hint_schema(hint)
            except TypeHintParsingException:
                pass
        elif hint_name in signature.parameters:
            # A bound method's signature omits its receiver, whose annotation the hints still hold.
            properties[hint_name] = _hint_schema(hint)

    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _hint_schema(hint: Any) -> dict:
    """The JSON schema of one type hint (always a new dict: callers add "description", "nullable", ...)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is None:
        if isinstance(hint, type) and issubclass(hint, Enum):
            return _enum_class_schema(hint)
        return _bare_hint_schema(hint)
    if origin is Union or origin is types.UnionType:
        return _union_schema(args)
    if origin is Literal and len(args) > 0:
        if any(type(value) not in _SCALAR_JSON_TYPES for value in args):
            raise TypeHintParsingException(
                "Only the valid python literals can be listed in typing.Literal."
            )
        return _enum_values_schema(list(args))
    if origin is list:
        # A list has one type argument at most; extra ones are ignored
        return {"type": "array", "items": _hint_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        return _tuple_schema(hint, args)
    if origin is dict:
        # JSON object keys are always strings, so only the value type can be described
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = _hint_schema(args[1])
        return schema
    raise TypeHintParsingException(
        "Couldn't parse this type hint, likely due to a custom class or object: ", hint
    )


def _enum_class_schema(enum_class: type[Enum]) -> dict:
    # The model has to write member values, so those are what the schema enumerates
    values = [member.value for member in enum_class]
    if not values:
        raise TypeHintParsingException(
            f"The Enum {enum_class.__name__} has no members, so no value could ever match it."
        )
    if any(type(value) not in _SCALAR_JSON_TYPES for value in values):
        raise TypeHintParsingException(
            f"The Enum {enum_class.__name__} has member values that cannot be written as JSON scalars.\n"
            f"Values: {values}\n"
            "Enum member values must be int, float, str, bool or None to be converted to a JSON schema."
        )
    return _enum_values_schema(values)


def _enum_values_schema(values: list) -> dict:
    # "type" names each JSON type among the values once, in order of first appearance
    json_types = list(dict.fromkeys(_SCALAR_JSON_TYPES[type(value)] for value in values))
    return {"type": json_types[0] if len(json_types) == 1 else json_types, "enum": values}


def _bare_hint_schema(hint: Any) -> dict:
    schema = _BARE_HINT_SCHEMAS.get(hint)
    if schema is None:
        schema = _media_hint_schemas().get(hint)
    if schema is None:
        # A custom class: there is no telling what JSON it expects, so refuse rather than guess
        raise TypeHintParsingException(_CUSTOM_CLASS_MESSAGE.format(hint=hint))
    return dict(schema)


def _union_schema(args: tuple) -> dict:
    # None is not a member type of its own: it makes the schema "nullable"
    members = [_hint_schema(arg) for arg in args if arg is not type(None)]
    if len(members) == 1:
        schema = members[0]
    elif all(member.keys() == {"type"} and isinstance(member["type"], str) for member in members):
        # Plain types merge into a sorted type list (`list | tuple` both give "array", kept once). Members
        # with more keys (items, enum, ...) go through "anyOf" below so nothing is lost.
        type_names = sorted({member["type"] for member in members})
        schema = {"type": type_names[0] if len(type_names) == 1 else type_names}
    else:
        schema = {"anyOf": members}
    if type(None) in args:
        schema["nullable"] = True
    return schema


def _tuple_schema(hint: Any, args: tuple) -> dict:
    if not args:
        return {"type": "array"}
    if len(args) == 1:
        raise TypeHintParsingException(
            _TUPLE_OF_ONE_MESSAGE.format(hint=str(hint).replace("typing.", ""))
        )
    if ... in args:
        raise TypeHintParsingException(
            "Conversion of '...' is not supported in Tuple type hints. Use list[] types for variable-length "
            "inputs instead."
        )
    return {"type": "array", "prefixItems": [_hint_schema(arg) for arg in args]}


def _media_hint_schemas() -> dict[Any, dict]:
    """PIL images and torch tensors, which transformers maps to "image" and "audio" when those libraries are
    usable. A hint can only be one of these classes if its library is already imported, so this looks in
    `sys.modules` instead of importing anything."""
    schemas: dict[Any, dict] = {}
    pil_image = sys.modules.get("PIL.Image")
    if pil_image is not None and hasattr(pil_image, "Image"):
        schemas[pil_image.Image] = {"type": "image"}
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "Tensor") and _torch_is_supported(torch):
        schemas[torch.Tensor] = {"type": "audio"}
    return schemas


def _torch_is_supported(torch: Any) -> bool:
    # transformers only counts torch as available from release 2.6.0 on (pre-releases of 2.6.0 do not count)
    import importlib.metadata  # only when torch is loaded: the import is slow

    try:
        installed = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        installed = getattr(torch, "__version__", "")
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)(.*)", str(installed))
    if match is None:
        return False
    release = tuple(int(part) for part in match.group(1).split("."))
    release += (0,) * (3 - len(release))
    while len(release) > 3 and release[-1] == 0:  # 2.6.0.0 is 2.6.0
        release = release[:-1]
    if release != (2, 6, 0):
        return release > (2, 6, 0)
    suffix = match.group(2).split("+", 1)[0].lower()
    is_prerelease = re.match(r"[.\-_]?(a|b|c|rc|alpha|beta|pre|preview|dev)", suffix) is not None
    return not is_prerelease

"""Casting tool-call arguments to the types the calling tool's JSON schema declares.

Formats such as XML-style tool calls deliver every argument as text (`<parameter=n>7</parameter>`). When
the caller passes `tools=`, transformers' interpreter casts those strings using the tool's schema as each
region closes: "7" becomes 7 for an integer parameter and stays "7" for a string one. This module does
the same, with identical results, for generated parsers:

    tool_params = tool_parameters(tools)              # once, when the parser is built
    mode = cast_mode(content, content_args)           # once per field, from its content parser
    if tool_params and mode is not None:              # no usable tool: no casting at all
        value = coerce_tool_calls(value, tool_params, typed=mode == TYPED)  # each closed value

Which arguments are cast depends on the field's content parser (transformers 5.25.0): the typed
formats (`json`, `python-call-list`) already tell a quoted string from a number, so an argument whose
schema allows a string is left as the model wrote it there; a field whose xml-inline
`value_parser_by` reads each value as the model's own output says is never cast.

Types are read from the schema again on every cast, as the interpreter does: `tool_parameters` keeps
references to the caller's `properties` dicts, so a schema edited between two regions takes effect, and
a malformed schema fails only when an argument it describes is cast.
(Measured: reading one property's types takes about 0.5 us; casting a 4-argument call about 5 us, a bit
less than the interpreter's method. Caching the types would save about half of that, at the cost of
those two behaviours.)

Standard library only: this module is imported at parse time by generated parsers.
"""

from __future__ import annotations

import json
from types import FunctionType, MethodType
from typing import Any

__all__ = ["ALL", "TYPED", "cast_mode", "coerce_argument", "coerce_tool_calls", "coerce_value", "schema_types", "tool_parameters"]

_INFINITIES = (float("inf"), float("-inf"))

# Content parsers whose syntax already tells a quoted string from a typed literal.
TYPED_FORMATS = frozenset({"json", "python-call-list"})
# How a field's values are cast (`cast_mode`): every argument the schema types, or only those whose
# schema does not allow a string.
ALL, TYPED = "all", "typed"


def cast_mode(content: Any, content_args: Any) -> str | None:
    """How the tool schema casts the values of a field with this content parser: ALL, TYPED, or
    None (never: with `value_parser_by` the model's own output says how to read each value)."""
    if isinstance(content_args, dict) and "value_parser_by" in content_args:
        return None
    return TYPED if content in TYPED_FORMATS else ALL


def tool_parameters(tools: Any) -> dict[str, dict]:
    """Map each usable tool's name to its schema's `properties` dict (the caller's own object, not a copy).

    `tools` is what `apply_chat_template` accepts: functions and methods (converted with `function_schema`,
    whose exceptions propagate) and schema dicts, with or without the `{"type": "function", "function":
    {...}}` wrapper. Entries without a string "name" and anything that is neither a function nor a dict are
    skipped; a tool whose parameters have no `properties` dict maps to `{}` (its arguments are never cast).
    A later tool with the same name replaces an earlier one.
    """
    parameters_by_tool: dict[str, dict] = {}
    for tool in tools or []:
        if isinstance(tool, dict):
            function = tool.get("function", tool)
        # The same tests as inspect.isfunction / inspect.ismethod
        elif isinstance(tool, (FunctionType, MethodType)):
            # Imported here: it pulls in `inspect`, which parsers without function tools never need
            from .tool_schema import function_schema

            schema = function_schema(tool)
            function = schema.get("function", schema) if isinstance(schema, dict) else None
        else:
            continue
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        parameters_by_tool[function["name"]] = properties if isinstance(properties, dict) else {}
    return parameters_by_tool


def schema_types(schema: Any) -> tuple[str, ...]:
    """The JSON type names a property schema allows, in the order casts are tried.

    Collects "type" (a name or a list of names; non-strings are dropped), then recursively the types of
    each "anyOf" and "oneOf" choice, then "null" if the schema is `nullable` (how `function_schema` marks
    Optional) and "null" was not already there. Duplicates are kept. Not a dict: no types.
    """
    if not isinstance(schema, dict):
        return ()
    declared = schema.get("type")
    if isinstance(declared, str):
        found = [declared]
    elif isinstance(declared, list):
        found = [name for name in declared if isinstance(name, str)]
    else:
        found = []
    # Unrolled over the two keywords: this runs for every cast argument
    choices = schema.get("anyOf")
    if choices:
        for choice in choices:
            found.extend(schema_types(choice))
    choices = schema.get("oneOf")
    if choices:
        for choice in choices:
            found.extend(schema_types(choice))
    if schema.get("nullable") and "null" not in found:
        found.append("null")
    return tuple(found)


def coerce_value(raw: str, types: tuple[str, ...]) -> Any:
    """Cast the argument text `raw` to the first of `types` it is valid for; otherwise return `raw` unchanged.

    - "integer": `int(raw)`, or a float spelling of a whole number ("3.0", "1e3"), never NaN/inf.
    - "number": `float(raw)` except NaN/inf; an int when the value is whole and `raw` has no ".".
    - "boolean": true/1/false/0, ignoring case and surrounding whitespace.
    - "null": "null" or "None" (surrounding whitespace ignored).
    - "object" / "array": JSON text that decodes to a dict / list.
    "string" and unknown names never cast, and so never stop a later type from casting: with
    ("string", "integer"), "7" becomes 7.
    """
    for type_name in types:
        try:
            if type_name == "integer":
                try:
                    return int(raw)
                except ValueError:
                    whole = float(raw)  # JSON Schema counts 3.0 as an integer
                    if not whole.is_integer():
                        continue
                    return int(whole)
            if type_name == "number":
                number = float(raw)
                if number != number or number in _INFINITIES:
                    continue  # not representable in JSON
                # "7" stays an int; "7.0" was written as a float and stays one
                return int(number) if number.is_integer() and "." not in raw else number
            if type_name == "boolean":
                word = raw.strip().lower()
                if word in ("true", "1", "false", "0"):
                    return word in ("true", "1")
            if type_name == "null" and raw.strip() in ("null", "None"):
                return None
            if type_name in ("object", "array"):
                decoded = json.loads(raw)
                if isinstance(decoded, dict if type_name == "object" else list):
                    return decoded
        except ValueError:  # includes json.JSONDecodeError
            continue
    return raw


def coerce_argument(argument: Any, types: tuple[str, ...], typed: bool = False) -> Any:
    """One argument cast as `coerce_tool_calls` casts it (never mutating it): a string by `types`, a
    list (duplicate keys gathered by `merge_duplicates`) item by item unless the parameter may be an
    "array"; with `typed`, nothing when the parameter may be a string."""
    if typed and "string" in types:
        return argument
    if isinstance(argument, str):
        return coerce_value(argument, types)
    if isinstance(argument, list) and "array" not in types:
        return [coerce_value(item, types) if isinstance(item, str) else item for item in argument]
    return argument


def coerce_tool_calls(value: Any, tool_params: dict[str, dict], typed: bool = False) -> Any:
    """Cast the string arguments of the tool call(s) in a closed field's `value`, in place.

    A list is handled item by item (recursively) and comes back as a new list; a dict of the shape
    `{"function": {"name": str, "arguments": dict}}` has its arguments cast in place and is returned;
    anything else is returned untouched. Only arguments named in the tool's `properties` with at least
    one declared type are cast (see `coerce_argument`; `typed` for the TYPED cast mode).
    """
    if isinstance(value, list):
        return [coerce_tool_calls(item, tool_params, typed) for item in value]
    function = value.get("function") if isinstance(value, dict) else None
    if not isinstance(function, dict):
        return value
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return value
    properties = tool_params.get(name)
    if not properties:
        return value
    for key, argument in arguments.items():
        if key not in properties:
            continue
        types = schema_types(properties[key])
        if not types:
            continue
        if isinstance(argument, (str, list)):
            arguments[key] = coerce_argument(argument, types, typed)
    return value

"""Argument values written by the grammar, typed by the tool's JSON schema.

Three writers, one per way a content parser reads values:

- `JsonWriter`: JSON in a content parser's dialect, written from the schema: standard JSON strings
  with JSON's escapes but no `\\u` (python-call-list refuses lone surrogates), or strings between
  custom delimiters (json's `string_delims`) and bare keys (`unquoted_keys`). Integers stay within
  what every reader takes (|n| < 2**53), numbers have no exponent (no overflow to infinity).
- `raw_value`: the text of an xml-inline or kv-lines value that the interpreter casts with the
  tool's schema (`_coerce`): an integer as digits, a boolean as true/false, an object as JSON text,
  a string as free text that does not contain the value's terminator.
- Standard JSON content goes to xgrammar's own `json_schema` format instead (see calls.py).

A schema keyword that a writer cannot enforce is a GrammarError naming the tool and the keyword:
the grammar never accepts arguments the schema rejects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Callable

from . import formats as F
from .charclass import escape_chars
from .errors import GrammarError
from .strings import string_rules

# Keywords that say nothing about validity (or only about what the writers never write).
_ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly"}
# An object the transform reads only some keys of (a call object): members under other keys may
# stand "around" (or only "after") the ones it reads, which the parser ignores (rtcompile's own
# keyword).
OTHER_KEYS = "x-rtcompile-other-keys"
_HANDLED = {"type", "enum", "const", "properties", "required", "additionalProperties", "items", "anyOf", "nullable", OTHER_KEYS}
_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")

INTEGER = r"-?(0|[1-9][0-9]{0,14})"  # (below 2**53 in magnitude: 15 digits at most)
NUMBER = r"-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?"
BOOLEAN_WORDS = ("true", "false")
# The characters a value's regexes and grammars may start or end with outside strings:
# punctuation, numbers, and the edges of true/false/null (and Python's True/False/None).
# Punctuation (and whitespace) stands between any two other pieces: a word, a number, a key or
# a string is never written right beside another.
SEAM_PUNCTUATION = "{}[](),:= \t\n\r"
SEAM_STARTS = SEAM_PUNCTUATION + "-0123456789tfn"
SEAM_ENDS = SEAM_PUNCTUATION + "0123456789el"
BARE_KEY = "[A-Za-z_] [A-Za-z0-9_]*"  # (the EBNF of a bare key in free-form objects)


def standard_schema(schema: Any) -> Any:
    """The schema as JSON Schema proper, for xgrammar's json_schema format: OpenAPI's `nullable`
    (what transformers' get_json_schema writes for Optional parameters, and what the interpreter
    reads as "null" allowed) becomes a "null" type."""
    if isinstance(schema, list):
        return [standard_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: standard_schema(value) for key, value in schema.items() if key != "nullable"}
    if "properties" in schema and isinstance(schema["properties"], dict):
        out["properties"] = {key: standard_schema(value) for key, value in schema["properties"].items()}
    if schema.get("nullable") is True:
        declared = out.get("type")
        if isinstance(declared, str):
            out["type"] = [declared, "null"] if declared != "null" else "null"
        elif isinstance(declared, list):
            out["type"] = declared if "null" in declared else [*declared, "null"]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def schema_types(schema: Any, where: str) -> tuple[str, ...]:
    """The types a schema allows (all of them for an untyped schema)."""
    if not isinstance(schema, dict):
        if schema is True:
            return _TYPES
        raise GrammarError(where, f"a schema must be an object, got {schema!r}")
    unknown = set(schema) - _HANDLED - _ANNOTATIONS
    if unknown:
        raise GrammarError(where, f"the schema keyword {sorted(unknown)[0]!r} cannot be enforced in this format")
    declared = schema.get("type", list(_TYPES))
    types = [declared] if isinstance(declared, str) else list(declared)
    if schema.get("nullable") and "null" not in types:
        types.append("null")
    for name in types:
        if name not in _TYPES:
            raise GrammarError(where, f"unknown type {name!r}")
    return tuple(types)


@dataclass(frozen=True)
class Dialect:
    """How a JSON-like content parser spells strings and keys."""

    # (open, close) of the strings the grammar writes; None: standard JSON strings.
    string_delims: tuple[str, str] | None = None
    unquoted_keys: bool = False
    # Strings no written string may contain (the region's closer, control tokens...).
    excludes: tuple[str, ...] = ()
    # python-call-list: strings in either quote, Python's True/False/None beside JSON's words.
    python: bool = False
    # The whitespace the writer may write around punctuation (none that could close the region).
    space: str = " \t\n\r"
    # Every object's keys sorted (else in the schema's order): chat templates write a value's keys
    # in the order given, or sorted throughout (`tojson` with sorted keys, `dictsort`).
    sorted_keys: bool = False


class JsonWriter:
    """Writes JSON values valid against a schema, in a dialect."""

    def __init__(self, dialect: Dialect, write_text: Callable[[str], F.Format]):
        self.dialect = dialect
        self.write_text = write_text  # (literal text as the speller writes it: control tokens by id)
        space = "[" + escape_chars(dialect.space) + "]*" if dialect.space else ""
        self.space = F.regex(space) if space else F.EMPTY
        self.comma = F.regex(space + "," + space)
        self.colon = F.regex(space + ":" + space)

    def value_in_key_orders(self, schema: Any, where: str) -> F.Format:
        """The value with every object's keys in the schema's order, or every object's keys
        sorted: the two ways chat templates write a value (one choice for the whole value, not
        one per object, which would multiply the grammar by two at each level)."""
        in_order = JsonWriter(replace(self.dialect, sorted_keys=False), self.write_text).value(schema, where)
        in_sorted_order = JsonWriter(replace(self.dialect, sorted_keys=True), self.write_text).value(schema, where)
        return F.choice(in_order, in_sorted_order)

    def value(self, schema: Any, where: str) -> F.Format:
        if isinstance(schema, dict) and "anyOf" in schema:
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            return F.choice(*(self.value({**rest, **branch}, where) for branch in schema["anyOf"]))
        if schema is True or schema == {} or (isinstance(schema, dict) and set(schema) <= _ANNOTATIONS):
            return self.any_value("value")
        types = schema_types(schema, where)
        if isinstance(schema, dict) and ("enum" in schema or "const" in schema):
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            return F.choice(*(self.literal(v, where) for v in values if _type_of(v) in types or _int_as_number(v, types)))
        return F.choice(*(self.typed(name, schema if isinstance(schema, dict) else {}, where) for name in types))

    def typed(self, name: str, schema: dict, where: str) -> F.Format:
        if name != "string":
            self._check_syntax(where)
        if name == "object":
            if "properties" not in schema and schema.get("additionalProperties", True) is not False:
                return self.any_value("object")
            return self.object(schema, where)
        if name == "array":
            if "items" not in schema:
                return self.any_value("array")
            items = schema.get("items", True)
            item = self.value(items, f"{where}.items")
            return F.sequence(
                F.const("["), self.space, F.optional(F.sequence(item, F.star(F.sequence(self.comma, item)))), self.space, F.const("]")
            )
        if name == "string":
            return self.string()
        if name == "integer":
            return F.regex(INTEGER)
        if name == "number":
            return F.regex(NUMBER)
        if name == "boolean":
            return F.choice(*(F.const(w) for w in (("true", "false", "True", "False") if self.dialect.python else ("true", "false"))))
        return F.choice(F.const("null"), F.const("None")) if self.dialect.python else F.const("null")

    def check_seams(self, fmt: F.Format, where: str) -> None:
        """Refuse a value `fmt` (written by this writer, whitespace and the region's closer
        around it) whose pieces could spell an excluded text across their seams. The string
        automaton keeps it out of a string's text and the fixed-text checks out of each constant,
        but `{` then the bare key `x_1` spell the closer `{x`, and a quote then a string's text
        spell `"a`: a seam is a character one piece may end with beside one the next may start
        with, or a quote beside anything."""
        starts, ends = set(SEAM_STARTS) | (set("TFN") if self.dialect.python else set()), set(SEAM_ENDS)
        constants, grammars = _pieces(fmt)
        if any(BARE_KEY in grammar for grammar in grammars):  # (bare keys of free-form objects)
            word_chars = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
            starts |= word_chars
            ends |= word_chars
        for text in constants:
            starts.add(text[0])
            ends.add(text[-1])
        starts |= {text[0] for text in self.dialect.excludes if text}  # (the closer after the value)
        if self.dialect.string_delims is not None:
            opening, closing = self.dialect.string_delims
            before_text, after_text = {opening[-1]}, {closing[0]}
            starts |= {opening[0], closing[0]}
            ends |= {opening[-1], closing[-1]}
        else:
            before_text = after_text = {'"', "'"} if self.dialect.python else {'"'}
        for word in self.dialect.excludes:
            if len(word) == 1 and word in before_text | after_text:
                raise GrammarError(where, f"the value's quotes would write {word!r}, which ends it")
            for a, b in zip(word, word[1:]):
                if (a in ends and b in starts and (a in SEAM_PUNCTUATION or b in SEAM_PUNCTUATION)) or a in before_text or b in after_text:
                    raise GrammarError(where, f"the value's pieces could spell {word!r} across {a + b!r}, which ends it")

    def _check_syntax(self, where: str) -> None:
        """Refuse a value whose own syntax (punctuation, whitespace, digits, words) could write an
        excluded text (a kv-lines separator ",", a closer "}")."""
        syntax = set("{}[],:-+.0123456789truefalsnTFN") | set(self.dialect.space)
        for text in self.dialect.excludes:
            if text and set(text) <= syntax:
                raise GrammarError(where, f"the value's JSON would write {text!r}, which ends it")

    def object(self, schema: dict, where: str) -> F.Format:
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        if not isinstance(properties, dict) or not required <= set(properties):
            raise GrammarError(where, "every required property must be declared in 'properties'")
        members = {key: (self.member(key, sub, f"{where}.{key}"), key in required) for key, sub in properties.items()}
        order = sorted(members) if self.dialect.sorted_keys else list(members)
        body = ordered_members([members[k] for k in order], self.comma)
        if schema.get(OTHER_KEYS) and required == set(properties) and properties and self._standard():
            body = self._with_other_members(body, list(properties), before=schema[OTHER_KEYS] == "around")
        return F.sequence(F.const("{"), self.space, body, self.space, F.const("}"))

    def _standard(self) -> bool:
        return self.dialect.string_delims is None and not self.dialect.unquoted_keys and not self.dialect.python

    def _with_other_members(self, body: F.Format, read: list[str], before: bool) -> F.Format:
        """`body` (the members read, all required) with a member under another key before them and
        one after, each optional, as chat templates write a call's id (Command R7B's
        "tool_call_id" first, Mistral Nemo's "id" last): a word key that no read key is (a read
        key twice is one call to JSON, its last value winning, and another to a reader that
        streams the first), and an id's value (a string of word characters and dashes). None
        where a closer could be written inside them. (Any string, or any value, or any number of
        members, made qwen3's tag compile up to 2x slower, and random walks rarely end.)"""
        if any(word and set(word) <= _ID_CHARS for word in self.dialect.excludes):
            return body
        space = f"ws ::= [{escape_chars(self.dialect.space)}]*" if self.dialect.space else 'ws ::= ""'
        # (one grammar text before and after: xgrammar compiles it once)
        member = _grammar(f'root ::= key ws ":" ws "\\"" {_ID_CLASS}* "\\""', space, *key_other_than(read))
        first = F.optional(F.sequence(member, self.comma)) if before else F.EMPTY
        last = F.optional(F.sequence(self.comma, member))
        return F.sequence(first, body, last)

    def member(self, key: str, schema: Any, where: str) -> F.Format:
        return F.sequence(self._key(key), self.colon, self.value(schema, where))

    def string(self) -> F.Format:
        """A string that holds no excluded text (the region's closer, spelled out or as a control
        token's id), in the dialect's quotes or delimiters: an EBNF automaton (strings.py)."""
        rules = self.string_rules()
        return {"type": "grammar", "grammar": "\n".join([f"root ::= {' | '.join(_heads(rules))}", *rules]) + "\n"}

    def string_rules(self) -> list[str]:
        """EBNF rules of the dialect's strings: `dq` (double quotes), `sq` (single, python-call-
        list), `ds` (json's string_delims)."""
        words = list(self.dialect.excludes)
        if self.dialect.string_delims is not None:
            opening, closing = self.dialect.string_delims
            # (the interpreter refuses text holding its sentinels \x01 and \x02)
            return string_rules(
                "ds", [*words, closing], None, opening=_ebnf(self.write_text(opening)),
                closing=_ebnf(self.write_text(closing)), excluded="\x01\x02",
            )
        rules = string_rules("dq", words, '"')
        if self.dialect.python:
            rules += string_rules("sq", words, "'")
        return rules

    def any_value(self, kind: str) -> F.Format:
        """Any value of `kind` ("object", "array"; "value": any) in the dialect: an EBNF
        grammar, since values nest without bound."""
        strings = self.string_rules()
        words = ["true", "false", "null"] + (["True", "False", "None"] if self.dialect.python else [])
        key = f"string | {BARE_KEY}" if self.dialect.unquoted_keys else "string"
        rules = [
            f"root ::= {kind}",
            "value ::= object | array | string | number | " + " | ".join(f'"{w}"' for w in words),
            'object ::= "{" ws ( member ( ws "," ws member )* )? ws "}"',
            'member ::= key ws ":" ws value',
            f"key ::= {key}",
            'array ::= "[" ws ( value ( ws "," ws value )* )? ws "]"',
            "string ::= " + " | ".join(_heads(strings)),
            *strings,
            'number ::= "-"? ("0" | [1-9] [0-9]{0,14}) ("." [0-9]{1,15})?',
            f"ws ::= [{escape_chars(self.dialect.space)}]*" if self.dialect.space else 'ws ::= ""',
        ]
        return {"type": "grammar", "grammar": "\n".join(rules) + "\n"}

    def literal(self, value: Any, where: str) -> F.Format:
        """A constant (enum or const) written in the dialect."""
        if isinstance(value, str):
            if self.dialect.string_delims is not None:
                opening, closing = self.dialect.string_delims
                if closing in value or "\x01" in value or "\x02" in value:
                    raise GrammarError(where, f"the value {value!r} cannot be written between {closing!r}")
                return F.sequence(self.write_text(opening), F.const(value), self.write_text(closing))
            if self.dialect.python:
                return F.choice(F.const(json.dumps(value)), F.const(_single_quoted(value)))
            return F.const(json.dumps(value))
        if isinstance(value, bool) or value is None:
            if self.dialect.python:
                return F.choice(F.const(json.dumps(value)), F.const(repr(value)))
            return F.const(json.dumps(value))
        if isinstance(value, (int, float)):
            return F.const(json.dumps(value))
        if isinstance(value, list):
            return F.sequence(F.const("["), _joined([self.literal(v, where) for v in value]), F.const("]"))
        if isinstance(value, dict):
            parts = [F.sequence(self._key(k), F.const(":"), self.literal(v, where)) for k, v in value.items()]
            return F.sequence(F.const("{"), _joined(parts), F.const("}"))
        raise GrammarError(where, f"the constant {value!r} cannot be written")

    def _key(self, key: str) -> F.Format:
        if self.dialect.unquoted_keys and key.isidentifier() and key.isascii():
            return F.const(key)
        return F.const(json.dumps(key))


def _pieces(fmt: F.Format) -> tuple[list[str], list[str]]:
    """The non-empty constant texts of a format, and its EBNF grammars."""
    if fmt.get("type") == "const_string":
        return ([fmt["value"]] if fmt["value"] else []), []
    if fmt.get("type") == "grammar":
        return [], [fmt["grammar"]]
    constants: list[str] = []
    grammars: list[str] = []
    children = [*fmt.get("elements", []), *([fmt["content"]] if isinstance(fmt.get("content"), dict) else [])]
    for child in children:
        more, other = _pieces(child)
        constants += more
        grammars += other
    return constants, grammars


def _heads(rules: list[str]) -> list[str]:
    """The names of the string rules' entry points (their states are `<name>_<n>`)."""
    return [rule.split(" ::= ")[0] for rule in rules if "_" not in rule.split(" ::= ")[0]]


def _single_quoted(text: str) -> str:
    """A Python-style single-quoted literal with JSON's escapes (what python-call-list reads)."""
    body = json.dumps(text)[1:-1].replace('\\"', '"').replace("'", "\\'")
    return "'" + body + "'"


def _ebnf(fmt: F.Format) -> str:
    """A format of literal pieces (text, control tokens) as an EBNF sequence."""
    parts = fmt["elements"] if fmt.get("type") == "sequence" else [fmt]
    out = []
    for part in parts:
        if part.get("type") == "token":
            out.append(f"Token({part['token']})")
        else:
            out.append(json.dumps(part["value"]))
    return " ".join(out)


def _joined(parts: list[F.Format]) -> F.Format:
    out: list[F.Format] = []
    for index, part in enumerate(parts):
        if index:
            out.append(F.const(","))
        out.append(part)
    return F.sequence(*out)


# A separator as chat templates write it (JSON's ", " of Python's json.dumps, or compact).
# JSON's whitespace around its punctuation, as chat templates write it (compact, `", "` of
# Python's json.dumps, or indented).
SPACE = F.regex("[ \\t\\n\\r]*")
COMMA = F.regex("[ \\t\\n\\r]*,[ \\t\\n\\r]*")


def ordered_members(members: list[tuple[F.Format, bool]], separator: F.Format, index: int = 0, first: bool = True) -> F.Format:
    """Members from `index` on, in order, optional ones optional, `separator` between two."""
    if index == len(members):
        return F.EMPTY
    member, required = members[index]
    if not first:
        written = F.sequence(separator, member)
        rest = ordered_members(members, separator, index + 1, first=False)
        return F.sequence(written if required else F.optional(written), rest)
    present = F.sequence(member, ordered_members(members, separator, index + 1, first=False))
    if required:
        return present
    return F.choice(present, ordered_members(members, separator, index + 1, first=True))


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _int_as_number(value: Any, types: tuple[str, ...]) -> bool:
    return _type_of(value) == "integer" and "number" in types


# ---- raw values: xml-inline and kv-lines text cast by the schema ------------------------------------


def raw_value(schema: Any, text: Callable[[], F.Format], writer: "JsonWriter", where: str, stripped: bool = False) -> F.Format:
    """The text of a value the interpreter casts with `schema` into a valid argument; `text()`: free
    text for a string (its terminator excluded by the caller); `writer`: writes the JSON text of
    an object or array value (keeping out the value's terminator)."""
    types = schema_types(schema, where)
    cast_types = cast_order(schema)
    if isinstance(schema, dict) and ("enum" in schema or "const" in schema):
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        return F.choice(*(_raw_literal(v, cast_types, where, stripped) for v in values))
    if "string" in types:
        if "object" in types or "array" in types:
            raise GrammarError(where, "a string that may also be an object or array cannot be written as text")
        # Text that a type listed beside "string" takes becomes that type; any other text stays a
        # string: every text is then a valid value.
        return text()
    written = []
    for name in types:
        if name == "integer":
            written.append(F.regex(INTEGER))
        elif name == "number":
            written.append(F.regex(NUMBER))
        elif name == "boolean":  # (the cast lowercases: chat templates write Python's True too)
            written.append(F.choice(*(F.const(word) for word in ("true", "false", "True", "False"))))
        elif name == "null":
            written.append(F.choice(F.const("null"), F.const("None")))
        else:  # object, array: json.loads of the text
            sub = {"type": name, **{k: v for k, v in (schema if isinstance(schema, dict) else {}).items() if k not in ("type", "nullable")}}
            written.append(writer.value_in_key_orders(sub, where))
    return F.choice(*written)


def cast_order(schema: Any) -> tuple[str, ...]:
    """The types the interpreter casts a text value by, in its order."""
    from rtcompile.runtime.coerce import schema_types as runtime_schema_types

    return runtime_schema_types(schema)


def _raw_literal(value: Any, cast_types: tuple[str, ...], where: str, stripped: bool = False) -> F.Format:
    """An enum member written as text that the interpreter's cast turns back into it (after the
    parser strips it, where it does)."""
    from rtcompile.runtime.coerce import coerce_value

    text = value if isinstance(value, str) else json.dumps(value)
    if stripped and text != text.strip():
        raise GrammarError(where, f"the value {value!r} loses its whitespace where the parser strips values")
    cast = coerce_value(text, cast_types) if cast_types else text
    if cast != value or type(cast) is not type(value):
        raise GrammarError(where, f"the enum value {value!r} cannot be written as text the cast gives back")
    return F.const(text)


_WORD = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
_ID_CHARS = set(_WORD + "-")
_ID_CLASS = "[0-9A-Z_a-z\\-]"  # (a call id's characters: Mistral's "abc123def", Cohere's "0")


def key_other_than(words: list[str]) -> list[str]:
    """EBNF rules of `key`: a JSON key that is a word (`[A-Za-z0-9_]+`) and none of `words`. A
    trie of the words, left at a character no word goes on with, or ended where no word ends. As in
    the string automaton (strings.py), leaving it on a character no word holds is one rule all
    nodes share: xgrammar passes over the vocabulary once per broad class."""
    trie: dict = {}
    for word in words:
        if word and set(word) <= set(_WORD):
            node = trie
            for char in word:
                node = node.setdefault(char, {})
            node[""] = {}  # (a word ends here)
    alphabet = sorted({char for word in words if set(word) <= set(_WORD) for char in word})
    outside = "".join(c for c in _WORD if c not in alphabet)
    rules = ['key ::= "\\"" key_0', 'key_free ::= [0-9A-Z_a-z] key_free | "\\""']
    if outside:
        rules.append(f"key_out ::= [{_spans(outside)}] key_free")
    nodes = [trie]  # (breadth first: node i is rule key_i)
    for number, node in enumerate(nodes):
        children = {char: child for char, child in node.items() if char}
        choices = [] if node is trie or "" in node else ['"\\""']
        choices += ["key_out"] if outside else []
        leave = "".join(c for c in alphabet if c not in children)
        choices += [f"[{_spans(leave)}] key_free"] if leave else []
        for char, child in children.items():
            choices.append(f'"{char}" key_{len(nodes)}')
            nodes.append(child)
        rules.append(f"key_{number} ::= " + " | ".join(choices))
    return rules


def _grammar(*rules: str) -> F.Format:
    return {"type": "grammar", "grammar": "\n".join(rules) + "\n"}

def _spans(chars: str) -> str:
    """Sorted ASCII word characters as a class body, runs written as ranges (`0-9A-Z_a-mo-z`)."""
    out, start = [], 0
    for index in range(1, len(chars) + 1):
        if index == len(chars) or ord(chars[index]) != ord(chars[index - 1]) + 1:
            run = chars[start:index]
            out.append(run if len(run) < 3 else f"{run[0]}-{run[-1]}")
            start = index
    return "".join(out)


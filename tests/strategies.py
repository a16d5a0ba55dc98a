"""Hypothesis strategies for the differential tests against transformers' response parser.

Everything here builds *plans*: a template together with what is known about it (strings that match
each delimiter, which payloads suit each content parser, which named groups a pattern captures). The
outputs, prefixes and chunkings are then drawn from the plan, so generated text actually exercises
the template instead of being noise the parser never reacts to.

Delimiters are built from a deliberately tiny alphabet (`<`, `>`, `/`, `a`, `b`, `|`, newline,
space) so that delimiters of different fields collide, overlap, prefix one another and nearly match
far more often than realistic templates would let them.

Public entry points:
    cases()            a `Case`: a template and one to three `Run`s (prefix, chunks, tools) with it
    tool_call_cases()  like `cases()`, with a tool-call-shaped field and a tools list always present
    known_format_cases()  the interpreter's bundled fallback templates with generated outputs
    invalid_templates()   an `InvalidTemplate`: a valid template broken by one validation rule
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Literal, Optional, Union

import regex
from hypothesis import strategies as st

# --------------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------------

# fmt: off
DELIMITER_ALPHABET = "<>/ab|\n "
# Characters for free text: the delimiter alphabet (so noise can complete or break delimiters),
# JSON/kv punctuation, and a few non-ASCII code points (combining, astral, a line separator).
NOISE_ALPHABET = DELIMITER_ALPHABET + 'xyz{}[]":=,;\t\\' + "é中😀\u2028\u0301"

# Field names drawn in random order: the interpreter breaks ties by *name*, not declaration order,
# and upper case sorts before lower case, so declaration order and name order often disagree.
FIELD_NAMES = ("content", "reasoning_content", "tool_calls", "a", "b_b", "Z")
# Names that are not Python identifiers, or are keywords, quotes, braces, non-ASCII: template text
# must reach generated code only as escaped literals, and name ordering must stay code-point order.
ODD_FIELD_NAMES = (
    "x-y", "class", "名", "", "a b", "__init__", "None", "'\"", "\\", "{content}", "Ä", "\n",
)
GROUP_NAMES = ("name", "id", "content")
TOOL_NAMES = ("a", "ab", "get_weather")
ARGUMENT_KEYS = ("a", "b", "n", "flag")

COMMON_LITERALS = (
    "<a>", "</a>", "<b>", "</b>", "<ab>", "</ab>", "<a", "<ab", "|a|", "<|", "|>",
    "a", "<", ">", "</", "\n", "\n\n", " <a>", "ab", "b>", "<|a|>",
    # Rarely collide, but must survive code generation: quotes, backslashes, braces, NUL, CR.
    '"""', "'", "\\", "{x}", "\x00", "\r\n", "%s",
)

# Text that a tool schema may coerce: integers, floats written as integers, booleans in both
# spellings, null, JSON containers, NaN/inf (refused for "number") and plain strings.
ARGUMENT_TEXTS = (
    "3", "-2", "3.0", "2.5", "1e2", "true", "False", "0", "1", "null", "None",
    "[1, 2]", '{"k": 1}', "nan", "inf", "x", "", " 7 ", "0x1", "1_0",
)
# fmt: on


# --------------------------------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delimiter:
    """A delimiter as written in the template, plus strings that match (or are meant to) it."""

    value: Any  # a literal, a list of literals, or a pattern string
    is_pattern: bool
    samples: tuple[str, ...]
    captures: tuple[str, ...] = ()


@dataclass
class FieldPlan:
    name: str
    spec: dict
    open: Optional[Delimiter]
    close: Optional[Delimiter]
    payloads: st.SearchStrategy


@dataclass
class TemplatePlan:
    template: dict
    fields: list[FieldPlan]
    anchor: Delimiter


@dataclass
class Run:
    """One pass over a template: the prefix, the generation split into chunks, the tools."""

    prefix: Optional[str]
    chunks: list[str]
    tools: Optional[list] = None
    # After finalize, optionally call "feed" or "finalize" once more (both must raise RuntimeError).
    after_finalize: Optional[str] = None

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def __repr__(self) -> str:
        if isinstance(self.tools, (list, tuple)):
            items = ", ".join(_tool_repr(t) for t in self.tools)
            tools = (
                f"[{items}]"
                if isinstance(self.tools, list)
                else f"({items}{',' * (len(self.tools) == 1)})"
            )
        else:
            tools = repr(self.tools)
        return (
            f"Run(prefix={self.prefix!r}, chunks={self.chunks!r}, tools={tools}, "
            f"after_finalize={self.after_finalize!r})"
        )


@dataclass
class Case:
    """A template and the runs made with it. Several runs share one template because compiling a
    template costs far more than running it."""

    template: Any
    runs: list[Run]

    def __repr__(self) -> str:
        # Printable as Python: paste into an @example(...) to pin a regression.
        return f"Case(template={self.template!r}, runs={self.runs!r})"


def _tool_repr(tool: Any) -> str:
    source = getattr(tool, "tool_source", None)
    if source is not None:
        return f"python_tool({source!r})"
    return tool.__name__ if callable(tool) else repr(tool)


@dataclass
class InvalidTemplate:
    """A template broken by exactly one validation rule."""

    template: Any
    rule: str
    # The JSON paths a good error message may name, most specific first; "" accepts any path.
    paths: tuple[str, ...]

    def __repr__(self) -> str:
        return (
            f"InvalidTemplate(template={self.template!r}, rule={self.rule!r}, paths={self.paths!r})"
        )


def one_in(count: int) -> st.SearchStrategy[bool]:
    """True about once in `count` draws. (Hypothesis draws the bounds of `integers()` far more often
    than uniformly, so `integers(0, n) == 0` would be true about a fifth of the time.)"""
    return st.sampled_from([False] * (count - 1) + [True])


# --------------------------------------------------------------------------------------------------
# Delimiters
# --------------------------------------------------------------------------------------------------

literal_strings = st.one_of(
    st.sampled_from(COMMON_LITERALS),
    st.text(DELIMITER_ALPHABET, min_size=1, max_size=4),
    # A non-ASCII character now and then, so code that slices by bytes or escapes badly shows.
    st.text(DELIMITER_ALPHABET + "é😀", min_size=1, max_size=3),
)


@st.composite
def literal_delimiters(draw) -> Delimiter:
    literal = draw(literal_strings)
    return Delimiter(literal, False, (literal,))


@st.composite
def literal_list_delimiters(draw) -> Delimiter:
    literals = draw(st.lists(literal_strings, min_size=1, max_size=3))
    if draw(st.booleans()):
        # Prefix overlap: one literal is a strict prefix of another ("<a" / "<ab"), so a complete
        # match at the buffer's end may still grow.
        base = draw(st.sampled_from(literals))
        if len(base) > 1 and draw(st.booleans()):
            literals.append(base[: draw(st.integers(1, len(base) - 1))])
        else:
            literals.append(base + draw(st.text(DELIMITER_ALPHABET, min_size=1, max_size=2)))
    if draw(one_in(5)):
        literals.append(
            draw(st.sampled_from(literals))
        )  # duplicates are accepted and de-duplicated
    literals = draw(st.permutations(literals))
    return Delimiter(list(literals), False, tuple(dict.fromkeys(literals)))


def _char_class(chars: str) -> str:
    return "[" + "".join(regex.escape(c) for c in chars) + "]"


@st.composite
def pattern_delimiters(draw, *, allow_captures: bool = True) -> Delimiter:
    left = draw(literal_strings)
    right = draw(literal_strings)
    e_left, e_right = regex.escape(left), regex.escape(right)
    group = draw(st.sampled_from(GROUP_NAMES))
    # fmt: off
    forms = [
        "plain", "leading_ws", "trailing_ws", "lookahead", "lookbehind", "negative_lookahead",
        "end", "optional_tail", "optional_newline", "alternation", "char_class", "lazy_any",
        "case_insensitive", "empty_matchable", "start", "greedy_class", "greedy_any",
        # Forms that look behind the match or depend on where the buffer starts: an implementation
        # that trims consumed text must still give them the interpreter's view of the buffer.
        "lookbehind_then", "negative_lookbehind", "word_boundary", "multiline_start",
        "search_start", "leading_ws_alternation",
        # Matches that end before the buffer's end yet may change with more text (transformers
        # 5.24.0 re-checks them on the buffer extended by one character before committing).
        "anchored_end", "negated_class", "optional_lookahead",
    ]
    # fmt: on
    if allow_captures:
        forms += ["named_word", "named_lazy", "named_optional"]
    form = draw(st.sampled_from(forms))
    tool = draw(st.sampled_from(TOOL_NAMES))
    if form == "plain":
        return Delimiter(e_left, True, (left,))
    if form == "leading_ws":
        # Like the qwen templates' r"\s*<tool_call>": trailing whitespace is held back.
        return Delimiter(r"\s*" + e_left, True, (left, " " + left, "\n\n" + left))
    if form == "leading_ws_alternation":
        # Like qwen's close r"\s*(?:<\|im_end\|>|<\|endoftext\|>)", scanned as literals.
        return Delimiter(rf"[ \t\n]*(?:{e_left}|{e_right})", True, (left, "\n" + right, " \t" + left))
    if form == "trailing_ws":
        return Delimiter(e_left + r"\s*", True, (left, left + "\n", left + " \n"))
    if form == "lookahead":
        return Delimiter(f"(?={e_left})", True, (left,))
    if form == "lookbehind":
        return Delimiter(f"(?<={e_left})", True, (left,))
    if form == "negative_lookahead":
        return Delimiter(f"{e_left}(?!{e_right})", True, (left, left + right))
    if form == "end":
        return Delimiter(draw(st.sampled_from(["$", r"\Z"])), True, ("",))
    if form == "optional_tail":
        # A close ending in an optional group: streamed and one-shot results may differ.
        return Delimiter(f"{e_left}(?:{e_right})?", True, (left, left + right))
    if form == "optional_newline":
        return Delimiter(f"{e_left}(\\n)?", True, (left, left + "\n"))
    if form == "alternation":
        return Delimiter(f"{e_left}|{e_right}", True, (left, right))
    if form == "char_class":
        chars = draw(st.text(DELIMITER_ALPHABET, min_size=1, max_size=3))
        return Delimiter(_char_class(chars), True, tuple(dict.fromkeys(chars)))
    if form == "greedy_class":
        return Delimiter(
            f"{e_left}{_char_class('ab')}+{e_right}",
            True,
            (left + "a" + right, left + "ab" + right),
        )
    if form == "greedy_any":
        # A partial match can always grow to the end of the buffer: holds everything after `left`.
        return Delimiter(f"{e_left}.*{e_right}", True, (left + right, left + "x" + right))
    if form == "anchored_end":
        # `$` also matches before a trailing newline: a match there ends before the edge.
        return Delimiter(f"{e_left}$", True, (left, left + "\n"))
    if form == "negated_class":
        # A class that matches anything but `right` (including what the interpreter extends with).
        return Delimiter(f"{e_left}[^{regex.escape(right[0])}]*{e_right}", True, (left + right, left + "x" + right))
    if form == "optional_lookahead":
        return Delimiter(f"{e_left}(?:(?=\\n)|(?!\\n))(?:{e_right}(?=.))?", True, (left, left + right + "x"))
    if form == "lookbehind_then":
        return Delimiter(f"(?<={e_left}){e_right}", True, (left + right, right))
    if form == "negative_lookbehind":
        return Delimiter(f"(?<!{e_left}){e_right}", True, (right, left + right))
    if form == "word_boundary":
        return Delimiter(f"\\b{e_left}", True, (left, " " + left))
    if form == "multiline_start":
        return Delimiter(f"(?m)^{e_left}", True, ("\n" + left, left))
    if form == "search_start":
        return Delimiter(f"\\G{e_left}", True, (left,))
    if form == "lazy_any":
        return Delimiter(f"{e_left}.*?{e_right}", True, (left + right, left + "xy" + right))
    if form == "case_insensitive":
        return Delimiter(f"(?i){e_left}", True, (left, left.upper()))
    if form == "empty_matchable":
        # Matches the empty string everywhere: together with another such delimiter this is
        # what sends the interpreter into its no-progress loop.
        return Delimiter(f"(?:{e_left})?", True, ("", left))
    if form == "start":
        return Delimiter("^", True, ("",))
    if form == "named_word":
        return Delimiter(
            f"{e_left}(?P<{group}>\\w+){e_right}", True, (left + tool + right,), (group,)
        )
    if form == "named_lazy":
        return Delimiter(
            f"{e_left}(?P<{group}>.*?){e_right}",
            True,
            (left + tool + right, left + right),
            (group,),
        )
    # An optional named group: a capture that may be None is dropped from the transform scope.
    return Delimiter(
        f"{e_left}(?:=(?P<{group}>[\\w.]+))?{e_right}",
        True,
        (left + right, left + "=" + tool + right),
        (group,),
    )


def delimiters(*, allow_captures: bool = True) -> st.SearchStrategy[Delimiter]:
    return st.one_of(
        literal_delimiters(),
        literal_list_delimiters(),
        pattern_delimiters(allow_captures=allow_captures),
    )


# --------------------------------------------------------------------------------------------------
# Content parsers: arguments and payloads
# --------------------------------------------------------------------------------------------------

padding = st.sampled_from(["", "", " ", "\n", " \n ", "\t"])


def _padded(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(padding, inner, padding).map("".join)


noise = st.text(NOISE_ALPHABET, max_size=8)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 1000),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(NOISE_ALPHABET, max_size=5),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(
            st.sampled_from(ARGUMENT_KEYS + ("name", "arguments")), children, max_size=3
        ),
    ),
    max_leaves=6,
)
argument_dicts = st.dictionaries(
    st.sampled_from(ARGUMENT_KEYS),
    st.one_of(st.sampled_from(ARGUMENT_TEXTS), json_values),
    max_size=3,
)
tool_call_objects = st.fixed_dictionaries(
    {"name": st.sampled_from(TOOL_NAMES), "arguments": argument_dicts}
)


def _render_unquoted(obj: dict) -> str:
    return "{" + ",".join(f"{key}:{json.dumps(value)}" for key, value in obj.items()) + "}"


@st.composite
def unquoted_payloads(draw) -> str:
    """JSON with bare keys for `unquoted_keys`: whitespace around keys now and then (kept since
    5.24.0), and string values holding key-like text (`"x,b:1"`, which 5.24.0 leaves alone)."""
    obj = draw(argument_dicts)
    space = st.sampled_from(["", "", " ", "\n", "  "])
    items = []
    for key, value in obj.items():
        if isinstance(value, str) and draw(one_in(3)):
            value = value + draw(st.sampled_from([",b:1", "{a:2}", '\\",n:', ", flag :"]))
        items.append(f"{draw(space)}{key}{draw(space)}:{draw(space)}{json.dumps(value)}")
    return "{" + ",".join(items) + draw(space) + "}"


@st.composite
def json_payloads(draw, args: dict) -> str:
    kind = draw(
        st.sampled_from(
            ["value", "tool_call", "tool_call_list", "unquoted", "delimited", "broken", "noise"]
        )
    )
    if kind == "value":
        return json.dumps(draw(json_values), ensure_ascii=draw(st.booleans()))
    if kind == "tool_call":
        return json.dumps(draw(tool_call_objects))
    if kind == "tool_call_list":
        return json.dumps(draw(st.lists(tool_call_objects, max_size=3)))
    if kind == "unquoted":
        return draw(unquoted_payloads())
    if kind == "delimited":
        delims = args.get("string_delims") if isinstance(args, dict) else None
        pairs = [p for p in (delims or []) if isinstance(p, (list, tuple)) and len(p) == 2]
        opener, closer = draw(st.sampled_from(pairs)) if pairs else ('"', '"')
        value = draw(st.text(NOISE_ALPHABET, max_size=5))
        key = draw(st.sampled_from(ARGUMENT_KEYS))
        return "{" + f'"{key}": {opener}{value}{closer}' + "}"
    if kind == "broken":
        full = json.dumps(draw(tool_call_objects))
        return full[: draw(st.integers(0, len(full) - 1))]
    return draw(noise)


# python-call-list: `[name(key=value, ...), ...]`, rendered from JSON-like values with every
# spelling the grammar allows (both quotes, escapes, surrogate pairs, True/true, whitespace between
# tokens), and now and then with what it refuses (see CALL_LIST_BREAKAGES).
CALL_NAMES = TOOL_NAMES + ("ns.get-weather", "a.b", "x-y", "_f9")
CALL_SPACE = ("", "", "", " ", "\n", "\t", "\r\n", "  ")
# Whitespace the grammar does not allow (only [ \t\n\r] is).
FOREIGN_SPACE = ("\xa0", "\u2028", "\x0c", "\x0b", "\u3000")
# Values at and past the limits, odd numbers and strings, as source text.
CALL_LIST_ATOMS = (
    "9007199254740991", "-9007199254740991", "9007199254740992", "-9007199254740992",
    "12345678901234567", "123456789012345678901234567890", "1e308", "1e309", "-1e400", "1e-400",
    "0", "-0", "-0.0", "01", "1.", ".5", "+1", "1.5e", "1E+2", "0.1e-2", "-", "nan", "inf",
    "'\\u00e9'", "'\\ud83d\\ude00'", "'\\uD83D\\uDE00'", "'\\ud83d'", "'\\udc00x'", "'\\ud83d\\u0041'",
    "'\\u12'", "'\\uzzzz'", "'\\x41'", "'\\q'", "'\\/\\b\\f\\n\\r\\t'", "'a\"b'", '"a\'b"', "'\\''",
    '"\\""', "'line\nbreak'", "'\\\n'", "'\ud800'", "'unterminated", "x", "True", "true", "None",
    "null", "False", "false", "Truex", "True.x", "{1: 2}", "{'k': 1, 'k': 2}", "[1, 2,]", "{}", "[]",
)


def _call_list_string(draw, text: str) -> str:
    quote = draw(st.sampled_from(["'", '"']))
    out = [quote]
    for char in text:
        if char == quote or char == "\\":
            out.append("\\" + char)
        elif char in "\n\r\t\b\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}[char])
        elif ord(char) > 0xFFFF and draw(st.booleans()):  # as a surrogate pair of escapes
            code = ord(char) - 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)))
        elif draw(one_in(6)):
            out.append(draw(st.sampled_from(["\\u%04x", "\\u%04X"])) % ord(char) if ord(char) <= 0xFFFF else char)
        else:
            out.append(char)
    out.append(quote)
    return "".join(out)


def _call_list_value(draw, value: Any) -> str:
    space = st.sampled_from(CALL_SPACE)
    if value is None:
        return draw(st.sampled_from(["None", "null"]))
    if value is True or value is False:
        return draw(st.sampled_from(["True", "true"] if value else ["False", "false"]))
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _call_list_string(draw, value)
    if isinstance(value, list):
        items = [draw(space) + _call_list_value(draw, v) + draw(space) for v in value]
        return "[" + ",".join(items) + "]"
    items = [
        draw(space) + _call_list_string(draw, k) + draw(space) + ":" + draw(space) + _call_list_value(draw, v)
        for k, v in value.items()
    ]
    return "{" + ",".join(items) + draw(space) + "}"


@st.composite
def call_list_payloads(draw) -> str:
    """The text of a python-call-list region: mostly valid, sometimes broken in one place."""
    space = st.sampled_from(CALL_SPACE)
    calls = []
    for _ in range(draw(st.integers(0, 3))):
        arguments = []
        for key, value in draw(argument_dicts).items():
            if draw(one_in(5)):
                rendered = draw(st.sampled_from(CALL_LIST_ATOMS))
            elif isinstance(value, str) and value in ARGUMENT_TEXTS and draw(st.booleans()):
                rendered = value if value not in ("", " 7 ") else repr(value)  # bare, as in `n=3`
            else:
                rendered = _call_list_value(draw, value)
            arguments.append(f"{draw(space)}{key}{draw(space)}={draw(space)}{rendered}{draw(space)}")
        name = draw(st.sampled_from(CALL_NAMES))
        calls.append(f"{draw(space)}{name}{draw(space)}({','.join(arguments)}){draw(space)}")
    text = f"{draw(space)}[{','.join(calls)}]{draw(space)}"
    breakage = draw(st.sampled_from(["none"] * 6 + list(CALL_LIST_BREAKAGES)))
    return CALL_LIST_BREAKAGES[breakage](draw, text) if breakage != "none" else text


def _insert_somewhere(draw, text: str, piece: str) -> str:
    at = draw(st.integers(0, len(text)))
    return text[:at] + piece + text[at:]


CALL_LIST_BREAKAGES: dict = {
    "trailing_text": lambda draw, text: text + draw(st.sampled_from(["x", ";", "]", "\n<|eot|>", ","])),
    "foreign_space": lambda draw, text: _insert_somewhere(draw, text, draw(st.sampled_from(FOREIGN_SPACE))),
    "trailing_comma": lambda draw, text: text.replace(")", ",)", 1).replace("]", ",]", 1) if draw(st.booleans()) else text.replace(")", ",)", 1),
    "positional": lambda draw, text: text.replace("(", "(1, ", 1),
    "cut": lambda draw, text: text[: draw(st.integers(0, max(0, len(text) - 1)))],
    "repeated_keyword": lambda draw, text: text.replace("(", "(a=1, a=2, ", 1),
    "deep": lambda draw, text: "[f(a=" + "[" * (n := draw(st.sampled_from([99, 100, 101]))) + "]" * n + ")]",
    "deep_dict": lambda draw, text: "[f(a=" + "{'k':" * (n := draw(st.sampled_from([99, 100, 101]))) + "1" + "}" * n + ")]",
    "bare_object": lambda draw, text: text.strip().lstrip("[").rstrip("]"),
}


# xml-inline tag patterns, each with a renderer for (key, value) pairs that match it.
XML_TAG_STYLES = {
    "backreference": (
        r"<(?P<key>\w+)>(?P<value>.*?)</(?P=key)>",
        lambda key, value: f"<{key}>{value}</{key}>",
    ),
    "parameter": (
        r"<parameter=(?P<key>[^>\n]+)>\s*(?P<value>.*?)\s*</parameter>",
        lambda key, value: f"<parameter={key}>\n{value}\n</parameter>",
    ),
    "attribute": (
        r'<arg (?P<key>\w+)="(?P<value>[^"]*)"/>',
        lambda key, value: f'<arg {key}="{value}"/>',
    ),
    # No `value` group: every key maps to "" (or what the value_parser makes of it).
    "key_only": (r"\[(?P<key>\w+)\]", lambda key, value: f"[{key}]"),
    # An optional `value` group: an absent value is None, which a value_parser may choke on.
    "optional_value": (
        r"\{(?P<key>\w+)(?:=(?P<value>[^}]*))?\}",
        lambda key, value: "{" + key + ("" if value == "" else "=" + value) + "}",
    ),
    # No `key` group: the interpreter raises ValueError at parse time once a tag matches.
    "missing_key": (r"<v>(?P<value>.*?)</v>", lambda key, value: f"<v>{value}</v>"),
    # A `type` group saying how to read the value (for value_parser_by); it may be left out.
    "typed": (
        r'<arg name="(?P<key>\w+)"(?: type="(?P<type>\w+)")?>(?P<value>.*?)</arg>',
        lambda key, value, kind: f'<arg name="{key}"' + (f' type="{kind}"' if kind else "") + f">{value}</arg>",
    ),
}
# What the "typed" style's `type` group captures, and value_parser_by specs over it: well formed
# (some captures without a parser fall back to value_parser), naming a group the pattern lacks
# (ValueError once a tag matches), malformed (ValueError), not a dict at all (AttributeError), or
# None (ignored when parsing, but its key still turns the tool-schema casts off).
VALUE_TYPES = ("int", "str", "json", "bool", "float", "other")
value_parser_by_specs = st.one_of(
    st.fixed_dictionaries(
        {
            "group": st.just("type"),
            "parsers": st.dictionaries(
                st.sampled_from(VALUE_TYPES),
                st.sampled_from(
                    [{"name": "int"}, {"name": "text"}, {"name": "json"}, {"name": "bool"}, {"name": "float"}, {}]
                ),
                max_size=4,
            ),
        }
    ),
    st.sampled_from(
        [
            {"group": "kind", "parsers": {"int": {"name": "int"}}},
            {"group": "type"},
            {"group": 3, "parsers": {}},
            {"group": "type", "parsers": [["int", {"name": "int"}]]},
            {"group": "type", "parsers": {"int": {"name": "no-such-parser"}}},
            "type",
            ["type"],
            None,
        ]
    ),
)

value_parsers = st.one_of(
    st.none(),
    st.fixed_dictionaries({"name": st.sampled_from(["text", "int", "float", "bool", "json"])}),
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["text", "json", "kv-lines"]),
            "args": st.fixed_dictionaries({"strip": st.booleans()}),
        }
    ),
    st.just({}),  # name defaults to "text"
    st.just({"name": "no-such-parser"}),  # KeyError at parse time
)


@st.composite
def xml_inline_args(draw) -> tuple[dict, str]:
    style = draw(st.sampled_from(sorted(XML_TAG_STYLES)))
    args: dict = {"tag_pattern": XML_TAG_STYLES[style][0]}
    value_parser = draw(value_parsers)
    if value_parser is not None:
        args["value_parser"] = value_parser
    if draw(st.booleans()):
        args["merge_duplicates"] = draw(st.booleans())
    if style == "typed" or draw(one_in(8)):
        args["value_parser_by"] = draw(value_parser_by_specs)
    malformed = draw(st.sampled_from(["no"] * 18 + ["missing", "bad_regex"]))
    if malformed == "missing":
        del args["tag_pattern"]  # ValueError at parse time
    elif malformed == "bad_regex":
        args["tag_pattern"] = "<(?P<key>"  # regex error at parse time
    return args, style


@st.composite
def xml_inline_payloads(draw, style: str) -> str:
    render = XML_TAG_STYLES[style][1]
    pairs = draw(
        st.lists(
            st.tuples(
                st.sampled_from(ARGUMENT_KEYS), st.sampled_from(ARGUMENT_TEXTS + ("a b", "<x>"))
            ),
            max_size=4,
        )
    )
    parts = []
    for key, value in pairs:
        parts.append(draw(padding))
        if style == "typed":
            parts.append(render(key, value, draw(st.sampled_from(VALUE_TYPES + ("",)))))
        else:
            parts.append(render(key, value))
    if draw(one_in(5)):
        parts.append(draw(noise))
    return "".join(parts)


@st.composite
def kv_lines_args(draw) -> dict:
    args: dict = {}
    if draw(st.booleans()):
        args["line_sep"] = draw(st.sampled_from(["\n", ";", ",", "||"]))
    if draw(st.booleans()):
        args["kv_sep"] = draw(st.sampled_from([":", "=", ": ", "=>"]))
    if draw(st.booleans()):
        args["strip"] = draw(st.booleans())
    value_parser = draw(value_parsers)
    if value_parser is not None:
        args["value_parser"] = value_parser
    if draw(one_in(25)):
        args[draw(st.sampled_from(["line_sep", "kv_sep"]))] = (
            ""  # ValueError("empty separator") at parse time
        )
    return args


@st.composite
def kv_lines_payloads(draw, args: dict) -> str:
    line_sep = args.get("line_sep", "\n") or "\n"
    kv_sep = args.get("kv_sep", ":") or ":"
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        shape = draw(st.sampled_from(["plain", "plain", "plain", "spaced", "noise"]))
        key = draw(st.sampled_from(ARGUMENT_KEYS))
        value = draw(st.sampled_from(ARGUMENT_TEXTS))
        if shape == "noise":
            lines.append(draw(noise))  # no separator: skipped
        elif shape == "spaced":
            lines.append(f" {key} {kv_sep} {value} ")
        else:
            lines.append(f"{key}{kv_sep}{value}")
    return line_sep.join(lines)


# Text for the scalar parsers: mostly what each accepts (including Python's generous spellings:
# "1_000", non-ASCII digits, "nan", "+5"), sometimes what it refuses (a ValueError at close).
odd_number_texts = st.sampled_from(
    ["nan", "-inf", "1e3", "1_000", "٣", "4.0", "0x10", "", "+5", "true", "yes", "TRUE"]
)
scalar_texts = {
    "int": st.one_of(
        st.integers(-(10**6), 10**6).map(str),
        st.integers(-(10**6), 10**6).map(str),
        odd_number_texts,
    ),
    "float": st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.integers(-99, 99).map(str),
        odd_number_texts,
    ),
    "bool": st.sampled_from(["true", "True", "1", "0", "false", "yes", "TRUE", "", "2"]),
}


@st.composite
def content_configs(
    draw, *, parser: Optional[str] = None
) -> tuple[str, Optional[dict], st.SearchStrategy[str]]:
    """(content parser name, content_args or None when absent, payload strategy)."""
    parser = parser or draw(
        st.sampled_from(
            ["text"] * 5
            + ["int", "float", "bool", "json", "json", "xml-inline", "kv-lines", "python-call-list"]
        )
    )
    if parser in ("text", "int", "float", "bool"):
        args = draw(
            st.sampled_from(
                [None, {}, {"strip": True}, {"strip": False}, {"strip": 0}, {"unused": 1}]
            )
        )
        inner = noise if parser == "text" else scalar_texts[parser]
        return parser, args, _padded(inner)
    if parser == "json":
        args = {}
        if draw(st.booleans()):
            args["unquoted_keys"] = draw(st.booleans())
        if draw(st.booleans()):
            args["string_delims"] = draw(
                st.lists(
                    st.sampled_from([['<|"|>', '<|"|>'], ["'", "'"], ["«", "»"], ["<s>", "</s>"]]),
                    max_size=2,
                )
            )
        if draw(st.booleans()):
            args["allow_non_json"] = draw(st.booleans())
        if draw(one_in(4)):
            args["strip"] = draw(st.booleans())
        return parser, args or draw(st.sampled_from([None, {}])), _padded(json_payloads(args))
    if parser == "xml-inline":
        args, style = draw(xml_inline_args())
        return parser, args, xml_inline_payloads(style)
    if parser == "python-call-list":  # (it takes no arguments, and ignores any)
        args = draw(st.sampled_from([None, None, {}, {"unused": 1}]))
        return parser, args, call_list_payloads()
    args = draw(kv_lines_args())
    return parser, args, kv_lines_payloads(args)


# --------------------------------------------------------------------------------------------------
# Transforms
# --------------------------------------------------------------------------------------------------

transform_literals = st.one_of(
    st.sampled_from(["function", "", "{", "}", "{}", "{a-b}", "{ content }", "x", "{1.}"]),
    st.integers(-2, 2),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, width=16),
)


@st.composite
def transforms(draw, captures: tuple[str, ...], each: bool, structured: bool = True) -> Any:
    """A transform whose placeholders mostly resolve: "{content}" (or the list items' keys under
    transform_each), the delimiters' named groups, dotted paths into the content, and now and then a
    name that never resolves (KeyError at parse time)."""
    if each:  # the scope is the captures plus each list item's keys
        names = [*captures, "name", "arguments", "a"]
        dotted = ["{arguments.a}", "{name.a}"]
    else:  # the scope is the captures plus "content"
        names = [*captures, "content", "content"]
        # "{content.0}" indexes a list (ValueError); "{名}" is a placeholder too (\w is Unicode).
        dotted = ["{content.name}", "{content.arguments}", "{content.a}", "{content.0}", "{名}"]
    if not structured and not draw(one_in(5)):
        dotted = []  # dotted paths into a scalar always fail; keep that case, but rare
    placeholders = [f"{{{n}}}" for n in names] + dotted + ["{missing}"]
    placeholder = st.sampled_from(placeholders)
    shape = draw(st.sampled_from(["whole", "tool_call", "tool_call_content", "tree"]))
    if shape == "whole":
        return draw(placeholder)
    name_source = "{name}" if ("name" in captures or each) else draw(placeholder)
    if shape == "tool_call":
        arguments = "{arguments}" if each else "{content}"
        return {"type": "function", "function": {"name": name_source, "arguments": arguments}}
    if shape == "tool_call_content":
        return {"type": "function", "function": "{content}" if not each else "{arguments}"}
    leaves = st.one_of(placeholder, placeholder, transform_literals)
    return draw(
        st.recursive(
            leaves,
            lambda children: st.one_of(
                st.lists(children, max_size=3),
                st.dictionaries(
                    st.sampled_from(["type", "function", "name", "arguments", "x"]),
                    children,
                    max_size=3,
                ),
            ),
            max_leaves=5,
        )
    )


# --------------------------------------------------------------------------------------------------
# Fields and templates
# --------------------------------------------------------------------------------------------------


def _put_delimiter(spec: dict, kind: str, delimiter: Delimiter) -> None:
    spec[f"{kind}_pattern" if delimiter.is_pattern else kind] = delimiter.value


@st.composite
def field_plans(
    draw,
    name: str,
    *,
    implicit: bool,
    tool_call: bool = False,
    valid_only: bool = False,
    shared: tuple[Delimiter, ...] = (),
) -> FieldPlan:
    """One field. `shared` holds the delimiters of the fields drawn before: reusing one now and then
    makes two delimiters match at one position with one length: the field *name* breaks the tie.
    """

    def some_delimiter() -> Delimiter:
        if shared and draw(one_in(4)):
            return draw(st.sampled_from(shared))
        return draw(delimiters())

    spec: dict = {}
    open_delimiter = None if implicit else some_delimiter()
    # No close: the field runs to the end. For the implicit field that is the plain "leftover text
    # is content" shape, so it gets an even chance.
    if implicit:
        has_close = draw(st.booleans())
    else:
        has_close = not draw(one_in(5))
    close_delimiter = some_delimiter() if has_close else None
    if tool_call:
        return _tool_call_field(draw, name, open_delimiter or draw(delimiters()), close_delimiter)
    if open_delimiter is not None:
        _put_delimiter(spec, "open", open_delimiter)
    if close_delimiter is not None:
        _put_delimiter(spec, "close", close_delimiter)
    parser, args, payloads = draw(content_configs())
    if parser != "text" or draw(st.booleans()):
        spec["content"] = parser
    if args is not None:
        spec["content_args"] = args
    if draw(one_in(100)):
        spec["content_args"] = draw(st.sampled_from([[], None, "x"]))  # accepted; fails once parsed
    repeats = draw(st.sampled_from([None, None, True, True, False, 1, "yes", 0]))
    if repeats is not None:
        spec["repeats"] = repeats
        # `join` needs string values: mostly on text fields, now and then elsewhere (ValueError).
        if repeats and draw(one_in(3 if parser == "text" else 13)):
            spec["join"] = draw(st.sampled_from(["", "\n", ", ", "|"]))
    if draw(one_in(10)):
        spec["optional"] = draw(st.sampled_from([False, False, True, 0]))
    captures = tuple(
        dict.fromkeys(
            (open_delimiter.captures if open_delimiter else ())
            + (close_delimiter.captures if close_delimiter else ())
        )
    )
    # Named groups demand a transform; leave one out now and then (a template error).
    if captures:
        wants_transform = valid_only or not draw(one_in(31))
    else:
        wants_transform = draw(one_in(4))
    if wants_transform:
        each = (parser == "json" and draw(one_in(3))) or (parser == "python-call-list" and not draw(one_in(4)))
        spec["transform"] = draw(
            transforms(captures, each, structured=parser in ("json", "xml-inline", "kv-lines", "python-call-list"))
        )
        if spec["transform"] is None and valid_only:
            # A transform tree can collapse to the literal None, which counts as no transform:
            # named groups without one are a template error, and so is transform_each without
            # one; this template must be valid.
            if captures:
                spec["transform"] = "{content}"
            else:
                each = False
        if each or draw(one_in(10)):
            spec["transform_each"] = each
    spec = dict(draw(st.permutations(list(spec.items()))))
    return FieldPlan(name, spec, open_delimiter, close_delimiter, payloads)


def _tool_call_field(
    draw, name: str, open_delimiter: Delimiter, close_delimiter: Optional[Delimiter]
) -> FieldPlan:
    """A field shaped like the tool-call fields of real templates, so tool-schema coercion runs."""
    recipe = draw(
        st.sampled_from(["named_xml", "named_kv", "json_object", "json_list", "named_json", "python_calls"])
    )
    named_open = Delimiter(
        r"<call=(?P<name>\w+)>", True, tuple(f"<call={t}>" for t in TOOL_NAMES), ("name",)
    )
    spec: dict = {"repeats": draw(st.sampled_from([True, True, False]))}
    if recipe in ("named_xml", "named_kv", "named_json"):
        if draw(st.booleans()):
            open_delimiter = named_open
        else:
            left = draw(literal_strings)
            open_delimiter = Delimiter(
                regex.escape(left) + r"(?P<name>\w+)>",
                True,
                tuple(left + t + ">" for t in TOOL_NAMES),
                ("name",),
            )
        parser = {"named_xml": "xml-inline", "named_kv": "kv-lines", "named_json": "json"}[recipe]
        parser, args, payloads = draw(content_configs(parser=parser))
        spec["transform"] = {
            "type": "function",
            "function": {"name": "{name}", "arguments": "{content}"},
        }
    elif recipe == "python_calls":
        parser, args, payloads = draw(content_configs(parser="python-call-list"))
        spec["transform"] = {
            "type": "function",
            "function": {"name": "{name}", "arguments": "{arguments}"},
        }
        spec["transform_each"] = True
    elif recipe == "json_object":
        parser, args, payloads = draw(content_configs(parser="json"))
        payloads = _padded(tool_call_objects.map(json.dumps))
        spec["transform"] = {"type": "function", "function": "{content}"}
    else:
        parser, args, payloads = draw(content_configs(parser="json"))
        payloads = _padded(st.lists(tool_call_objects, max_size=3).map(json.dumps))
        spec["transform"] = {
            "type": "function",
            "function": {"name": "{name}", "arguments": "{arguments}"},
        }
        spec["transform_each"] = True
    spec["content"] = parser
    if args is not None:
        spec["content_args"] = args
    _put_delimiter(spec, "open", open_delimiter)
    if close_delimiter is None or draw(st.booleans()):
        close_delimiter = Delimiter("</call>", False, ("</call>",))
    _put_delimiter(spec, "close", close_delimiter)
    return FieldPlan(name, spec, open_delimiter, close_delimiter, payloads)


anchor_delimiters = st.one_of(
    st.sampled_from(["<|a|>\n", "<a>", "\n", "a", "|"]).map(lambda s: Delimiter(s, False, (s,))),
    literal_delimiters(),
    literal_list_delimiters(),
    pattern_delimiters(),
)

default_values = st.one_of(
    st.sampled_from(["assistant", "", "x"]),
    st.sampled_from([None, 0, False]),
    st.just([]),
    st.just({}),
    st.just(["x"]),
    st.just({"a": [1, {"b": ""}]}),
)


@st.composite
def template_plans(draw, *, tool_call: bool = False, valid_only: bool = False) -> TemplatePlan:
    count = draw(st.integers(1, 4))
    name_pool = st.sampled_from(FIELD_NAMES * 4 + ODD_FIELD_NAMES)
    names = draw(st.lists(name_pool, min_size=count, max_size=count, unique=True))
    implicit_index = draw(st.none() | st.integers(0, count - 1))
    tool_call_index = draw(st.integers(0, count - 1)) if tool_call else None
    if tool_call_index is not None and tool_call_index == implicit_index:
        implicit_index = None
    fields: list[FieldPlan] = []
    for index, name in enumerate(names):
        shared = tuple(d for f in fields for d in (f.open, f.close) if d is not None)
        fields.append(
            draw(
                field_plans(
                    name,
                    implicit=index == implicit_index,
                    tool_call=index == tool_call_index,
                    valid_only=valid_only,
                    shared=shared,
                )
            )
        )
    template: dict = {}
    version = draw(
        st.sampled_from(["absent", "absent", 1, 1.0, True])
    )  # 1.0 and True compare equal to 1
    if version != "absent":
        template["version"] = version
    if draw(st.booleans()):
        keys = st.sampled_from(FIELD_NAMES * 2 + ("role", "extra") + ODD_FIELD_NAMES[:4])
        template["defaults"] = draw(st.dictionaries(keys, default_values, max_size=3))
    template["fields"] = {plan.name: plan.spec for plan in fields}
    anchor = draw(anchor_delimiters)
    template["start_anchor_pattern" if anchor.is_pattern else "start_anchor"] = anchor.value
    template = dict(draw(st.permutations(list(template.items()))))
    return TemplatePlan(template, fields, anchor)


# --------------------------------------------------------------------------------------------------
# Outputs, prefixes, chunkings
# --------------------------------------------------------------------------------------------------


@st.composite
def near_misses(draw, sample: str) -> str:
    """A delimiter sample that almost matches: truncated, one character changed, or one inserted."""
    if not sample:
        return draw(noise)
    how = draw(st.sampled_from(["truncate", "change", "insert", "drop_first"]))
    index = draw(st.integers(0, len(sample) - 1))
    if how == "truncate":
        return sample[:index]
    if how == "drop_first":
        return sample[1:]
    char = draw(st.sampled_from(DELIMITER_ALPHABET + "x"))
    if how == "change":
        return sample[:index] + char + sample[index + 1 :]
    return sample[:index] + char + sample[index:]


def _samples(delimiter: Optional[Delimiter]) -> tuple[str, ...]:
    return delimiter.samples if delimiter is not None and delimiter.samples else ("",)


@st.composite
def segments(draw, plan: TemplatePlan) -> str:
    kind = draw(
        st.sampled_from(
            ["region"] * 5 + ["open", "close", "payload", "noise", "near_miss", "anchor"]
        )
    )
    fieldplan = draw(st.sampled_from(plan.fields))
    if kind == "region":
        parts = [draw(st.sampled_from(_samples(fieldplan.open)))]
        parts.append(draw(fieldplan.payloads))
        if not draw(one_in(6)):  # now and then leave the region unterminated
            parts.append(draw(st.sampled_from(_samples(fieldplan.close))))
        return "".join(parts)
    if kind == "open":
        return draw(st.sampled_from(_samples(fieldplan.open)))
    if kind == "close":
        return draw(st.sampled_from(_samples(fieldplan.close)))
    if kind == "payload":
        return draw(fieldplan.payloads)
    if kind == "anchor":
        return draw(st.sampled_from(_samples(plan.anchor)))
    if kind == "near_miss":
        delimiter = draw(
            st.sampled_from([d for d in (fieldplan.open, fieldplan.close, plan.anchor) if d])
        )
        return draw(near_misses(draw(st.sampled_from(_samples(delimiter)))))
    return draw(noise)


@st.composite
def outputs(draw, plan: TemplatePlan, max_segments: int = 8) -> str:
    return "".join(draw(st.lists(segments(plan), min_size=1, max_size=max_segments)))


@st.composite
def prefixes(draw, plan: TemplatePlan) -> Optional[str]:
    kind = draw(
        st.sampled_from(
            ["empty"] * 8 + ["no_anchor", "no_anchor", "turns"] * 3 + ["overlap"] * 2 + ["none"]
        )
    )
    if kind == "empty":
        return ""
    if kind == "none":
        return None  # the interpreter demands a prefix: ValueError after template validation
    if kind == "no_anchor":
        return draw(outputs(plan, max_segments=3))
    anchor_sample = st.sampled_from(_samples(plan.anchor))
    if kind == "turns":
        # Multi-turn history: earlier turns, each starting with an anchor; only the last counts.
        turns = draw(
            st.lists(
                st.tuples(anchor_sample, outputs(plan, max_segments=2)), min_size=1, max_size=3
            )
        )
        return draw(outputs(plan, max_segments=1)) + "".join(a + body for a, body in turns)
    # The anchor runs into a delimiter: the truncated prefix starts in the middle of it.
    delimiter_sample = draw(
        st.sampled_from([s for f in plan.fields for s in _samples(f.open) + _samples(f.close)])
    )
    cut = draw(st.integers(0, len(delimiter_sample)))
    return (
        draw(anchor_sample)
        + delimiter_sample[cut:]
        + draw(st.sampled_from(["", *_samples(plan.anchor)]))
    )


@st.composite
def chunkings(draw, text: str) -> list[str]:
    """Split `text` into chunks: whole, one character each, or at random cut points (repeated cut
    points give empty chunks, which must produce no events)."""
    mode = draw(st.sampled_from(["whole", "chars", "cuts", "cuts", "cuts"]))
    if mode == "whole":
        chunks = [text]
    elif mode == "chars":
        chunks = list(text)
    else:
        cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
        bounds = [0, *cuts, len(text)]
        chunks = [text[start:end] for start, end in zip(bounds, bounds[1:])]
    if draw(one_in(6)):
        chunks.insert(draw(st.integers(0, len(chunks))), "")
    return chunks


# --------------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------------


def get_weather(a: int, b: float, n: Optional[int] = None, flag: bool = False) -> str:
    """Look up the weather.

    Args:
        a: how many days
        b: the temperature threshold
        n: an optional count
        flag: whether to use metric units
    """
    return ""


def ab(a: list[int], b: dict, n: Union[int, str], flag: Optional[bool] = None) -> None:
    """Take containers and unions.

    Args:
        a: some integers
        b: a mapping
        n: a number or a word
        flag: a nullable switch
    """


PYTHON_TOOLS: tuple[Callable, ...] = (get_weather, ab)


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Mixed(Enum):
    ONE = 1
    A = "a"


class NoMembers(Enum):
    pass


class Opaque:
    """A custom class: no JSON schema for it (TypeHintParsingException)."""


_TOOL_NAMESPACE = {
    "Any": Any,
    "Optional": Optional,
    "Union": Union,
    "Literal": Literal,
    "Color": Color,
    "Mixed": Mixed,
    "NoMembers": NoMembers,
    "Opaque": Opaque,
}


def python_tool(source: str) -> Callable:
    """The function (or bound method) that `source` defines as `tool`; the source stays attached so
    a failing case prints as reproducible Python."""
    namespace = dict(_TOOL_NAMESPACE)
    exec(source, namespace)  # noqa: S102 - test-generated source, built from the fixed pieces below
    tool = namespace["tool"]
    getattr(tool, "__func__", tool).tool_source = (
        source  # a bound method reads its function's attributes
    )
    return tool


# Type hints get_json_schema turns into schemas (unions, enums, Literal, nested containers)
# and, in REFUSED_TYPE_HINTS, some it refuses (TypeHintParsingException): a one-element or open
# tuple, a custom class, an Enum without members.
# fmt: off
TYPE_HINTS = (
    "int", "float", "str", "bool", "list", "dict", "list[int]", "dict[str, int]", "tuple[int, str]",
    "Optional[int]", "Union[int, str]", "int | None", "int | str | None", "float | bool",
    "Literal['x', 'y']", "Literal[1, 'a']", "Any", "Color", "Mixed", "list[dict[str, float]]",
    "Union[list[int], dict]", "Optional[list[int]]", "None",
)
REFUSED_TYPE_HINTS = ("tuple[int]", "tuple[int, ...]", "Opaque", "NoMembers")
ARGUMENT_DESCRIPTIONS = (
    "a value", "a value (choices: [\"x\", \"y\"])", "a number (choices: [1, 2.5])",
    "spans\n            two lines",
)
# fmt: on


@st.composite
def python_tool_sources(draw) -> str:
    """Source of a function named after a tool, with hints and a Google docstring built from parts:
    sometimes no docstring, an undocumented or unhinted argument, or a bad `(choices: ...)` block.
    """
    name = draw(st.sampled_from(TOOL_NAMES))
    params = draw(st.lists(st.sampled_from(ARGUMENT_KEYS), max_size=4, unique=True))
    as_method = draw(one_in(5))
    signature, described = (["self"] if as_method else []), []
    for param in params:
        hint = draw(st.sampled_from(REFUSED_TYPE_HINTS if draw(one_in(25)) else TYPE_HINTS))
        text = (
            param if draw(one_in(40)) else f"{param}: {hint}"
        )  # an unhinted argument now and then
        if draw(one_in(3)):
            text += " = None"
        signature.append(text)
        if not draw(one_in(30)):
            # "(choices: [x])" is not JSON: get_json_schema lets the JSONDecodeError out.
            description = (
                "broken (choices: [x])"
                if draw(one_in(40))
                else draw(st.sampled_from(ARGUMENT_DESCRIPTIONS))
            )
            described.append(f"            {param}: {description}")
    # Defaults must follow non-defaults: keep the order valid Python.
    signature.sort(key=lambda part: "=" in part)
    returns = draw(st.sampled_from(["", " -> str", " -> Opaque", " -> list[int]"]))
    docstring = ""
    if not draw(one_in(20)):
        docstring = '        """Do something.\n\n'
        if described:
            docstring += "        Args:\n" + "\n".join(described) + "\n"
        if draw(st.booleans()):
            docstring += "\n        Returns:\n            something\n"
        docstring += '        """\n'
    body = docstring + "        return None\n"
    function = f"    def {name}({', '.join(signature)}){returns}:\n{body}"
    if as_method:
        return f"class Holder:\n{function}\ntool = Holder().{name}\n"
    return function.replace("\n    ", "\n")[4:] + f"tool = {name}\n"


# fmt: off
parameter_schemas = st.sampled_from(
    [
        {"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"},
        {"type": "object"}, {"type": "array"}, {"type": "string"},
        {"type": ["integer", "null"]}, {"type": ["boolean", "string"]},
        {"type": ["array", "integer"]},
        {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        {"oneOf": [{"type": "number"}, {"type": "null"}]},
        {"anyOf": [{"type": "array"}, {"type": "object"}]},
        {"type": "integer", "nullable": True}, {"nullable": True}, {}, {"type": 3}, "integer",
    ]
)
# fmt: on


@st.composite
def tool_entries(draw) -> Any:
    shape = draw(
        st.sampled_from(
            ["wrapped"] * 4 + ["bare", "python", "no_parameters", "bad_parameters", "junk"]
        )
    )
    name = draw(st.sampled_from(TOOL_NAMES))
    properties = draw(
        st.dictionaries(st.sampled_from(ARGUMENT_KEYS), parameter_schemas, max_size=4)
    )
    parameters = {"type": "object", "properties": properties}
    if shape == "wrapped":
        return {"type": "function", "function": {"name": name, "parameters": parameters}}
    if shape == "bare":
        return {"name": name, "parameters": parameters}
    if shape == "python":
        if draw(st.booleans()):
            return draw(st.sampled_from(PYTHON_TOOLS))
        return python_tool(draw(python_tool_sources()))
    if shape == "no_parameters":
        return {"type": "function", "function": {"name": name}}
    if shape == "bad_parameters":
        return {
            "function": {
                "name": name,
                "parameters": draw(st.sampled_from(["x", {"properties": []}, None])),
            }
        }
    return draw(st.sampled_from(["not a tool", 3, {"function": {"name": 5}}, {"function": "x"}]))


tools_lists = st.lists(tool_entries(), max_size=3)
# Mostly lists; the interpreter only iterates `tools`, so a tuple works and a dict or a string
# contributes nothing usable (their items are not tools).
tool_collections = st.one_of(
    tools_lists, tools_lists, tools_lists, tools_lists.map(tuple), st.sampled_from([{}, "ab", ()])
)


# --------------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------------


@st.composite
def runs(draw, plan: TemplatePlan, *, always_tools: bool = False) -> Run:
    text = draw(outputs(plan))
    return Run(
        prefix=draw(prefixes(plan)),
        chunks=draw(chunkings(text)),
        tools=draw(tool_collections) if always_tools or draw(one_in(4)) else None,
        after_finalize=draw(st.sampled_from([None, None, "feed", "finalize"])),
    )


def fresh_tree(value: Any) -> Any:
    """A copy that shares no container, not even between two keys of the original (`deepcopy`
    would keep such aliasing). A template read from JSON never aliases: were two `defaults` values
    one list, the interpreter would append to both, which no JSON template can express."""
    if isinstance(value, dict):
        return {key: fresh_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [fresh_tree(item) for item in value]
    return value


@st.composite
def cases_from_plans(
    draw, plans: st.SearchStrategy[TemplatePlan], *, always_tools: bool = False
) -> Case:
    plan = draw(plans)
    return Case(
        template=fresh_tree(plan.template),
        runs=draw(st.lists(runs(plan, always_tools=always_tools), min_size=1, max_size=3)),
    )


def cases() -> st.SearchStrategy[Case]:
    return cases_from_plans(template_plans())


def tool_call_cases() -> st.SearchStrategy[Case]:
    return cases_from_plans(template_plans(tool_call=True), always_tools=True)


def _known_format_plans() -> list[TemplatePlan]:
    """The interpreter's own fallback templates (qwen3, qwen3.5, gemma4), with matching samples."""
    from transformers.cli.serving.utils import _RESPONSE_TEMPLATE_FALLBACKS

    plans = []
    for template in _RESPONSE_TEMPLATE_FALLBACKS.values():
        fields = []
        for name, spec in template["fields"].items():
            open_samples, close_samples = _KNOWN_SAMPLES[
                name, spec.get("open_pattern", spec.get("open", ""))
            ]
            parser = spec.get("content", "text")
            if parser == "json":
                payloads = _padded(
                    st.one_of(
                        tool_call_objects.map(json.dumps),
                        unquoted_payloads(),
                        argument_dicts.map(
                            lambda d: _render_unquoted(
                                {k: '<|"|>' + str(v) + '<|"|>' for k, v in d.items()}
                            )
                        ),
                    )
                )
            elif parser == "xml-inline":
                payloads = xml_inline_payloads("parameter")
            else:
                payloads = _padded(noise)
            fields.append(
                FieldPlan(
                    name,
                    spec,
                    Delimiter(None, True, open_samples),
                    Delimiter(None, True, close_samples),
                    payloads,
                )
            )
        anchors = template["start_anchor"]
        anchors = tuple(anchors) if isinstance(anchors, list) else (anchors,)
        plans.append(TemplatePlan(template, fields, Delimiter(None, False, anchors)))
    return plans


# Strings matching the delimiters of the known templates, keyed by (field, open delimiter).
_KNOWN_SAMPLES = {
    ("reasoning_content", "<think>"): (("<think>", "<think>\n"), ("</think>", "</think>\n\n")),
    ("tool_calls", r"\s*<tool_call>"): (("<tool_call>", "\n<tool_call>\n"), ("</tool_call>",)),
    ("content", ""): (
        ("",),
        ("<|im_end|>", "\n<|im_end|>\n<|endoftext|>", "<|endoftext|>", "<|eot_id|>"),
    ),
    ("tool_calls", r"\s*<tool_call>\s*<function=(?P<name>[^>\n]+)>"): (
        tuple(f"\n<tool_call>\n<function={t}>" for t in TOOL_NAMES),
        ("</function>\n</tool_call>", "</function></tool_call>"),
    ),
    ("reasoning_content", "<|channel>thought\n"): (("<|channel>thought\n",), ("<channel|>",)),
    ("tool_calls", r"<\|tool_call>call:(?P<name>\w+)"): (
        tuple(f"<|tool_call>call:{t}" for t in TOOL_NAMES),
        ("<tool_call|>",),
    ),
}


def known_format_cases() -> st.SearchStrategy[Case]:
    plans = _known_format_plans()
    for plan in plans:  # the content field's samples depend on the template's end markers
        for fieldplan in plan.fields:
            if fieldplan.name == "content" and "close" in fieldplan.spec:
                closes = fieldplan.spec["close"]
                fieldplan.close = Delimiter(closes, False, tuple(closes))
    return cases_from_plans(st.sampled_from(plans), always_tools=False)


# --------------------------------------------------------------------------------------------------
# Invalid templates
# --------------------------------------------------------------------------------------------------

BAD_PATTERNS = ("(", "[a", "a{2,1}", "(?P<1>x)", "*a", ")", "a**", "[z-a]", "\\p{Foo}", "\\")


@st.composite
def invalid_templates(draw) -> InvalidTemplate:
    """A generated valid template broken by one rule of the interpreter's validation."""
    # The rule comes first: draws late in a large example lean towards their first choice.
    rule = draw(st.sampled_from(sorted(_MUTATIONS)))
    plan = draw(template_plans(valid_only=True))
    template = fresh_tree(plan.template)  # a private copy to break
    fields: dict = template["fields"]
    name = draw(st.sampled_from(sorted(fields)))
    spec = fields[name]
    anchor_key = "start_anchor_pattern" if "start_anchor_pattern" in template else "start_anchor"
    if rule == "template_not_dict":
        return InvalidTemplate(
            draw(st.sampled_from([[], "template", None, 1, [template]])), rule, ("",)
        )
    paths = _MUTATIONS[rule](draw, template, name, spec, anchor_key)
    return InvalidTemplate(template, rule, _with_bracketed_names(paths, name))


def _with_bracketed_names(paths: tuple[str, ...], name: str) -> tuple[str, ...]:
    """Each `fields.NAME...` path also in the bracket notation that names which are not plain words
    need (`fields["x-y"].open`), either being acceptable."""
    dotted = f"fields.{name}"
    variants = []
    for path in paths:
        variants.append(path)
        if path == dotted or path.startswith(dotted + "."):
            variants.append(f"fields[{json.dumps(name)}]" + path[len(dotted) :])
            variants.append(f"fields[{json.dumps(name, ensure_ascii=False)}]" + path[len(dotted) :])
    return tuple(dict.fromkeys(variants))


def _set_version(draw, template, name, spec, anchor_key):
    template["version"] = draw(st.sampled_from([2, 0, "1", None, 1.5, [1]]))
    return ("version",)


def _unknown_top_level_key(draw, template, name, spec, anchor_key):
    key = draw(st.sampled_from(["Fields", "start_anchors", "extra", "response_template"]))
    template[key] = draw(json_scalars)
    return (key,)


def _defaults_not_dict(draw, template, name, spec, anchor_key):
    template["defaults"] = draw(
        st.sampled_from([[], "assistant", 0, None, [["role", "assistant"]]])
    )
    return ("defaults",)


def _fields_bad(draw, template, name, spec, anchor_key):
    how = draw(st.sampled_from(["empty", "missing", "list", "string", "none"]))
    if how == "missing":
        del template["fields"]
    else:
        template["fields"] = {"empty": {}, "list": [spec], "string": "x", "none": None}[how]
    return ("fields",)


def _field_not_dict(draw, template, name, spec, anchor_key):
    template["fields"][name] = draw(st.sampled_from([[], "x", None, 1, ["open", "<a>"]]))
    return (f"fields.{name}",)


def _unknown_field_key(draw, template, name, spec, anchor_key):
    key = draw(st.sampled_from(["opens", "Close", "transforms", "parser", "closePattern"]))
    spec[key] = draw(json_scalars)
    return (f"fields.{name}.{key}", f"fields.{name}")


def _unknown_content_parser(draw, template, name, spec, anchor_key):
    spec["content"] = draw(st.sampled_from(["xml", "JSON", "", "kv_lines", None, 1]))
    return (f"fields.{name}.content",)


def _both_literal_and_pattern(draw, template, name, spec, anchor_key):
    kind = draw(st.sampled_from(["open", "close"]))
    spec[kind] = draw(literal_strings)
    spec[f"{kind}_pattern"] = regex.escape(draw(literal_strings))
    return (f"fields.{name}.{kind}", f"fields.{name}")


def _bad_literal(draw, template, name, spec, anchor_key):
    kind = draw(st.sampled_from(["open", "close"]))
    spec.pop(f"{kind}_pattern", None)
    spec[kind] = draw(
        st.sampled_from(
            [[], [""], "", ["<a>", ""], ["<a>", 1], [None], 5, {"a": 1}, None, ["<a>", ["<b>"]]]
        )
    )
    return (f"fields.{name}.{kind}",)


def _bad_regex(draw, template, name, spec, anchor_key):
    kind = draw(st.sampled_from(["open", "close"]))
    spec.pop(kind, None)
    spec[f"{kind}_pattern"] = draw(st.sampled_from(BAD_PATTERNS))
    return (f"fields.{name}.{kind}_pattern",)


def _join_not_string(draw, template, name, spec, anchor_key):
    spec["repeats"] = True
    spec["join"] = draw(st.sampled_from([1, ["\n"], True, {"x": 1}]))
    return (f"fields.{name}.join",)


def _join_without_repeats(draw, template, name, spec, anchor_key):
    how = draw(st.sampled_from(["absent", False, 0, "", None]))
    spec.pop("repeats", None)
    if how != "absent":
        spec["repeats"] = how
    spec["join"] = draw(st.sampled_from(["", "\n", ","]))
    return (f"fields.{name}.join", f"fields.{name}.repeats")


def _transform_each_not_bool(draw, template, name, spec, anchor_key):
    spec.setdefault("transform", "{content}")
    spec["transform_each"] = draw(st.sampled_from([1, 0, "true", None, []]))
    return (f"fields.{name}.transform_each",)


def _transform_each_without_transform(draw, template, name, spec, anchor_key):
    spec.pop("transform", None)
    spec["transform_each"] = True
    return (f"fields.{name}.transform_each", f"fields.{name}.transform")


def _mixed_placeholder(draw, template, name, spec, anchor_key):
    mixed = draw(
        st.sampled_from(
            ["x{content}", "{content} ", "{{content}}", "{a}{b}", "call:{name}", "{content.}x{y}"]
        )
    )
    spec.pop("transform_each", None)
    where = draw(st.sampled_from(["whole", "nested", "list"]))
    spec["transform"] = {
        "whole": mixed,
        "nested": {"function": {"name": mixed}},
        "list": ["{content}", mixed],
    }[where]
    return (f"fields.{name}.transform",)


def _named_group_without_transform(draw, template, name, spec, anchor_key):
    spec.pop("transform", None)
    spec.pop("transform_each", None)
    kind = draw(st.sampled_from(["open", "close"]))
    spec.pop(kind, None)
    spec[f"{kind}_pattern"] = draw(
        st.sampled_from([r"<(?P<name>\w+)>", r"</(?P<id>a)>", r"(?P<x>)"])
    )
    return (f"fields.{name}.{kind}_pattern", f"fields.{name}.transform", f"fields.{name}")


def _two_implicit_fields(draw, template, name, spec, anchor_key):
    fields = template["fields"]
    if len(fields) == 1:
        fields["zz_implicit"] = {"close": "</z>"}
    for field_spec in fields.values():
        field_spec.pop("open", None)
        field_spec.pop("open_pattern", None)
    return ("fields",)


def _missing_start_anchor(draw, template, name, spec, anchor_key):
    del template[anchor_key]
    return ("start_anchor",)


def _both_start_anchors(draw, template, name, spec, anchor_key):
    template["start_anchor"] = draw(literal_strings)
    template["start_anchor_pattern"] = regex.escape(draw(literal_strings))
    return ("start_anchor",)


def _bad_start_anchor(draw, template, name, spec, anchor_key):
    del template[anchor_key]
    if draw(st.booleans()):
        template["start_anchor"] = draw(st.sampled_from([5, [], [""], "", [1], None, {"a": "b"}]))
        return ("start_anchor",)
    template["start_anchor_pattern"] = draw(st.sampled_from(BAD_PATTERNS))
    return ("start_anchor_pattern",)


def _pattern_not_string(draw, template, name, spec, anchor_key):
    # regex.compile(5) raises TypeError, which the interpreter does not turn into ValueError.
    kind = draw(st.sampled_from(["open", "close"]))
    spec.pop(kind, None)
    spec[f"{kind}_pattern"] = draw(st.sampled_from([5, None, ["<a>"]]))
    return (f"fields.{name}.{kind}_pattern",)


def _content_unhashable(draw, template, name, spec, anchor_key):
    # `content not in CONTENT_PARSERS` with a list or dict raises TypeError in the interpreter.
    spec["content"] = draw(st.sampled_from([["json"], {"name": "json"}]))
    return (f"fields.{name}.content",)


_MUTATIONS: dict[str, Callable] = {
    "version": _set_version,
    "unknown_top_level_key": _unknown_top_level_key,
    "defaults_not_dict": _defaults_not_dict,
    "fields_bad": _fields_bad,
    "template_not_dict": None,  # replaces the whole template; handled in invalid_templates
    "field_not_dict": _field_not_dict,
    "unknown_field_key": _unknown_field_key,
    "unknown_content_parser": _unknown_content_parser,
    "both_literal_and_pattern": _both_literal_and_pattern,
    "bad_literal": _bad_literal,
    "bad_regex": _bad_regex,
    "join_not_string": _join_not_string,
    "join_without_repeats": _join_without_repeats,
    "transform_each_not_bool": _transform_each_not_bool,
    "transform_each_without_transform": _transform_each_without_transform,
    "mixed_placeholder": _mixed_placeholder,
    "named_group_without_transform": _named_group_without_transform,
    "two_implicit_fields": _two_implicit_fields,
    "missing_start_anchor": _missing_start_anchor,
    "both_start_anchors": _both_start_anchors,
    "bad_start_anchor": _bad_start_anchor,
    "pattern_not_string": _pattern_not_string,
    "content_unhashable": _content_unhashable,
}

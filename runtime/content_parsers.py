"""Content parsers with their arguments bound once, at import of a generated module.

`make_parser(name, args)` returns a function of the region's text. The behaviour, including every
error class and message, is that of the transformers 5.25.0 interpreter, which reads `args` on each
call; here what can be prepared (compiled patterns, flags) is prepared once. Arguments the
interpreter would only choke on while parsing (a non-dict `args`, a malformed `string_delims`, an
invalid `tag_pattern`) are not prepared: such parsers run the per-call path and fail as the
interpreter does, at the same moment.

`text`/`int`/`float`/`bool` with well-formed arguments are usually inlined by the code generator;
they are here for nested `value_parser`s and the per-call path.
"""

from __future__ import annotations

import contextvars
import functools
import json
import re
from json.encoder import encode_basestring_ascii
from typing import Any, Callable

import regex

from .scanning import LazyRegex
from .tags import tag_reader

# The calling parser's `timeout` for tag_pattern matching (set only while a region is finished).
MATCH_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar("rtcompile_match_timeout", default=None)

# Placeholders for pre-extracted custom-delimited strings (control characters models don't write).
SENTINEL_OPEN, SENTINEL_CLOSE = "\x01", "\x02"


@functools.lru_cache(maxsize=None)
def unquoted_key() -> Any:
    """The pattern `unquoted_keys` rewrites with (compiled on first use, not at import): a whole
    double-quoted string, kept as it is (so key-like text inside a string value is left alone),
    or a bare identifier key after `{` or `,`, with the whitespace around it (group 2 is the key)."""
    return regex.compile(r'"(?:\\.|[^"\\])*"|(?<=[{,])(\s*)(\w+)(\s*):')


@functools.lru_cache(maxsize=None)
def unquoted_key_ascii() -> Any:
    """unquoted_key() for ASCII text, compiled by the faster stdlib engine: on ASCII characters
    `regex` reads \\s as [\\t\\n\\v\\f\\r ] and \\w as [0-9A-Za-z_], spelled out here (`re`'s \\s
    would add U+001C..U+001F). A test checks that the two rewrite every ASCII text alike."""
    return re.compile(r'"(?:\\.|[^"\\])*"|(?<=[{,])([\t\n\x0b\x0c\r ]*)([0-9A-Za-z_]+)([\t\n\x0b\x0c\r ]*):')


def _quote_key(match: Any) -> str:
    if match.group(2) is None:
        return match.group(0)  # a string: unchanged
    return f'{match.group(1)}"{match.group(2)}"{match.group(3)}:'


def make_parser(name: Any, args: Any) -> Callable[[str], Any]:
    """The parser `name` with `args` bound (a KeyError for an unknown name is raised at parse time)."""
    factory = FACTORIES.get(name) if isinstance(name, str) else None
    if factory is None or not isinstance(args, dict):
        return lambda text: parse_content(text, name, args)
    try:
        return factory(args)
    except Exception:  # malformed args: keep the interpreter's parse-time failure
        return lambda text: parse_content(text, name, args)


def parse_content(text: str, name: Any, args: Any) -> Any:
    """The per-call path: dispatch like the interpreter (KeyError for an unknown parser name)."""
    return PER_CALL[name](text, args)


# ---- text, int, float, bool ---------------------------------------------------------------------


def _strip(text: str, args: Any) -> str:
    return text.strip() if args.get("strip", True) else text


def _text(text: str, args: Any) -> str:
    return _strip(text, args)


def _int(text: str, args: Any) -> int:
    return int(_strip(text, args))


def _float(text: str, args: Any) -> float:
    return float(_strip(text, args))


def _bool(text: str, args: Any) -> bool:
    return _strip(text, args).lower() in ("true", "1")


def _scalar_factory(convert: Callable[[str], Any]) -> Callable[[dict], Callable[[str], Any]]:
    def factory(args: dict) -> Callable[[str], Any]:
        if args.get("strip", True):
            return lambda text: convert(text.strip())
        return convert

    return factory


def _as_bool(text: str) -> bool:
    return text.lower() in ("true", "1")


# ---- json -------------------------------------------------------------------------------------


def _json(text: str, args: Any) -> Any:
    string_delims = args.get("string_delims", [])
    unquoted_keys = args.get("unquoted_keys", False)
    if string_delims and (SENTINEL_OPEN in text or SENTINEL_CLOSE in text):
        raise ValueError(_SENTINEL_MESSAGE)
    stashers = [
        _regex_stasher(regex.compile(regex.escape(open_d) + r"(.*?)" + regex.escape(close_d), regex.DOTALL))
        for open_d, close_d in string_delims
    ]
    return _run_json(text, args, stashers, unquoted_keys, bool(string_delims))


_SENTINEL_MESSAGE = "json: input contains reserved sentinel characters (\\x01/\\x02); cannot parse safely."


def _regex_stasher(pattern: Any) -> Callable[[str, list], str]:
    """A string_delims pair as its pattern `open(.*?)close` (DOTALL): each match is replaced by a
    numbered placeholder, its text appended to `captured`."""

    def stash_all(working: str, captured: list) -> str:
        def stash(match: Any) -> str:
            captured.append(match.group(1))
            return f"{SENTINEL_OPEN}{len(captured) - 1}{SENTINEL_CLOSE}"

        return pattern.sub(stash, working)

    return stash_all


def _literal_stasher(open_d: str, close_d: str) -> Callable[[str, list], str]:
    """_regex_stasher of `open(.*?)close` for two non-empty literals, by str.find (the same
    matches: the leftmost match starts at the first `open` that has a `close` after it, and if the
    first has none, no later one has; the lazy group ends at the first `close`)."""
    open_len, close_len = len(open_d), len(close_d)

    def stash_all(working: str, captured: list) -> str:
        find = working.find
        start = find(open_d)
        if start < 0:
            return working
        pieces = []
        done = 0
        while start >= 0:
            close = find(close_d, start + open_len)
            if close < 0:
                break
            pieces.append(working[done:start])
            captured.append(working[start + open_len : close])
            pieces.append(f"{SENTINEL_OPEN}{len(captured) - 1}{SENTINEL_CLOSE}")
            done = close + close_len
            start = find(open_d, done)
        pieces.append(working[done:])
        return "".join(pieces)

    return stash_all


def _run_json(text: str, args: dict, stashers: list, unquoted_keys: Any, check_sentinels: bool) -> Any:
    working = text
    captured: list[str] = []
    for stash_all in stashers:
        working = stash_all(working, captured)
    if unquoted_keys:
        working = (unquoted_key_ascii() if working.isascii() else unquoted_key()).sub(_quote_key, working)
    for i, value in enumerate(captured):  # (json.dumps of a str is this C function)
        working = working.replace(f"{SENTINEL_OPEN}{i}{SENTINEL_CLOSE}", encode_basestring_ascii(value))
    try:
        return json.loads(working)
    except json.JSONDecodeError as e:
        if args.get("allow_non_json"):
            return _strip(text, args)
        if working == text:
            raise ValueError(f"json parser could not parse region as JSON.\nContent: {text!r}\nError: {e}") from e
        raise ValueError(
            f"json: could not parse after dialect transforms.\n"
            f"Original: {text!r}\nTransformed: {working!r}\nError: {e}"
        ) from e


def _json_factory(args: dict) -> Callable[[str], Any]:
    string_delims = args.get("string_delims", [])
    unquoted_keys = args.get("unquoted_keys", False)
    stashers = [
        _literal_stasher(open_d, close_d)
        if isinstance(open_d, str) and isinstance(close_d, str) and open_d and close_d
        else _regex_stasher(LazyRegex(regex.escape(open_d) + r"(.*?)" + regex.escape(close_d)))
        for open_d, close_d in string_delims
    ]
    check_sentinels = bool(string_delims)
    if not stashers and not unquoted_keys:
        allow_non_json = args.get("allow_non_json")

        def plain_json(text: str) -> Any:
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                if allow_non_json:
                    return _strip(text, args)
                raise ValueError(
                    f"json parser could not parse region as JSON.\nContent: {text!r}\nError: {e}"
                ) from e

        return plain_json

    def dialect_json(text: str) -> Any:
        if check_sentinels and (SENTINEL_OPEN in text or SENTINEL_CLOSE in text):
            raise ValueError(_SENTINEL_MESSAGE)
        return _run_json(text, args, stashers, unquoted_keys, check_sentinels)

    return dialect_json


# ---- xml-inline and kv-lines ----------------------------------------------------------------------


def sub_parse(raw: Any, value_parser: Any) -> Any:
    """A value of xml-inline or kv-lines read by the field's `value_parser` (as written without one)."""
    if value_parser is None:
        return raw
    return parse_content(raw, value_parser.get("name", "text"), value_parser.get("args", {}))


def put_value(out: dict, merged: set, key: str, value: Any, merge: Any) -> None:
    """xml-inline's rule for a key seen again: with `merge_duplicates`, its values become a list
    (the first repeat wraps the first value in a list even when that value is itself a list, a
    value_parser's JSON array say: the interpreter tracks merged keys in `merged`, not value
    types); without, the later value wins."""
    if key in out and merge:
        if key not in merged:
            out[key] = [out[key]]
            merged.add(key)
        out[key].append(value)
    else:
        out[key] = value


def _xml_inline(text: str, args: Any) -> dict:
    tag_pattern = args.get("tag_pattern")
    if tag_pattern is None:
        raise ValueError("xml-inline: 'tag_pattern' content_arg is required")
    by_capture = _parsers_by_capture(args)
    return _run_xml_inline(
        text,
        regex.finditer(tag_pattern, text, flags=regex.DOTALL, timeout=MATCH_TIMEOUT.get()),
        tag_pattern,
        args.get("value_parser"),
        args.get("merge_duplicates", False),
        by_capture,
    )


def _parsers_by_capture(args: Any) -> tuple[str, dict] | None:
    """`value_parser_by` ({"group": G, "parsers": {capture: parser}}) as (G, parsers), or None.
    A malformed spec fails as the interpreter's does: a ValueError, or an AttributeError for a
    spec that is not a dict (the interpreter calls its `.get`)."""
    spec = args.get("value_parser_by")
    if spec is None:
        return None
    group, parsers = spec.get("group"), spec.get("parsers")
    if not isinstance(group, str) or not isinstance(parsers, dict):
        raise ValueError(
            "xml-inline: 'value_parser_by' must be a dict with 'group' (a named group in tag_pattern) "
            f"and 'parsers' (a dict mapping what that group captures to a value parser). Got: {spec!r}"
        )
    return group, parsers


def _run_xml_inline(
    text: str, matches: Any, tag_pattern: Any, value_parser: Any, merge: Any, by_capture: tuple[str, dict] | None
) -> dict:
    out: dict[str, Any] = {}
    merged: set = set()  # keys already turned into a list of their values (see below)
    for match in matches:
        groups = match.groupdict()
        key = groups.get("key")
        if key is None:
            raise ValueError(f"xml-inline: tag_pattern must have a named group 'key'. Pattern: {tag_pattern}")
        parser = value_parser
        if by_capture is not None:
            group, parsers = by_capture
            if group not in groups:
                raise ValueError(
                    f"xml-inline: value_parser_by names group '{group}', which tag_pattern does not define. "
                    f"Pattern: {tag_pattern}"
                )
            # a capture without an entry (or a group that took no part in the match): value_parser
            parser = parsers.get(groups[group], value_parser)
        put_value(out, merged, key, sub_parse(groups.get("value", ""), parser), merge)
    return out


def _xml_inline_factory(args: dict) -> Callable[[str], dict]:
    tag_pattern = args.get("tag_pattern")
    if not isinstance(tag_pattern, str):
        raise TypeError("tag_pattern is checked per call")
    by_capture = _parsers_by_capture(args)  # (a malformed spec raises: checked per call instead)
    compiled = LazyRegex(tag_pattern)  # (compiled on first use)
    value_parser = args.get("value_parser")
    merge = args.get("merge_duplicates", False)

    def xml_inline(text: str) -> dict:
        # Literal-delimited tags are read by str.find (tags.py: the same pairs, far faster than
        # the engine's lazy value), in linear time, so a time bound has nothing to bound there.
        reader = tag_reader(tag_pattern) if by_capture is None else None  # (analysed once, then cached)
        if reader is not None:
            pairs = reader(text)
            if value_parser is None and not merge:
                return dict(pairs)  # (later keys overwrite earlier ones, in first-seen order)
            return _merge_pairs(pairs, value_parser, merge)
        timeout = MATCH_TIMEOUT.get()
        if timeout is None:
            # (without a time bound, the plain engine: the stdlib twin where one exists, see twin.py)
            pattern = compiled.plain()
            # (a stdlib pattern: one group per name, so group(name) is what groupdict() holds)
            if (
                value_parser is None
                and not merge
                and by_capture is None
                and "key" in pattern.groupindex
                and isinstance(pattern, re.Pattern)
            ):
                return _plain_xml_inline(text, pattern, tag_pattern)
            matches = pattern.finditer(text)
        else:
            matches = compiled.finditer(text, timeout=timeout)
        return _run_xml_inline(text, matches, tag_pattern, value_parser, merge, by_capture)

    return xml_inline


def _merge_pairs(pairs: list[tuple[str, str]], value_parser: Any, merge: Any) -> dict:
    """_run_xml_inline over (key, value) pairs that a tag reader found (keys are never None)."""
    out: dict[str, Any] = {}
    merged: set = set()
    for key, raw in pairs:
        put_value(out, merged, key, sub_parse(raw, value_parser), merge)
    return out


def _plain_xml_inline(text: str, pattern: Any, tag_pattern: str) -> dict:
    """_run_xml_inline without a value parser or merging, for a pattern with a `key` group: each
    tag's value as captured ("" when the pattern has no `value` group), later keys overwriting."""
    out: dict[str, Any] = {}
    if "value" in pattern.groupindex:
        for match in pattern.finditer(text):
            key, value = match.group("key", "value")
            if key is None:
                raise ValueError(f"xml-inline: tag_pattern must have a named group 'key'. Pattern: {tag_pattern}")
            out[key] = value
    else:
        for match in pattern.finditer(text):
            key = match.group("key")
            if key is None:
                raise ValueError(f"xml-inline: tag_pattern must have a named group 'key'. Pattern: {tag_pattern}")
            out[key] = ""
    return out


def _kv_lines(text: str, args: Any) -> dict:
    line_sep = args.get("line_sep", "\n")
    kv_sep = args.get("kv_sep", ":")
    value_parser = args.get("value_parser")
    out: dict[str, Any] = {}
    for line in text.split(line_sep):
        line = _strip(line, args)
        if not line or kv_sep not in line:
            continue
        key, value = line.split(kv_sep, 1)
        key, value = _strip(key, args), _strip(value, args)
        out[key] = sub_parse(value, value_parser)
    return out


# ---- python-call-list -----------------------------------------------------------------------------
# Python-style tool calls, `[get_weather(city="Paris"), ...]` -> [{"name", "arguments"}, ...]: the
# grammar of transformers 5.24.0 (its docs specify it for other implementations), deliberately
# strict. Keyword arguments only; values are strings (single or double quotes, a fixed escape set,
# no raw newline, no lone surrogate), numbers (JSON's syntax, integers within +-(2^53 - 1), floats
# that stay finite), True/False/None (or true/false/null), lists and dicts with string keys, nested
# at most 100 deep; whitespace ([ \t\n\r]) around every token and nowhere inside one; nothing after
# the closing `]`. Every error is a ValueError naming the position the reader stood at.

CALL_LIST_MAX_INTEGER = 2**53 - 1
CALL_LIST_MAX_DEPTH = 100
_CALL_LIST_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_CALL_LIST_CONSTANTS = {"True": True, "true": True, "False": False, "false": False, "None": None, "null": None}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


@functools.lru_cache(maxsize=None)
def _call_list_patterns() -> tuple[Any, Any, Any, Any, Any]:
    """(whitespace, name, number, string, surrogate) patterns, compiled on first use.

    Plain `re` is enough: every class here is ASCII or a code-point range, read alike by both."""
    import re

    return (
        re.compile(r"[ \t\n\r]*"),
        # A function or keyword name: identifiers joined by single dots or dashes (`ns.get-weather`).
        re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[-.][A-Za-z0-9_]+)*"),
        re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"),
        # A quoted string on one line; a backslash takes the next character, whatever it is.
        re.compile(r"""'((?:[^'\\\n\r]|\\.)*)'|"((?:[^"\\\n\r]|\\.)*)\"""", re.DOTALL),
        re.compile("[\ud800-\udfff]"),
    )


class CallListReader:
    """One pass of recursive descent over a python-call-list region, `pos` its reading position."""

    __slots__ = ("text", "pos", "_space", "_name", "_number", "_string", "_surrogate")

    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self._space, self._name, self._number, self._string, self._surrogate = _call_list_patterns()

    def fail(self, message: str) -> ValueError:
        return ValueError(f"python-call-list: {message} at position {self.pos}.\nContent: {self.text!r}")

    def next_is(self, char: str) -> bool:
        """Skip whitespace; whether the next token starts with `char`."""
        self.pos = self._space.match(self.text, self.pos).end()
        return self.text.startswith(char, self.pos)

    def take(self, char: str) -> None:
        if not self.next_is(char):
            raise self.fail(f"expected {char!r}")
        self.pos += 1

    def at_end(self) -> bool:
        """Whether only whitespace is left."""
        self.pos = self._space.match(self.text, self.pos).end()
        return self.pos == len(self.text)

    def read_calls(self) -> list[dict]:
        self.take("[")
        calls = self.read_sequence("]", self.read_call, None)
        self.pos = self._space.match(self.text, self.pos).end()
        if self.pos != len(self.text):
            raise self.fail("unexpected content after the closing ']'")
        return calls

    def read_sequence(self, close: str, read_item: Callable[[Any], Any], argument: Any) -> list:
        """Items separated by commas up to `close` (no trailing comma: the item reader rejects it)."""
        items: list = []
        if self.next_is(close):
            self.pos += 1
            return items
        while True:
            items.append(read_item(argument))
            if self.next_is(close):
                self.pos += 1
                return items
            self.take(",")

    def read_call(self, _unused: Any) -> dict:
        name = self.read_name("a function name")
        self.take("(")
        arguments = self.read_sequence(")", self.read_keyword_argument, None)
        return {"name": name, "arguments": self.without_repeats(arguments)}

    def read_keyword_argument(self, _unused: Any) -> tuple[str, Any]:
        key = self.read_name("a keyword argument (positional arguments and trailing commas are not supported)")
        if not self.next_is("="):
            raise self.fail("expected '=' (positional arguments are not supported)")
        self.pos += 1
        return key, self.read_value(0)

    def read_name(self, what: str) -> str:
        self.pos = self._space.match(self.text, self.pos).end()
        match = self._name.match(self.text, self.pos)
        if match is None:
            raise self.fail(f"expected {what}")
        self.pos = match.end()
        return match.group()

    def without_repeats(self, pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for key, value in pairs:
            if key in out:
                raise self.fail(f"repeated name {key!r}")
            out[key] = value
        return out

    def read_value(self, depth: int) -> Any:
        """A value inside `depth` enclosing lists and dicts."""
        self.pos = self._space.match(self.text, self.pos).end()
        text, pos = self.text, self.pos
        first = text[pos : pos + 1]
        if first == "'" or first == '"':
            return self.read_string()
        if first == "[" or first == "{":
            if depth >= CALL_LIST_MAX_DEPTH:
                raise self.fail(f"lists and dicts nested more than {CALL_LIST_MAX_DEPTH} levels deep")
            self.pos += 1
            if first == "[":
                return self.read_sequence("]", self.read_value, depth + 1)
            return self.without_repeats(self.read_sequence("}", self.read_pair, depth + 1))
        number = self._number.match(text, pos)
        if number is not None:
            literal = number.group()
            if number.group(1) is None and number.group(2) is None:
                # (the length test first: a huge literal never reaches int())
                if len(literal) > 17 or abs(int(literal)) > CALL_LIST_MAX_INTEGER:
                    raise self.fail("integer outside the range of -(2^53 - 1) to 2^53 - 1")
                value: Any = int(literal)
            else:
                value = float(literal)
                if value in (float("inf"), float("-inf")):
                    raise self.fail("number too large")
            self.pos = number.end()
            return value
        name = self._name.match(text, pos)
        if name is not None and name.group() in _CALL_LIST_CONSTANTS:
            self.pos = name.end()
            return _CALL_LIST_CONSTANTS[name.group()]
        raise self.fail("expected a string, number, list, dict, True, False or None")

    def read_pair(self, depth: int) -> tuple[str, Any]:
        if not (self.next_is("'") or self.next_is('"')):
            raise self.fail("dict keys must be strings")
        key = self.read_string()
        self.take(":")
        return key, self.read_value(depth)

    def read_string(self) -> str:
        """The string at `pos` (errors name where it starts), decoded."""
        match = self._string.match(self.text, self.pos)
        if match is None:
            raise self.fail("invalid string")
        body = match.group(1)
        if body is None:
            body = match.group(2)
        if self._surrogate.search(body) is not None:
            raise self.fail("lone surrogate in the string starting")
        if "\\" in body:
            body = self.decode_escapes(body)
        self.pos = match.end()
        return body

    def decode_escapes(self, body: str) -> str:
        out: list[str] = []
        done = 0  # body[:done] is decoded
        while (backslash := body.find("\\", done)) >= 0:
            out.append(body[done:backslash])
            escaped = body[backslash + 1]  # (the pattern guarantees a character after a backslash)
            simple = _CALL_LIST_ESCAPES.get(escaped)
            if simple is not None:
                out.append(simple)
                done = backslash + 2
                continue
            code = _hex4(body, backslash + 2) if escaped == "u" else None
            if code is None:
                raise self.fail(f"unsupported escape {body[backslash : backslash + 2]!r} in the string starting")
            done = backslash + 6
            if 0xD800 <= code <= 0xDBFF and body.startswith("\\u", done):
                # A high surrogate escape followed by a low one is one character.
                low = _hex4(body, done + 2)
                if low is not None and 0xDC00 <= low <= 0xDFFF:
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    done += 6
            if 0xD800 <= code <= 0xDFFF:
                raise self.fail("lone surrogate escape in the string starting")
            out.append(chr(code))
        out.append(body[done:])
        return "".join(out)


def _hex4(text: str, start: int) -> int | None:
    """The four ASCII hex digits at text[start:], as a number; None if they are not there."""
    digits = text[start : start + 4]
    if len(digits) != 4 or not all(c in _HEX_DIGITS for c in digits):
        return None
    return int(digits, 16)


def _python_call_list(text: str, args: Any) -> list[dict]:
    return CallListReader(text).read_calls()


PER_CALL: dict[str, Callable[[str, Any], Any]] = {
    "text": _text,
    "int": _int,
    "float": _float,
    "bool": _bool,
    "json": _json,
    "xml-inline": _xml_inline,
    "kv-lines": _kv_lines,
    "python-call-list": _python_call_list,
}

FACTORIES: dict[str, Callable[[dict], Callable[[str], Any]]] = {
    "text": _scalar_factory(str),
    "int": _scalar_factory(int),
    "float": _scalar_factory(float),
    "bool": _scalar_factory(_as_bool),
    "json": _json_factory,
    "xml-inline": _xml_inline_factory,
    "kv-lines": lambda args: lambda text: _kv_lines(text, args),
    "python-call-list": lambda args: lambda text: CallListReader(text).read_calls(),  # (no arguments)
}

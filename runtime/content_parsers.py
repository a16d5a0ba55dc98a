"""Content parsers with their arguments bound once, at import of a generated module.

`make_parser(name, args)` returns a function of the region's text. The behaviour, including every
error class and message, is that of the transformers 5.23.0 interpreter, which reads `args` on each
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
from typing import Any, Callable

import regex

# The calling parser's `timeout` for tag_pattern matching (set only while a region is finished).
MATCH_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar("rtcompile_match_timeout", default=None)

# Placeholders for pre-extracted custom-delimited strings (control characters models don't write).
SENTINEL_OPEN, SENTINEL_CLOSE = "\x01", "\x02"


@functools.lru_cache(maxsize=None)
def unquoted_key() -> Any:
    """The bare-identifier key pattern of `unquoted_keys` (compiled on first use, not at import)."""
    return regex.compile(r"(?<=[{,])(\w+):")


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
    patterns = [
        regex.compile(regex.escape(open_d) + r"(.*?)" + regex.escape(close_d), regex.DOTALL)
        for open_d, close_d in string_delims
    ]
    return _run_json(text, args, patterns, unquoted_keys, bool(string_delims))


_SENTINEL_MESSAGE = "json: input contains reserved sentinel characters (\\x01/\\x02); cannot parse safely."


def _run_json(text: str, args: dict, patterns: list, unquoted_keys: Any, check_sentinels: bool) -> Any:
    working = text
    captured: list[str] = []
    for pattern in patterns:

        def stash(match: Any) -> str:
            captured.append(match.group(1))
            return f"{SENTINEL_OPEN}{len(captured) - 1}{SENTINEL_CLOSE}"

        working = pattern.sub(stash, working)
    if unquoted_keys:
        working = unquoted_key().sub(r'"\1":', working)
    for i, value in enumerate(captured):
        working = working.replace(f"{SENTINEL_OPEN}{i}{SENTINEL_CLOSE}", json.dumps(value))
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
    patterns = [  # (compiled on first use: see LazyRegex)
        LazyRegex(regex.escape(open_d) + r"(.*?)" + regex.escape(close_d)) for open_d, close_d in string_delims
    ]
    check_sentinels = bool(string_delims)
    if not patterns and not unquoted_keys:
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
        return _run_json(text, args, patterns, unquoted_keys, check_sentinels)

    return dialect_json


# ---- xml-inline and kv-lines ----------------------------------------------------------------------


def _sub_parse(raw: Any, value_parser: Any) -> Any:
    if value_parser is None:
        return raw
    return parse_content(raw, value_parser.get("name", "text"), value_parser.get("args", {}))


def _xml_inline(text: str, args: Any) -> dict:
    tag_pattern = args.get("tag_pattern")
    if tag_pattern is None:
        raise ValueError("xml-inline: 'tag_pattern' content_arg is required")
    return _run_xml_inline(
        text,
        regex.finditer(tag_pattern, text, flags=regex.DOTALL, timeout=MATCH_TIMEOUT.get()),
        tag_pattern,
        args.get("value_parser"),
        args.get("merge_duplicates", False),
    )


def _run_xml_inline(text: str, matches: Any, tag_pattern: Any, value_parser: Any, merge: Any) -> dict:
    out: dict[str, Any] = {}
    for match in matches:
        groups = match.groupdict()
        key = groups.get("key")
        if key is None:
            raise ValueError(f"xml-inline: tag_pattern must have a named group 'key'. Pattern: {tag_pattern}")
        value = _sub_parse(groups.get("value", ""), value_parser)
        if key in out and merge:
            if not isinstance(out[key], list):
                out[key] = [out[key]]
            out[key].append(value)
        else:
            out[key] = value
    return out


def _xml_inline_factory(args: dict) -> Callable[[str], dict]:
    tag_pattern = args.get("tag_pattern")
    if not isinstance(tag_pattern, str):
        raise TypeError("tag_pattern is checked per call")
    compiled = LazyRegex(tag_pattern)  # (compiled on first use)
    value_parser = args.get("value_parser")
    merge = args.get("merge_duplicates", False)
    return lambda text: _run_xml_inline(
        text, compiled.finditer(text, timeout=MATCH_TIMEOUT.get()), tag_pattern, value_parser, merge
    )


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
        out[key] = _sub_parse(value, value_parser)
    return out


PER_CALL: dict[str, Callable[[str, Any], Any]] = {
    "text": _text,
    "int": _int,
    "float": _float,
    "bool": _bool,
    "json": _json,
    "xml-inline": _xml_inline,
    "kv-lines": _kv_lines,
}

FACTORIES: dict[str, Callable[[dict], Callable[[str], Any]]] = {
    "text": _scalar_factory(str),
    "int": _scalar_factory(int),
    "float": _scalar_factory(float),
    "bool": _scalar_factory(_as_bool),
    "json": _json_factory,
    "xml-inline": _xml_inline_factory,
    "kv-lines": lambda args: lambda text: _kv_lines(text, args),
}

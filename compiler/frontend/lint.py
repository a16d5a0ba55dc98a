"""Warnings about templates the interpreter accepts but that fail, or misbehave, while parsing.

The front end accepts exactly what the interpreter accepts; these problems only show up when a
region closes (or never, as a hang), so `python -m rtcompile --check` reports them up front.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

from . import ir
from .validate import json_path
from .patterns import has_nested_unbounded_repeat, min_width

CONTENT_ARG_KEYS = {
    "text": {"strip"},
    "int": {"strip"},
    "float": {"strip"},
    "bool": {"strip"},
    "json": {"unquoted_keys", "string_delims", "allow_non_json", "strip"},
    "xml-inline": {"tag_pattern", "value_parser", "value_parser_by", "merge_duplicates"},
    "kv-lines": {"line_sep", "kv_sep", "strip", "value_parser"},
    "python-call-list": set(),  # (takes no arguments)
}
# A group with an unbounded quantifier that is itself repeated without bound, for patterns the
# analysis cannot read (regex-only syntax): (a+)+, (?:x*y?)*, ...
NESTED_QUANTIFIER = regex.compile(r"\((?:[^()\\]|\\.)*[*+}](?:[^()\\]|\\.)*\)[*+]|\((?:[^()\\]|\\.)*[*+]\)\{\d*,\}")


@dataclass(frozen=True)
class Warning_:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def lint(template: ir.Template) -> list[Warning_]:
    found: list[Warning_] = []
    for field in template.fields:
        found += _lint_content(field)
        found += _lint_transform(field)
        for key, delimiter in (("open_pattern", field.open), ("close_pattern", field.close)):
            if delimiter is not None and delimiter.pattern is not None and _nested(delimiter.pattern):
                found.append(
                    Warning_(
                        json_path("fields", field.name, key),
                        "nested unbounded quantifiers can make matching take exponential time; "
                        "set a match timeout or simplify the pattern",
                    )
                )
        found += _lint_empty_loop(template, field)
    return found


def _nested(pattern: str) -> bool:
    nested = has_nested_unbounded_repeat(pattern)
    return bool(NESTED_QUANTIFIER.search(pattern)) if nested is None else nested


def _lint_content(field: ir.Field) -> list[Warning_]:
    where = json_path("fields", field.name, "content_args")
    args = field.content.args
    if not isinstance(args, dict):
        return [Warning_(where, f"must be an object; parsing this field fails with AttributeError (got {type(args).__name__})")]
    out = []
    unknown = sorted(set(args) - CONTENT_ARG_KEYS[field.content.parser])
    if unknown:
        out.append(Warning_(where, f"keys {unknown} are ignored by the {field.content.parser!r} parser"))
    if field.content.parser == "xml-inline":
        tag = args.get("tag_pattern")
        if tag is None:
            out.append(Warning_(where, "xml-inline needs 'tag_pattern'; every region of this field fails to parse"))
        elif not isinstance(tag, str):
            out.append(Warning_(where, "'tag_pattern' must be a string"))
        else:
            try:
                compiled = regex.compile(tag, regex.DOTALL)
            except regex.error as e:
                out.append(Warning_(where, f"'tag_pattern' is not a valid regex: {e}"))
            else:
                if "key" not in compiled.groupindex:
                    out.append(Warning_(where, "'tag_pattern' has no named group 'key'; any tag it matches fails to parse"))
                out += _lint_value_parser_by(where, args.get("value_parser_by"), compiled)
    if field.content.parser in ("xml-inline", "kv-lines"):
        out += _lint_value_parser(where, args.get("value_parser"))
    if field.content.parser == "json":
        delims = args.get("string_delims", [])
        if not (isinstance(delims, list) and all(isinstance(d, list) and len(d) == 2 and all(isinstance(x, str) for x in d) for d in delims)):
            out.append(Warning_(where, "'string_delims' must be a list of [open, close] string pairs"))
    return out


def _lint_value_parser(where: str, value_parser) -> list[Warning_]:
    if value_parser is None:
        return []
    if not isinstance(value_parser, dict):
        return [Warning_(where, "'value_parser' must be an object with 'name' (and 'args')")]
    name = value_parser.get("name", "text")
    if name not in CONTENT_ARG_KEYS:
        return [Warning_(where, f"'value_parser' names unknown parser {name!r}; parsing fails with KeyError")]
    return []


def _lint_value_parser_by(where: str, spec, compiled_tag) -> list[Warning_]:
    """xml-inline's `value_parser_by` ({"group": G, "parsers": {capture: parser}}): the interpreter
    reads it when a region closes, and fails there."""
    if spec is None:
        return []
    if not isinstance(spec, dict) or not isinstance(spec.get("group"), str) or not isinstance(spec.get("parsers"), dict):
        return [Warning_(where, "'value_parser_by' must be an object with 'group' (a string) and 'parsers' (an object); every region of this field fails to parse")]
    out = []
    if spec["group"] not in compiled_tag.groupindex:
        out.append(Warning_(where, f"'value_parser_by' names group {spec['group']!r}, which 'tag_pattern' does not define; any tag it matches fails to parse"))
    for capture, parser in spec["parsers"].items():
        for warning in _lint_value_parser(where, parser):
            out.append(Warning_(where, f"'value_parser_by' for {capture!r}: {warning.message}"))
    return out


def _lint_transform(field: ir.Field) -> list[Warning_]:
    if field.transform is None or field.transform_each:
        return []  # transform_each scopes hold each element's keys: not known before parsing
    # (a close pattern's named groups join the scope too, since transformers 5.24.0)
    available = {"content"} | {g for d in (field.open, field.close) if d is not None for g in d.group_names}
    out = []
    for node, path in _placeholders(field.transform, ("fields", field.name, "transform")):
        if node.root not in available:
            out.append(
                Warning_(
                    json_path(*path),
                    f"placeholder {{{node.path}}} can never resolve (available: {sorted(available)}); "
                    "every region of this field raises KeyError",
                )
            )
    return out


def _placeholders(node, path):
    if isinstance(node, ir.Placeholder):
        yield node, path
    elif isinstance(node, ir.DictNode):
        for key, value in node.items:
            yield from _placeholders(value, (*path, key))
    elif isinstance(node, ir.ListNode):
        for i, value in enumerate(node.items):
            yield from _placeholders(value, (*path, i))


# Texts on which a pattern that can match the empty string is likely to show it (a heuristic: an
# exact answer would need a regex engine of our own).
EMPTY_MATCH_PROBES = ("", "a", " ", "\n", "<", ">", "a b\n<x>/|")


def _can_match_empty(delimiter: ir.Delimiter | None) -> bool:
    if delimiter is None or delimiter.pattern is None:
        return False  # literals are never empty
    if delimiter.charsets is not None:
        return False  # the analysis proved every match starts with a character
    shortest = min_width(delimiter.pattern)
    if shortest is not None:
        return shortest == 0
    compiled = regex.compile(delimiter.pattern, regex.DOTALL)
    return any(m.start() == m.end() for probe in EMPTY_MATCH_PROBES for m in compiled.finditer(probe))


def _lint_empty_loop(template: ir.Template, field: ir.Field) -> list[Warning_]:
    if field.open is not None and _can_match_empty(field.open) and _can_match_empty(field.close):
        return [
            Warning_(
                json_path("fields", field.name),
                "open and close can both match the empty string at one position: the interpreter "
                "loops forever there (rtcompile raises ParserLoopError)",
            )
        ]
    return []

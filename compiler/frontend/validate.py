"""Front end: validate a response template and lower it to the IR.

The rules, their order and the exception classes are those of the transformers 5.25.0 interpreter
(`transformers.utils.chat_parsing.response_templates`), so a template is accepted here exactly when
the interpreter accepts it, and the first problem found is the one the interpreter reports. Messages
start with the JSON path of the problem (`fields.tool_calls.open_pattern: invalid regex: ...`).

Problems the interpreter only meets while parsing (an xml-inline field without `tag_pattern`, a
transform placeholder that can never resolve, ...) are not errors here; `lint()` reports them.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import regex

from rtcompile.runtime.transforms import PLACEHOLDER

from . import ir
from .canonical import TemplateError, TemplateTypeError, canonical_text, sha256_of
from .patterns import (
    analyse_pattern,
    literal_charsets,
    literal_run,
    match_is_final,
    match_is_final_at_edge,
    reads_past_match,
    uses_search_anchor,
)

# A set, like the interpreter's dict: an unhashable `content` value raises TypeError there too.
CONTENT_PARSERS = frozenset({"text", "int", "float", "bool", "json", "xml-inline", "kv-lines", "python-call-list"})
TEMPLATE_KEYS = {"version", "defaults", "fields", "start_anchor", "start_anchor_pattern"}
FIELD_KEYS = {
    "open",
    "open_pattern",
    "close",
    "close_pattern",
    "content",
    "content_args",
    "repeats",
    "join",
    "optional",
    "transform",
    "transform_each",
}


def json_path(*parts: Any) -> str:
    """`fields.tool_calls.open`, with bracketed JSON strings for keys that are not plain words."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.isascii() and part.replace("_", "a").isalnum():
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


def lower(template: Any) -> ir.Template:
    """Validate `template` like the interpreter does and return its IR."""
    _check_shape(template)
    fields = tuple(_lower_field(i, name, raw) for i, (name, raw) in enumerate(template["fields"].items()))
    implicit = [f for f in fields if f.open is None]
    if len(implicit) > 1:
        raise TemplateError(
            "fields",
            "at most one field may omit 'open'/'open_pattern' (that field becomes the implicit-open / "
            f"leftover sink). Found: {', '.join(f.name for f in implicit)}",
        )
    start_anchor = _lower_delimiter((), template, "start_anchor", "start_anchor_pattern")
    if start_anchor is None:
        raise TemplateError("", "response_template must define 'start_anchor' or 'start_anchor_pattern'.")
    canonical = canonical_text(template)
    return ir.Template(
        fields=fields,
        implicit=implicit[0].index if implicit else None,
        defaults=copy.deepcopy(template.get("defaults", {})),
        start_anchor=start_anchor,
        source=copy.deepcopy(template),
        canonical=canonical,
        sha256=sha256_of(canonical),
    )


def _check_shape(spec: Any) -> None:
    if not isinstance(spec, dict):
        raise TemplateError("", f"response_template must be a dict, got {type(spec).__name__}")
    version = spec.get("version", 1)
    if version != 1:
        raise TemplateError("version", f"Unsupported response_template version: {version}")
    unknown = set(spec) - TEMPLATE_KEYS
    if unknown:
        raise TemplateError("", f"Unknown keys in response_template: {sorted(unknown)}")
    if not isinstance(spec.get("defaults", {}), dict):
        raise TemplateError("defaults", "response_template.defaults must be a dict")
    fields = spec.get("fields", {})
    if not isinstance(fields, dict) or not fields:
        raise TemplateError("fields", "response_template.fields must be a non-empty dict")
    # Everything is stored as a literal in the generated module: no objects (only the Python API
    # can pass those).
    canonical_text(spec)


def _lower_field(index: int, name: str, field: Any) -> ir.Field:
    path = ("fields", name)
    if not isinstance(field, dict):
        raise TemplateError(json_path(*path), "a field must be a dict")
    unknown = set(field) - FIELD_KEYS
    if unknown:
        raise TemplateError(json_path(*path), f"unknown keys {sorted(unknown)}")
    content = field.get("content", "text")
    try:
        known = content in CONTENT_PARSERS
    except TypeError as e:  # the interpreter's dict lookup raises TypeError for unhashable values
        raise TemplateTypeError(json_path(*path, "content"), f"content parser must be a string: {e}") from e
    if not known or not isinstance(content, str):
        raise TemplateError(
            json_path(*path, "content"),
            f"unknown content parser '{content}'. Available: {sorted(CONTENT_PARSERS)}",
        )
    open_ = _lower_delimiter(path, field, "open", "open_pattern")
    close = _lower_delimiter(path, field, "close", "close_pattern")
    join = field.get("join")
    if join is not None and not isinstance(join, str):
        raise TemplateError(json_path(*path, "join"), f"'join' must be a string, got {type(join).__name__}")
    if join is not None and not field.get("repeats", False):
        raise TemplateError(json_path(*path, "join"), "'join' requires 'repeats': true")
    transform = field.get("transform")
    transform_each = field.get("transform_each", False)
    if not isinstance(transform_each, bool):
        raise TemplateError(
            json_path(*path, "transform_each"),
            f"transform_each must be a bool, got {type(transform_each).__name__}",
        )
    if transform_each and transform is None:
        raise TemplateError(json_path(*path, "transform_each"), "transform_each is set but no transform was provided")
    if transform is not None:
        node = _lower_transform(transform, (*path, "transform"))
    else:
        node = None
        captured = sorted({g for d in (open_, close) if d is not None for g in d.group_names})
        if captured:
            key = "open_pattern" if open_ is not None and open_.group_names else "close_pattern"
            raise TemplateError(
                json_path(*path, key),
                f"declares named group(s) {captured}, but the field has no 'transform'. Named captures "
                "only reach the output through a 'transform' (beside 'content'): add a transform that "
                "uses them, or remove the named groups from the pattern.",
            )
    return ir.Field(
        index=index,
        name=name,
        open=open_,
        close=close,
        content=ir.Content(content, field.get("content_args", {})),
        repeats=bool(field.get("repeats", False)),
        join=join,
        optional=bool(field.get("optional", True)),
        transform=node,
        transform_each=transform_each,
    )


def _lower_delimiter(path: tuple, spec: dict, literal_key: str, pattern_key: str) -> ir.Delimiter | None:
    if literal_key in spec and pattern_key in spec:
        raise TemplateError(json_path(*path), f"cannot specify both '{literal_key}' and '{pattern_key}'")
    if literal_key in spec:
        where = json_path(*path, literal_key)
        raw = spec[literal_key]
        if isinstance(raw, str):
            literals = [raw]
        elif isinstance(raw, list):
            if not raw:
                raise TemplateError(where, f"'{literal_key}' list must contain at least one literal")
            if not all(isinstance(s, str) for s in raw):
                raise TemplateError(where, f"'{literal_key}' list must contain only strings")
            literals = list(dict.fromkeys(raw))
        else:
            raise TemplateError(where, f"'{literal_key}' must be a string or list of strings, got {type(raw).__name__}")
        if any(s == "" for s in literals):
            raise TemplateError(where, f"'{literal_key}' literals cannot be empty strings")
        can_extend = any(a != b and a.startswith(b) for a in literals for b in literals)
        return ir.Delimiter(
            literals=tuple(literals),
            pattern=None,
            can_extend=can_extend,
            group_names=(),
            context=0,
            charsets=literal_charsets(literals),
            # (one inside another: a partial "xabz" of "xabzq" may hide behind a complete "ab")
            final=not any(a != b and b in a for a in literals for b in literals),
        )
    if pattern_key in spec:
        where = json_path(*path, pattern_key)
        source = spec[pattern_key]
        try:
            compiled = regex.compile(source, regex.DOTALL)
        except regex.error as e:
            raise TemplateError(where, f"invalid regex: {e}") from e
        except TypeError as e:
            raise TemplateTypeError(where, f"a pattern must be a string: {e}") from e
        context, charsets = analyse_pattern(source)
        group_names = tuple(compiled.groupindex)
        return ir.Delimiter(
            literals=None,
            pattern=source,
            can_extend=False,
            group_names=group_names,
            context=context,
            charsets=charsets,
            # (captures need the regex's match object)
            literal_run=None if group_names else literal_run(source),
            search_anchored=uses_search_anchor(source),
            reads_past_match=reads_past_match(source),
            final=match_is_final(source),
            final_at_edge=match_is_final_at_edge(source),
        )
    return None


def _lower_transform(node: Any, path: tuple) -> ir.TransformNode:
    """Check the interpreter's rule (no placeholder mixed with literal text) and build the IR tree.

    The walk visits values in the interpreter's order, so the first offending string is the same."""
    if isinstance(node, dict):
        return ir.DictNode(tuple((k, _lower_transform(v, (*path, k))) for k, v in node.items()))
    if isinstance(node, list):
        return ir.ListNode(tuple(_lower_transform(v, (*path, i)) for i, v in enumerate(node)))
    if not isinstance(node, str):
        return ir.Literal(node)
    whole = PLACEHOLDER.fullmatch(node)
    if whole is None:
        if PLACEHOLDER.search(node):
            raise TemplateError(
                json_path(*path),
                f"transform string {node!r} mixes a {{placeholder}} with literal text. Use either a "
                'whole-string placeholder (e.g. "{content}") or a plain literal; string interpolation '
                "is not supported.",
            )
        return ir.Literal(node)
    dotted = whole.group(1)
    root, *keys = dotted.split(".")
    return ir.Placeholder(path=dotted, root=root, keys=tuple(keys))


"""Facts about a template that several backends need, computed once from the validated IR.

The parser generator, the grammar backend and the serving plan all ask the same questions of a
template: which literal strings can a delimiter be, where does a tool call's name, id and arguments
come from, which fields a pattern closes. They are answered here, from the IR alone (never from the
template's JSON), so the backends cannot disagree about them.

    >>> shape = call_shape(field)        # the field `tool_calls` of qwen3
    >>> shape.name, shape.arguments
    (Source(kind='path', value=('name',)), Source(kind='path', value=('arguments',)))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ir

LITERAL = "literal"  # a constant of the transform
CAPTURE = "capture"  # a named group of the open (or close) pattern
PATH = "path"  # keys into the parsed content (into the list item, under transform_each)
UNKNOWN = "unknown"  # built from several placeholders, or a path into a capture: known once parsed


@dataclass(frozen=True)
class Source:
    """Where one part of a call comes from: `kind` is one of LITERAL, CAPTURE, PATH, UNKNOWN."""

    kind: str
    value: Any = None


@dataclass(frozen=True)
class CallShape:
    """Where a tool call's parts come from, read off a field's transform.

    `each`: the content is a list and every item is one call (transform_each); paths are then
    relative to the item, and a placeholder root names an item key (item keys shadow captures, as
    in the interpreter's scope). `id` is None when the transform gives calls no id."""

    each: bool
    name: Source
    arguments: Source
    id: Source | None
    call_type: Source | None  # the `type` key of the call ("function"), None when absent


def call_shape(field: ir.Field) -> CallShape:
    """The call shape of `field`'s transform (a field without one yields its content as is)."""
    root = field.transform if field.transform is not None else ir.Placeholder("content", "content", ())
    each = field.transform_each

    def locate(*target: str) -> Source | None:
        return _locate(root, target, each)

    return CallShape(
        each=each,
        name=locate("function", "name") or Source(UNKNOWN),
        arguments=locate("function", "arguments") or Source(UNKNOWN),
        id=locate("id"),
        call_type=locate("type"),
    )


def _locate(node: ir.TransformNode, target: tuple[str, ...], each: bool) -> Source | None:
    """The source of the value at `target` (keys) in what `node` builds; None when absent."""
    if isinstance(node, ir.DictNode):
        if not target:
            return Source(UNKNOWN)
        for key, child in reversed(node.items):  # (a repeated key: the last one wins, as in a dict)
            if key == target[0]:
                return _locate(child, target[1:], each)
        return None
    if isinstance(node, ir.ListNode):
        return Source(UNKNOWN) if not target else None
    if isinstance(node, ir.Literal):
        value = node.value
        for key in target:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return Source(LITERAL, value)
    return _placeholder_source(node, target, each)


def _placeholder_source(node: ir.Placeholder, target: tuple[str, ...], each: bool) -> Source:
    keys = (*node.keys, *target)
    if each:  # the scope is the captures overlaid by the item's keys: the item provides it
        return Source(PATH, (node.root, *keys))
    if node.root == "content":
        return Source(PATH, keys)
    if keys:  # captures are strings: a path into one never resolves
        return Source(UNKNOWN)
    return Source(CAPTURE, node.root)


def delimiter_literals(delimiter: ir.Delimiter | None) -> tuple[str, ...]:
    """The literal strings a literal delimiter matches (empty for a pattern or no delimiter)."""
    if delimiter is None or delimiter.literals is None:
        return ()
    return delimiter.literals


def closers_ending_in_anchor(template: ir.Template) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per field, the (closer, anchor) pairs of literal closers that end with the next message's
    start anchor: a generation stops before the next message starts, so its last region may miss
    exactly the anchor (a server completes such a closer at the end of the output)."""
    anchors = delimiter_literals(template.start_anchor)
    out = {}
    for field in template.fields:
        pairs = tuple(
            (closer, anchor)
            for closer in delimiter_literals(field.close)
            for anchor in anchors
            if anchor and closer.endswith(anchor) and closer != anchor
        )
        if pairs:
            out[field.name] = pairs
    return out


def field_facts(template: ir.Template) -> dict[str, dict]:
    """Per field, what servers read of it, as plain data (a generated module's FIELD_FACTS): its
    literal delimiters (`open`, `close`: none for a pattern), the regex the interpreter compiles for
    each (`open_regex`, `close_regex`: literals longest first; None without that delimiter),
    whether a pattern closes it, its content parser and arguments (as given, `{}` by default),
    whether its value is what the content parser gives (no transform, or `{content}`), `repeats`,
    `join`, `optional`, and where a call's parts come from under its transform (`call`: None
    without one; sources as (kind, value); a capture the closer names too counts as unknown)."""
    closed_by_pattern = pattern_closed(template)
    return {field.name: _one_field_facts(field, field.name in closed_by_pattern) for field in template.fields}


def _one_field_facts(field: ir.Field, closed_by_pattern: bool) -> dict:
    call = None
    if field.transform is not None:
        shape = call_shape(field)
        name, call_id = _served(shape.name, field), _served(shape.id, field)
        call = {"each": shape.each, "name": _pair(name), "arguments": _pair(shape.arguments), "id": _pair(call_id)}
    return {
        "open": delimiter_literals(field.open),
        "close": delimiter_literals(field.close),
        "open_regex": field.open.alternation if field.open is not None else None,
        "close_regex": field.close.alternation if field.close is not None else None,
        "pattern_closed": closed_by_pattern,
        "content": field.content.parser,
        "content_args": field.content.args,
        "value_is_content": field.transform is None or field.transform == _WHOLE_CONTENT,
        "repeats": field.repeats,
        "join": field.join,
        "optional": field.optional,
        "call": call,
    }


_WHOLE_CONTENT = ir.Placeholder("content", "content", ())  # the transform "{content}"


def _served(source: Source | None, field: ir.Field) -> Source | None:
    """A part's source as a server sees it while the region streams: a capture that the closer's
    pattern names too is known only at the close (the closer's value wins), like a parsed value."""
    if source is not None and source.kind == CAPTURE and field.close is not None and source.value in field.close.group_names:
        return Source(UNKNOWN)
    return source


def _pair(found: Source | None) -> tuple | None:
    return None if found is None else (found.kind, found.value)


def template_facts(template: ir.Template) -> dict:
    """What servers read of the template as a whole (a generated module's TEMPLATE_FACTS): the
    literal strings of its start anchor (none for a pattern) and its defaults."""
    return {"start_anchor": delimiter_literals(template.start_anchor), "defaults": template.defaults}


def pattern_closed(template: ir.Template) -> frozenset[str]:
    """The fields whose close delimiter is a pattern."""
    return frozenset(f.name for f in template.fields if f.close is not None and f.close.pattern is not None)


def field_named(template: ir.Template, name: str) -> ir.Field | None:
    for field in template.fields:
        if field.name == name:
            return field
    return None

"""Served variants of a template: the copies an inference server parses a generation with, or
hands to its own classes, made here from the validated template so that no integration walks a
template's JSON.

A variant is a template of its own (a dict, compiled like any other). Which fields it changes is
the host's choice (it names them); what a changed field becomes is read off the IR:

    >>> server_view(qwen3, sink="content", verbatim="tool_calls", capture="rtcompile_opener")
    ... # tool_calls as plain text: {"open_pattern": "(?P<rtcompile_opener>\\s*<tool_call>)",
    ... #   "close": "</tool_call>", "repeats": True, "transform": {"text": "{content}", ...}}
"""

from __future__ import annotations

import copy
from typing import Any

import regex

from . import ir
from .validate import lower

__all__ = ["field_names", "plain_text_field", "regions_view", "renamed_field", "server_view", "verbatim_field"]

# What a field's value is made of, beside its delimiters and whether it repeats or is required.
_VALUE_KEYS = ("content", "content_args", "transform", "transform_each", "join")


def verbatim_field(field: ir.Field, capture: str) -> dict:
    """`field` as plain text with its delimiters, for a parser that hands its regions on as the
    model wrote them. A single literal opener is known; otherwise the opener's regex is wrapped in
    the group `capture` (the parser reports captures while the region is open, and the region's
    value has it at its close). A single literal closer stays one; otherwise its regex closes the
    field (what it matched comes with the close event of a parser built with report_closers)."""
    plain: dict[str, Any] = {"repeats": True} if field.repeats else {}
    opener = field.open
    if opener is not None and opener.literals is not None and len(opener.literals) == 1:
        plain["open"] = opener.literals[0]
    elif opener is not None:
        plain["open_pattern"] = f"(?P<{capture}>{opener.alternation})"
        groups = regex.compile(plain["open_pattern"]).groupindex
        # every named group must be used by the transform (the compiler checks)
        plain["transform"] = {"text": "{content}", **{group: "{" + group + "}" for group in groups}}
    closer = field.close
    if closer is not None and closer.literals is not None and len(closer.literals) == 1:
        plain["close"] = closer.literals[0]
    elif closer is not None:
        plain["close_pattern"] = closer.alternation
    return plain


def server_view(template: Any, *, sink: str, verbatim: str | None = None, capture: str) -> dict:
    """The template as a server parses a generation with it: no field required (a response need
    not write any); a `sink` field for the text outside every region when every field has an
    opener; the field `verbatim` (when the template has it) as plain text with its delimiters
    (`verbatim_field`). The template itself when nothing changes, so that bundled templates keep
    their checked-in parsers."""
    lowered = lower(template)
    fields = {field.name: field for field in lowered.fields}
    plain = fields.get(verbatim) if verbatim is not None else None
    add_sink = sink not in fields and lowered.implicit is None
    required = [field.name for field in lowered.fields if not field.optional]
    if plain is None and not add_sink and not required:
        return template
    served = copy.deepcopy(template)
    if plain is not None:
        served["fields"][plain.name] = verbatim_field(plain, capture)
    if add_sink:
        served["fields"][sink] = {}
    for name in required:
        served["fields"][name]["optional"] = True
    return served


def regions_view(template: Any, *, sink: str, verbatim: list[str], parsed: str, capture: str) -> dict:
    """A template that parses only the field `parsed` (made optional), with the fields `verbatim`
    as regions of plain text with their delimiters and everything else in the field `sink`: the
    template's start anchor, no defaults."""
    lowered = lower(template)
    fields = {field.name: field for field in lowered.fields}
    anchor = lowered.start_anchor
    if anchor.literals is not None:
        literals = anchor.literals
        view: dict[str, Any] = {"start_anchor": literals[0] if len(literals) == 1 else list(literals)}
    else:
        view = {"start_anchor_pattern": anchor.pattern}
    view["fields"] = {sink: {}}
    for name in verbatim:
        view["fields"][name] = verbatim_field(fields[name], capture)
    view["fields"][parsed] = {**copy.deepcopy(template["fields"][parsed]), "optional": True}
    return view


def renamed_field(template: Any, old: str, new: str) -> dict:
    """A copy of the template whose field `old` is named `new` (in its place); the template itself
    when it has no field `old`."""
    if old not in {field.name for field in lower(template).fields}:
        return template
    renamed = copy.deepcopy(template)
    renamed["fields"] = {(new if name == old else name): spec for name, spec in renamed["fields"].items()}
    return renamed


def plain_text_field(template: Any, name: str) -> dict:
    """A copy of the template whose field `name` is read as plain text: its delimiters, `repeats`
    and `optional` kept, its content parser, arguments, transform and join dropped."""
    plain = copy.deepcopy(template)
    spec = plain["fields"][name]
    for key in _VALUE_KEYS:
        spec.pop(key, None)
    return plain


def field_names(template: Any) -> tuple[str, ...]:
    """The names of the template's fields, in order (the template validated first)."""
    return tuple(field.name for field in lower(template).fields)

"""Builders of xgrammar structural-tag formats, as the JSON data xgrammar reads.

The grammar backend builds plain dicts (JSON-serializable, no xgrammar import): the
`{"type": "structural_tag", "format": ...}` object that `xgrammar.GrammarCompiler(...)
.compile_structural_tag(json.dumps(tag))` compiles. Every format used here exists in xgrammar
0.2.7 (SGLang 0.5.23) and 0.2.8 (vLLM 0.34.0) alike, except `excludes` of `json_schema`, which 0.2.7
ignores (see `json_schema`).

A few rules of xgrammar's matcher shape what is built (measured on 0.2.8):
- A string (`const_string`, a tag's `begin`, a trigger) accepts a control token's id and its spelling
  in ordinary tokens alike; only `token` formats (and token triggers) tell the two apart.
- `any_text` with `excludes` blocks an excluded string whether it comes as an id or spelled out;
  `any_tokens` with `exclude_tokens` blocks the ids only.
- Free text inside `star`/`or` can be split across iterations, so exclusions only hold inside one
  `any_text` or one triggered-tags format: loops over free text are always triggered tags.
"""

from __future__ import annotations

from typing import Any

Format = dict

EMPTY: Format = {"type": "const_string", "value": ""}
# A choice with no way through (`choice` leaves it out).
NEVER: Format = {"type": "or", "elements": []}


def const(text: str) -> Format:
    return {"type": "const_string", "value": text}


def token(token_id: int) -> Format:
    return {"type": "token", "token": token_id}


def regex(pattern: str) -> Format:
    return {"type": "regex", "pattern": pattern}


def any_text(excludes: list[str] | tuple[str, ...] = ()) -> Format:
    return {"type": "any_text", "excludes": sorted(set(excludes))}


def any_tokens(exclude_ids: list[int] | tuple[int, ...] = ()) -> Format:
    return {"type": "any_tokens", "exclude_tokens": sorted(set(exclude_ids))}


def json_schema(schema: Any, excludes: list[str] | tuple[str, ...] = ()) -> Format:
    """A JSON value valid against `schema`. `excludes`: strings no JSON string (nor property name)
    may contain (xgrammar 0.2.8; 0.2.7 ignores the key)."""
    out: Format = {"type": "json_schema", "json_schema": schema}
    if excludes:
        out["excludes"] = sorted(set(excludes))
    return out


def sequence(*elements: Format) -> Format:
    flat: list[Format] = []
    for element in elements:
        for item in element["elements"] if element.get("type") == "sequence" else [element]:
            if item == EMPTY:
                continue
            if item.get("type") == "const_string" and flat and flat[-1].get("type") == "const_string":
                flat[-1] = const(flat[-1]["value"] + item["value"])
            else:
                flat.append(item)
    if not flat:
        return EMPTY
    return flat[0] if len(flat) == 1 else {"type": "sequence", "elements": flat}


def choice(*elements: Format) -> Format:
    unique: list[Format] = []
    for element in elements:
        if element not in unique and element != NEVER:
            unique.append(element)
    if len(unique) == 1:
        return unique[0]
    return {"type": "or", "elements": unique}


def optional(content: Format) -> Format:
    return EMPTY if content == EMPTY else {"type": "optional", "content": content}


def star(content: Format) -> Format:
    return {"type": "star", "content": content}


def plus(content: Format) -> Format:
    return {"type": "plus", "content": content}


def repeat(content: Format, low: int, high: int | None) -> Format:
    return {"type": "repeat", "min": low, "max": -1 if high is None else high, "content": content}


def tag(begin: str | Format, content: Format, end: str | Format = "") -> Format:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def triggered_tags(
    triggers: list[str], tags: list[Format], *, excludes: list[str] | tuple[str, ...] = (), at_least_one: bool = False,
    stop_after_first: bool = False,
) -> Format:
    return {
        "type": "triggered_tags",
        "triggers": triggers,
        "tags": tags,
        "excludes": sorted(set(excludes)),
        "at_least_one": at_least_one,
        "stop_after_first": stop_after_first,
    }


def token_triggered_tags(
    trigger_ids: list[int], tags: list[Format], *, exclude_ids: list[int] | tuple[int, ...] = (),
    at_least_one: bool = False, stop_after_first: bool = False,
) -> Format:
    return {
        "type": "token_triggered_tags",
        "trigger_tokens": trigger_ids,
        "tags": tags,
        "exclude_tokens": sorted(set(exclude_ids)),
        "at_least_one": at_least_one,
        "stop_after_first": stop_after_first,
    }


def structural_tag(format_: Format) -> dict:
    return {"type": "structural_tag", "format": format_}

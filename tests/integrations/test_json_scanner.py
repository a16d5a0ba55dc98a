"""The streaming reader of JSON tool-call regions (`arguments.JsonScanner`), on its own.

What it reports (each call's name, each member of its arguments object, each transform_each item)
must not depend on where the chunks split the region, and must be what the field's own JSON parser
reads from the whole region: the members it reports, parsed, are the arguments object.
"""

from __future__ import annotations

import json
import string

from hypothesis import given
from hypothesis import strategies as st

from rtcompile.frontend import facts
from rtcompile.frontend.validate import lower
from rtcompile.integrations.serving import FieldFacts
from rtcompile.integrations.serving.arguments import JsonScanner, delimiter_pairs
from rtcompile.integrations.serving.calls import ToolCallPlan

from strategies import chunkings

DELIMITER = '<|"|>'
DIALECT = {"unquoted_keys": True, "string_delims": [[DELIMITER, DELIMITER]]}
# How a call is read: one object with its name and arguments, or transform_each over a list.
NAMED_BY_PATH, EACH = False, True


def tool_call_plan(content_args: dict, each: bool) -> ToolCallPlan:
    """The plan of a json tool-call field, from its facts as the front end computes them."""
    name, arguments = ("{name}", "{arguments}") if each else ("{content.name}", "{content.arguments}")
    field = {"open": "<c>", "close": "</c>", "content": "json", "content_args": content_args, "transform_each": each,
             "transform": {"type": "function", "function": {"name": name, "arguments": arguments}}}
    ir = lower({"start_anchor": "<s>", "fields": {"tool_calls": field}})
    return ToolCallPlan(FieldFacts(**facts.field_facts(ir)["tool_calls"]))


class Reports:
    """The scanner's sink: what it reported, in order."""

    def __init__(self):
        self.seen: list[tuple] = []

    def member(self, slot, raw):
        self.seen.append(("member", slot, raw))

    def leaf(self, slot, which, raw):
        self.seen.append(("leaf", slot, which, raw))

    def element(self, slot):
        self.seen.append(("element", slot))


def scan(chunks: list[str], content_args: dict, each: bool) -> tuple[list[tuple], ToolCallPlan]:
    plan = tool_call_plan(content_args, each)
    reports = Reports()
    scanner = JsonScanner(
        reports,
        plan,
        delimiter_pairs(content_args.get("string_delims", [])),
        bool(content_args.get("unquoted_keys")),
    )
    for chunk in chunks:
        scanner.feed(chunk)
    return reports.seen, plan


def calls_read(seen: list[tuple], plan: ToolCallPlan) -> dict[int, dict]:
    """Per call slot: its name and its arguments, as the reports give them once parsed."""
    calls: dict[int, dict] = {}
    for kind, slot, *rest in seen:
        call = calls.setdefault(slot, {"name": None, "arguments": {}})
        if kind == "leaf":
            call[rest[0]] = plan.json_parser(rest[1])
        elif kind == "member":
            call["arguments"].update(plan.json_parser("{" + rest[0] + "}"))
    return calls


# ---- values, written as JSON or in the dialect (unquoted keys, <|"|>-delimited strings) ---------

_KEYS = st.text(string.ascii_letters + "_", min_size=1, max_size=6)
# characters that are structural, escapes, or a part of the delimiter
_STRINGS = st.text(st.sampled_from(list('ab "\\\n{}[],:<|>é\u2028')), max_size=10)
_SCALARS = st.none() | st.booleans() | st.integers(-999, 999) | st.floats(-1e6, 1e6) | _STRINGS
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8,
)
_ARGUMENTS = st.dictionaries(_KEYS, _VALUES, max_size=5)
_NAMES = st.text(string.ascii_letters + "_", min_size=1, max_size=8)


def in_dialect(value) -> str:
    """`value` in the dialect; a string holding the delimiter is written as a JSON string."""
    if isinstance(value, str):
        return json.dumps(value) if DELIMITER in value else DELIMITER + value + DELIMITER
    if isinstance(value, list):
        return "[" + ",".join(in_dialect(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{in_dialect(item)}" for key, item in value.items()) + "}"
    return json.dumps(value)


@st.composite
def regions(draw, dialect: bool) -> tuple[str, list[tuple[str, dict]]]:
    calls = draw(st.lists(st.tuples(_NAMES, _ARGUMENTS), min_size=1, max_size=3))
    if dialect:
        objects = [in_dialect({"name": name, "arguments": args}) for name, args in calls]
    else:
        indent = draw(st.sampled_from([None, 1]))
        objects = [
            json.dumps({"name": name, "arguments": args}, indent=indent) for name, args in calls
        ]
    return objects, calls


@st.composite
def small_chunks(draw, text: str) -> list[str]:
    """A stream's chunks: 1 to 6 characters each, as a server receives them."""
    sizes = draw(st.lists(st.integers(1, 6), min_size=len(text), max_size=len(text)))
    chunks, start = [], 0
    for size in sizes:
        if start >= len(text):
            break
        chunks.append(text[start : start + size])
        start += size
    return chunks


@given(data=st.data(), dialect=st.booleans(), each=st.booleans())
def test_reports_are_the_whole_regions_calls_however_it_is_chunked(data, dialect, each):
    objects, calls = data.draw(regions(dialect))
    content_args = DIALECT if dialect else {}
    if each:
        text, call = "[" + ", ".join(objects) + "]", EACH
    else:
        text, call, calls = objects[0], NAMED_BY_PATH, calls[:1]
    whole, plan = scan([text], content_args, call)
    assert calls_read(whole, plan) == {
        slot: {"name": name, "arguments": args} for slot, (name, args) in enumerate(calls)
    }
    assert [report for report in whole if report[0] == "element"] == (
        [("element", slot) for slot in range(len(calls))] if each else []
    )
    chunks = data.draw(st.one_of(chunkings(text), small_chunks(text)))
    assert scan(chunks, content_args, call)[0] == whole


# Each text puts a boundary case of the scan at some split: an escape, an opener or closer of the
# delimiter, an opener inside a JSON string, a first character of the opener that opens nothing,
# containers of no interest nested in a member, data after the region's value.
_EDGE_TEXTS = [
    ({}, '{"name": "a\\"b", "arguments": {"k": "x\\\\y\\"", "n": [1, {"z": "]"}], "m": 2}}'),
    (
        DIALECT,
        '{name:<|"|>a"b<|"|>,arguments:{k:<|"|>x\\y<|<|"|>,s:"p<|"|>q<|"|>r",n:[1,{z:<|"|>]<|"|>}],'
        "m:2}}",
    ),
    (DIALECT, '{name:<|"|>f<|"|>,arguments:{k:<|"|>a<|"|>,w:<<|"|>b<|"|>}}'),
    ({}, '{"name": "f", "arguments": {"k": 1}} {"name": "g"}'),
]


def test_every_two_way_split_reports_what_the_whole_region_reports():
    for content_args, text in _EDGE_TEXTS:
        whole, _ = scan([text], content_args, NAMED_BY_PATH)
        assert any(report[0] == "member" for report in whole), text
        for cut in range(len(text) + 1):
            halves = [text[:cut], text[cut:]]
            assert scan(halves, content_args, NAMED_BY_PATH)[0] == whole, (text, cut)


def test_members_are_reported_when_complete_not_at_the_regions_end():
    text = '{"name": "f", "arguments": {"a": "x", "b": [1, 2], "c": 3, "d": true}}'
    plan = tool_call_plan({}, NAMED_BY_PATH)
    reports = Reports()
    scanner = JsonScanner(reports, plan, [], False)
    reported_after = {}
    for end in range(1, len(text) + 1):
        scanner.feed(text[end - 1])
        for report in reports.seen[len(reported_after) :]:
            reported_after[report] = text[:end]
    # a string or container at its closing character, a number or literal at the "," or "}" after it
    assert list(reported_after.values()) == [
        '{"name": "f"',
        '{"name": "f", "arguments": {"a": "x"',
        '{"name": "f", "arguments": {"a": "x", "b": [1, 2]',
        '{"name": "f", "arguments": {"a": "x", "b": [1, 2], "c": 3,',
        '{"name": "f", "arguments": {"a": "x", "b": [1, 2], "c": 3, "d": true}',
    ]

"""Free content with regions in it: xgrammar's triggered tags, built from the regions' first pieces.

A triggered-tags format lets free text run until a trigger appears, then requires one of that
trigger's tags. Every region is split into its first piece and the rest: a control token's id
(token-triggered tags, whose free text may still spell the token out: the parser reads that as text)
or literal text (text-triggered tags, whose free text can never hold the trigger). Regions that
start the same way share one tag whose content chooses among them. What the free text must never
hold (the openers of regions the request forbids) is excluded from it. (`MessageWriter` in the
annotations is message.py's, which imports this module.)
"""

from __future__ import annotations

from . import formats as F
from .calls import closing
from .delimiters import blocking_literals, write_delimiter
from .errors import GrammarError


TOKEN, TEXT = "token", "text"


def triggered_loop(writer: "MessageWriter", with_calls: bool, text_only: bool = False) -> F.Format:
    """Free content with regions (a template with an implicit field; request auto or none), then
    optionally one region that the output's end closes. `with_calls=False`: no call in it (the
    caller keeps content from opening one); `text_only`: triggered by text (the loop follows text
    the grammar wrote character by character)."""
    repeating, ends, forbidden = _regions(writer)
    call_field = writer.call_field
    if call_field is not None and call_field is not writer.sink:
        if with_calls and writer.calls is not None:
            region = writer.call_region()
            if writer.request.parallel and region.closed is not None:
                repeating.append((call_field.name, region.closed))
                if writer.calls.closing.stops:  # (the last call may end with the output)
                    ends.append(region.open_end)
            else:  # (calls only at the end: content never opens one)
                forbidden.extend(blocking_literals(call_field.open, f"fields.{call_field.name}.open"))
                ends.append(writer.call_tail())
        elif with_calls and call_field.open is not None:  # tool_choice none
            forbidden.extend(blocking_literals(call_field.open, f"fields.{call_field.name}.open"))
    repeating.extend(_markers(writer))
    try:
        loop = _loop(writer, repeating, forbidden, text_only)
    except _SpelledOut:
        return _spelled_loop(writer, with_calls)
    return F.sequence(loop, F.optional(F.choice(*ends))) if ends else loop


class _SpelledOut(Exception):
    """The loop must be triggered by text, control tokens spelled out (see `_spelled_loop`)."""


def _spelled_loop(writer: "MessageWriter", with_calls: bool) -> F.Format:
    """A loop triggered by text where some regions start with control tokens. A spelled-out
    token then enters the region in the grammar while the parser reads text: so no region's content
    may hold any opener (by id or spelled out), and what such a "region" writes stays content."""
    openers = writer.opener_texts()
    writer.also_excluded = openers
    if writer.calls is not None:
        writer.calls.also_excluded = openers
    return triggered_loop(writer, with_calls, text_only=True)


def region_loop(writer: "MessageWriter") -> F.Format:
    """No implicit field: regions one after another (text outside them is dropped), each after
    the optional start anchor, the last one possibly closed by the output's end."""
    repeating, ends, _ = _regions(writer)
    if writer.calls is not None:
        region = writer.call_region()
        if writer.request.parallel and region.closed is not None:
            repeating.append((writer.call_field.name, region.closed))
        ends.append(writer.call_tail())
    glue = writer.glue()
    loop = F.star(F.sequence(glue, F.choice(*(fmt for _, fmt in repeating)))) if repeating else F.EMPTY
    return F.sequence(loop, F.optional(F.sequence(glue, F.choice(*ends)))) if ends else loop


def _regions(writer: "MessageWriter") -> tuple[list, list, list]:
    """The text fields' regions: (name, closed region) pairs, regions ending the output, and the
    openers of fields the grammar never opens (free text must not hold them)."""
    repeating: list[tuple[str, F.Format]] = []
    ends: list[F.Format] = []
    forbidden: list[str] = []
    for field in writer.template.fields:
        if field.open is None or field is writer.call_field:
            continue
        region = writer.text_region(field)
        if region is None:
            forbidden.extend(blocking_literals(field.open, f"fields.{field.name}.open"))
            continue
        if region.closed is not None:
            repeating.append((field.name, region.closed))
        ends.append(region.open_end)
    return repeating, ends, forbidden


def _markers(writer: "MessageWriter") -> list[tuple[str, F.Format]]:
    """The implicit field's closers that are not stop tokens (kimi's tool-section markers): the
    parser closes the content there and goes on outside every region."""
    field = writer.implicit
    close = closing(field.close, writer.speller, f"fields.{field.name}.close")
    return [(field.name, close.written)] if close.written is not None else []


def _ends_with_tokens(tags: dict) -> bool:
    """Whether every tag ends with a control token (free tokens may follow it): its content's
    last piece, or its token trigger when it has no content (a marker)."""
    return all(
        (rest == F.EMPTY and key[0] == TOKEN) or (_last(rest) is not None and _last(rest)[0] == TOKEN)
        for key, rests in tags.items()
        for rest in rests
    )


def _loop(writer: "MessageWriter", regions: list[tuple[str, F.Format]], forbidden: list[str], text_only: bool) -> F.Format:
    tags = _tags(writer, regions, spelled=False)
    kinds = {kind for kind, _ in tags}
    if len(kinds) > 1:
        _drop_optional_tokens(tags)
        kinds = {kind for kind, _ in tags}
    if kinds == {TOKEN} and (text_only or not _ends_with_tokens(tags)):
        kinds = {TOKEN, TEXT}
    if len(kinds) > 1:
        # (free text between tokens is read token by token: it may only follow a token)
        if not writer.also_excluded:
            raise _SpelledOut
        tags = _tags(writer, regions, spelled=True)
        kinds = {TEXT}
    if not tags:
        return writer.free_text(tuple(forbidden), after_token=not text_only, outside=True)
    if kinds == {TOKEN}:
        exclude = writer.speller.excluded_ids(forbidden)
        if exclude is None:  # (text to keep out of the free text: a loop triggered by text does)
            if not writer.also_excluded:
                raise _SpelledOut
            raise GrammarError("fields", f"free content cannot avoid {forbidden!r}")
        ordered = sorted(tags, key=lambda key: key[1])
        exclude = [*exclude, *writer.opening_token_ids(keep=tuple(key[1] for key in ordered))]
        return F.token_triggered_tags(
            [key[1] for key in ordered], [_tag(F.token(key[1]), tags[key]) for key in ordered], exclude_ids=exclude
        )
    ordered = sorted(tags, key=lambda key: key[1])
    triggers = [key[1] for key in ordered]
    for a in triggers:
        for b in triggers:
            if a != b and b.startswith(a):
                raise GrammarError("fields", f"the openers {a!r} and {b!r} start alike: free content cannot trigger them apart")
    return F.triggered_tags(triggers, [_tag(key[1], tags[key]) for key in ordered], excludes=forbidden)


def _tag(begin, rests: list[F.Format]) -> F.Format:
    """A tag whose content chooses among `rests`; the closer they all end with, if one, is the
    tag's end (xgrammar refuses a tag with an empty end around content that repeats without bound)."""
    last = {_last(rest) for rest in rests}
    if len(last) == 1 and None not in last:
        kind, value = _last(rests[0])
        return F.tag(begin, F.choice(*(_without_last(rest) for rest in rests)), F.token(value) if kind == TOKEN else value)
    return F.tag(begin, F.choice(*rests), "")


def _last(fmt: F.Format):
    """The fixed piece a format ends with: (TOKEN, id) or (TEXT, text), else None."""
    if fmt.get("type") == "sequence":
        fmt = fmt["elements"][-1]
    if fmt.get("type") == "token":
        return (TOKEN, fmt["token"])
    if fmt.get("type") == "const_string" and fmt["value"]:
        return (TEXT, fmt["value"])
    return None


def _without_last(fmt: F.Format) -> F.Format:
    if fmt.get("type") == "sequence":
        return F.sequence(*fmt["elements"][:-1])
    return F.EMPTY


def _tags(writer: "MessageWriter", regions: list[tuple[str, F.Format]], spelled: bool) -> dict:
    """The regions' alternatives by trigger: (kind, first piece) -> the rests. A text first piece
    is cut at its field's trigger (`<|tool_call>call:` for gemma's per-tool openers), so the free
    text can hold no opener of any name. `spelled`: control tokens as their text, for a loop that
    text triggers too (a region entered by a spelled-out token is text to the parser, which is no
    call, so the request still holds; an id still opens the region, as the grammar says)."""
    by_id = {token_id: text for text, token_id in writer.speller.control.items()}
    tags: dict[tuple[str, object], list[F.Format]] = {}
    for name, region in regions:
        triggers = [
            (TEXT, by_id[value]) if spelled and kind == TOKEN else (kind, value) for kind, value in _field_triggers(writer, name)
        ]
        for (kind, value), rest in split_first(region, f"fields.{name}.open"):
            if spelled and kind == TOKEN:
                kind, value = TEXT, by_id[value]
            trigger = value
            if kind == TEXT:
                trigger = next((t for k, t in triggers if k == TEXT and value.startswith(t)), value)
                rest = F.sequence(F.const(value[len(trigger) :]), rest)
            tags.setdefault((kind, trigger), []).append(rest)
    return tags


def _drop_optional_tokens(tags: dict) -> None:
    """Where a region may start with a control token or without it (`(?:<minimax:tool_call>\\s*)?
    <invoke ...`), leave the token to the free text: written there (by id or spelled out) and
    followed by the region's text trigger, it is read as the same region."""
    text_keys = {key for key in tags if key[0] == TEXT}
    for key in [k for k in tags if k[0] == TOKEN]:
        kept = []
        for rest in tags[key]:
            try:
                pieces = split_first(rest, "")
            except GrammarError:
                pieces = []
            covered = pieces and all(
                first[0] == TEXT and any(first[1].startswith(t[1]) for t in text_keys) for first, _ in pieces
            )
            if not covered:
                kept.append(rest)
        if kept:
            tags[key] = kept
        else:
            del tags[key]


def opener_starts(writer: "MessageWriter", field) -> list[str]:
    """The texts `field`'s opener may start with (control tokens spelled)."""
    by_id = {token_id: text for text, token_id in writer.speller.control.items()}
    starts = []
    try:
        triggers = _field_triggers(writer, field.name)
    except GrammarError:  # (an opener that starts with no fixed text: nothing to add)
        return []
    for kind, value in triggers:
        starts.append(by_id[value] if kind == TOKEN else value)
    return starts


def _field_triggers(writer: "MessageWriter", name: str) -> list[tuple[str, object]]:
    """The first pieces of a field's opener written without captures (the text every call's
    opener starts with, before the name): the triggers of its tags."""
    field = next(f for f in writer.template.fields if f.name == name)
    delimiter = field.open if field is not writer.implicit else field.close
    if delimiter is None:
        return []
    written = write_delimiter(delimiter, writer.speller, f"fields.{name}", checked=False)
    return [first for first, _ in split_first(written.format, f"fields.{name}")]


def split_first(fmt: F.Format, where: str) -> list[tuple[tuple[str, object], F.Format]]:
    """(first piece, rest) pairs covering what `fmt` writes: a control token or literal text
    first, leading optional whitespace dropped (free text before the region writes it)."""
    kind = fmt.get("type")
    if kind == "token":
        return [((TOKEN, fmt["token"]), F.EMPTY)]
    if kind == "const_string":
        if not fmt["value"]:
            raise GrammarError(where, "a region that starts with nothing cannot be triggered")
        return [((TEXT, fmt["value"]), F.EMPTY)]
    if kind == "or":
        return [pair for element in fmt["elements"] for pair in split_first(element, where)]
    if kind == "sequence":
        head, rest = fmt["elements"][0], F.sequence(*fmt["elements"][1:])
        out = []
        if _nullable(head):
            out.extend(split_first(rest, where))
            if head.get("type") == "regex":
                return out
            head = head["content"]
        out.extend((first, F.sequence(after, rest)) for first, after in split_first(head, where))
        return out
    raise GrammarError(where, "a region must start with fixed text or a control token to be triggered")


def _nullable(fmt: F.Format) -> bool:
    kind = fmt.get("type")
    if kind in ("optional", "star"):
        return True
    if kind == "regex":
        return fmt["pattern"].endswith(("*", "?"))
    return False

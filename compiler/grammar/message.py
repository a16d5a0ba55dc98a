"""The whole output as the grammar writes it: where the prompt left the parser, then reasoning,
content and tool calls in the order the request allows.

The parser's own rules decide the shape. Outside every region, text goes to the implicit field
(content) and any field's opener opens its region; inside a region only its closer counts; the
output's end closes whatever region is open. So:

- with an implicit field, `auto` and `none` are a loop of free content and regions (loops.py);
- without one (gpt-oss: text outside regions is dropped), a loop of regions, each optionally
  preceded by the start anchor (how such formats begin each part of a message);
- `required` and a named tool: reasoning first where the template has it (free, never
  suppressed), content that opens no region, the calls (with the implicit field's own markers,
  kimi's and DeepSeek's call sections, around them), and content after them;
  `parallel_tool_calls=False` allows one call (and a list of one);
- an opener anchored at the parser's start (`^\\s*(?=\\[...)`, Llama's pythonic calls) comes
  first or never: content is kept from starting like it.

A region's closer is written unless it is a stop token (the output ends there) or a lookahead that
the next call's opener satisfies (calls then follow one another directly).
"""

from __future__ import annotations

from dataclasses import dataclass

from rtcompile.frontend import facts, ir

from . import formats as F
from .calls import CallWriter, closing, without_leading_layout
from .charclass import class_source
from .delimiters import blocking_literals, opener_firsts, unfactored, write_delimiter
from .errors import GrammarError
from .request import Request
from .spelling import Speller

REASONING = "reasoning_content"
TOOL_CALLS = "tool_calls"
TEXT_PARSERS = ("text",)


@dataclass(frozen=True)
class Region:
    """A region as written: `closed` with its closer (None when the closer is never written),
    `open_end` without it, ending the output."""

    closed: F.Format | None
    open_end: F.Format


class MessageWriter:
    def __init__(self, template: ir.Template, speller: Speller, request: Request):
        self.template = template
        self.speller = speller
        self.request = request
        implicit = template.fields[template.implicit] if template.implicit is not None else None
        # The implicit field takes free content only where its text always parses: text, and a
        # transform that reads nothing but the text (a json sink would fail on free text). Else
        # the grammar writes nothing outside regions, as for a template without an implicit field.
        writable = implicit is not None and plain_text(implicit) and fits_defaults(implicit, template.defaults)
        self.implicit = implicit if writable else None
        self.sink = implicit  # (where text outside regions goes, whether or not the grammar writes any)
        if implicit is not None and implicit.close is not None and implicit.close.pattern is not None:
            written = write_delimiter(implicit.close, speller, f"fields.{implicit.name}.close", checked=False)
            if written.at_start and not written.at_line_start:
                # (after a prompt's text it never matches: the parser stays in the field, and
                # reads no opener the grammar writes)
                raise GrammarError(f"fields.{implicit.name}.close", "the closer matches only where the text starts")
        self.reasoning = facts.field_named(template, REASONING)
        self.call_field = facts.field_named(template, TOOL_CALLS)
        if self.call_field is not None and self.call_field is implicit:
            raise GrammarError(f"fields.{self.call_field.name}", "the tool-call field takes the text outside every region")
        self.calls: CallWriter | None = None
        self.tools: tuple = ()
        # Text no region content may hold (set while a loop is triggered by spelled-out control
        # tokens: see loops.py).
        self.also_excluded: tuple[str, ...] = ()
        self._opener_texts: tuple[str, ...] | None = None
        if self.call_field is not None and request.callable:
            if not fits_defaults(self.call_field, template.defaults):
                raise GrammarError(f"fields.{self.call_field.name}", "the template's default for it cannot take a region's value")
            self.calls = CallWriter(self.call_field, speller)
            self.calls.after_free_text = self.implicit is not None
            self.tools = self.calls.callable_tools(request.callable)
            if not self.tools:
                raise GrammarError(f"fields.{self.call_field.name}", "names no tool of the request")
        elif request.forced:
            raise GrammarError("fields", f"the template has no {TOOL_CALLS!r} field to write calls in")
        for field in template.fields:
            if not field.optional:
                raise GrammarError(f"fields.{field.name}", "a required field cannot be guaranteed by the grammar")
        _check_openers_apart(template, speller)
        self._check_written_openers_apart()

    # ---- the whole output

    def output(self, open_field: str | None, at_start: bool = True) -> F.Format:
        """The output after a prompt that left `open_field` open (None: outside every region);
        `at_start`: the prompt left nothing after its start anchor (a `^` opener can still match)."""
        outside = open_field is None or (self.sink is not None and open_field == self.sink.name)
        if self.call_field is not None and self.call_field.open is not None and self._calls_at_start():
            if not (outside and at_start):
                if self.request.forced:
                    raise GrammarError(f"fields.{self.call_field.name}.open", "calls open only where the output starts, and the prompt leaves text there")
                self.calls = None  # (the opener can no longer match: no call, whatever follows)
            elif self.request.forced:
                return self.call_block()
            else:
                return self.at_start_output()
        if outside:
            return self.body(reasoning_done=False)
        return self.rest_of_region(facts.field_named(self.template, open_field))

    def rest_of_region(self, field: ir.Field) -> F.Format:
        """The prompt opened `field`: the rest of its text, its closer, then the rest."""
        where = f"fields.{field.name}"
        if field is self.call_field or not plain_text(field):
            raise GrammarError(where, "the prompt leaves this region open: the grammar cannot finish it")
        close = closing(field.close, self.speller, f"{where}.close")
        rest = self.free_text(close.blocking, after_token=True)
        if close.written is None:
            if self.request.forced:
                raise GrammarError(where, "the prompt opens a region only the output's end closes")
            return rest
        tail = F.sequence(without_leading_layout(close.written), self.body(reasoning_done=field is self.reasoning))
        return F.sequence(rest, tail if self.request.forced else F.optional(tail))

    def body(self, reasoning_done: bool) -> F.Format:
        if self.request.forced:
            return self.forced(reasoning_done)
        from .loops import region_loop, triggered_loop

        if self.implicit is None:
            return region_loop(self)
        return triggered_loop(self, with_calls=True)

    # ---- calls that open only where the parser's text starts

    def _calls_at_start(self) -> bool:
        field = self.call_field
        return write_delimiter(field.open, self.speller, f"fields.{field.name}.open", checked=False).at_start

    def at_start_output(self) -> F.Format:
        """The calls first, or content that cannot start like their opener."""
        where = f"fields.{self.call_field.name}.open"
        if self.implicit is None:
            raise GrammarError(where, "calls that open only at the start need a content field beside them")
        from .loops import triggered_loop

        calls = self.calls
        self.calls = None  # (the loop after the start holds no call)
        guard = F.regex(opening_guard(self.call_field.open, where))
        content = F.optional(F.sequence(guard, triggered_loop(self, with_calls=False, text_only=True)))
        if calls is None:
            return content
        self.calls = calls
        return F.choice(self.call_block(), content)

    # ---- required / named

    def forced(self, reasoning_done: bool) -> F.Format:
        """Reasoning (free), content that opens no region, the calls, content after them."""
        openers = self.opener_texts() if self.implicit is not None else ()
        lead = self.layout_before_text(openers) if self.implicit is not None else F.EMPTY
        if self.reasoning is not None and not reasoning_done:
            region = self.text_region(self.reasoning)
            if region is not None and region.closed is not None:
                lead = F.sequence(lead, F.optional(F.sequence(self.glue(), region.closed)))
        before = after = F.EMPTY
        if self.implicit is not None:
            before = F.optional(self.free_text(openers, after_token=not _ends_in_text(lead), outside=True))
            after = F.optional(F.sequence(self.markers(), self.text_after_markers(openers)))
        closed, open_end = self.call_blocks()
        calls = open_end if closed is None else F.choice(F.sequence(closed, after), open_end)
        return F.sequence(lead, before, self.markers(leading=False), self.glue(), calls)

    def opener_texts(self) -> tuple[str, ...]:
        """Text free content must not hold so that it opens no region: every opener's necessary
        literal, and the text it starts with (free text that could also be the start of a region
        keeps xgrammar's matcher from following the region)."""
        if self._opener_texts is None:
            self._opener_texts = self._find_opener_texts()
        return self._opener_texts

    def _find_opener_texts(self) -> tuple[str, ...]:
        from .loops import opener_starts

        out: list[str] = []
        for field in self.template.fields:
            if field.open is not None:
                out.extend(blocking_literals(field.open, f"fields.{field.name}.open"))
                out.extend(opener_starts(self, field))
        return tuple(dict.fromkeys(out))

    def call_block(self) -> F.Format:
        """At least one call, the last one closed or ended by the output's end."""
        closed, open_end = self.call_blocks()
        return open_end if closed is None else F.choice(closed, open_end)

    def call_blocks(self) -> tuple[F.Format | None, F.Format]:
        """The calls of a forced request (or of an opener only at the start), at least one: ending
        with a written closer (None where closers are never written), and ending with the output's
        end (the last call's closer left to it, where a stop token may close it). Each tool's
        region is written once where the closer is always written (xgrammar compiles each copy)."""
        calls = self.calls
        parallel = self.request.parallel
        high = None if parallel else 1
        if calls.shape.each:
            closed = calls.region(self.tools, 1, high) if calls.closing.written is not None else None
            return closed, calls.region(self.tools, 1, high, closed=False)
        one_open = calls.region(self.tools, closed=False)
        if calls.closing.written is None:
            if parallel and self._calls_follow_directly():
                return None, F.plus(one_open)
            return None, one_open
        one_closed = calls.region(self.tools)
        closed = F.plus(F.sequence(one_closed, self.markers(), self.glue())) if parallel else one_closed
        if not calls.closing.stops:
            return closed, F.NEVER
        earlier = F.star(F.sequence(one_closed, self.markers(), self.glue())) if parallel else F.EMPTY
        return closed, F.sequence(earlier, one_open)

    def _calls_follow_directly(self) -> bool:
        """Whether a call's lookahead closer is satisfied by the next call's opener."""
        calls = self.calls
        opener = blocking_literals(calls.field.open, f"fields.{calls.field.name}.open")
        return any(any(o.startswith(b) or b.startswith(o) for o in opener) for b in calls.closing.by_next)

    def text_after_markers(self, blocking: tuple[str, ...]) -> F.Format:
        """Free text where markers may come before it, in a loop (between calls), read character
        by character: where a marker starts with a control token, it never starts with whitespace
        or such a marker's first character. Text that could start by reading, byte by byte, a
        marker written by id leaves xgrammar 0.2.8's matcher no token at all after the loop's next
        call (see README.md, xgrammar releases). The whitespace and a marker before the text are
        the markers' own."""
        text = self.free_text(blocking, after_token=False, outside=True)
        close = self.implicit.close
        literals = [] if close is None else closing(close, self.speller, f"fields.{self.implicit.name}.close").blocking
        by_id = [t for t in literals if t and not self.speller.is_stop(t) and isinstance(self.speller.pieces(t)[0], int)]
        firsts = {literal[0] for literal in by_id}
        if not firsts:
            return text
        return F.sequence(F.regex(class_source(firsts | set(" \t\n\r"), negated=True)), text)

    def markers(self, leading: bool = True) -> F.Format:
        """Layout whitespace and the implicit field's closers that are no stop tokens (call
        sections): what may stand around calls outside every region. `leading=False`: no
        whitespace first (after free text, see `free_text`)."""
        if self.implicit is None:
            return F.EMPTY
        layout = self.layout_before_text(self.opener_texts())
        lead = layout if leading else F.EMPTY
        close = closing(self.implicit.close, self.speller, f"fields.{self.implicit.name}.close")
        if close.written is None:
            return lead
        # (a marker's own leading whitespace left out: see CallWriter.opener)
        return F.sequence(lead, F.star(F.sequence(without_leading_layout(close.written), layout)))

    def layout_before_text(self, blocking: tuple[str, ...]) -> F.Format:
        """Whitespace the grammar writes outside regions (before free text, an opener, a
        marker): none that starts a word free text must not hold. The parser reads it with what
        follows as one text: layout " " then free text ">" would spell the opener " >" across
        them, and layout " \\n" before the opener " \\n>" would open the region one " \\n" early."""
        words = (*blocking, *self.also_excluded)
        starts = {word[0] for word in words if word}
        chars = "".join(c for c in " \t\n\r" if c not in starts)
        return F.regex("[" + chars.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r") + "]*") if chars else F.EMPTY

    def glue(self) -> F.Format:
        """What may come between regions where text outside regions is dropped: the start anchor,
        which such formats write before each part of a message (where no opener matches in it)."""
        if self.sink is not None:
            return F.EMPTY
        anchors = [a for a in facts.delimiter_literals(self.template.start_anchor) if not self._opens_something(a)]
        # (an anchor holding a control token that starts with another anchor's text is left out:
        # read byte by byte, that anchor and the opener after it could start the same bytes, and
        # xgrammar's matcher dead-ends once that reading fails: see README.md, xgrammar releases)
        anchors = [a for a in anchors if not (self._holds_token(a) and any(b != a and a.startswith(b) for b in anchors))]
        if not anchors:
            return F.EMPTY
        return F.optional(F.choice(*(self.speller.write(a) for a in anchors)))

    def _holds_token(self, text: str) -> bool:
        return any(isinstance(piece, int) for piece in self.speller.pieces(text))

    def _opens_something(self, text: str) -> bool:
        """Whether an opener could match from within `text` (text the grammar writes outside
        regions), alone or with an opener written after it: an anchor `a` before the opener
        `a(?P<name>\\w+)>`, written `aa>`, would show the name `aa`. Asked of `text` and each
        opener as the grammar writes it (as far as its text is fixed: a partial match counts)."""
        import regex

        patterns = [f.open.alternation for f in self.template.fields if f.open is not None]
        if any(regex.search(pattern, text, regex.DOTALL) for pattern in patterns):
            return True
        for after in self._written_openers():
            for pattern in patterns:
                found = regex.search(pattern, text + after, regex.DOTALL, partial=True)
                if found is None or found.start() >= len(text):
                    continue
                # (gpt-oss's call opener may start with its anchor: read with it or without it,
                # the same opener with the same name is no other reading)
                alone = regex.match(pattern, after, regex.DOTALL, partial=True)
                if alone is None or alone.end() + len(text) != found.end() or alone.groupdict() != found.groupdict():
                    return True
        return False

    def _written_openers(self) -> list[str]:
        """The fixed text each opener starts with as the grammar writes it (a call's with each
        tool's name)."""
        return [text for field in self.template.fields for text in self._written_opener_of(field)]

    def _written_opener_of(self, field: ir.Field) -> list[str]:
        if field.open is None:
            return []
        if self.calls is not None and field is self.call_field:
            formats = [self.calls.opener(tool).format for tool in self.tools]
        else:
            formats = [write_delimiter(field.open, self.speller, f"fields.{field.name}.open", checked=False).format]
        by_id = {token_id: spelling for spelling, token_id in self.speller.control.items()}
        return [text for fmt in formats for text in _fixed_starts(fmt, by_id) if text]

    def _check_written_openers_apart(self) -> None:
        """Refuse an opener that, as the grammar writes it, another field's opener could match at
        the same place (`[/]` written `/` where another field opens on `[>/]`): the parser could
        open that field instead. A match that the written text only begins counts."""
        import regex

        fields = [f for f in self.template.fields if f.open is not None]
        for field in fields:
            for text in self._written_opener_of(field):
                for other in fields:
                    if other is not field and regex.match(other.open.alternation, text, regex.DOTALL, partial=True):
                        raise GrammarError(
                            f"fields.{field.name}", f"its delimiter written {text!r} may be read as {other.name!r}'s: the parser may open that field instead"
                        )

    # ---- regions

    def text_region(self, field: ir.Field) -> Region | None:
        """A region of a text field, or None for a field the grammar never opens."""
        if field.open is None or not plain_text(field) or not fits_defaults(field, self.template.defaults):
            return None
        where = f"fields.{field.name}"
        opener = write_delimiter(field.open, self.speller, f"{where}.open")
        if opener.assumes and not (opener.assumes_exactly and len(set(opener.assumes)) == 1):
            return None  # (a lookahead free text could not be made to satisfy: never opened)
        close = closing(field.close, self.speller, f"{where}.close")
        # (a lookahead's text is written first: `(?=<a>)` opens only before `<a>`)
        opened = F.sequence(opener.format, self.speller.write(opener.assumes[0])) if opener.assumes else opener.format
        text = self.free_text(close.blocking, after_token=not _ends_in_text(opened))
        body = F.sequence(opened, text)
        # (the free text writes the closer's leading whitespace: see CallWriter.opener)
        closer = without_leading_layout(close.written) if close.written is not None else None
        return Region(F.sequence(body, closer) if closer is not None else None, body)

    def call_region(self) -> Region:
        """The call field's region for the loops: one call, or a list (transform_each)."""
        calls = self.calls
        high = None if self.request.parallel else 1
        if calls.shape.each:
            body = calls.region(self.tools, 1, high, closed=False)
        else:
            body = calls.region(self.tools, closed=False)
        closed = calls.region(self.tools, 1, high) if calls.shape.each else calls.region(self.tools)
        return Region(closed if calls.closing.written is not None else None, body)

    def call_tail(self) -> F.Format:
        """The calls that end the output (after content): as `call_block`."""
        return self.call_block()

    def opening_token_ids(self, keep: tuple = ()) -> list[int]:
        """Control tokens whose text alone holds an opener's match (a `<call=ab>` token where
        calls open with `<call=(?P<name>\\w+)>`): free text outside regions never writes them
        (but the triggers in `keep`, which a loop dispatches on)."""
        import regex

        openers = [f.open.alternation for f in self.template.fields if f.open is not None]
        return [
            token_id
            for text, token_id in self.speller.control.items()
            if token_id not in keep and any(regex.search(pattern, text, regex.DOTALL) for pattern in openers)
        ]

    def free_text(self, blocking: tuple[str, ...], after_token: bool, outside: bool = False) -> F.Format:
        """Any text holding none of `blocking`. Read token by token (`any_tokens`, excluding
        ids: the spelled-out tokens stay text, as the parser reads them) where each holds a control
        token and the text starts at a token boundary (`after_token`), else character by character
        (`any_text`, which excludes ids and spellings alike). The grammar writes no whitespace of
        its own right after free text: text ending with the start of a delimiter whose rest is
        whitespace would make it match there."""
        blocking = tuple(dict.fromkeys((*blocking, *self.also_excluded)))
        ids = self.speller.excluded_ids(list(blocking))
        if after_token and ids is not None and self.speller.control:
            return F.any_tokens([*ids, *(self.opening_token_ids() if outside else ())])
        return F.any_text(blocking)


def _fixed_starts(fmt: F.Format, by_id: dict[int, str], limit: int = 16) -> list[str]:
    """The texts `fmt` may start with, each as far as it is fixed (up to a piece whose text is
    free: a regex that needs a character, free text); at most `limit` of them."""
    texts, _ = _starts(fmt, by_id, limit)
    return texts


def _starts(fmt: F.Format, by_id: dict[int, str], limit: int) -> tuple[list[str], bool]:
    """(texts, whether each is the whole of what `fmt` writes)."""
    kind = fmt.get("type")
    if kind == "const_string":
        return [fmt["value"]], True
    if kind == "token":
        return [by_id.get(fmt["token"], "")], True
    if kind == "regex":
        import regex

        return [""], regex.fullmatch(fmt["pattern"], "") is not None and fmt["pattern"].endswith("*")
    if kind == "optional":
        texts, whole = _starts(fmt["content"], by_id, limit)
        return (["", *texts][:limit], whole) if whole else (texts, False)
    if kind == "or":
        out: list[str] = []
        whole = True
        for element in fmt["elements"]:
            texts, complete = _starts(element, by_id, limit)
            out.extend(texts)
            whole = whole and complete
        return list(dict.fromkeys(out))[:limit], whole
    if kind == "sequence":
        out, whole = [""], True
        for element in fmt["elements"]:
            texts, complete = _starts(element, by_id, limit)
            out = list(dict.fromkeys(a + b for a in out for b in texts))[:limit]
            if not complete:
                return out, False
        return out, whole
    return [""], False


def _check_openers_apart(template: ir.Template, speller: Speller) -> None:
    """Refuse openers (and the implicit field's literal closers) that the parser could take for
    one another: identical patterns, or texts one of which starts the other (the same text in two
    fields: the parser picks by name; a proper prefix: what follows the shorter could complete the
    longer). A pattern counts by the literal text its matches start with after leading
    whitespace, where it has one."""
    seen: list[tuple[str, str]] = []
    patterns: dict[str, str] = {}
    sink = template.fields[template.implicit] if template.implicit is not None else None
    for field in template.fields:
        delimiter = field.open if field.open is not None else (field.close if field is sink else None)
        if delimiter is None:
            continue
        if delimiter.pattern is not None:
            if delimiter.pattern in patterns:
                raise GrammarError(f"fields.{field.name}", f"its delimiter is also {patterns[delimiter.pattern]!r}'s: the parser picks by name")
            patterns[delimiter.pattern] = field.name
        for literal in delimiter.literals or ():
            if any(ord(c) < 0x20 and c not in "\t\n\r" for c in literal):
                raise GrammarError(f"fields.{field.name}", f"its delimiter {literal!r} holds a control character")
        for literal in _starting_texts(delimiter):
            # (a stop token is never written; a control token's id is never free text)
            if _bordered(literal) and not speller.is_stop(literal) and speller.first_id(literal) is None:
                raise GrammarError(f"fields.{field.name}", f"its delimiter {literal!r} overlaps itself: free text before it could complete it early")
            for name, other in seen:
                if name != field.name and (_collide(literal, other) or _collide(other, literal)):
                    raise GrammarError(
                        f"fields.{field.name}", f"its delimiter {literal!r} and {name!r}'s {other!r} overlap: the parser may take one for the other"
                    )
            seen.append((field.name, literal))


def _bordered(text: str) -> bool:
    """Whether a proper prefix of `text` is also its suffix: free text ending with that prefix,
    then the delimiter written, would show it one border earlier."""
    return any(text[:size] == text[-size:] for size in range(1, len(text)))


def _collide(first: str, second: str) -> bool:
    """Whether text holding `second` can show `first` earlier or longer: one starts the other, or
    an end of `first` starts `second` (text before `second` could complete `first` with it)."""
    if first.startswith(second) or second.startswith(first):
        return True
    return any(second.startswith(first[size:]) for size in range(1, len(first)))


def _starting_texts(delimiter: ir.Delimiter) -> tuple[str, ...]:
    """The texts a delimiter's matches start with: its literals, or a pattern's literal prefix
    after leading anchors and optional repeats (none when that prefix is empty)."""
    if delimiter.literals is not None:
        return delimiter.literals
    from rtcompile.runtime import regex_syntax as rs

    from .delimiters import parse

    items = list(parse(delimiter.pattern, "").root.items)
    while items and (isinstance(items[0], rs.Anchor) or (isinstance(items[0], rs.Repeat) and items[0].min == 0)):
        items.pop(0)
    items = unfactored(items)  # (`<\\|(?:a\\|>|b\\|>)` starts with `<|a|>` or `<|b|>`, not `<|`)
    if items and isinstance(items[0], rs.Alternation):
        branches = [rs.literal_prefix(branch) for branch in items[0].branches]
        return tuple(branches) if all(branches) else ()
    prefix = rs.literal_prefix(rs.Seq(tuple(items)))
    return (prefix,) if prefix else ()


def fits_defaults(field: ir.Field, defaults: dict) -> bool:
    """Whether a region of `field` can land in a message that starts from the template's
    defaults: a repeating field appends to a list, a joined one adds to a string."""
    if field.name not in defaults:
        return True
    value = defaults[field.name]
    if field.join is not None and field.repeats:
        return value is None or isinstance(value, str)
    if field.repeats:
        return isinstance(value, list)
    return True


def plain_text(field: ir.Field) -> bool:
    """Whether any text in the field's region parses: text content, no transform_each, and a
    transform (if any) that reads only the text itself (a capture may be missing, a path into a
    string always fails)."""
    if field.content.parser not in TEXT_PARSERS or field.transform_each or not isinstance(field.content.args, dict):
        return False  # (the interpreter reads content_args with .get: anything but a dict fails)
    if field.join is not None and field.repeats:  # (joined values must be strings: the text itself)
        return field.transform is None or field.transform == ir.Placeholder("content", "content", ())
    return _reads_only_content(field.transform)


def _reads_only_content(node) -> bool:
    if node is None or isinstance(node, ir.Literal):
        return True
    if isinstance(node, ir.Placeholder):
        return node.root == "content" and not node.keys
    children = node.items if isinstance(node, ir.ListNode) else [child for _, child in node.items]
    return all(_reads_only_content(child) for child in children)


def _ends_in_text(fmt: F.Format) -> bool:
    """Whether a format may end inside a token: anything but a control token last."""
    if fmt == F.EMPTY:
        return False
    if fmt.get("type") == "sequence":
        return _ends_in_text(fmt["elements"][-1])
    if fmt.get("type") == "or":
        return any(_ends_in_text(e) for e in fmt["elements"])
    if fmt.get("type") == "optional":
        return _ends_in_text(fmt["content"])
    return fmt.get("type") != "token"


def opening_guard(delimiter: ir.Delimiter, where: str) -> str:
    """A regex class of the first characters content may start with so that an opener anchored
    at the start (`^\\s*(?:<\\|python_tag\\|>\\s*)?(?=\\{...)`) cannot match there: no
    whitespace, and none of the characters the opener goes on with (its lookahead included)."""
    from .charclass import WHITESPACE, union

    classes = opener_firsts(delimiter, where)
    if any(cls.negated for cls in classes):
        raise GrammarError(where, "the opener may start with almost anything: content cannot avoid it")
    return union([WHITESPACE, *classes], True, where).source()

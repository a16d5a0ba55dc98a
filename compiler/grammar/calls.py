"""The tool-call field's regions, written for the tools a request allows.

The field's transform says where a call's name, id and arguments sit (`frontend.facts.call_shape`);
the grammar writes the inverse: the name where the transform reads it (a capture of the open
pattern, or a key of the content), the arguments where it reads them, typed by the tool's schema.
Each content parser has its writer:

- json: xgrammar's `json_schema` of the content the transform reads (`{"name": const, "arguments":
  schema}` for qwen3's `"function": "{content}"`), or JsonWriter for json's dialects;
- xml-inline: one tag per parameter, the tag pattern written with the key filled in and the value
  typed by the schema (in schema order, required ones present);
- kv-lines: one `key<sep>value` line per parameter;
- python-call-list: `[name(key=value, ...), ...]` with JSON values.

A region is `opener content closer`: the closer is written unless it is a stop token (the output
ends there) or a lookahead that the next call's opener satisfies (`Closing`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import regex

from rtcompile.frontend import facts, ir
from rtcompile.runtime import regex_syntax as rs

from . import charclass as C
from . import formats as F
from .automata import always_holds, spells, starts_inside
from .delimiters import Written, blocking_literals, parse, unfactored, write_delimiter, write_pattern
from .errors import GrammarError
from .request import Tool
from .spelling import Speller
from .values import COMMA, OTHER_KEYS, SPACE, Dialect, JsonWriter, ordered_members, raw_value, standard_schema

CALL_LIST_NAME = regex.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[-.][A-Za-z0-9_]+)*")
LAYOUT = C.LAYOUT_WHITESPACE


@dataclass(frozen=True)
class Closing:
    """How a region ends. `written`: the closer the grammar writes (None: the output's end, or the
    next opener, closes it); `by_next`: literals a lookahead alternative closes the region before
    (the next call's opener can close it); `blocking`: text the region's content must not hold."""

    written: F.Format | None
    by_next: tuple[str, ...]
    blocking: tuple[str, ...]
    # Some alternative is a stop token: the output's end may close the region.
    stops: bool = False


def closing(delimiter: ir.Delimiter | None, speller: Speller, where: str) -> Closing:
    if delimiter is None:
        return Closing(None, (), ())
    blocking = blocking_literals(delimiter, where)
    if delimiter.literals is not None:
        # (a literal another one extends is not written: what the grammar writes after it, the
        # next opener, could extend it, and the parser would read the longer one: `a` then `<a>`
        # closes on `a<`)
        kept = [
            literal
            for literal in delimiter.literals
            if not speller.is_stop(literal) and not any(o != literal and o.startswith(literal) for o in delimiter.literals)
        ]
        stops = any(speller.is_stop(literal) for literal in delimiter.literals)
        if kept:
            alternatives = parse("|".join(regex.escape(literal) for literal in delimiter.literals), where)
            _check_starts_after_content(alternatives, parse("|".join(regex.escape(k) for k in kept), where).root, False, blocking, where)
        return Closing(F.choice(*(speller.write(k) for k in kept)) if kept else None, (), blocking, stops)
    syntax = parse(delimiter.pattern, where)
    lead, branches = _branches(syntax.root)
    written, by_next, stops = [], [], False
    for branch in branches:
        look = _lookahead_only(branch)
        if look is not None:
            by_next.extend(filter(None, [_literal_text(look)]))
            continue
        literal = _literal_text(branch)
        if literal is not None and speller.is_stop(literal):
            stops = True
            continue  # (a stop token: the output ends there)
        written.append(rs.Seq(lead + branch.items))
    if not written:
        return Closing(None, tuple(by_next), blocking, stops)
    root = written[0] if len(written) == 1 else rs.Seq((rs.Alternation(tuple(written)),))
    pattern = write_pattern(rs.to_source(replace(syntax, root=root)), speller, where)  # (its flags kept)
    if pattern.assumes:  # (`<a>(?!ab)`: whatever the grammar writes next decides whether it closes)
        raise GrammarError(where, "the closer looks ahead at the text after it, which the grammar cannot check")
    _check_starts_after_content(syntax, root, pattern.at_line_start, blocking, where)
    if pattern.at_line_start:  # (the newline the closer matches after is written with it)
        return Closing(F.sequence(speller.write("\n"), pattern.format), tuple(by_next), blocking, stops)
    if pattern.at_start:
        raise GrammarError(where, "the closer matches only where the text starts, so it never closes a region")
    return Closing(pattern.format, tuple(by_next), blocking, stops)


def _check_starts_after_content(syntax: rs.Syntax, written: rs.Seq, newline_first: bool, blocking: tuple[str, ...], where: str) -> None:
    """Refuse a closer whose match could start inside the region's content and run on into the
    closer the grammar writes (`a.*?<a>` from an `a` of the content): the parser would close the
    region early."""
    closer = replace(syntax, root=rs.Seq(((rs.Char("\n"),) if newline_first else ()) + written.items))
    if starts_inside(rs.to_source(syntax), rs.to_source(closer), blocking):
        raise GrammarError(where, "a match of the closer could start inside the region's text and end in the written closer")


def _branches(root: rs.Seq) -> tuple[tuple, list[rs.Seq]]:
    """A pattern as (leading optional repeats, alternatives): `\\s*(?:<a>|<b>)` is `\\s*` before
    each of `<a>`, `<b>`."""
    items = list(root.items)
    lead = []
    while items and isinstance(items[0], rs.Repeat) and items[0].min == 0:
        lead.append(items.pop(0))
    if len(items) == 1 and isinstance(items[0], rs.Group) and items[0].index is None:
        items = list(items[0].body.items)
    items = unfactored(items)
    if len(items) == 1 and isinstance(items[0], rs.Alternation):
        return tuple(lead), list(items[0].branches)
    return (), [root]


def _lookahead_only(seq: rs.Seq) -> rs.Seq | None:
    items = seq.items
    if len(items) == 1 and isinstance(items[0], rs.Look) and not items[0].behind and not items[0].negated:
        return items[0].body
    return None


def _literal_text(seq: rs.Seq) -> str | None:
    """The text a sequence of plain characters matches (None if it is anything else)."""
    if not all(isinstance(node, rs.Char) for node in seq.items):
        return None
    return "".join(node.char for node in seq.items)


class CallWriter:
    """Writes the regions of the tool-call `field` for a request's tools."""

    def __init__(self, field: ir.Field, speller: Speller):
        self.field = field
        self.where = f"fields.{field.name}"
        self.speller = speller
        self.shape = facts.call_shape(field)
        self.closing = closing(field.close, speller, f"{self.where}.close")
        # Text the region's content must not hold beside its closer (MessageWriter.also_excluded).
        self.also_excluded: tuple[str, ...] = ()
        # Whether free text before a call writes the whitespace its opener may start with (then
        # the opener writes none: see `opener`).
        self.after_free_text = False
        self._openers: dict[tuple[str | None, bool], Written] = {}
        self.content = field.content.parser
        if not isinstance(field.content.args, dict):
            raise GrammarError(self.where, "content_args must be an object: the parser fails on anything else")
        self.args = field.content.args
        if field.open is None:
            raise GrammarError(self.where, "a tool-call field without an open delimiter cannot be written")
        if field.join is not None and field.repeats:
            # (the parser joins the regions' values as text: a call, an object, fails to join)
            raise GrammarError(f"{self.where}.join", "regions joined as text cannot hold tool calls")
        if self.shape.arguments.kind != facts.PATH:
            raise GrammarError(self.where, "the transform takes the arguments from no place in the content")
        if self.shape.name.kind not in (facts.PATH, facts.CAPTURE, facts.LITERAL):
            raise GrammarError(self.where, "the transform takes the call's name from no single place")
        read = {s.value for s in (self.shape.name, self.shape.arguments, self.shape.id) if s is not None and s.kind == facts.CAPTURE}
        missing = sorted(read - set(field.open.group_names))
        if missing:
            # (the parser raises KeyError for the placeholder: no call it reads would parse)
            raise GrammarError(f"{self.where}.transform", f"the transform reads {{{missing[0]}}}, which the opener does not capture")
        if field.close is not None and read & set(field.close.group_names):
            # (the closer's captures take the place of the opener's: the name would be what it matched)
            raise GrammarError(f"{self.where}.close", f"the closer captures {sorted(read & set(field.close.group_names))[0]!r}, which the call reads")

    @property
    def excluded(self) -> tuple[str, ...]:
        """What the content must not hold: the closer, and what the message writer adds."""
        return tuple(dict.fromkeys((*self.closing.blocking, *self.also_excluded)))

    # ---- what the message writer asks

    def callable_tools(self, tools: tuple[Tool, ...]) -> tuple[Tool, ...]:
        """The tools whose calls this field can write (a literal name allows one)."""
        if self.shape.name.kind == facts.LITERAL:
            return tuple(t for t in tools if t.name == self.shape.name.value)
        return tools

    def region(self, tools: tuple[Tool, ...], low: int = 1, high: int | None = None, closed: bool = True) -> F.Format:
        """One region calling one of `tools` (transform_each: `low` to `high` calls in a list),
        with its closer (where it is written) or without (the output's end closes it)."""
        closer = self.closing.written if closed and self.closing.written is not None else F.EMPTY
        if self.shape.each:
            opener = self.opener(None)
            content = self.listed(tools, low, high, opener.tail)
            self._check_fixed_text(content, self.where)
            _check_assumptions(opener, content, self.where)
            return F.sequence(opener.format, content, closer)
        return F.choice(*(F.sequence(self._opened(tool), closer) for tool in tools))

    def _opened(self, tool: Tool) -> F.Format:
        opener = self.opener(tool)
        content = self.arguments(tool, opener.tail)
        self._check_fixed_text(content, f"{self.where} (tool {tool.name!r})")
        _check_assumptions(opener, content, f"{self.where} (tool {tool.name!r})")
        return F.sequence(opener.format, content)

    def _check_fixed_text(self, content: F.Format, where: str) -> None:
        """Refuse content whose fixed text (a name, a key, a tag) holds what closes the region."""
        for text in _fixed_texts(content, self.speller):
            for blocked in self.excluded:
                if blocked in text:
                    raise GrammarError(where, f"the content writes {text!r}, which holds its closer {blocked!r}")
        # (a tag's `>` and the value after it spell the closer `>a`; JSON's seams: _check_seams)
        spelled = spells(content, tuple(self.excluded)) if self.content in ("xml-inline", "kv-lines", "python-call-list") else None
        if spelled is not None:
            raise GrammarError(where, f"the content's pieces could spell its closer {spelled!r} across them")

    def opener(self, tool: Tool | None) -> Written:
        """How the opener is written for `tool` (None: the opener alone), once per request: the
        message writer asks for each tool's several times."""
        key = (tool.name if tool is not None else None, self.after_free_text)
        written = self._openers.get(key)
        if written is None:
            written = self._openers[key] = self._write_opener(tool)
        return written

    def _write_opener(self, tool: Tool | None) -> Written:
        captures = {}
        if tool is not None and self.shape.name.kind == facts.CAPTURE:
            captures[self.shape.name.value] = tool.name
        where = f"{self.where}.open" + (f" (tool {tool.name!r})" if tool is not None else "")
        written = write_delimiter(self.field.open, self.speller, where, captures)
        if not self.after_free_text:
            return written
        # (no whitespace of its own first: the text before the call writes it; xgrammar's matcher
        # dead-ends on free tokens, then a whitespace regex, then a control token)
        return replace(written, format=without_leading_layout(written.format))

    # ---- content

    def arguments(self, tool: Tool, tail: C.CharClass | None) -> F.Format:
        where = f"{self.where} (tool {tool.name!r})"
        if self.content == "json":
            schema = self.content_schema(tool, where)
            return self.json_content(schema, tail, where)
        if self.content in ("xml-inline", "kv-lines"):
            if self.shape.arguments.value != () or self.shape.name.kind == facts.PATH:
                raise GrammarError(where, f"{self.content} content must be the arguments themselves")
            if self.content == "xml-inline":
                return self.xml_content(tool, tail, where)
            return self.lines_content(tool, tail, where)
        raise GrammarError(where, f"a {self.content} region cannot hold tool calls")

    def content_schema(self, tool: Tool, where: str) -> Any:
        """The schema of the content the transform turns into a call of `tool`."""
        parts: list[tuple[tuple, Any]] = []
        if self.shape.name.kind == facts.PATH:
            parts.append((self.shape.name.value, {"type": "string", "const": tool.name}))
        parts.append((self.shape.arguments.value, standard_schema(tool.parameters)))
        if self.shape.id is not None and self.shape.id.kind == facts.PATH:
            parts.append((self.shape.id.value, {"type": "string"}))
        # (members before the read ones would break an opener's lookahead into the content: only after)
        return _schema_of_paths(parts, where, "after" if self._opener_looks_ahead() else "around")

    def _opener_looks_ahead(self) -> bool:
        opener = self.field.open
        if opener.pattern is None:
            return False
        return any(isinstance(node, rs.Look) and not node.behind for node in rs.walk(parse(opener.pattern, self.where).root))

    def layout_chars(self) -> str:
        """The whitespace the grammar may write inside the region: none that could be (part of)
        its closer (a closer such as "\\n")."""
        closer_chars = "".join(text for text in self.excluded if not text.strip())
        return "".join(c for c in LAYOUT if c not in closer_chars)

    def layout(self, tail: C.CharClass | None = None) -> F.Format:
        """Whitespace the grammar may write inside the region: none that continues a capture before
        it (`tail`), none that could be (part of) its closer (a closer such as "\\n")."""
        closer_chars = "".join(text for text in self.excluded if not text.strip())
        chars = "".join(c for c in LAYOUT if c not in closer_chars and (tail is None or not tail.contains(c)))
        return F.regex(f"[{_esc(chars)}]*") if chars else F.EMPTY

    def json_content(self, schema: Any, tail: C.CharClass | None, where: str) -> F.Format:
        return F.sequence(self.layout(tail), self.json_value(schema, where), self.layout())

    def json_value(self, schema: Any, where: str) -> F.Format:
        """A JSON value valid against `schema` that holds no closer: rtcompile's own writer (its
        strings kept from closers by a small automaton, which xgrammar compiles several times
        faster than json_schema's `excludes`), or, for schema keywords the writer does not
        enforce, xgrammar's json_schema (refused where its syntax could write a closer)."""
        excludes = self.excluded
        dialect = bool(self.args.get("string_delims") or self.args.get("unquoted_keys"))
        try:
            value = self.json_writer(excludes, where).value_in_key_orders(schema, where)
        except GrammarError:
            if dialect or _json_may_write(excludes):
                raise
            value = F.json_schema(schema, excludes)
        self._check_seams(value, where)
        return value

    def json_writer(self, excludes: tuple[str, ...], where: str) -> JsonWriter:
        """rtcompile's own JSON writer for the region (dialects, or closers JSON's syntax could
        write); refused where even its compact syntax could write a closer."""
        written = [text for text in excludes if text and set(text) <= WRITER_SYNTAX]
        if written:
            raise GrammarError(where, f"JSON arguments would write the closer {written[0]!r} themselves")
        return JsonWriter(self._dialect(excludes, where), self.speller.write)

    def _check_seams(self, value: F.Format, where: str) -> None:
        """JSON `value` (rtcompile's or xgrammar's, which has the same seams) must not spell the
        closer across its pieces (JsonWriter.check_seams)."""
        JsonWriter(self._dialect(self.excluded, where), self.speller.write).check_seams(value, where)

    def _dialect(self, excludes: tuple[str, ...], where: str) -> Dialect:
        delims = self.args.get("string_delims") or []
        pair = None
        if delims:
            first = delims[0]
            if not (isinstance(first, (list, tuple)) and len(first) == 2 and all(isinstance(s, str) and s for s in first)):
                raise GrammarError(where, "string_delims must hold [open, close] pairs of non-empty strings")
            pair = (first[0], first[1])
        return Dialect(pair, bool(self.args.get("unquoted_keys")), excludes)

    def listed(self, tools: tuple[Tool, ...], low: int, high: int | None, tail: C.CharClass | None) -> F.Format:
        """transform_each: a list of `low` to `high` calls."""
        where = self.where
        if self.content == "python-call-list":
            return F.sequence(self.layout(tail), self.call_list(tools, low, high, where), self.layout())
        if self.content != "json":
            raise GrammarError(where, f"transform_each over {self.content} content cannot hold tool calls")
        item = {"anyOf": [self.content_schema(tool, f"{where} (tool {tool.name!r})") for tool in tools]}
        if len(tools) == 1:
            item = item["anyOf"][0]
        schema: dict = {"type": "array", "items": item, "minItems": low}
        if high is not None:
            schema["maxItems"] = high
        try:
            writer = self.json_writer(self.excluded, where)
            calls = F.choice(*(writer.value_in_key_orders(self.content_schema(t, where), where) for t in tools))
            listed = F.sequence(F.const("["), SPACE, _counted(calls, COMMA, low, high), SPACE, F.const("]"))
        except GrammarError:
            if self.args.get("string_delims") or self.args.get("unquoted_keys") or _json_may_write(self.excluded):
                raise
            listed = F.json_schema(schema, self.excluded)
        self._check_seams(listed, where)
        return F.sequence(self.layout(tail), listed, self.layout())

    def call_list(self, tools: tuple[Tool, ...], low: int, high: int | None, where: str) -> F.Format:
        if (self.shape.name.value, self.shape.arguments.value) != (("name",), ("arguments",)):
            raise GrammarError(where, "the transform must read each call's 'name' and 'arguments'")
        writer = JsonWriter(Dialect(excludes=self.excluded, python=True), self.speller.write)
        calls = []
        for tool in tools:
            tool_where = f"{where} (tool {tool.name!r})"
            if not CALL_LIST_NAME.fullmatch(tool.name):
                raise GrammarError(tool_where, "the name cannot be written in a python call list")
            properties, required = _object_members(tool.parameters, tool_where)
            members = []
            for key, sub in properties.items():
                if not CALL_LIST_NAME.fullmatch(key):
                    raise GrammarError(tool_where, f"the argument {key!r} cannot be written as a keyword")
                members.append((F.sequence(F.const(key + "="), writer.value_in_key_orders(sub, f"{tool_where}.{key}")), key in required))
            calls.append(F.sequence(F.const(tool.name + "("), ordered_members(members, COMMA), F.const(")")))
        listed = F.sequence(F.const("["), _counted(F.choice(*calls), COMMA, low, high), F.const("]"))
        writer.check_seams(listed, where)
        return listed

    def xml_content(self, tool: Tool, tail: C.CharClass | None, where: str) -> F.Format:
        pattern = self.args.get("tag_pattern")
        if not isinstance(pattern, str):
            raise GrammarError(where, "xml-inline content needs a tag_pattern")
        if "value_parser_by" in self.args or self.args.get("merge_duplicates") not in (None, False):
            if "value_parser_by" in self.args:
                raise GrammarError(where, "value_parser_by (a parser chosen by the model's text) cannot be written")
        groups = set((parse(pattern, where).group_names or {}).values())
        if not {"key", "value"} <= groups:
            raise GrammarError(where, "a tag_pattern needs both a 'key' and a 'value' group")
        properties, required = _object_members(tool.parameters, where)
        tags = []
        for key, sub in properties.items():
            value_where = f"{where}.{key}"
            writer = self._value_writer(sub, value_where)
            written = write_pattern(pattern, self.speller, value_where, {"key": key, "value": writer}, layout=self.layout_chars())
            tags.append((written.format, key in required))
        glue = self.layout()
        # (with no tag, the trailing glue follows the opener: it must not go on with its capture)
        return F.sequence(self.layout(tail), ordered_members(tags, glue), self.layout(tail))

    def lines_content(self, tool: Tool, tail: C.CharClass | None, where: str) -> F.Format:
        line_sep = self.args.get("line_sep", "\n")
        kv_sep = self.args.get("kv_sep", ":")
        if not (isinstance(line_sep, str) and line_sep and isinstance(kv_sep, str) and kv_sep):
            raise GrammarError(where, "kv-lines needs non-empty line_sep and kv_sep")
        properties, required = _object_members(tool.parameters, where)
        lines = []
        for key, sub in properties.items():
            if kv_sep in key or line_sep in key or key != key.strip() or not key:
                raise GrammarError(where, f"the key {key!r} cannot be written on a kv-lines line")
            writer = self._value_writer(sub, f"{where}.{key}", stripped=True)
            lines.append((F.sequence(F.const(key + kv_sep), writer(line_sep)), key in required))
        separator = self.speller.write(line_sep)
        # (without strip, whitespace around a line would be part of its key)
        layout = self.layout(tail) if self.args.get("strip", True) else F.EMPTY
        return F.sequence(layout, F.optional(separator), ordered_members(lines, separator), F.optional(separator))

    def _value_writer(self, schema: Any, where: str, stripped: bool = False):
        parser = self.args.get("value_parser")
        name = parser.get("name", "text") if isinstance(parser, dict) else None
        if name not in (None, "text", "json"):
            raise GrammarError(where, f"values read by the {name!r} parser cannot be written")
        blocking = self.excluded

        def write(terminator: str) -> F.Format:
            excludes = [terminator, *blocking]
            space = "".join(c for c in LAYOUT if not any(c in t for t in excludes if not t.strip()))
            writer = JsonWriter(Dialect(excludes=tuple(excludes), space=space), self.speller.write)
            if name == "json":
                value = writer.value_in_key_orders(standard_schema(schema), where)
                writer.check_seams(value, where)
                return value
            # (free text, stripped or not by the parser: any text is a string; it is followed by
            # fixed text only, as xgrammar's any_text must be)
            strips = stripped and self.args.get("strip", True) or (name == "text" and (parser.get("args") or {}).get("strip", True))
            return raw_value(schema, lambda: F.any_text(excludes), writer, where, bool(strips))

        return write


def _check_assumptions(opener: Written, content: F.Format, where: str) -> None:
    """The opener's lookaheads (left out when writing it) must hold for every text the rest of
    the opener and the content may write, in any layout and key order (`always_holds`); a
    negative one is never trusted."""
    if len(opener.looks) < len(opener.assumes):
        raise GrammarError(where, "the opener's negative lookahead cannot be checked against its content")
    written, _ = _text_pattern(content)
    for look in opener.looks:
        following = look.rest + written
        if not written or not always_holds(look.pattern, following):
            raise GrammarError(where, f"the opener's {look.source!r} may not hold for the content written after it")


def _text_pattern(fmt: F.Format) -> tuple[str, bool]:
    """A regex of the texts a format starts with, and whether it is all of them: where a piece
    cannot be read as text (a token by id, an EBNF grammar, a JSON schema), what follows is not
    known and the regex ends."""
    kind = fmt.get("type")
    if kind == "const_string":
        return regex.escape(fmt["value"]), True
    if kind == "regex":
        return f"(?:{fmt['pattern']})", True
    if kind == "sequence":
        out = []
        for element in fmt["elements"]:
            text, whole = _text_pattern(element)
            out.append(text)
            if not whole:
                return "".join(out), False
        return "".join(out), True
    if kind == "or":
        branches = [_text_pattern(element) for element in fmt["elements"]]
        return "(?:" + "|".join(text for text, _ in branches) + ")", all(whole for _, whole in branches)
    if kind in ("optional", "star", "plus", "repeat"):
        text, whole = _text_pattern(fmt["content"])
        low, high = {"optional": (0, 1), "star": (0, -1), "plus": (1, -1)}.get(kind) or (fmt["min"], fmt["max"])
        if not whole:  # (its first item, or none when it may be left out)
            return (f"(?:{text})" if low else f"(?:{text})?"), False
        return f"(?:{text}){{{low},{'' if high == -1 else high}}}", True
    return "", False


def _fixed_texts(fmt: F.Format, speller: Speller) -> list[str]:
    """The literal texts a format writes (constants, control tokens spelled)."""
    kind = fmt.get("type")
    if kind == "const_string":
        return [fmt["value"]]
    if kind == "token":
        spelled = {token_id: text for text, token_id in speller.control.items()}
        return [spelled.get(fmt["token"], "")]
    out: list[str] = []
    for child in fmt.get("elements", []):
        out.extend(_fixed_texts(child, speller))
    if isinstance(fmt.get("content"), dict):
        out.extend(_fixed_texts(fmt["content"], speller))
    return out


# What xgrammar's JSON may write outside strings: a closer made of these alone could appear there.
JSON_SYNTAX = frozenset(' \t\n\r{}[],:-+.0123456789eE"truefalsn')
# What rtcompile's JSON writer writes outside strings (punctuation, whitespace, numbers, words).
WRITER_SYNTAX = frozenset("{}[],: \t\n\r-+.0123456789truefalsnTFN")


def without_leading_layout(fmt: F.Format) -> F.Format:
    """`fmt` without the optional whitespace it starts with (`\\s*` of `\\s*<tool_call>`)."""
    kind = fmt.get("type")
    if kind == "or":
        return F.choice(*(without_leading_layout(e) for e in fmt["elements"]))
    if kind == "sequence":
        first, rest = fmt["elements"][0], F.sequence(*fmt["elements"][1:])
        if first.get("type") == "regex" and _layout_only(first["pattern"]):
            return without_leading_layout(rest)
        if first.get("type") == "optional":  # (with it, or without it and what follows it trimmed)
            return F.choice(F.sequence(first["content"], rest), without_leading_layout(rest))
    return fmt


def _layout_only(pattern: str) -> bool:
    """Whether a regex is a starred class of layout whitespace (as the delimiter writer writes
    `\\s*`)."""
    return pattern.endswith("]*") and pattern.startswith("[") and not pattern.startswith("[^")


def _json_may_write(excluded: tuple[str, ...]) -> bool:
    """Whether JSON's own syntax (its free whitespace, brackets, numbers, words) could write an
    excluded text, which xgrammar's json_schema excludes only from strings: the grammar then writes
    JSON itself (compact, single spaces), and refuses what even that cannot avoid."""
    return any(text and set(text) <= JSON_SYNTAX for text in excluded)


def _esc(chars: str) -> str:
    return "".join({"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(c, c) for c in chars)


def _counted(item: F.Format, separator: F.Format, low: int, high: int | None) -> F.Format:
    """`low` to `high` items with separators between (at least one)."""
    more_low = max(low - 1, 0)
    more_high = None if high is None else high - 1
    if more_high == 0:
        return item
    return F.sequence(item, F.repeat(F.sequence(separator, item), more_low, more_high))


def _object_members(schema: Any, where: str) -> tuple[dict, set]:
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise GrammarError(where, "the parameters must be an object schema")
    properties = schema.get("properties", {}) or {}
    required = set(schema.get("required", []) or [])
    if not isinstance(properties, dict) or not required <= set(properties):
        raise GrammarError(where, "every required parameter must be declared in 'properties'")
    return properties, required


def _schema_of_paths(parts: list[tuple[tuple, Any]], where: str, others: str) -> Any:
    """The object schema holding each (path, schema): nested objects, every key required, members
    under other keys allowed `others` ("around" or "after") the read ones."""
    if any(path == () for path, _ in parts):
        if len(parts) > 1:
            raise GrammarError(where, "the content is the arguments and also holds the call's name or id")
        return parts[0][1]
    tree: dict = {}
    for path, schema in parts:
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict) or "__schema__" in node:
                raise GrammarError(where, "the transform reads a key inside a value it also reads whole")
        if path[-1] in node:
            raise GrammarError(where, "the transform reads one key for two parts of a call")
        node[path[-1]] = {"__schema__": schema}
    return _tree_schema(tree, others)


def _tree_schema(node: dict, others: str) -> Any:
    if "__schema__" in node:
        return node["__schema__"]
    # The keys the transform reads, and members under keys it ignores around them (Mistral Nemo's
    # chat template writes each call's "id" after them, Command R7B's "tool_call_id" before).
    return {
        "type": "object",
        "properties": {key: _tree_schema(child, others) for key, child in node.items()},
        "required": list(node),
        "additionalProperties": False,
        OTHER_KEYS: others,
    }

"""The grammar backend: a template's validated IR compiled into a constrained-decoding grammar, an
xgrammar structural tag, so that a model writes what the parser reads.

    tag = rtcompile.structural_tag(template, tools, tool_choice="required", tokenizer=tok)
    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo.from_huggingface(tok))
    grammar = compiler.compile_structural_tag(json.dumps(tag))

One module per part of the output:

    request.py     tools, tool_choice and parallel_tool_calls, normalized
    spelling.py    delimiter text as the parser must see it: control tokens by id, stop tokens
    delimiters.py  delimiters (literals and patterns) written, captures filled in
    values.py      arguments typed by their schema, in each content parser's syntax
    calls.py       the tool-call field's regions, its transform inverted
    message.py     the whole output: the prompt's state, reasoning, content and calls
    loops.py       free content with regions in it (triggered tags)
    formats.py     the structural-tag JSON builders

It reads the template's IR only (rtcompile.frontend), the same facts the parser module is
generated from, never the template's JSON; the prompt's state comes from the compiled parser itself.
"""

from __future__ import annotations

import threading
from typing import Any

from rtcompile.frontend import facts
from rtcompile.runtime.errors import ParserLoopError

from .errors import GrammarError

__all__ = ["GrammarError", "structural_tag"]

_CACHE: dict[tuple, dict] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 256


def structural_tag(
    template: Any,
    tools: Any = None,
    *,
    tool_choice: Any = "auto",
    parallel_tool_calls: bool = True,
    prefix: Any = None,
    tokenizer: Any = None,
    stop_tokens: Any = None,
) -> dict:
    """The xgrammar structural tag (JSON data) under which every output parses, by the template's
    parser, into a message whose tool calls satisfy the request.

    `template`: as `parse_response` takes it. `tools`: OpenAI-style function tools. `tool_choice`:
    "auto", "required", "none" or {"type": "function", "function": {"name": ...}}.
    `parallel_tool_calls=False`: at most one call (exactly one when forced). `prefix`: the prompt
    (text, or token ids with a tokenizer): the grammar starts where the parser is after it.
    `tokenizer`: a fast transformers tokenizer: delimiters that are control tokens are matched by
    id. `stop_tokens`: the ids (or spellings) that end generation (default: the tokenizer's end of
    sequence): the grammar never writes them, it ends there.

    Raises GrammarError (a ValueError) for a request or template the grammar cannot express."""
    from rtcompile import api, frontend

    from . import formats
    from .message import MessageWriter
    from .request import normalize
    from .spelling import Speller

    module = api.load(template)
    request = normalize(tools, tool_choice, parallel_tool_calls)
    speller = Speller.for_tokenizer(tokenizer, stop_tokens)
    ir = _ir_of(module, frontend)
    state = prompt_state(module, ir, prefix, tokenizer)
    if tokenizer is not None:
        _check_first_token_decoding(ir, tokenizer)
    key = (module.TEMPLATE_SHA256, request.key(), state, tuple(sorted(speller.control.items())), speller.stops)
    cached = _CACHE.get(key)
    if cached is not None:
        return _copy(cached)
    tag = formats.structural_tag(MessageWriter(ir, speller, request).output(*state))
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = tag
    return _copy(tag)


def prompt_state(module: Any, ir: Any, prefix: Any, tokenizer: Any) -> tuple[str | None, bool]:
    """Where the parser is after the prompt: the field whose region is open (None: outside every
    region), and whether nothing but whitespace follows the prompt's start anchor (an opener
    anchored with `^` can still match). A prompt whose held-back end could still be a delimiter
    (text that decides nothing until the output follows) is refused."""
    if prefix is None:
        return None, True
    options = {"tokenizer": tokenizer} if tokenizer is not None else {}
    try:
        parser = module.ResponseParser(prefix, errors="keep", **options)
    except (TypeError, ValueError, KeyError, AttributeError, ParserLoopError) as error:  # (the parser's own, on the prompt)
        raise GrammarError("prefix", f"the prompt does not parse: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}") from error
    closed = [event for event in parser.initial_events if event["type"] == "region_close"]
    if any(event["field"] == "tool_calls" for event in closed):
        raise GrammarError("prefix", "the prompt already holds tool calls after its start anchor")
    failed = [event["field"] for event in closed if "error" in event]
    if failed:
        raise GrammarError("prefix", f"the prompt holds a {failed[0]!r} region that fails to parse: no output can mend it")
    sink = ir.fields[ir.implicit] if ir.implicit is not None else None
    opened = [event["field"] for event in parser.initial_events if event["type"] == "region_open"]
    if sink is not None and parser.current_field == sink.name and opened and opened[-1] == sink.name:
        from .message import plain_text

        if not plain_text(sink):
            raise GrammarError("prefix", f"the prompt leaves text in the {sink.name!r} field, which only parses as {sink.content.parser}")
    from .message import fits_defaults

    current = facts.field_named(ir, parser.current_field)
    if current is not None and not fits_defaults(current, ir.defaults):
        raise GrammarError("prefix", f"the prompt opens a {current.name!r} region, which the template's defaults leave no place for")
    held = parser.unread_text
    if held and _delimiter_in(ir, parser.current_field, held):
        raise GrammarError("prefix", f"the prompt ends in {held!r}, which the output decides the meaning of")
    return parser.current_field, not parser.initial_events and not held.strip()


def _delimiter_in(ir: Any, current: str | None, text: str) -> bool:
    """Whether text the parser holds back at the prompt's end leaves its state undecided: a
    delimiter the parser watches matches in it (but the implicit field's closer, which only ends
    a region the output has not opened), or it is the start of one (not mere whitespace)."""
    import regex

    fields = {f.name: f for f in ir.fields}
    sink = ir.fields[ir.implicit] if ir.implicit is not None else None
    field = fields.get(current) if current is not None else None
    if field is not None and field is not sink:
        watched = [field.close]
    else:
        watched = [f.open for f in ir.fields]
    if any(d is not None and regex.search(d.alternation, text, regex.DOTALL) for d in watched):
        return True
    closes_sink = sink is not None and sink.close is not None and regex.search(sink.close.alternation, text, regex.DOTALL)
    return bool(text.strip()) and not closes_sink


def _check_first_token_decoding(ir: Any, tokenizer: Any) -> None:
    """The token-id parser decodes the output from its first token on, and a decoder of
    sentencepiece's kind drops the space that the first token starts with: an opener that starts
    with whitespace, written first, would not be read as one. Refused."""
    for field in ir.fields:
        for literal in (field.open.literals or ()) if field.open is not None else ():
            if not literal[:1].isspace():
                continue
            ids = tokenizer.encode(literal, add_special_tokens=False)
            if tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) != literal:
                raise GrammarError(
                    f"fields.{field.name}.open", f"this tokenizer decodes an output that starts with {literal!r} without "
                    "its leading whitespace, so the parser would not read it as the opener there"
                )


_IRS: dict[str, Any] = {}


def _ir_of(module: Any, frontend: Any) -> Any:
    ir = _IRS.get(module.TEMPLATE_SHA256)
    if ir is None:
        ir = _IRS.setdefault(module.TEMPLATE_SHA256, frontend.lower(module.TEMPLATE))
    return ir


def _copy(tag: Any) -> Any:
    """A copy of the tag the caller may change: its dicts and lists are new, its strings, numbers
    and booleans shared (copy.deepcopy, with its memo, took twice as long)."""
    if isinstance(tag, dict):
        return {key: _copy(value) for key, value in tag.items()}
    if isinstance(tag, list):
        return [_copy(item) for item in tag]
    return tag

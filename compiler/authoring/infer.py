"""Derive a response template from a chat template, by rendering probes and comparing the renders.

Nothing here knows a model family. The chat template renders probe conversations whose values are
sentinels (texts and names that occur nowhere else), and each part of the response template is
read off where the sentinels land. What the model writes is only ever what a finished turn adds
to the conversation (`verify.render_turn`): text a render holds whatever the message is (tool
instructions, example calls with placeholder names) is the prompt's, never a call's.

- the generation prompt (what `add_generation_prompt` adds) after a question, after a question
  with tools offered and after a tool result: the start anchors. A template whose switch adds
  nothing shows the anchor as the text every such prompt ends with whatever its last message
  says and whatever tools it offers, so instructions that name the tools, and example calls in
  them, stay before the anchor. A reasoning block the prompt opens (or opens and closes) stays
  after the anchor so the parser reads it from the prefix. An anchor holds only text that is the
  same for every user message (nothing, one word, several lines) and that finished
  conversations hold between the user's words and the answer (`_fixed_anchors`): a generation
  prompt that writes an empty exchange before the assistant's header gives only the header;
- the text before and after the reasoning sentinel: the reasoning delimiters;
- the text before the answer sentinel (a content opener, when it is markup) and after it: where an
  assistant turn ends, each of its end markers closing the content;
- plain text every answer turn starts with (`助手：`), and the generation prompt written again
  inside a turn that comes in parts: the role, read by a field that yields the constant
  "assistant" (`_role_field`), never content;
- one call and two calls: where each call sits (by its name and its argument values), so the
  text around a call, the text between two calls and the text around all of them are the call's
  own delimiters, the separator and the section delimiters. Calls with no opener of their own
  are listed after the section's opener (or the turn's start), each after the one before;
- the argument syntax, by trying each content parser on the text of the call and keeping the one
  that gives the arguments back: a JSON list of calls, a Python-style call list, a JSON object
  holding name and arguments, a JSON object of arguments (also with unquoted keys and custom
  string delimiters, as Gemma writes them), Python keyword arguments without the list around
  them (single-quoted strings too), or repeated key/value markup (XML-style tags, key/value
  lines). Where the template alters the values it writes, a syntax that gives the names and keys
  back is kept as a guess, and said so.

Last, a call field that finds calls in a plain answer is left out. What cannot be derived is
reported part by part (with what `verify.accommodate` had to supply for the template to render),
and the template is written without it.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex as re

from rtcompile.arguments import UsageError

from . import verify as v
from .chat_render import ChatRenderer, RenderAborted, RenderError

PROBE_CALL = v.function_call("probe_lookup", {"probe_city": "Zanzibarville", "probe_days": 7})
PROBE_CALL_2 = v.function_call("probe_search", {"probe_query": "Quuxfield", "probe_flag": True})
# A tool no probe calls: offering it instead shows which text of a prompt names the tools.
OTHER_TOOL_CALL = v.function_call("unrelated_tool", {"unrelated_field": 0.5})
PROBE_REASONING = "Pondering the probe question carefully."
PROBE_ANSWER = "Probe answer sentinel."
PROBE_ANSWER_2 = "A different reply entirely!"
CALL_TRANSFORM = {"type": "function", "function": {"name": "{name}", "arguments": "{arguments}"}}


@dataclass
class Part:
    name: str
    status: str  # "derived", "guessed", "not derived"
    detail: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Inference:
    template: dict
    parts: list[Part] = field(default_factory=list)
    # The markup that ends an answer turn, in order (`<|END_RESPONSE|>`, `<|END_OF_TURN_TOKEN|>`).
    turn_ends: list[str] = field(default_factory=list)

    def note(self, name: str, status: str, detail: str) -> None:
        part = Part(name, status, detail)
        if part not in self.parts:
            self.parts.append(part)

    def format_text(self) -> str:
        lines = ["inferred parts:"]
        for part in self.parts:
            lines.append(f"  {part.name:<16} {part.status:<12} {part.detail}")
        return "\n".join(lines)


# ---- regex building ------------------------------------------------------------------------------


def literal_pattern(text: str) -> str:
    """A literal with every whitespace run loosened to \\s* (models vary spacing; templates too)."""
    out = []
    for piece in re.split(r"(\s+)", text):
        if not piece:
            continue
        out.append(r"\s*" if piece.isspace() else re.escape(piece))
    pattern = "".join(out)
    while r"\s*\s*" in pattern:
        pattern = pattern.replace(r"\s*\s*", r"\s*")
    return pattern


def _stop_class(following: str, extra: str = "") -> str:
    """A character class for a captured name: anything but what follows it, `<` and whitespace."""
    stops = set(extra + "<")
    if following and not following[0].isspace():  # (whitespace is excluded by \s already)
        stops.add(following[0])
    body = "".join(re.escape(c) if c not in "\\]^-" else "\\" + c for c in sorted(stops))
    return f"[^{body}\\s]+"


def tokens_in(text: str) -> list[str]:
    """The token-like pieces of `text` in order; text that has none is one piece (stripped)."""
    found = [m.group() for m in MARKUP_RE.finditer(text)]
    if found:
        return found
    return [text.strip()] if text.strip() else []


def _unique(items: list[str]) -> list[str]:
    return [item for item in dict.fromkeys(items) if item]


def _literal_or_list(items: list[str]) -> str | list[str]:
    return items[0] if len(items) == 1 else items


# ---- probing -------------------------------------------------------------------------------------


@dataclass
class Probe:
    prompt: str
    generation: str | None  # what the model writes, as verify cuts it
    turn: str = ""  # the finished assistant turn as rendered, generation prompt included
    error: str | None = None


class Prober:
    def __init__(self, renderer: ChatRenderer, conventions: v.Conventions):
        self.renderer = renderer
        self.conventions = conventions

    def probe(self, message: dict, history: list[dict] | None = None, tools: list | None = None) -> Probe:
        """`message` rendered after `history` (one question by default), with the tools its calls
        and the history's need, or `tools` when given."""
        history = history or [v._user("What is the weather in Paris?")]
        case = v.Case("probe", "probe", history, message)
        tools = tools if tools is not None else v.tools_for(history + [message])
        conversation = v.to_chat_conversation(history, None, self.conventions)
        try:
            prompt = self.renderer.render(conversation, tools=tools, add_generation_prompt=True)
            base = self.renderer.render(conversation, tools=tools, add_generation_prompt=False)
            full = self.renderer.render(
                v.to_chat_conversation(history, message, self.conventions), tools=tools, add_generation_prompt=False
            )
        except RenderError as e:
            return Probe("", None, error=str(e))
        turn = full[v.common_prefix_length(base, full) :]
        rendered = v.render_turn(self.renderer, case, self.conventions, tools)
        if rendered.generation is not None:
            return Probe(prompt, rendered.generation, turn)
        # The finished turn departs from the prompt: keep what it renders from there on.
        at = _split_at_tokens(full, v.common_prefix_length(prompt, full))
        return Probe(prompt, full[at:].rstrip() or None, turn, error=rendered.unrenderable)

    def generation_prompt(self, history: list[dict], tools: list | None = None) -> tuple[str, str]:
        """(prompt, what add_generation_prompt adds), with the tools the history's calls need or
        `tools`. A template whose switch adds nothing (it always opens the next turn, or never
        does) shows the opener another way: the text every such prompt ends with, whatever its
        last message says and whatever tools it offers."""
        tools = tools if tools is not None else v.tools_for(history)
        conversation = v.to_chat_conversation(history, None, self.conventions)
        prompt = self.renderer.render(conversation, tools=tools, add_generation_prompt=True)
        base = self.renderer.render(conversation, tools=tools, add_generation_prompt=False)
        added = prompt[len(base) :] if prompt.startswith(base) and prompt != base else ""
        if not added:
            added = self._shared_tail(history, prompt, tools)
        return prompt, added

    def _shared_tail(self, history: list[dict], prompt: str, tools: list) -> str:
        """What the prompt ends with after its last message, found by rendering the same history
        with that message saying something else (nothing, one word, several lines), and with other
        tools: the prompts share it (from its first markup on, so no part of the message is
        taken). Tool instructions a template writes after the history are in it only as far as
        they do not name the tools, so example calls in them stay before the anchor. Empty when
        the message is not rendered."""
        variants = []
        for words in v.USER_MESSAGES:
            varied = copy.deepcopy(history)
            varied[-1]["content"] = words
            variants.append((varied, tools))
        if tools:
            variants.append((history, v.tools_for([{"role": "assistant", "tool_calls": [OTHER_TOOL_CALL]}])))
        shared, moved = len(prompt), False
        for messages, offered in variants:
            try:
                other = self.renderer.render(
                    v.to_chat_conversation(messages, None, self.conventions), tools=offered, add_generation_prompt=True
                )
            except RenderError:
                continue
            moved = moved or (messages is not history and other != prompt)
            shared = min(shared, _common_suffix(prompt, other))
        if not moved:
            return ""
        tail = prompt[len(prompt) - shared :]
        markup = MARKUP_RE.search(tail)
        if markup:
            return tail[markup.start() :]
        return tail if tail.strip() else ""

    def fixed_text_before_reply(self, context: int) -> str | None:
        """The text between the last message's words and the reply in finished conversations of
        `context` (an index into `verify.anchor_contexts`), the same whatever those words are
        (nothing, one word, several lines): what no user message moves. None when fewer than two
        such conversations render."""
        texts = []
        for words in v.USER_MESSAGES:
            _, history, tools = v.anchor_contexts(words)[context]
            text = v.conversation_prompt(self.renderer, self.conventions, history, tools)
            if text is not None:
                texts.append(text)
        if len(texts) < 2:
            return None
        shared = min(_common_suffix(texts[0], other) for other in texts[1:])
        return texts[0][len(texts[0]) - shared :]


# ---- the parts -----------------------------------------------------------------------------------


_OPENER_PIECE = re.compile(r"(?:" + v.MARKUP_RE.pattern + r"|[^\s<>\[\]|]+)\Z")


def opener_before(text: str, at: int, anchors: list[str]) -> str:
    """The markup right before position `at`: tokens and the words glued to them, back to the
    previous whitespace, less a generation prompt it starts with."""
    end = at
    while end > 0 and text[end - 1].isspace():
        end -= 1
    start = end
    while start > 0:
        match = _OPENER_PIECE.search(text, 0, start)
        if not match or match.start() == start:
            break
        start = match.start()
    opener = text[start:end]
    for anchor in sorted(anchors, key=len, reverse=True):
        if anchor and opener.startswith(anchor.strip()) and opener != anchor.strip():
            opener = opener[len(anchor.strip()) :]
            break
    return opener.strip()


MARKUP_RE = v.MARKUP_RE  # markup a boundary must not cut


def _split_at_tokens(text: str, boundary: int) -> int:
    """Move `boundary` back to the start of the markup of `text` that it would cut in two (a
    whole token or tag, or one still open at the boundary)."""
    for match in MARKUP_RE.finditer(text):
        if match.start() < boundary < match.end():
            return match.start()
    before = text[:boundary]
    for opening, closing in (("<", ">"), ("[", "]")):
        if before.rfind(opening) > before.rfind(closing):
            return before.rfind(opening)
    return boundary


def _strip_empty_block(text: str, reasoning: tuple[str, str] | None) -> str:
    if reasoning:
        # An empty block, or a bare close (a finished turn that closes what the prompt opened).
        pattern = r"\A\s*(?:" + literal_pattern(reasoning[0]) + r")?\s*" + literal_pattern(reasoning[1]) + r"\s*"
        return re.sub(pattern, "", text)
    return text


def _json_values(text: str) -> list[tuple[int, int, Any]]:
    """Every JSON value starting at a `{` or `[` of `text`: (start, end, value)."""
    decoder = json.JSONDecoder()
    out = []
    for start, char in enumerate(text):
        if char in "{[":
            try:
                value, end = decoder.raw_decode(text, start)
            except ValueError:
                continue
            out.append((start, end, value))
    return out


def _value_texts(value: Any) -> list[str]:
    """How a chat template may write an argument value: Python str(), JSON, lower-case booleans."""
    texts = [json.dumps(value, ensure_ascii=False), str(value)]
    if isinstance(value, bool):
        texts.append(str(value).lower())
    if isinstance(value, str):
        texts.insert(0, value)
    return _unique(texts)


@dataclass
class CallShape:
    """One call's rendering split around its name and arguments."""

    start: int  # where the call's own text starts (its name, or the JSON object holding it)
    end: int  # where its arguments end
    open_pattern: str  # from `start` up to the arguments, with name/id groups
    content: str
    content_args: dict
    transform: dict
    content_span: tuple[int, int]


def _find_id_pattern(
    text: str, given_ids: list[str], name: str, following: str, capture_name: bool = True
) -> tuple[str | None, str]:
    """If a given call id is rendered in `text`: a pattern for ids like it, and the id found. An id
    holding the name (Kimi's functions.NAME:0) keeps its shape, its other parts optional; any
    other id is whatever runs up to the markup that follows it (models write their own ids)."""
    for given in given_ids:
        if given and given in text:
            if capture_name and name in given:
                before, _, after = given.partition(name)
                name_class = _stop_class(after or following, ":")
                loosened = "".join(r"\d+" if piece.isdigit() else re.escape(piece) for piece in re.split(r"(\d+)", after) if piece)
                pattern = (f"(?:{re.escape(before)})?" if before else "") + f"(?P<name>{name_class})"
                pattern += f"(?:{loosened})?" if after else ""
                return f"(?P<id>{pattern})", given
            return f"(?P<id>{_stop_class(following)})", given
    return None, ""


def _call_shape(text: str, call: dict, given_ids: list[str], parsers, exact: bool = True) -> CallShape | None:
    """Where `call` sits in `text` and how its arguments are written. With `exact` false, keyword
    arguments that come back with the probe's keys but other values are accepted too (a template
    that mangles values as it writes them: the syntax is still the model's)."""
    name = call["function"]["name"]
    arguments = call["function"]["arguments"]
    at = text.find(name)
    if at < 0:
        return None
    # A JSON object holding the name and the arguments (Hermes / Qwen3 / Llama 3).
    for start, end, value in _json_values(text):
        if isinstance(value, dict) and start <= at < end:
            name_keys = [k for k, item in value.items() if item == name]
            argument_keys = [k for k, item in value.items() if item == arguments or _loads(item) == arguments]
            if name_keys and argument_keys:
                if set(value) == {"name", "arguments"} and value["arguments"] == arguments:
                    transform = {"type": "function", "function": "{content}"}
                else:
                    transform = {
                        "type": "function",
                        "function": {"name": f"{{content.{name_keys[0]}}}", "arguments": f"{{content.{argument_keys[0]}}}"},
                    }
                return CallShape(start, end, "", "json", {}, transform, (start, end))
    # The arguments after the name, in some syntax; the text between is the rest of the opener.
    after_name = at + len(name)
    candidates = []
    for start, end, value in _json_values(text):
        if start >= after_name and value == arguments:
            candidates.append((start, end, {}))
            break
    if not candidates:
        candidates.extend(_dialect_candidates(text, after_name, arguments, parsers))
    if not candidates:
        candidates.extend(_keyword_argument_candidates(text, after_name, arguments, parsers, exact))
    if candidates:
        start, end, content_args = candidates[0]
        between = text[after_name:start]
        content = "xml-inline" if "tag_pattern" in content_args else "json"
        return _named_shape(text, at, name, between, given_ids, start, end, content, content_args)
    return _markup_shape(text, at, name, arguments, given_ids, parsers)


def _loads(item: Any) -> Any:
    if isinstance(item, str):
        try:
            return json.loads(item)
        except ValueError:
            return None
    return None


def _named_shape(text, at, name, between, given_ids, start, end, content, content_args) -> CallShape:
    id_pattern, given = _find_id_pattern(text[max(0, at - 40) : start], given_ids, name, between)
    id_at = text.rfind(given, 0, start) if given else -1
    if id_pattern and given and name in given and id_at <= at < id_at + len(given):
        # The name is written only inside the id (functions.NAME:0): the opener is built around it.
        prefix_start = id_at
        opener = id_pattern + literal_pattern(text[id_at + len(given) : start])
        return CallShape(prefix_start, end, opener, content, content_args,
                         {"id": "{id}", **CALL_TRANSFORM_CONTENT}, (start, end))
    opener = f"(?P<name>{_stop_class(between or text[start : start + 1])})"
    transform = dict(CALL_TRANSFORM_CONTENT)
    id_at = between.find(given) if given else -1
    if id_at >= 0:
        after_id = between[id_at + len(given) :]
        id_pattern, _ = _find_id_pattern(between, [given], name, after_id or text[start : start + 1], capture_name=False)
        opener += _literal_naming(between[:id_at], name) + id_pattern + _literal_naming(after_id, name)
        transform = {"id": "{id}", **transform}
    else:
        opener += _literal_naming(between, name)
    return CallShape(at, end, opener, content, content_args, transform, (start, end))


def _literal_naming(text: str, name: str) -> str:
    """`literal_pattern(text)`, with the call's name, where the template writes it again (`to=NAME`
    then `<invoke name="NAME">`), matching any name: the first one is captured."""
    pieces = text.split(name)
    pattern = literal_pattern(pieces[0])
    for piece in pieces[1:]:
        pattern += _stop_class(piece) + literal_pattern(piece)
    return pattern


CALL_TRANSFORM_CONTENT = {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}


def _dialect_candidates(text: str, after_name: int, arguments: dict, parsers) -> list:
    """Arguments as a JSON-like object with unquoted keys and strings between custom markers."""
    brace = text.find("{", after_name)
    if brace < 0 or not arguments:
        return []
    string_values = [value for value in arguments.values() if isinstance(value, str)]
    delims = []
    for value in string_values:
        at = text.find(value, brace)
        if at < 0:
            continue
        colon = text.rfind(":", brace, at)
        left = text[colon + 1 : at] if colon >= 0 else ""
        right = ""
        for stop in range(at + len(value), min(len(text), at + len(value) + 20)):
            if text[stop] in ",}":
                right = text[at + len(value) : stop]
                break
        if left and right:
            delims = [[left, right]]
        break
    for args in ({"unquoted_keys": True, **({"string_delims": delims} if delims else {})},):
        for close in [m.start() for m in re.finditer(r"\}", text[brace:])]:
            body = text[brace : brace + close + 1]
            try:
                if parsers["json"](body, args) == arguments:
                    return [(brace, brace + close + 1, args)]
            except ValueError:
                continue
    return []


# One keyword argument of a Python-style call, `key=value`: the value a quoted string (either
# quote, escapes kept), a flat list or mapping, or a bare word or number up to the next comma.
KEYWORD_ARGUMENT = (
    r"""(?P<key>[A-Za-z_]\w*)\s*=\s*(?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\[[^\[\]]*\]|\{[^{}]*\}|[^,()\s]+)"""
)


def _keyword_arguments_args(single_quoted: bool) -> dict:
    """xml-inline arguments that read `key=value, ...` (a Python-style call without the list
    around it, which the python-call-list parser needs): each value through the json parser,
    single-quoted strings as string delimiters where the template writes them, anything else
    not JSON (`True`, a bare word) kept as text for the tool schema to coerce."""
    value_args: dict[str, Any] = {"allow_non_json": True}
    if single_quoted:
        value_args["string_delims"] = [["'", "'"]]
    return {"tag_pattern": KEYWORD_ARGUMENT, "value_parser": {"name": "json", "args": value_args}}


def _keyword_argument_candidates(text: str, after_name: int, arguments: dict, parsers, exact: bool = True) -> list:
    """Arguments as Python keyword arguments in parentheses after the name, `f(a='x', b=3)`:
    (start, end, content_args) of the text between the parentheses, when the xml-inline parser
    reads the probe's arguments back from it."""
    opening = re.match(r"\s*\(", text[after_name:])
    if not opening or not arguments:
        return []
    start = after_name + opening.end()
    for close in [start + m.start() for m in re.finditer(r"\)", text[start:])]:
        body = text[start:close]
        # Strings in single quotes where the template writes them; where it mangles the values,
        # whatever the model quotes them with.
        args = _keyword_arguments_args(single_quoted="'" in body or not exact)
        try:
            parsed = parsers["xml-inline"](body, args)
        except (ValueError, KeyError):
            continue
        same_keys = isinstance(parsed, dict) and set(parsed) == set(arguments)
        if _same_arguments(parsed, arguments) or (not exact and same_keys):
            return [(start, close, args)]
    return []


def _same_arguments(parsed: Any, arguments: dict) -> bool:
    """Whether parsed arguments are the probe's: the same keys, strings exactly, other values
    as the tool schema's coercion gives them back (`True` written as text, `7` as a string)."""
    if not isinstance(parsed, dict) or set(parsed) != set(arguments):
        return False
    for key, expected in arguments.items():
        value = parsed[key]
        if isinstance(expected, str):
            if value != expected:
                return False
        elif value != expected and str(value).strip().lower() != json.dumps(expected).lower():
            return False
    return True


def _markup_shape(text: str, at: int, name: str, arguments: dict, given_ids, parsers) -> CallShape | None:
    """Arguments as repeated key/value markup: <parameter=K>V</parameter>, <arg_key>K</arg_key>
    <arg_value>V</arg_value>, K: V lines. Needs two arguments to tell a unit's two ends apart."""
    keys = list(arguments)
    if len(keys) < 2:
        return None
    # In the order the template writes them (some sort the keys).
    keys.sort(key=lambda k: (text.find(k, at + len(name)) < 0, text.find(k, at + len(name))))
    spans = []
    position = at + len(name)
    for key in keys:
        key_at = text.find(key, position)
        if key_at < 0:
            return None
        for candidate in _value_texts(arguments[key]):
            value_at = text.find(candidate, key_at + len(key))
            if value_at >= 0:
                break
        else:
            return None
        spans.append((key_at, key_at + len(key), value_at, value_at + len(candidate)))
        position = value_at + len(candidate)
    middles = _unique([text[span[1] : span[2]] for span in spans])
    middle = middles[0]
    inter = text[spans[0][3] : spans[1][0]]
    close_tag = inter.find(">")
    right, left = (inter[: close_tag + 1], inter[close_tag + 1 :]) if close_tag >= 0 else ("", inter)
    if not left.strip() and not right.strip():
        # key/value lines: no markup around a unit, a separator between key and value.
        separator = middle.strip() or middle
        if not separator or "\n" not in inter:
            return None
        content, content_args = "kv-lines", {"kv_sep": separator}
        units_start, units_end = spans[0][0], spans[-1][3]
    else:
        key_class = _stop_class(middle)
        # The markup between key and value may depend on the value's type (string="true").
        between = literal_pattern(middle) if len(middles) == 1 else "(?:" + "|".join(literal_pattern(m) for m in middles) + ")"
        tag_pattern = (
            literal_pattern(left.lstrip()) + f"(?P<key>{key_class})" + between
            + "(?P<value>.*?)" + literal_pattern(right)
        )
        content, content_args = "xml-inline", {"tag_pattern": tag_pattern}
        units_start = spans[0][0] - len(left.lstrip())
        units_end = spans[-1][3] + len(right)
        if text[units_start : spans[0][0]] != left.lstrip() or text[spans[-1][3] : units_end] != right:
            return None
    try:
        parsed = parsers[content](text[units_start:units_end], content_args)
    except ValueError:
        return None
    if set(parsed) != set(keys):
        return None
    between = text[at + len(name) : units_start]
    return _named_shape(text, at, name, between, given_ids, units_start, units_end, content, content_args)


def _call_list(text: str, calls: list[dict], parsers) -> tuple[int, int, str, dict] | None:
    """All calls in one JSON list of objects, or in one Python-style call list."""
    names = [call["function"]["name"] for call in calls]
    arguments = [call["function"]["arguments"] for call in calls]
    for start, end, value in _json_values(text):
        if isinstance(value, list) and len(value) == len(calls) and all(isinstance(item, dict) for item in value):
            first = value[0]
            name_keys = [k for k, item in first.items() if item == names[0]]
            argument_keys = [k for k, item in first.items() if item == arguments[0] or _loads(item) == arguments[0]]
            if name_keys and argument_keys:
                transform = {
                    "type": "function",
                    "function": {"name": f"{{{name_keys[0]}}}", "arguments": f"{{{argument_keys[0]}}}"},
                }
                return start, end, "json", transform
    for start in [m.start() for m in re.finditer(r"\[", text)]:
        for end in [start + m.end() for m in re.finditer(r"\]", text[start:])]:
            try:
                parsed = parsers["python-call-list"](text[start:end], {})
            except (ValueError, KeyError):
                continue
            if [p["name"] for p in parsed] == names and [p["arguments"] for p in parsed] == arguments:
                return start, end, "python-call-list", dict(CALL_TRANSFORM)
    return None


def _common_suffix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


def _content_parsers() -> dict:
    from transformers.utils.chat_parsing.content_parsers import CONTENT_PARSERS

    return CONTENT_PARSERS


def infer(renderer: ChatRenderer) -> Inference:
    """Derive a response template from the renders of `renderer`'s chat template (module doc)."""
    parsers = _content_parsers()
    conventions, notes = v.discover_conventions(renderer)
    prober = Prober(renderer, conventions)
    result = Inference(template={})
    for note in notes:
        result.note("chat template", "note", note)
    prompt, prompts_added = _generation_prompts(prober)
    reasoning = _infer_reasoning(prober, [added for _, added in prompts_added], result)
    anchors = _start_anchors(prober, prompt, prompts_added, reasoning, result)
    content_field, content_closes = _infer_content(prober, anchors, reasoning, result)
    label = _role_label(prober, reasoning, result)
    headers = _turn_headers(prober, anchors, result)
    try:
        calls_field, section_tokens = _infer_calls(prober, reasoning, content_field, parsers, result)
    except (ValueError, IndexError, KeyError, TypeError, re.error) as e:
        # A chat template unlike any probe here must still get the rest of its template.
        result.note("tool_calls", "not derived", f"the call renders defeat the analysis ({type(e).__name__}: {e})")
        calls_field, section_tokens = None, []
    _close_content(content_field, _unique(content_closes + section_tokens), result)
    fields: dict[str, dict] = {}
    if reasoning:
        fields["reasoning_content"] = {"open": reasoning[0], "close": reasoning[1], "content": "text"}
    if calls_field:
        fields["tool_calls"] = calls_field
    if label or headers:
        fields["role"] = _role_field(label, headers, reasoning)
    fields["content"] = content_field
    result.template["defaults"] = {"role": "assistant"}
    result.template["fields"] = fields
    _drop_what_the_validators_reject(result)
    _drop_calls_found_in_plain_answers(prober, result)
    return result


def _drop_calls_found_in_plain_answers(prober: Prober, result: Inference) -> None:
    """A call field that finds calls in a plain answer reads something the prompt shows (example
    calls in tool instructions, left after the start anchor) as the model's: parse plain answers
    rendered where tools are offered, and leave the field out, saying so, if any call comes back."""
    if "tool_calls" not in result.template["fields"]:
        return
    from transformers.utils.chat_parsing import parse_response

    offered = v.tools_for([{"role": "assistant", "tool_calls": [PROBE_CALL]}])
    after_tool = _after_tool_result()
    contexts = (
        ("with tools offered", [v._user("What is the weather in Paris?")], offered),
        ("after a tool result", after_tool, v.tools_for(after_tool)),
    )
    for description, history, tools in contexts:
        case = v.Case("plain", "a plain answer", history, {"role": "assistant", "content": PROBE_ANSWER})
        try:
            rendered = v.render_turn(prober.renderer, case, prober.conventions, tools)
            if rendered.generation is None:
                continue
            parsed = parse_response(rendered.generation, result.template, prefix=rendered.prefix, tools=tools)
        except (RenderError, ValueError, KeyError, TypeError):
            continue
        if parsed.get("tool_calls"):
            del result.template["fields"]["tool_calls"]
            names = [call.get("function", {}).get("name") for call in parsed["tool_calls"] if isinstance(call, dict)]
            result.note("tool_calls", "not derived",
                        f"left out: it finds calls {names} in a plain answer {description} (text the prompt shows)")
            return


def _generation_prompts(prober: Prober) -> tuple[str, list[tuple[int, str]]]:
    """The prompt of a one-question conversation, and what the generation prompt adds there,
    there with tools offered, and after a tool result: (context, added), the context an index
    into `verify.anchor_contexts`."""
    question = [v._user("What is the weather in Paris?")]
    try:
        prompt, added = prober.generation_prompt(question)
    except RenderError as e:
        raise RenderError(f"the chat template cannot render a conversation of one user message: {e}") from None
    prompts_added = [(0, added)]
    offered = v.tools_for([{"role": "assistant", "tool_calls": [PROBE_CALL]}])
    for context, history, tools in ((1, question, offered), (2, _after_tool_result(), None)):
        try:
            prompts_added.append((context, prober.generation_prompt(history, tools)[1]))
        except RenderError:
            pass  # a template without tools or tool results: the other anchors are enough
    return prompt, prompts_added


def _infer_reasoning(prober: Prober, prompts_added: list[str], result: Inference) -> tuple[str, str] | None:
    """(open, close) from the markup around the reasoning sentinel, in an answer or a call turn."""
    for message in (
        {"role": "assistant", "reasoning_content": PROBE_REASONING, "content": PROBE_ANSWER},
        {"role": "assistant", "reasoning_content": PROBE_REASONING, "tool_calls": [PROBE_CALL]},
    ):
        turn = prober.probe(message).turn
        if PROBE_REASONING not in turn:
            continue
        at = turn.find(PROBE_REASONING)
        opener = opener_before(turn, at, prompts_added)
        tail = turn[at + len(PROBE_REASONING) :]
        closer = tokens_in(tail.split(PROBE_ANSWER)[0] if PROBE_ANSWER in tail else tail)
        if opener and closer:
            result.note("reasoning", "derived", f"{opener!r} ... {closer[0]!r}")
            return opener, closer[0]
    # Never rendered, but a prompt that opens (or opens and closes) an XML-like tag shows it.
    tag = re.search(r"<([A-Za-z_][\w\-]*)>\s*\Z", prompts_added[0]) or re.search(
        r"<([A-Za-z_][\w\-]*)>\s*</\1>\s*\Z", prompts_added[0]
    )
    if tag:
        reasoning = (f"<{tag.group(1)}>", f"</{tag.group(1)}>")
        result.note(
            "reasoning", "guessed",
            f"the chat template never renders reasoning, but the prompt opens {reasoning[0]!r}; "
            f"closing it with {reasoning[1]!r} by the XML convention",
        )
        return reasoning
    result.note("reasoning", "not derived", "the chat template renders no reasoning in any probe")
    return None


def _start_anchors(
    prober: Prober, prompt: str, prompts_added: list[tuple[int, str]], reasoning, result: Inference
) -> list[str]:
    """The generation prompts, less a reasoning block they open (the parser reads that block from
    the prefix, after the anchor), and less any text a prompt with the user's words in it does
    not hold (`_fixed_anchors`). An anchor that ends with another one is left out: wherever it
    matches, the shorter one matches at the same end."""
    anchors = []
    for context, text in prompts_added:
        at = text.find(reasoning[0]) if reasoning else -1
        if at > 0:
            block = text[at:]
            opened = "opens and closes an empty reasoning block" if reasoning[1] in block else "opens the reasoning"
            result.note("prefilled", "derived", f"the generation prompt {opened} ({block!r}); the parser reads it from the prefix")
            text = text[:at]
        if text.strip():
            anchors += _fixed_anchors(text, prober.fixed_text_before_reply(context), reasoning, result)
    anchors = _unique(anchors)
    anchors = [a for a in anchors if not any(b != a and a.endswith(b) for b in anchors)]
    if anchors:
        result.template["start_anchor"] = _literal_or_list(anchors)
        result.note("start_anchor", "derived", ", ".join(repr(a) for a in anchors))
    else:
        result.template["start_anchor"] = prompt[-1:] or "\n"
        result.note("start_anchor", "not derived", "the prompt ends with nothing token-like; using its last character")
    return anchors


def _fixed_anchors(candidate: str, fixed: str | None, reasoning, result: Inference) -> list[str]:
    """Start anchors built only from text that is the same for every user message. `candidate` is
    what the generation prompt adds; `fixed` is the text finished conversations hold between the
    user's words and the reply, whatever the words (None when unknown). Where a generation prompt
    writes more than that (an empty exchange before the assistant's header, `<｜User｜>` "\\n"
    `<｜Assistant｜>`, which a prompt with the user's words in it never holds), the anchor is the
    longest part of the candidate, from a markup on, that `fixed` holds; where it only ends with
    whitespace `fixed` lacks, the candidate without it is kept beside it. Where no part of it is
    there (tool instructions the generation prompt writes after the history), both are kept: the
    candidate for the generation prompt, and `fixed` from its first markup, less a reasoning block
    it opens, for the conversation as it goes on."""
    if fixed is None or candidate in fixed:
        return [candidate]
    core = candidate
    while core and core[-1].isspace() and core not in fixed:
        core = core[:-1]
    if core.strip() and core in fixed:
        # Layout after the generation prompt (`\nASSISTANT: ` then a newline): both are kept, and
        # where both match the longer one wins, so each prompt is read from its own end.
        result.note("start_anchor", "derived", f"{core!r} too: the generation prompt ends with whitespace "
                    f"({candidate[len(core):]!r}) a finished conversation does not hold there")
        return [candidate, core]
    for match in MARKUP_RE.finditer(candidate):
        tail = candidate[match.start() :]
        if match.start() > 0 and tail in fixed:
            result.note("start_anchor", "derived", f"{tail!r}: the generation prompt writes "
                        f"{candidate[: match.start()]!r} before it, which a prompt with the user's words in it "
                        "does not hold")
            return [tail]
    first = MARKUP_RE.search(fixed)
    own = fixed[first.start() :] if first else ""
    if reasoning and reasoning[0] in own:
        own = own[: own.find(reasoning[0])]
    if not own.strip():
        return [candidate]
    result.note("start_anchor", "derived", f"{own!r} too: what every finished conversation holds before the reply, "
                f"where the generation prompt's {candidate!r} is not")
    return [candidate, own]


def _infer_content(prober: Prober, anchors: list[str], reasoning, result: Inference) -> tuple[dict, list[str]]:
    """The content field's opener (the markup before the answer, less an empty reasoning block)
    and the markers that end it."""
    content_field: dict[str, Any] = {"content": "text"}
    closes: list[str] = []
    answer = prober.probe({"role": "assistant", "content": PROBE_ANSWER})
    text = answer.turn
    for anchor in sorted(anchors, key=len, reverse=True):
        if text.startswith(anchor):
            text = text[len(anchor) :]
            break
    if PROBE_ANSWER not in text:
        result.note("content", "not derived", f"the answer probe did not render ({answer.error})")
        return content_field, closes
    at = text.find(PROBE_ANSWER)
    before = _strip_empty_block(text[:at], reasoning)
    if reasoning and before != text[:at] and reasoning[1] in text[:at]:
        # The answer follows a closed (empty) reasoning block: its close must not become content.
        closes.append(reasoning[1])
    opener = opener_before(before, len(before), anchors) if before.strip() else ""
    if opener and not MARKUP_RE.search(opener):
        opener = ""  # plain text before every answer is a role label (`_role_label`), not a content opener
    if opener:
        content_field["open"] = opener
    generation = answer.generation or text
    end = tokens_in(generation[generation.rfind(PROBE_ANSWER) + len(PROBE_ANSWER) :])
    # Each marker of the turn's end closes the content: the first ends it, and those after it
    # close an implicit region that never opened, instead of opening a second content that
    # would replace the first.
    closes.extend(end)
    result.turn_ends = end
    result.note(
        "content", "derived",
        (f"opens with {opener!r}, " if opener else "implicit, ")
        + (f"the turn ends at {end[0]!r}" if end else "the turn ends with the generation (no end marker rendered)"),
    )
    return content_field, closes


def _after_tool_result() -> list[dict]:
    return [
        v._user("What is the weather in Paris?"),
        {"role": "assistant", "tool_calls": [PROBE_CALL]},
        {"role": "tool", "name": "probe_lookup", "content": "Probe result."},
    ]


def _role_label(prober: Prober, reasoning, result: Inference) -> str | None:
    """Plain text the chat template writes at the start of every finished answer turn, after the
    generation prompt, whatever the answer says (`助手：`, `Assistant:`): a role label the model
    writes too, which must not end up in the content. Found by rendering two different answers in
    each context an answer can follow (a question, a question with tools offered, a tool result:
    some templates label turns only in some of them); the label is the plain text both start with,
    no markup before it. None when there is none."""
    offered = v.tools_for([{"role": "assistant", "tool_calls": [PROBE_CALL]}])
    contexts = [
        ("after a question", None, None),
        ("with tools offered", None, offered),
        ("after a tool result", _after_tool_result(), None),
    ]
    found: dict[str, str] = {}
    for description, history, tools in contexts:
        heads = []
        for answer in (PROBE_ANSWER, PROBE_ANSWER_2):
            probe = prober.probe({"role": "assistant", "content": answer}, history, tools=tools)
            generation = probe.generation or ""
            if probe.error or answer not in generation:
                break
            before = _strip_empty_block(generation[: generation.find(answer)], reasoning)
            # Plain text only: after markup it belongs to that markup (`<|im_start|>assistant`).
            heads.append("" if MARKUP_RE.search(before) else before.strip())
        if len(heads) == 2 and heads[0] and heads[0] == heads[1]:
            found[description] = heads[0]
    labels = _unique(list(found.values()))
    if not labels:
        return None
    if len(labels) > 1:
        result.note("role label", "not derived", f"answer turns start with different text: {labels}")
        return None
    where = ", ".join(found)
    unlabelled = [d for d, _, _ in contexts if d not in found]
    result.note(
        "role label", "derived",
        f"{labels[0]!r} starts every answer turn ({where}"
        + (f"; not {', '.join(unlabelled)}" if unlabelled else "")
        + "): read as the role, not as content",
    )
    return labels[0]


def _turn_headers(prober: Prober, anchors: list[str], result: Inference) -> list[str]:
    """The generation prompt written again inside a finished turn: a template that splits one
    assistant message into several turns (its reasoning, its answer, its calls) opens each with the
    assistant's header, which the model writes too and which belongs to no field. Found by
    rendering messages with two parts and looking for an anchor inside what the model writes."""
    headers: list[str] = []
    for message in (
        {"role": "assistant", "reasoning_content": PROBE_REASONING, "content": PROBE_ANSWER},
        {"role": "assistant", "content": PROBE_ANSWER, "tool_calls": [PROBE_CALL]},
        {"role": "assistant", "reasoning_content": PROBE_REASONING, "tool_calls": [PROBE_CALL]},
    ):
        probe = prober.probe(message)
        generation = "" if probe.error else (probe.generation or "").strip()
        for anchor in anchors:
            header = anchor.strip()
            if header and MARKUP_RE.match(header) and header in generation[1:]:
                headers.append(header)
    headers = _unique(headers)
    if headers:
        result.note("turn header", "derived", ", ".join(repr(h) for h in headers)
                    + " opens each part of a finished turn again: read as the role, not as content")
    return headers


def _role_field(label: str | None, headers: list[str], reasoning) -> dict:
    """A field that swallows a role label where a turn starts, and the assistant's header wherever
    a turn opens a part again, and yields the role itself: it opens on either and closes at once,
    its transform a constant."""
    alternatives = [_turn_start(reasoning) + r"\s*" + literal_pattern(label)] if label else []
    alternatives += [r"\s*" + literal_pattern(header) for header in headers]
    return {
        "open_pattern": alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")",
        "close_pattern": "",
        "content": "text",
        "transform": "assistant",
    }


def _close_content(content_field: dict, closes: list[str], result: Inference) -> None:
    """The content's close: where an answer turn ends, or where a call section or a closed
    reasoning block starts."""
    if not closes:
        return
    if "open" in content_field:
        content_field["close"] = _literal_or_list(closes)
    else:
        # Whitespace before the end belongs to no field: an implicit region must not reopen for it
        # (a second, empty content would replace the first).
        content_field["close_pattern"] = r"\s*(?:" + "|".join(literal_pattern(c) for c in closes) + ")"
    if len(result.turn_ends) > 1:
        result.note("content", "derived", "the turn ends with " + " ".join(repr(t) for t in result.turn_ends)
                    + ": each of them closes the content")
    also = [c for c in closes if c not in result.turn_ends]
    if also:
        result.note("content", "derived", "also closed by " + ", ".join(repr(c) for c in also) + " (call sections, closed reasoning)")


def _drop_what_the_validators_reject(result: Inference) -> None:
    """Keep the template valid: a field either validator rejects is left out, and said so."""
    fields = result.template["fields"]
    for name in ("tool_calls", "reasoning_content"):
        try:
            validate(result.template)
            return
        except (ValueError, TypeError) as e:
            if name in fields:
                del fields[name]
                result.note(name, "not derived", f"left out: the validator rejects what was derived ({e})")


def _turn_start(reasoning: tuple[str, str] | None) -> str:
    """Where a call with no opener of its own can start: the start of the turn, or right after
    the reasoning (anywhere else it could not be told from content)."""
    if reasoning:
        return r"(?:^|(?<=" + re.escape(reasoning[1]) + "))"
    return "^"


def _infer_calls(prober: Prober, reasoning, content_field, parsers, result: Inference) -> tuple[dict | None, list[str]]:
    one = prober.probe({"role": "assistant", "tool_calls": [PROBE_CALL]})
    two = prober.probe({"role": "assistant", "tool_calls": [PROBE_CALL, PROBE_CALL_2]})
    g1 = _strip_empty_block(one.generation or "", reasoning)
    if "probe_lookup" not in g1:
        result.note("tool_calls", "not derived", "the chat template renders no tool call" + (f" ({one.error})" if one.error else ""))
        return None, []
    g2 = _strip_empty_block(two.generation or "", reasoning)
    parallel = "probe_lookup" in g2 and "probe_search" in g2
    if not parallel:
        result.note("parallel calls", "not derived", "the chat template renders only one call per turn" + (f" ({two.error})" if two.error else ""))
    given = [v.call_id(prober.conventions, 9, i, c["function"]["name"]) for i, c in enumerate([PROBE_CALL, PROBE_CALL_2])]

    listed = _call_list(g2, [PROBE_CALL, PROBE_CALL_2], parsers) if parallel else None
    if listed:
        return _list_field(g2, listed, reasoning, result)
    listed = _call_list(g1, [PROBE_CALL], parsers)
    if listed:
        return _list_field(g1, listed, reasoning, result)
    return _per_call_field(g1, g2 if parallel else None, given, reasoning, content_field, parsers, result)


def _list_field(text: str, listed, reasoning, result: Inference) -> tuple[dict, list[str]]:
    """One region holding every call: a JSON list or a Python-style call list."""
    start, end, content, transform = listed
    lead = text[:start]
    after = tokens_in(text[end:])
    field: dict[str, Any] = {"content": content, "transform": transform, "transform_each": True}
    first_key = re.match(r'\[\s*\{\s*"[^"\\]+"\s*:', text[start:]) if content == "json" else None
    if lead.strip():
        field["open_pattern"] = r"\s*" + literal_pattern(lead.strip())
    elif first_key:
        # A bare JSON list of objects that starts with its key (`[{"name":`) is told from prose
        # by that start, so it may follow content.
        field["open_pattern"] = r"\s*(?=" + literal_pattern(first_key.group()) + ")"
    else:
        lookahead = r"\[\s*\{" if content == "json" else r"\[\s*[A-Za-z_][\w.\-]*\s*\(\s*(?:\)|[A-Za-z_]\w*\s*=)"
        field["open_pattern"] = _turn_start(reasoning) + r"\s*(?=" + lookahead + ")"
    if after:
        field["close"] = after[0]
    result.note("tool_calls", "derived", f"all calls in one {content} list after {lead.strip()!r}, closed by {after[:1]}")
    return field, after[:2]


@dataclass
class CallSplit:
    """The text of a call turn around the calls, split by comparing one call with two."""

    per_open: str  # before each call's own text
    per_close: str  # after each call's arguments, its own close
    separator: str  # between one call's close and the next call's opener
    section_open: str  # before the first call's opener: the section around all calls
    section_tokens: list[str]  # markup after the calls: the section's close, the turn's end
    between: str  # from the end of one call's arguments up to the next call (or the turn's end)


def _per_call_field(g1: str, g2: str | None, given, reasoning, content_field, parsers, result) -> tuple[dict | None, list[str]]:
    """One region per call: the text shared by the run-up to the first call and the text
    between two calls is each call's opener; what is left before is the section's opener, and
    likewise at the other end (`_split_calls`). Calls with no opener of their own are listed in
    the section or where the turn starts (`_listed_in_section`)."""
    shape, exact = _first_call_shape(g1, given, parsers)
    if shape is None:
        result.note("tool_calls", "not derived", f"no argument syntax reproduces the probe's arguments from {g1[:120]!r}")
        return None, []
    shapes = _parallel_shapes(g2, given, parsers, exact) if g2 is not None else None
    split = _split_calls(g1, g2, shape, shapes)
    if content_field.get("open") and split.per_open.strip().startswith(content_field["open"]):
        split.per_open = split.per_open.strip()[len(content_field["open"]) :]
    if not split.per_open.strip() and (split.section_open.strip() or shape.content == "xml-inline" or g2 is not None):
        # No opener of its own: the first call follows the block's opener (or starts the turn),
        # each next one follows the call before it.
        block = _block_start(split.section_open, reasoning)
        listed = _listed_in_section(
            g1, shape, block, split.per_close, split.between, g1[shape.end :], split.section_tokens, result
        )
        if not exact:
            _mark_guessed(result, g1)
        return listed
    field = _call_field({"open_pattern": _call_open_pattern(g1, shape, split, reasoning), **_call_close(split)}, shape)
    result.note(
        "tool_calls", "derived",
        f"each call {split.per_open.strip()!r}...{split.per_close.strip()!r}, arguments as {shape.content}"
        + (f" {shape.content_args}" if shape.content_args else "")
        + (f", all calls inside {split.section_open.strip()!r}" if split.section_open.strip() else ""),
    )
    if not exact:
        _mark_guessed(result, g1)
    if g2 is not None:
        split_by = f"separated by {split.separator!r}" if shapes else "rendered, but not split"
        result.note("parallel calls", "derived", split_by)
    return field, split.section_tokens


def _first_call_shape(g1: str, given, parsers) -> tuple[CallShape | None, bool]:
    """The call in the one-call render, and whether its values came back exactly (False: the
    template alters them, and the shape only gives the names and keys back)."""
    shape = _call_shape(g1, PROBE_CALL, given, parsers)
    if shape is not None:
        return shape, True
    return _call_shape(g1, PROBE_CALL, given, parsers, exact=False), False


def _parallel_shapes(g2: str, given, parsers, exact: bool) -> tuple[CallShape, CallShape] | None:
    """The two calls of the two-call render (the second one's positions relative to the end of
    the first one's arguments), or None when they cannot both be found."""
    first = _call_shape(g2, PROBE_CALL, given, parsers, exact=exact)
    if not first:
        return None
    second = _call_shape(g2[first.end :], PROBE_CALL_2, given[1:] + given, parsers, exact=exact)
    return (first, second) if second else None


def _split_calls(g1: str, g2: str | None, shape: CallShape, shapes) -> CallSplit:
    """Split the call turn's text around the calls: with two calls, what is between them is one
    call's close, the separator and the next one's opener; with one, the opener is all that
    leads up to the call and the close is the first markup after it."""
    lead, trail = g1[: shape.start], g1[shape.end :]
    if shapes:
        first, second = shapes
        between = g2[first.end : first.end + second.start]
        per_open, per_close, separator = _split_between_calls(between, lead, g2[first.end + second.end :])
    else:
        per_open, separator, between = lead, "", trail
        closing = tokens_in(trail)
        per_close = trail[: trail.find(closing[0]) + len(closing[0])] if closing else ""
    section_open = lead[: len(lead) - len(per_open)] if lead.endswith(per_open) else ""
    section_tokens = tokens_in(_less_prefix(trail, per_close))
    if shapes:
        # Markup a template writes after two calls only (a section close it forgets after one)
        # still ends the calls.
        after_both = g2[shapes[0].end + shapes[1].end :]
        section_tokens = _unique(section_tokens + tokens_in(_less_prefix(after_both, per_close)))
    return CallSplit(per_open, per_close, separator, section_open, section_tokens, between)


def _split_between_calls(between: str, lead: str, trail: str) -> tuple[str, str, str]:
    """(opener, close, separator) from the text between two calls: the opener is what it ends
    with that also leads up to the first call, the close what it starts with that also follows
    the last call; neither cuts a token, and what is left between them is the separator."""
    per_open = between[len(between) - _common_suffix(between, lead) :]
    close_end = _split_at_tokens(between, v.common_prefix_length(between, trail))
    per_close = between[:close_end]
    open_start = len(between) - len(per_open)
    for match in MARKUP_RE.finditer(between):
        if match.start() < open_start < match.end():
            open_start = match.end()  # the shared text starts inside a token: keep it whole
    per_open = between[max(open_start, close_end) :] if per_open else per_open
    if len(per_open) + len(per_close) > len(between):
        per_open = between[len(per_close) :]
    return per_open, per_close, between[len(per_close) : len(between) - len(per_open)]


def _less_prefix(text: str, prefix: str) -> str:
    return text[len(prefix) :] if text.startswith(prefix) else text


def _block_start(section_open: str, reasoning) -> tuple[str, str]:
    """Where calls listed without an opener of their own start: after the section's opener, or
    where the turn starts. (pattern, description)"""
    if section_open.strip():
        return r"\s*" + literal_pattern(section_open.strip()) + r"\s*", repr(section_open.strip())
    return _turn_start(reasoning) + r"\s*", "the start of the turn"


def _call_open_pattern(g1: str, shape: CallShape, split: CallSplit, reasoning) -> str:
    """The open pattern of a call with an opener of its own (the separator and the section's
    opener may come before it), or, without one, of a call only where the turn starts."""
    pattern = r"\s*"
    if split.separator.strip():
        pattern += "(?:" + literal_pattern(split.separator.strip()) + r")?\s*"
    if split.section_open.strip():
        pattern += "(?:" + literal_pattern(split.section_open.strip()) + r")?\s*"
    if split.per_open.strip():
        return pattern + literal_pattern(split.per_open.strip()) + shape.open_pattern
    if shape.open_pattern == "":
        # No opener at all (Llama 3 writes the JSON bare): a call only where the turn starts.
        start_text = g1[shape.start : g1.find('"', shape.start) + 1 or shape.start + 1]
        return _turn_start(reasoning) + r"\s*(?=" + literal_pattern(start_text) + ")"
    # A bare name before the arguments: only where the turn starts, and only when the arguments
    # follow, or every word of an answer would open a call.
    return _turn_start(reasoning) + r"\s*" + shape.open_pattern + "(?=" + re.escape(g1[shape.content_span[0]]) + ")"


def _call_close(split: CallSplit) -> dict:
    """A call's close: its own close, else the next call's opener or the section's close, else
    the section's close alone."""
    per_open, per_close = split.per_open.strip(), split.per_close.strip()
    if per_close:
        return {"close_pattern": r"\s*" + literal_pattern(per_close)}
    if per_open:
        ends = "|".join(re.escape(t) for t in split.section_tokens[:1])
        return {"close_pattern": "(?=" + literal_pattern(per_open) + ")" + (f"|{ends}" if ends else "")}
    if split.section_tokens:
        return {"close": split.section_tokens[0]}
    return {}


def _mark_guessed(result: Inference, rendered: str) -> None:
    """The call field was read off a render whose argument values the template alters: say so."""
    for part in reversed(result.parts):
        if part.name == "tool_calls":
            part.status = "guessed"
            part.detail += (
                f"; the chat template alters the argument values it writes ({rendered[:100]!r}), so the field "
                "reads the names and keys in the syntax shown and the values as the model writes them"
            )
            return


def _call_field(delimiters: dict[str, str], shape: CallShape) -> dict[str, Any]:
    """The tool-call field: its delimiters, then one call per region read as the shape says."""
    field: dict[str, Any] = {**delimiters, "repeats": True, "content": shape.content}
    if shape.content_args:
        field["content_args"] = shape.content_args
    field["transform"] = shape.transform
    return field


def _listed_in_section(
    g1: str, shape: CallShape, block: tuple[str, str], per_close: str, between: str, trail: str,
    section_tokens: list[str], result: Inference,
) -> tuple[dict, list[str]]:
    """Calls with no opener of their own, one after another inside a block (`<function_calls>`
    then `f(a='x')` on each line, or `<tool_calls>` then one JSON object per line) or where the
    turn starts: a call opens after the block's opener (`block`: its pattern and a description),
    or right after the call before it and the separator; it closes where the separator and the
    next call, or the block's close, follow it. Returns the field and the markers that close the
    content (the block's close, with any text before its token)."""
    own_close = per_close.rstrip()
    separator = between[len(own_close) :] if between.startswith(own_close) else between
    if separator.strip():
        gap = r"\s*" + literal_pattern(separator.strip()) + r"\s*"  # a comma, say
    else:
        gap = r"[ \t]*\n\s*" if "\n" in separator else r"\s*"
    lead_in = g1[shape.start : shape.content_span[0]]
    if shape.open_pattern:
        # The name (and id) captured, then what leads to the arguments; a next call is any name
        # followed by that lead-in.
        own_open = shape.open_pattern
        name = PROBE_CALL["function"]["name"]
        after_name = lead_in[len(name) :] if lead_in.startswith(name) else lead_in[-1:]
        next_call = r"[A-Za-z_][\w.\-]*" + literal_pattern(after_name)
        if not after_name:
            # The arguments right after the name (`get_weather{...}`): a name only where they follow,
            # or every word of an answer would open a call.
            arguments_start = "(?=" + re.escape(g1[shape.content_span[0]]) + ")"
            own_open += arguments_start
            next_call += arguments_start
    else:
        # A JSON object told by its first key (`{"name":`).
        first_key = re.match(r'\{\s*"[^"\\]+"\s*:', g1[shape.start :])
        next_call = literal_pattern(first_key.group()) if first_key else r"\{"
        own_open = "(?=" + next_call + ")"
    # The block's close with what the template writes before its token (a code fence, say).
    after_calls = trail[len(own_close) :] if trail.startswith(own_close) else trail
    block_close = ""
    if section_tokens:
        block_close = after_calls[: after_calls.find(section_tokens[0]) + len(section_tokens[0])].strip()
    last_char = (g1[shape.start : shape.end] + own_close)[-1]
    ends = [gap + next_call] + ([r"\s*" + literal_pattern(block_close)] if block_close else [])
    delimiters = {
        "open_pattern": "(?:" + block[0] + "|(?<=" + re.escape(last_char) + ")" + gap + ")" + own_open,
        "close_pattern": literal_pattern(own_close) + "(?=" + "|".join(ends) + ")",
    }
    field = _call_field(delimiters, shape)
    result.note(
        "tool_calls", "derived",
        f"calls listed after {block[1]}" + (f", up to {block_close!r}" if block_close else "")
        + f", one after another separated by {separator!r}, each written "
        f"{lead_in.strip().replace(PROBE_CALL['function']['name'], 'NAME') + '...' + own_close!r}, "
        f"arguments as {shape.content}" + (f" {shape.content_args}" if shape.content_args else ""),
    )
    return field, _unique([block_close] + section_tokens)


# ---- validation and the command line ----------------------------------------------------------------


def validate(template: dict) -> None:
    """The interpreter's own validator, then rtcompile's (both must accept what infer writes)."""
    from transformers.utils.chat_parsing.response_templates import load_response_template

    from rtcompile import frontend

    load_response_template(template)
    frontend.lower(template)


def cli(argv: list[str]) -> int:
    """python -m rtcompile infer CHAT_TEMPLATE|TOKENIZER_DIR [-o template.json] [--var NAME=VALUE]..."""
    from rtcompile.arguments import ArgumentParser

    from .chat_render import ChatTemplateError, load_chat_template

    parser = ArgumentParser(
        prog="python -m rtcompile infer",
        description="Derive a response template from a chat template by rendering probes, then verify it.",
    )
    parser.add_argument("chat_template", metavar="CHAT_TEMPLATE|TOKENIZER_DIR")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the template here (default: stdout)")
    v.add_chat_template_arguments(parser)
    args = parser.parse_args(argv)
    try:
        variables = v.read_variables(args.var)
        chat_template = load_chat_template(args.chat_template, args.template_name)
    except (ChatTemplateError, ValueError, OSError) as e:
        raise UsageError(str(e)) from None
    renderer = ChatRenderer(chat_template, variables, **({"timeout": args.timeout} if args.timeout else {}))
    try:
        try:
            inference = infer(renderer)
        except RenderAborted as e:
            raise UsageError(v.aborted_message(args.chat_template, e)) from None
        except RenderError as e:
            raise UsageError(f"{args.chat_template}: {e}") from None
        try:
            validate(inference.template)
        except (ValueError, TypeError) as e:
            inference.note("template", "invalid", f"the validator rejects the inferred template: {e}")
            print(inference.format_text(), file=sys.stderr)
            return 2
        text = json.dumps(inference.template, indent=2, ensure_ascii=False) + "\n"
        if args.output:
            from rtcompile.cache import FileSystem

            FileSystem().write_atomic(Path(args.output), text)
        try:
            report = v.verify(
                inference.template, renderer, variables=variables, examples=args.examples,
                template_label=args.output or "<inferred>",
                parsers=v.PARSERS if args.interpreter else ("rtcompile",),
            )
        except RenderAborted as e:
            raise UsageError(v.aborted_message(args.chat_template, e)) from None
    finally:
        renderer.close()
    if args.json:
        print(json.dumps({"template": inference.template, "parts": [p.to_json() for p in inference.parts],
                          "verify": report.to_json()}, indent=2, ensure_ascii=False))
    else:
        if not args.output:
            print(text, end="")
        print(inference.format_text(), file=sys.stderr if not args.output else sys.stdout)
        print(report.format_text(), file=sys.stderr if not args.output else sys.stdout)
    return 0 if report.ok else 1

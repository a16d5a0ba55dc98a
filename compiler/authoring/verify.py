"""Prove a response template against a model's chat template by round trip.

For each case (a conversation ending in an assistant message), the chat template renders the
conversation twice: up to the generation prompt (the prompt the model sees) and with the finished
assistant turn. What the finished render adds after the prompt, up to the turn's end, is what the
model would have generated. The response template must parse that text back into the message that
was rendered: once whole (`rtcompile.parse_response`) and once streamed in small chunks
(`rtcompile.ResponseParser`).

Whatever the cases show, the start anchor is checked in realistic prompts (`check_start_anchor`):
the last message saying nothing, one word or several lines, in the generation prompt and in the
conversation as it goes on. Where the anchor is missing the parser reads the whole prompt as the
answer; the report fails then, with one line that says so, even when no case is round-trippable.

A case the chat template itself cannot round-trip is reported as such, never as a failure of the
response template. That is detected by rendering, not by knowing the model family:

- the finished turn does not start with the generation prompt (the prompt pre-writes something
  the finished turn does not contain, or the history is rendered differently), and is not the
  history's render with the turn inserted either (`render_turn` takes a turn the prompt shows
  instructions around: after the history, inside the generation prompt, before the history), nor
  the history's render continued where the history already opens the turn (`_reopened_turn`);
- a part of the message is missing from the rendered turn (reasoning of a turn the template treats
  as history, content beside tool calls, calls beyond the first, tool calls at all);
- the template raises on the conversation (one call per turn only, alternation rules, ...).

How a chat template wants a message spelled (reasoning as `reasoning_content`, `reasoning`, a
thinking content chunk or a tool plan; arguments as a dict or a JSON string; empty content absent,
None or ""; call ids) is also found by rendering: `discover_conventions` tries each spelling and
keeps the first one whose render shows what was put in. Before that, `accommodate` finds what a
chat template needs that a bare conversation lacks (a variable a tokenizer or server would pass,
a system message, another spelling of the tools) by trying alternatives until it renders, and
says what it tried.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex as re

from rtcompile.arguments import UsageError

from .chat_render import ChatRenderer, ChatTemplate, RenderAborted, RenderError, RenderTimeout

PASSED, FAILED, UNRENDERABLE = "passed", "failed", "not round-trippable"
DEFAULT_EXAMPLES = 12
STREAM_CHUNKS = (1, 3, 2, 5, 1, 4)

# Token-like pieces of a chat template's markup, for the look-alike text of generated cases and
# for finding where a turn ends: <|x|>, <x>, </x>, <x|>, <|x>, [X], [/X], <｜x｜>.
TOKEN_RE = re.compile(
    r"<\|[^|<>\s]{1,40}\|>|</?[A-Za-z_][\w:.\-]{0,40}\|?>|<\|[A-Za-z_][\w.\-]{0,40}>"
    r"|\[/?[A-Z][A-Z_]{1,40}\]|<｜[^｜<>]{1,40}｜>"
)
# Markup more broadly: also tags and brackets with attributes or other marks inside.
MARKUP_RE = re.compile(TOKEN_RE.pattern + r"|<[^<>\n]{1,80}>|\[[^\[\]\n]{1,80}\]")
_TOKEN_AT_END = re.compile(r"(?:" + MARKUP_RE.pattern + r")\Z")
_TOKEN_AT_START = re.compile(r"\s*(" + TOKEN_RE.pattern + r")")


# ---- messages ------------------------------------------------------------------------------------


def function_call(name: str, arguments: dict) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _schema_for(value: Any) -> dict:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, list):
        return {"type": "array"}
    if isinstance(value, dict):
        return {"type": "object"}
    return {"type": "string"}


def tools_for(messages: list[dict]) -> list[dict]:
    """Function schemas for every call in the conversation, typed from the argument values (the
    parser needs them to coerce arguments that a format writes as bare text)."""
    tools: dict[str, dict] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call["function"]
            properties = tools[function["name"]] = tools.get(function["name"], {})
            for key, value in function["arguments"].items():
                properties.setdefault(key, _schema_for(value))
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"The {name} tool.",
                "parameters": {"type": "object", "properties": properties, "required": sorted(properties)},
            },
        }
        for name, properties in tools.items()
    ]


@dataclass
class Case:
    id: str
    description: str
    history: list[dict]  # canonical messages before the rendered assistant turn
    message: dict  # the canonical assistant message: role, content, reasoning_content, tool_calls


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


WEATHER = function_call("get_weather", {"city": "Paris", "unit": "celsius"})
FORECAST = function_call("get_forecast", {"city": "Tokyo", "days": 3})
TOOL_RESULT_TEXT = '{"temperature": 21, "sky": "clear"}'


def fixed_cases() -> list[Case]:
    question = _user("What is the weather in Paris? Answer briefly.")
    call_turn = {"role": "assistant", "tool_calls": [copy.deepcopy(WEATHER)]}
    result = {"role": "tool", "name": "get_weather", "content": TOOL_RESULT_TEXT}
    earlier = {"role": "assistant", "content": "Hello! What would you like to know?"}
    return [
        Case("answer", "a plain answer", [question], {"role": "assistant", "content": "It is sunny in Paris."}),
        Case(
            "reasoning_answer",
            "reasoning, then an answer",
            [question],
            {
                "role": "assistant",
                "reasoning_content": "The user wants the weather.\nI know it: sunny.",
                "content": "It is sunny in Paris.",
            },
        ),
        Case("one_call", "one tool call", [question], {"role": "assistant", "tool_calls": [copy.deepcopy(WEATHER)]}),
        Case(
            "reasoning_call",
            "reasoning, then a tool call",
            [question],
            {
                "role": "assistant",
                "reasoning_content": "I need live data, so I call the weather tool.",
                "tool_calls": [copy.deepcopy(WEATHER)],
            },
        ),
        Case(
            "parallel_calls",
            "two tool calls in one turn",
            [question],
            {"role": "assistant", "tool_calls": [copy.deepcopy(WEATHER), copy.deepcopy(FORECAST)]},
        ),
        Case(
            "content_call",
            "content beside a tool call",
            [question],
            {"role": "assistant", "content": "Let me check the weather.", "tool_calls": [copy.deepcopy(WEATHER)]},
        ),
        Case(
            "answer_after_tool_result",
            "an answer after a tool result",
            [question, call_turn, result],
            {"role": "assistant", "content": "It is 21 degrees and clear in Paris."},
        ),
        Case(
            "answer_multi_turn",
            "an answer after an earlier exchange",
            [_user("Hi there."), earlier, question],
            {"role": "assistant", "content": "Sunny, 21 degrees."},
        ),
    ]


# ---- what the chat template needs beyond the conversation ----------------------------------------

# Fixed, so renders (and the templates derived from them) are deterministic.
PLACEHOLDER_DATE = "26 Jul 2024"
DEFAULT_SYSTEM_MESSAGE = "You are a helpful assistant."
_UNDEFINED_NAME = re.compile(r"'(\w+)' is undefined")
_MAX_ACCOMMODATIONS = 8


def _candidate_values(name: str) -> list[Any]:
    """Values to try for a variable the chat template reads but nobody passed, most plausible
    first: a special token's conventional text, a date for date-like names, else an empty string,
    list, mapping, or false."""
    lowered = name.lower()
    if lowered.endswith("_token"):
        conventional = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
        return [conventional.get(lowered, f"<{lowered[: -len('_token')]}>"), ""]
    if "date" in lowered or "time" in lowered or lowered in ("today", "now"):
        return [PLACEHOLDER_DATE, ""]
    return ["", [], {}, False]


def _render_checks(renderer: ChatRenderer):
    """The renders every case needs, in order: one question's prompt and a finished answer,
    without tools and then with them, as (label, with tools, render)."""
    question = [_user("What is the weather in Paris?")]
    answer = {"role": "assistant", "content": "It is sunny."}
    call = function_call("probe_lookup", {"probe_city": "Zanzibarville"})
    tools = tools_for([{"role": "assistant", "tool_calls": [call]}])
    conversation = to_chat_conversation(question, None, Conventions())
    finished = to_chat_conversation(question, answer, Conventions())
    return [
        ("a question", False, lambda: renderer.render(conversation, tools=[], add_generation_prompt=True)),
        ("an answer", False, lambda: renderer.render(finished, tools=[], add_generation_prompt=False)),
        ("a question with tools", True,
         lambda: renderer.render(conversation, tools=tools, add_generation_prompt=True)),
        ("an answer with tools", True, lambda: renderer.render(finished, tools=tools, add_generation_prompt=False)),
    ]


def _first_failure(renderer: ChatRenderer) -> tuple[int, str] | None:
    """(index, error) of the first check that does not render, or None when all render."""
    for index, (_, _, render) in enumerate(_render_checks(renderer)):
        try:
            render()
        except RenderError as e:
            return index, str(e)
    return None


def question_refused(renderer: ChatRenderer) -> str | None:
    """The error when the chat template renders one question neither without tools nor with
    them (there is nothing to verify or infer then); None when it renders one."""
    errors = []
    for label, _, render in _render_checks(renderer):
        if label.startswith("a question"):
            try:
                render()
                return None
            except RenderError as e:
                errors.append(str(e))
    return errors[0]


def accommodate(renderer: ChatRenderer) -> list[str]:
    """Make `renderer` render what every case needs, when the chat template asks for more than a
    conversation: a variable nobody passed (supplied from its name: a special token, a date
    string, an empty value), a system message (put in front of every conversation), or another
    spelling of the tools (bare function schemas; a description for every parameter). Each
    alternative is kept only when the renders get further with it.
    Returns report lines: what was applied (by this call or an earlier one: the renderer keeps
    them in `accommodations`), and what was tried when nothing helped."""
    notes = renderer.accommodations  # what an earlier call applied, reported again
    tried: list[str] = []
    failure = _first_failure(renderer)
    for _ in range(_MAX_ACCOMMODATIONS):
        if failure is None:
            break
        index, error = failure
        label, with_tools, _ = _render_checks(renderer)[index]
        undefined = _UNDEFINED_NAME.search(error)
        attempts: list[tuple[str, tuple]] = []
        if undefined and undefined.group(1) not in renderer.variables:
            name = undefined.group(1)
            attempts = [(f"{name}={value!r}", ("variable", name, value)) for value in _candidate_values(name)]
        else:
            if renderer.system_message is None:
                system = ("system", DEFAULT_SYSTEM_MESSAGE)
                attempts.append(("a system message in front of the conversation", system))
            if not renderer.bare_tools and with_tools:
                attempts.append(("the tools as bare function schemas", ("bare_tools", True)))
            if not renderer.described_tools and with_tools:
                attempts.append(("the tools with a description for every parameter", ("described_tools", True)))
        chosen = None
        for description, change in attempts:
            undo = _apply(renderer, change)
            after = _first_failure(renderer)
            if _got_further(after, failure):
                chosen = description
                break
            undo()
            tried.append(description)
        if chosen is None:
            break  # no alternative gets the renders further
        notes.append(f"rendered with {chosen} (without it, rendering {label} fails: {error})")
        failure = after
    if failure is not None:
        index, error = failure
        return notes + [
            f"rendering {_render_checks(renderer)[index][0]} fails: {error}"
            + (f" (tried: {'; '.join(tried)})" if tried else " (no alternative applies)")
        ]
    return list(notes)


def _got_further(after: tuple[int, str] | None, before: tuple[int, str]) -> bool:
    """Whether the renders now fail on a later check (or not at all), or on the same check with
    another variable missing; an alternative that only trades one error for another is dropped
    (a variable of the wrong type, say, where the next candidate value may fit)."""
    if after is None or after[0] > before[0]:
        return True
    if after[0] < before[0]:
        return False
    missing_before, missing_after = _UNDEFINED_NAME.search(before[1]), _UNDEFINED_NAME.search(after[1])
    if missing_before:
        return bool(missing_after) and missing_after.group(1) != missing_before.group(1)
    return after[1] != before[1]


def _apply(renderer: ChatRenderer, change: tuple) -> Any:
    """Apply one accommodation to `renderer`; returns a function that takes it back."""
    kind = change[0]
    if kind == "variable":
        _, name, value = change
        renderer.variables[name] = value
        return lambda: renderer.variables.pop(name, None)
    if kind == "system":
        renderer.system_message = change[1]
        return lambda: setattr(renderer, "system_message", None)
    setattr(renderer, kind, True)  # bare_tools, described_tools
    return lambda: setattr(renderer, kind, False)


# ---- how the chat template wants messages spelled ------------------------------------------------

REASONING_SPELLINGS = ("reasoning_content", "reasoning", "thinking", "thinking_chunk", "tool_plan")


@dataclass(frozen=True)
class Conventions:
    arguments_as: str = "dict"  # "dict" or "json" (a JSON string)
    empty_content: str = "absent"  # how a call turn without content is written: absent, none, empty
    id_style: str = "functions"  # "functions" (functions.NAME:INDEX) or "nine" (9 alphanumerics)
    # The reasoning spelling the template renders, for answer turns and for call turns (None: never).
    reasoning_answer: str | None = "reasoning_content"
    reasoning_call: str | None = "reasoning_content"


def call_id(conventions: Conventions, number: int, index: int, name: str) -> str:
    if conventions.id_style == "functions":
        return f"functions.{name}:{index}"
    return f"callid{number % 10}{index:02d}"  # Mistral's templates insist on exactly 9 characters


def to_chat_message(message: dict, number: int, conventions: Conventions) -> dict:
    """A canonical message in the spelling the chat template reads. `number` tells the messages of
    one conversation apart, so call ids never clash."""
    if message["role"] != "assistant":
        return copy.deepcopy(message)
    out: dict[str, Any] = {"role": "assistant"}
    content = message.get("content")
    calls = message.get("tool_calls") or []
    reasoning = message.get("reasoning_content")
    spelling = conventions.reasoning_call if calls else conventions.reasoning_answer
    if content:
        out["content"] = content
    elif calls:
        if conventions.empty_content == "none":
            out["content"] = None
        elif conventions.empty_content == "empty":
            out["content"] = ""
    else:
        out["content"] = ""
    if reasoning is not None and spelling is not None:
        if spelling == "thinking_chunk":
            chunks = [{"type": "thinking", "thinking": reasoning}]
            if content:
                chunks.append({"type": "text", "text": content})
            out["content"] = chunks
        else:
            out[spelling] = reasoning
    if calls:
        out["tool_calls"] = []
        for index, call in enumerate(calls):
            function = call["function"]
            arguments = function["arguments"]
            if conventions.arguments_as == "json":
                arguments = json.dumps(arguments, ensure_ascii=False)
            out["tool_calls"].append(
                {
                    "id": call_id(conventions, number, index, function["name"]),
                    "type": "function",
                    "function": {"name": function["name"], "arguments": arguments},
                }
            )
    return out


def to_chat_conversation(history: list[dict], message: dict | None, conventions: Conventions) -> list[dict]:
    """History and message in the chat template's spelling; a tool result answers the call before it."""
    out = []
    last_calls: list[dict] = []
    number = 0
    for item in history + ([message] if message is not None else []):
        if item["role"] == "tool":
            result = copy.deepcopy(item)
            if last_calls:
                result["tool_call_id"] = last_calls[0]["id"]
                result["name"] = last_calls[0]["function"]["name"]
            out.append(result)
            continue
        number += 1
        chat = to_chat_message(item, number if item is not message else 9, conventions)
        if item["role"] == "assistant":
            last_calls = chat.get("tool_calls", [])
        out.append(chat)
    return out


def common_prefix_length(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    index = 0
    while index < limit and a[index] == b[index]:
        index += 1
    return index


def _turn_text(renderer: ChatRenderer, history: list[dict], message: dict, conventions: Conventions, tools) -> str:
    """The finished turn as rendered, from where it departs from the generation prompt."""
    prompt = renderer.render(to_chat_conversation(history, None, conventions), tools=tools, add_generation_prompt=True)
    full = renderer.render(to_chat_conversation(history, message, conventions), tools=tools, add_generation_prompt=False)
    return full[common_prefix_length(prompt, full) :]


_CONVENTION_QUESTION = [_user("What is the weather in Paris?")]
_CONVENTION_CALL = function_call("probe_lookup", {"probe_city": "Zanzibarville", "probe_days": 7})
_CONVENTION_REASONING = "Pondering the probe question carefully."


def discover_conventions(renderer: ChatRenderer) -> tuple[Conventions, list[str]]:
    """The first spelling of each message part whose render shows that part (see the module doc),
    once `accommodate` has made the chat template render; its report lines come first."""
    notes = accommodate(renderer)
    tools = tools_for([{"role": "assistant", "tool_calls": [_CONVENTION_CALL]}])
    chosen = _call_spelling(renderer, tools)
    if chosen is None:
        notes.append("no spelling of a tool call is rendered: the chat template renders no tool calls")
        # A history holding a call (before a tool result) must still render: the first spelling
        # the template accepts at all.
        chosen = _call_spelling(renderer, tools, shown=False) or Conventions()
    answer_spelling = _reasoning_spelling(renderer, chosen, tools, {"content": "Probe answer."})
    call_spelling = _reasoning_spelling(renderer, chosen, tools, {"tool_calls": [_CONVENTION_CALL]})
    conventions = Conventions(
        chosen.arguments_as, chosen.empty_content, chosen.id_style, answer_spelling, call_spelling
    )
    if answer_spelling is None and call_spelling is None:
        notes.append("the chat template never renders reasoning in a finished turn")
    elif answer_spelling is not None and _drops_earlier_reasoning(renderer, conventions):
        notes.append("the chat template drops the reasoning of earlier turns from the history")
    return conventions, notes


def _call_spelling(renderer: ChatRenderer, tools, shown: bool = True) -> Conventions | None:
    """The first spelling of a call turn (arguments as a dict or JSON, id style, empty content)
    whose render shows the call's name and values; with `shown` false, the first that renders."""
    call_message = {"role": "assistant", "tool_calls": [_CONVENTION_CALL]}
    # A dict printed as its Python repr shows the values too, but no model writes that.
    repr_of_arguments = str(_CONVENTION_CALL["function"]["arguments"])
    for arguments_as, id_style, empty_content in itertools.product(
        ("dict", "json"), ("functions", "nine"), ("absent", "none", "empty")
    ):
        conventions = Conventions(arguments_as=arguments_as, empty_content=empty_content, id_style=id_style)
        try:
            turn = _turn_text(renderer, _CONVENTION_QUESTION, call_message, conventions, tools)
        except RenderError:
            continue
        if not shown or (
            "probe_lookup" in turn and "Zanzibarville" in turn and "None" not in turn and repr_of_arguments not in turn
        ):
            return conventions
    return None


def _reasoning_spelling(renderer: ChatRenderer, chosen: Conventions, tools, rest: dict) -> str | None:
    """The first reasoning spelling whose render of a turn with reasoning and `rest` (an answer,
    or calls) shows the reasoning; None when none does."""
    message = {"role": "assistant", "reasoning_content": _CONVENTION_REASONING, **rest}
    for spelling in REASONING_SPELLINGS:
        if spelling == "tool_plan" and "tool_calls" not in rest:
            continue
        attempt = Conventions(chosen.arguments_as, chosen.empty_content, chosen.id_style, spelling, spelling)
        try:
            turn = _turn_text(renderer, _CONVENTION_QUESTION, message, attempt, tools)
        except RenderError:
            continue
        # A list content rendered as its Python repr shows the text too: not a real spelling.
        if _CONVENTION_REASONING in turn and "'thinking'" not in turn and '"thinking"' not in turn:
            return spelling
    return None


def _drops_earlier_reasoning(renderer: ChatRenderer, conventions: Conventions) -> bool:
    """Whether an earlier turn's reasoning is missing from the history a later question renders."""
    earlier = [
        _CONVENTION_QUESTION[0],
        {"role": "assistant", "reasoning_content": _CONVENTION_REASONING, "content": "Probe answer."},
        _user("And tomorrow?"),
    ]
    try:
        history = renderer.render(to_chat_conversation(earlier, None, conventions), add_generation_prompt=True)
    except RenderError:
        return False
    return _CONVENTION_REASONING not in history


# ---- splitting a rendered conversation into prompt and generation --------------------------------


@dataclass
class RenderedTurn:
    prefix: str | None = None
    generation: str | None = None
    unrenderable: str | None = None  # why the chat template cannot round-trip this case
    expected: dict | None = None
    given_ids: list[str] = field(default_factory=list)


def _next_message(message: dict, conventions: Conventions) -> dict:
    """What follows the turn in a longer conversation: a tool result after calls, else a user turn."""
    if message.get("tool_calls"):
        return {"role": "tool", "name": message["tool_calls"][0]["function"]["name"], "content": "Continuation result."}
    return _user("Continuation question.")


def _trim_to_token(text: str, diverged: bool) -> str:
    """Where two renders diverge inside a token (`<|USER_TOKEN|>` vs `<|CHATBOT_TOKEN|>`), back off
    to the end of the last whole token; then drop trailing whitespace (never generated)."""
    if diverged:
        ends = [m.end() for m in MARKUP_RE.finditer(text)]
        stripped = text.rstrip()
        if ends and not _TOKEN_AT_END.search(stripped):
            text = text[: ends[-1]]
    return text.rstrip()


def render_turn(renderer: ChatRenderer, case: Case, conventions: Conventions, tools: list) -> RenderedTurn:
    """The case's finished turn as the model writes it, cut from the renders (module doc). The
    turn is what the finished conversation adds after the generation prompt (less whitespace the
    prompt ends with and the finished turn does not have there); or, where the chat template shows
    the model text the finished conversation does not hold at that place (`_inserted_turn`), what
    the finished turn inserts into the history, less the opener it starts with; or, where the
    history already opens the turn and the generation prompt opens it again (`_reopened_turn`),
    what the finished turn adds to the history, parsed after the history. Text a render holds
    whatever the message is never becomes part of the turn."""
    history = to_chat_conversation(case.history, None, conventions)
    conversation = to_chat_conversation(case.history, case.message, conventions)
    try:
        prompt = renderer.render(history, tools=tools, add_generation_prompt=True)
        full = renderer.render(conversation, tools=tools, add_generation_prompt=False)
    except RenderError as e:
        return RenderedTurn(unrenderable=f"the chat template fails on this conversation ({e})")
    located = _locate_turn(renderer, history, tools, prompt, full)
    if isinstance(located, str):
        return RenderedTurn(unrenderable=located)
    start, end, prefix = located
    generation = _cut_at_turn_end(renderer, conversation, conventions, tools, case.message, full, start, end)
    missing = _parts_missing(case.message, generation, conventions)
    if missing:
        return RenderedTurn(unrenderable=missing)
    if _content_renders_as_reasoning(renderer, case, conventions, tools, full):
        return RenderedTurn(unrenderable="the chat template renders content beside tool calls exactly like reasoning")
    ids = [call["id"] for call in conversation[-1].get("tool_calls", [])]
    return RenderedTurn(prefix=prefix, generation=generation, expected=copy.deepcopy(case.message), given_ids=ids)


def _locate_turn(
    renderer: ChatRenderer, history: list[dict], tools, prompt: str, full: str
) -> tuple[int, int, str] | str:
    """(start, end, the prompt the turn follows) of the finished turn in `full`, or why the chat
    template cannot round-trip it."""
    if full.startswith(prompt):
        return len(prompt), len(full), prompt
    if prompt != prompt.rstrip() and full.startswith(prompt.rstrip()):
        # The prompt ends in whitespace the finished turn does not have at that place (template
        # layout after the generation prompt): the turn is what follows, less that whitespace.
        start = len(prompt.rstrip())
        while start < len(full) and full[start].isspace():
            start += 1
        return start, len(full), prompt
    try:
        base = renderer.render(history, tools=tools, add_generation_prompt=False)
    except RenderError:
        base = None
    inserted = _inserted_turn(base, prompt, full) if base is not None else None
    if inserted is not None:
        return (*inserted, prompt)
    if base is not None and _reopened_turn(base, prompt, full):
        return len(base), len(full), base
    at = common_prefix_length(prompt, full)
    return (
        "the finished turn is rendered differently from the generation prompt "
        f"(prompt continues {prompt[at:at + 40]!r}, finished turn {full[at:at + 40]!r})"
    )


def _reopened_turn(base: str, prompt: str, full: str) -> bool:
    """Whether the history's render already opens the assistant's turn and the generation prompt
    writes more before opening it again: an empty exchange after the user's turn (a published
    DeepSeek-V3.2 chat template writes `<｜User｜>question<｜Assistant｜><think>` for the question,
    then `<｜User｜>` "\\n" `<｜Assistant｜><think>` as its generation prompt). The finished
    conversation continues the history there, so the turn is what it adds to the history, and
    the prompt that turn was written after is the history's render."""
    if not prompt.startswith(base) or not full.startswith(base) or len(full) <= len(base):
        return False
    added = prompt[len(base) :]
    shared = 0
    while shared < min(len(base), len(added)) and base[-1 - shared] == added[-1 - shared]:
        shared += 1
    # Both end with the same markup (the assistant's header, a reasoning block it opens), not
    # just a stray character they happen to share; and the prompt writes more before it.
    return bool(MARKUP_RE.search(added, len(added) - shared)) and added[: len(added) - shared].strip() != ""


def _cut_at_turn_end(
    renderer: ChatRenderer, conversation: list[dict], conventions: Conventions, tools, message: dict,
    full: str, start: int, end: int,
) -> str:
    """The turn from `start`, up to where it ends: where a longer conversation's render parts from
    this one (what the template writes after the turn's end marker was never generated)."""
    rest = full[start:end]
    generation = rest.rstrip()
    try:
        longer = renderer.render(
            conversation + to_chat_conversation([], _next_message(conversation[-1], conventions), conventions),
            tools=tools,
            add_generation_prompt=False,
        )
    except RenderError:
        return generation
    if longer[:start] != full[:start]:
        return generation
    longer_rest = longer[start:]
    shared = min(common_prefix_length(rest, longer_rest), len(rest))
    cut = _trim_to_token(rest[:shared], diverged=shared < len(rest))
    if _parts_missing(message, cut) is not None:
        return generation
    if shared == len(rest) and not _ends_like_turns(renderer, tools):
        # No end-of-turn marker at all (GLM): the model stops at the next turn's opener.
        opener = _TOKEN_AT_START.match(longer_rest, len(rest))
        if opener:
            return cut + opener.group(1)
    return cut


def _content_renders_as_reasoning(
    renderer: ChatRenderer, case: Case, conventions: Conventions, tools, full: str
) -> bool:
    """Whether content beside calls renders exactly like reasoning (gpt-oss's analysis channel):
    then no parser can tell the two apart."""
    message = case.message
    if not (message.get("content") and message.get("tool_calls") and not message.get("reasoning_content")):
        return False
    as_reasoning = {k: v for k, v in message.items() if k != "content"}
    as_reasoning["reasoning_content"] = message["content"]
    try:
        other = renderer.render(
            to_chat_conversation(case.history, as_reasoning, conventions), tools=tools, add_generation_prompt=False
        )
    except RenderError:
        return False
    return other == full


def _inserted_turn(base: str, prompt: str, full: str) -> tuple[int, int] | None:
    """(start, end) of the finished turn in `full`, after the turn's opener, where the chat template
    shows the model something the finished conversation does not hold at that place (before the
    history, too: a system block written only for generation); None when `full` is not one of
    these two shapes:

    - text written after the history only (tool instructions after the last message): the
      finished conversation is the history's render with the turn inserted before that text, and
      the turn starts with the generation prompt;
    - text written in the generation prompt only, before the turn's opener (instructions, then
      the assistant header): the finished turn follows the history and starts with that opener."""
    if len(full) <= len(base):
        return None
    if not prompt.startswith(base):
        # Text the prompt shows before the history too (a system block written only for
        # generation): the history's render must still be where the prompt ends.
        at = prompt.rfind(base) if base else -1
        if at <= 0 or not full.startswith(base):
            return None
        prompt = prompt[at:]
    added = prompt[len(base) :]
    if added.strip() and full.startswith(base):
        finished = full[len(base) :]
        for at in range(len(added)):
            opener = added[at:]
            starts_cleanly = at == 0 or added[at - 1] == "\n" or bool(MARKUP_RE.match(added, at))
            if starts_cleanly and opener.strip() and finished.startswith(opener):
                return len(base) + len(opener), len(full)
        return None
    length = len(full) - len(base)
    # The insertion point is ambiguous by the text the turn's end shares with what follows it (the
    # next turn's opener): try each point back from where the renders part. The turn starts with
    # the generation prompt; a template that has none inserts it where no markup is cut.
    parted = common_prefix_length(base, full)
    for at in range(parted, max(-1, parted - max(len(added), 80) - 1), -1):
        if at >= len(base) or full[:at] != base[:at] or full[at + length :] != base[at:]:
            continue
        if added.strip() and full.startswith(added, at):
            return at + len(added), at + length
        if not added.strip() and not any(m.start() < at < m.end() for m in MARKUP_RE.finditer(base)):
            return at, at + length
    return None


def _ends_like_turns(renderer: ChatRenderer, tools) -> bool:
    """Whether a finished answer is followed by an end marker at all (GLM's is not: the model
    stops at the next turn's opener)."""
    words = "Marker probe answer."
    conversation = [_user("Marker probe question."), {"role": "assistant", "content": words}]
    try:
        text = renderer.render(conversation, tools=tools, add_generation_prompt=False)
    except RenderError:
        return True
    return words not in text or bool(text[text.rfind(words) + len(words) :].strip())


def _parts_missing(message: dict, generation: str, conventions: Conventions | None = None) -> str | None:
    reasoning = message.get("reasoning_content")
    if reasoning and reasoning not in generation:
        if conventions and (conventions.reasoning_answer or conventions.reasoning_call):
            return "the chat template drops this turn's reasoning (it renders reasoning only for some turns)"
        return "the chat template never renders reasoning"
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if content and content not in generation:
        if calls:
            return "the chat template drops the content beside tool calls"
        return "the chat template alters the content (it is not in the rendered turn verbatim)"
    names: dict[str, int] = {}
    for call in calls:
        names[call["function"]["name"]] = names.get(call["function"]["name"], 0) + 1
    for name, count in names.items():
        rendered = generation.count(name)
        if rendered == 0:
            return f"the chat template does not render the tool call {name!r}"
        if rendered < count:
            return f"the chat template renders {rendered} of {count} calls to {name!r}"
    return None


# ---- comparing ------------------------------------------------------------------------------------


def first_difference(expected: Any, actual: Any, path: str = "message") -> str | None:
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in expected:
            if key not in actual:
                return f"{path}.{key}: missing (expected {_short(expected[key])})"
            difference = first_difference(expected[key], actual[key], f"{path}.{key}")
            if difference:
                return difference
        for key in actual:
            if key not in expected:
                return f"{path}.{key}: unexpected {_short(actual[key])}"
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        for index, (a, b) in enumerate(zip(expected, actual)):
            difference = first_difference(a, b, f"{path}[{index}]")
            if difference:
                return difference
        if len(expected) != len(actual):
            return f"{path}: expected {len(expected)} items, got {len(actual)}"
        return None
    if type(expected) is not type(actual) or expected != actual:
        return f"{path}: expected {_short(expected)}, got {_short(actual)}"
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _comparable(parsed: dict, rendered: RenderedTurn) -> tuple[dict, dict]:
    """(expected, parsed) as they are compared. A parsed call id is checked where the chat
    template rendered the id it was given; where it renumbers or invents ids, the id the model
    wrote cannot be compared and is dropped."""
    expected, parsed = copy.deepcopy(rendered.expected), copy.deepcopy(parsed)
    expected_calls, parsed_calls = expected.get("tool_calls") or [], parsed.get("tool_calls")
    if isinstance(parsed_calls, list):
        for index, call in enumerate(parsed_calls):
            if not isinstance(call, dict) or "id" not in call:
                continue
            given = rendered.given_ids[index] if index < len(rendered.given_ids) else None
            if given is not None and given in rendered.generation and index < len(expected_calls):
                expected_calls[index] = {"id": given, **expected_calls[index]}
            else:
                del call["id"]
    return expected, parsed


PARSERS = ("rtcompile", "interpreter")


def _parser_api(parser: str):
    """(parse_response, ResponseParser) of rtcompile or of transformers' interpreter."""
    if parser == "interpreter":
        from transformers.utils import chat_parsing

        return chat_parsing.parse_response, chat_parsing.ResponseParser
    import rtcompile

    return rtcompile.parse_response, rtcompile.ResponseParser


def _parse_streamed(response_parser, template: dict, prefix: str, text: str, tools) -> dict:
    parser = response_parser(template, prefix, tools=tools)
    position = 0
    for size in itertools.cycle(STREAM_CHUNKS):
        if position >= len(text):
            break
        parser.feed(text[position : position + size])
        position += size
    message, _ = parser.finalize()
    return message


def check_case(template: dict, rendered: RenderedTurn, tools, parsers=("rtcompile",)) -> tuple[str, str | None]:
    """Parse the generation whole and streamed with each parser; the first difference fails it."""
    for parser in parsers:
        parse_response, response_parser = _parser_api(parser)
        label = "" if parsers == ("rtcompile",) else f"{parser}, "
        for mode in ("whole", "streamed"):
            try:
                if mode == "whole":
                    parsed = parse_response(rendered.generation, template, prefix=rendered.prefix, tools=tools)
                else:
                    parsed = _parse_streamed(response_parser, template, rendered.prefix, rendered.generation, tools)
            except Exception as e:  # the template's parse errors are what verify reports
                return FAILED, f"{label}{mode}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            expected, parsed = _comparable(parsed, rendered)
            difference = first_difference(expected, parsed)
            if difference:
                return FAILED, f"{label}{mode}: {difference}"
    return PASSED, None


# ---- generated cases -----------------------------------------------------------------------------


def lookalikes(renderer: ChatRenderer, conventions: Conventions) -> list[str]:
    """Token-like markup the chat template writes, each missing its last character, so generated
    text holds streaming parsers back without ever completing a delimiter."""
    pieces = set()
    for case in fixed_cases():
        tools = tools_for(case.history + [case.message])
        try:
            text = renderer.render(
                to_chat_conversation(case.history, case.message, conventions), tools=tools, add_generation_prompt=False
            )
        except (RenderError, RenderAborted):  # a case that hangs is reported where it is checked
            continue
        for match in TOKEN_RE.finditer(text):
            if len(match.group()) > 2:
                pieces.add(match.group()[:-1])
    return sorted(pieces)


def assistant_messages(pieces: list[str]):
    """A hypothesis strategy of canonical assistant messages: unicode, quotes, backslashes,
    braces and markup look-alikes in text; nested and typed arguments in calls."""
    from hypothesis import strategies as st

    words = st.sampled_from(
        ["Paris", "naïve café", "日本語", "🚀", '"quoted"', "it's", "back\\slash", "{braces: [1, 2]}",
         "tab\there", "line\nbreak", "a < b > c", "x=1, y='2'", "50%", "—", "<b>bold</b>", "null", "True"]
    )
    lookalike = st.sampled_from(pieces) if pieces else words
    free = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12)
    text = (
        st.lists(st.one_of(words, lookalike, free), min_size=1, max_size=6)
        .map(" ".join)
        .map(str.strip)
        .filter(bool)
    )
    keys = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
    scalars = st.one_of(
        text,
        st.integers(-10**6, 10**6),
        st.integers(-400, 400).map(lambda n: n / 4 + 0.125),  # exact in binary, never integral
        st.booleans(),
    )
    nested = st.recursive(
        st.one_of(text, st.integers(-1000, 1000), st.booleans()),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, min_size=1, max_size=3),
        max_leaves=6,
    )
    arguments = st.dictionaries(keys, st.one_of(scalars, nested), max_size=4)
    names = st.from_regex(r"[a-z][a-z_]{2,10}", fullmatch=True)

    @st.composite
    def calls(draw):
        count = draw(st.integers(1, 2))
        base = draw(names)
        return [function_call(f"{base}_{index}" if count > 1 else base, draw(arguments)) for index in range(count)]

    @st.composite
    def message(draw):
        shape = draw(st.sampled_from(["answer", "reasoning_answer", "calls", "content_calls", "reasoning_calls"]))
        out: dict[str, Any] = {"role": "assistant"}
        if shape.startswith("reasoning"):
            out["reasoning_content"] = draw(text)
        if shape in ("answer", "reasoning_answer", "content_calls"):
            out["content"] = draw(text)
        if shape.endswith("calls"):
            out["tool_calls"] = draw(calls())
        return out

    return message()


def generated_cases(count: int, seed_pieces: list[str], seed: int = 0) -> list[Case]:
    """`count` conversations drawn by hypothesis, deterministically (derandomized, no database)."""
    if count <= 0:
        return []
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    drawn: list[dict] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
        print_blob=False,
    )
    @given(st.data())
    def draw(data):
        drawn.append(data.draw(assistant_messages(seed_pieces)))

    draw()
    rng = random.Random(seed)
    question = _user("Please help with this request.")
    cases = []
    for index, message in enumerate(drawn[:count]):
        history = [question]
        if rng.random() < 0.25 and not message.get("tool_calls"):
            history = [question, {"role": "assistant", "tool_calls": [copy.deepcopy(WEATHER)]},
                       {"role": "tool", "name": "get_weather", "content": TOOL_RESULT_TEXT}]
        cases.append(Case(f"generated_{index:02d}", _describe(message), history, message))
    return cases


def _describe(message: dict) -> str:
    parts = [name for name in ("reasoning_content", "content") if message.get(name)]
    calls = message.get("tool_calls") or []
    if calls:
        parts.append(f"{len(calls)} call(s)")
    return "generated: " + ", ".join(parts)


# ---- the start anchor in realistic prompts -------------------------------------------------------

# What a user may write: nothing, one word, several lines. Each ends differently, so the text the
# renders share after it is the chat template's own, whatever the user wrote.
USER_MESSAGES = ("", "Kumquat", "Several lines:\nfirst\nsecond.")
ANCHOR_PROBE_REPLY = "Anchor probe reply."


def anchor_contexts(words: str) -> list[tuple[str, list[dict], list]]:
    """The conversations an answer follows, their last message saying `words`: after a question,
    after a question with tools offered, after a tool result. (description, history, tools)."""
    call = function_call("probe_lookup", {"probe_city": "Zanzibarville", "probe_days": 7})
    offered = tools_for([{"role": "assistant", "tool_calls": [call]}])
    after_tool = [
        _user("What is the weather in Paris?"),
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "name": "probe_lookup", "content": words},
    ]
    return [
        ("after the user's message", [_user(words)], []),
        ("after the user's message, with tools offered", [_user(words)], offered),
        ("after the tool result", after_tool, tools_for(after_tool)),
    ]


def realistic_prompts(
    renderer: ChatRenderer, conventions: Conventions, history: list[dict], tools
) -> list[tuple[str, str]]:
    """The prompts a turn after `history` is parsed after, as (name, text): the generation prompt
    (what a server sends), and the conversation's prompt (`conversation_prompt`). A render the
    template refuses is left out."""
    prompts = []
    try:
        conversation = to_chat_conversation(history, None, conventions)
        prompts.append(("the generation prompt", renderer.render(conversation, tools=tools, add_generation_prompt=True)))
    except RenderError:
        pass
    finished = conversation_prompt(renderer, conventions, history, tools)
    if finished is not None:
        prompts.append(("the conversation's prompt", finished))
    return prompts


def conversation_prompt(renderer: ChatRenderer, conventions: Conventions, history: list[dict], tools) -> str | None:
    """The conversation as it goes on after `history`, up to a reply: what the model saw before
    each of its turns in a finished conversation, and what the finished turn is parsed after where
    the generation prompt is not. None when the template refuses it or does not show the reply."""
    reply = {"role": "assistant", "content": ANCHOR_PROBE_REPLY}
    try:
        conversation = to_chat_conversation(history, reply, conventions)
        finished = renderer.render(conversation, tools=tools, add_generation_prompt=False)
    except RenderError:
        return None
    return finished[: finished.rfind(ANCHOR_PROBE_REPLY)] if ANCHOR_PROBE_REPLY in finished else None


@dataclass
class AnchorCheck:
    anchor: str  # the template's start anchor, as written
    checked: int = 0
    missing: list[str] = field(default_factory=list)  # where it is missing, one line each
    not_found: bool = False  # missing altogether somewhere (not only before the message)


def _anchor_text(template: dict) -> str:
    if "start_anchor_pattern" in template:
        return f"pattern {template['start_anchor_pattern']!r}"
    anchor = template.get("start_anchor")
    return repr(anchor) if isinstance(anchor, str) else " or ".join(repr(a) for a in anchor or [])


def check_start_anchor(template: dict, renderer: ChatRenderer, conventions: Conventions) -> AnchorCheck:
    """Whether the template's start anchor is found where the turn starts in every realistic
    prompt: after the last message's words (a question of no, one or several lines of words,
    with and without tools, or a tool result), in the generation prompt and in the conversation
    as it goes on. The parser reads from the anchor's last match; where it is missing the whole
    prompt is read as the answer (tool instructions and their example calls too), and where it is
    found only before the message, the message is. A render bound stops the check where it is."""
    from rtcompile import frontend

    check = AnchorCheck(_anchor_text(template))
    try:
        anchor_re = re.compile(frontend.lower(template).start_anchor.alternation, re.DOTALL)
    except (ValueError, TypeError, re.error) as e:  # an invalid template: no anchor to look for
        check.checked, check.not_found = 1, True
        check.missing.append(f"every prompt (the template is invalid: {e})")
        return check
    try:
        for words in USER_MESSAGES:
            for description, history, tools in anchor_contexts(words):
                for name, text in realistic_prompts(renderer, conventions, history, tools):
                    check.checked += 1
                    problem = _anchor_problem(anchor_re, text, words)
                    if problem:
                        check.not_found = check.not_found or problem == "not found"
                        check.missing.append(f"{name} {description} {_short(words, 24)} ({problem})")
    except RenderAborted:
        pass  # the cases report a template that exhausts a render bound
    return check


def _anchor_problem(anchor_re, text: str, words: str) -> str | None:
    last_end = None
    for match in anchor_re.finditer(text):
        last_end = match.end()
    if last_end is None:
        return "not found"
    at = text.rfind(words) if words else -1
    if at >= 0 and last_end < at + len(words):
        return "found only before the message"
    return None


# ---- the report ----------------------------------------------------------------------------------


@dataclass
class CaseResult:
    id: str
    description: str
    status: str
    detail: str | None = None
    generation: str | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class VerifyReport:
    template: str
    chat_template: str
    variables: dict
    conventions: Conventions
    notes: list[str]
    results: list[CaseResult]
    anchor: AnchorCheck | None = None

    def count(self, status: str) -> int:
        return sum(1 for result in self.results if result.status == status)

    @property
    def anchor_problems(self) -> list[str]:
        return list(self.anchor.missing) if self.anchor else []

    @property
    def anchor_prompts_checked(self) -> int:
        return self.anchor.checked if self.anchor else 0

    @property
    def ok(self) -> bool:
        """No case failed, and the start anchor is found in every realistic prompt (a template
        whose anchor is missing there fails even when the chat template round-trips no case)."""
        return self.count(FAILED) == 0 and not self.anchor_problems

    def summary(self) -> str:
        text = (
            f"{self.count(PASSED)} passed, {self.count(FAILED)} failed, "
            f"{self.count(UNRENDERABLE)} not round-trippable by the chat template"
        )
        if self.anchor_problems:
            missing, checked = len(self.anchor_problems), self.anchor_prompts_checked
            text += f"; start anchor missing from {missing} of {checked} realistic prompts"
        return text

    def anchor_warning(self) -> str | None:
        """One line that says the start anchor is missing, what that does, and the first place."""
        if not self.anchor_problems:
            return None
        consequence = (
            "the parser reads the whole prompt as the answer" if self.anchor.not_found
            else "the parser reads the last message as part of the answer"
        )
        return (
            f"  FAIL  start anchor {self.anchor.anchor} is missing from {len(self.anchor_problems)} of "
            f"{self.anchor_prompts_checked} realistic prompts ({consequence}); first: {self.anchor_problems[0]}"
        )

    def to_json(self) -> dict:
        return {
            "template": self.template,
            "chat_template": self.chat_template,
            "variables": self.variables,
            "conventions": self.conventions.__dict__,
            "notes": self.notes,
            "ok": self.ok,
            "start_anchor": {
                "anchor": self.anchor.anchor if self.anchor else None,
                "checked": self.anchor_prompts_checked,
                "missing": self.anchor_problems,
            },
            "passed": self.count(PASSED),
            "failed": self.count(FAILED),
            "not_round_trippable": self.count(UNRENDERABLE),
            "cases": [result.to_json() for result in self.results],
        }

    def format_text(self) -> str:
        lines = [f"verify {self.template} against {self.chat_template}"]
        warning = self.anchor_warning()
        if warning:
            lines.append(warning)
        if self.variables:
            lines.append("  with " + ", ".join(f"{k}={v!r}" for k, v in sorted(self.variables.items())))
        for note in self.notes:
            lines.append(f"  note: {note}")
        marks = {PASSED: "PASS", FAILED: "FAIL", UNRENDERABLE: "SKIP"}
        width = max((len(r.id) for r in self.results), default=0)
        for result in self.results:
            line = f"  {marks[result.status]}  {result.id:<{width}}  {result.description}"
            if result.detail:
                line += f"\n        {'not round-trippable: ' if result.status == UNRENDERABLE else ''}{result.detail}"
            if result.status == FAILED and result.generation is not None:
                line += f"\n        generation: {_short(result.generation, 160)}"
            lines.append(line)
        lines.append(self.summary())
        return "\n".join(lines)


def verify(
    template: dict,
    chat_template: ChatTemplate | ChatRenderer,
    *,
    variables: dict | None = None,
    examples: int = DEFAULT_EXAMPLES,
    template_label: str = "<template>",
    timeout: float | None = None,
    parsers: tuple[str, ...] = ("rtcompile",),
) -> VerifyReport:
    """Round-trip `template` through `chat_template` (see the module doc). `parsers` may add
    transformers' "interpreter": a case then passes only when both parse it back. Raises
    `RenderError` when the chat template cannot render even one question (nothing to verify),
    and `RenderAborted` when a render bound stops it on more than one case."""
    owned = not isinstance(chat_template, ChatRenderer)
    renderer = ChatRenderer(chat_template, variables, **({"timeout": timeout} if timeout else {})) if owned else chat_template
    try:
        conventions, notes = discover_conventions(renderer)
        refusal = question_refused(renderer)
        if refusal:
            raise RenderError(f"the chat template cannot render a conversation of one user message: {refusal}")
        cases = fixed_cases()
        try:
            if examples > 0:
                cases += generated_cases(examples, lookalikes(renderer, conventions))
        except ImportError:
            notes.append("hypothesis is not installed: generated cases skipped (pip install 'rtcompile[verify]')")
        results = []
        aborted = 0
        for case in cases:
            tools = tools_for(case.history + [case.message])
            try:
                rendered = render_turn(renderer, case, conventions, tools)
            except RenderAborted as e:
                # One conversation that hangs the template (or exhausts a bound) is that case's
                # fault; a second one means the template does so on anything, and running into
                # the bound for every case helps nobody.
                aborted += 1
                if aborted > 1:
                    raise
                rendered = RenderedTurn(unrenderable=f"the chat template does not finish rendering this conversation ({e})")
            if rendered.unrenderable:
                results.append(CaseResult(case.id, case.description, UNRENDERABLE, rendered.unrenderable))
                continue
            status, detail = check_case(template, rendered, tools, parsers)
            results.append(CaseResult(case.id, case.description, status, detail, rendered.generation))
        return VerifyReport(
            template=template_label,
            chat_template=renderer.template.origin,
            variables=dict(variables or {}),
            conventions=conventions,
            notes=notes,
            results=results,
            anchor=check_start_anchor(template, renderer, conventions),
        )
    finally:
        if owned:
            renderer.close()


def parse_variable(text: str) -> tuple[str, Any]:
    """`--var NAME=VALUE`: VALUE is JSON when it parses (true, 3, "x", [..]), else the plain text."""
    name, sep, raw = text.partition("=")
    if not sep or not name.isidentifier():
        raise ValueError(f"--var expects NAME=VALUE, got {text!r}")
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return name, lowered == "true"
    try:
        return name, json.loads(raw)
    except json.JSONDecodeError:
        return name, raw


# ---- command line --------------------------------------------------------------------------------


def add_chat_template_arguments(parser) -> None:
    parser.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a chat-template variable, e.g. enable_thinking=false (JSON values; repeatable)",
    )
    parser.add_argument("--template-name", help="which of a tokenizer_config.json's named chat templates")
    parser.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES, help="generated cases (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per render (default 10)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--interpreter",
        action="store_true",
        help="also parse with transformers' interpreter: a case passes only when both parsers give the message back",
    )


def read_variables(pairs: list[str]) -> dict:
    return dict(parse_variable(pair) for pair in pairs)


def cli(argv: list[str]) -> int:
    """python -m rtcompile verify TEMPLATE --chat-template FILE|TOKENIZER_DIR [--var NAME=VALUE]..."""
    from rtcompile import api
    from rtcompile.arguments import ArgumentParser

    from .chat_render import ChatTemplateError, load_chat_template

    parser = ArgumentParser(
        prog="python -m rtcompile verify",
        description="Prove a response template against a chat template by round trip: render "
        "conversations, parse each rendered assistant turn back, compare; and check that the start anchor is "
        "found in realistic prompts. Exit 0 only when no case failed and the anchor is found everywhere.",
    )
    parser.add_argument("template", metavar="TEMPLATE", help="response template JSON, tokenizer dir or bundled name")
    parser.add_argument(
        "--chat-template",
        metavar="FILE|TOKENIZER_DIR",
        help="the chat template (default: TEMPLATE itself, when it is a tokenizer directory or config holding both)",
    )
    add_chat_template_arguments(parser)
    args = parser.parse_args(argv)
    try:
        variables = read_variables(args.var)
        template = api.read_template(args.template)
        if args.chat_template is None and not Path(args.template).exists():
            raise UsageError(
                f"{args.template} is a bundled template name: give the chat template to verify it against "
                "with --chat-template FILE|DIR (TEMPLATE stands alone only as a tokenizer directory holding "
                "both templates)"
            )
        chat_template = load_chat_template(args.chat_template or args.template, args.template_name)
        from rtcompile import frontend

        frontend.lower(template)  # a clear error for an invalid template before any render
    except (ChatTemplateError, ValueError, KeyError, OSError, TypeError) as e:
        raise UsageError(f"{e}") from None
    try:
        report = verify(
            template, chat_template, variables=variables, examples=args.examples,
            template_label=args.template, timeout=args.timeout,
            parsers=PARSERS if args.interpreter else ("rtcompile",),
        )
    except RenderAborted as e:
        raise UsageError(aborted_message(chat_template.origin, e)) from None
    except RenderError as e:
        raise UsageError(f"{chat_template.origin}: {e}") from None
    print(json.dumps(report.to_json(), indent=2, ensure_ascii=False) if args.json else report.format_text())
    return 0 if report.ok else 1


def aborted_message(origin: str, error: RenderAborted) -> str:
    """The one line for a chat template that a render bound stopped."""
    if isinstance(error, RenderTimeout):
        return f"{origin}: {error}: the chat template does not finish (it may loop forever)"
    return f"{origin}: {error}"



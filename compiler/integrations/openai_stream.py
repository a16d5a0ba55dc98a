"""OpenAI `chat.completion.chunk` deltas from a streaming response parser.

A response parser reports *regions* (`region_open`, `region_chunk`, `region_close`); an OpenAI-style
server must send *deltas*: `{"role": "assistant"}`, then `content` / `reasoning_content` text as it is
written, then `tool_calls` entries (`index`, `id`, `type`, `function.name`, then `function.arguments`
fragments), and a finish reason. `OpenAIStream` turns the first into the second, for any template:

    parser = rtcompile.ResponseParser(template, prefix, tools=tools, errors="keep")
    stream = OpenAIStream(parser)                     # the template is read from the parser
    send(stream.initial_deltas)                       # {"role": "assistant"} and prefilled text
    for text in generation:
        send(stream.feed(text))                       # a list of delta dicts, often empty
    send(stream.finish(length=hit_max_tokens))        # the rest; then stream.finish_reason
    # each delta goes out as completion_chunk(delta, ...); the last chunk carries the finish reason

Token ids: over a parser built with a tokenizer (`rtcompile.ResponseParser(template, prompt_ids,
tokenizer=tok, errors="keep")`, transformers 5.25.0's token-id mode), `feed` takes the ids the model
generated (one or many at a time) instead of text: a control token is a delimiter only where the model
generated its id, and spelled out with ordinary tokens it stays text, in the deltas as in the message.

The contract (proven by tests/integrations/test_openai_stream.py for the bundled templates,
generated templates and random chunkings): the `function.arguments` fragments of one call
concatenate to a JSON text that `json.loads` to exactly that call's arguments in the parser's final
message (after `tools=` coercion); names, ids, indices and the number of calls match the final
message; the concatenated `content` and `reasoning_content` deltas equal the final message's fields.

Where the contract bends, by design (each case is also reported in `OpenAIStream.divergences`):
- Whitespace: a `text` field is stripped at its region's close in the final message. Deltas drop the
  whitespace at a region's start and hold back trailing whitespace until more text follows in the same
  region, so the concatenation equals the stripped value exactly (a held-back run is dropped at close).
- A field without `repeats` written by several regions: a parser with `errors="keep"` joins two
  non-empty texts with a blank line, and so does the stream (exact). A strict parser keeps only the
  last value (the interpreter's rule), but the stream has already sent the earlier ones: they stay
  in the stream (nothing the model wrote disappears from the client's view), and `divergences`
  says so. The same holds for a tool-call field without `repeats`.
- A tool-call region that fails to parse (a parser built with `errors="keep"`; e.g. a call cut off by
  the token limit): a call already announced is closed with the arguments complete so far (always
  valid JSON), and the region's raw text is sent as `content`, so nothing is lost. A content or
  reasoning region that fails (a non-`text` parser) sends its raw text under its own key. `errors`
  lists such regions. With a strict parser the parser's exception propagates from `feed`/`finish`.
- Content and reasoning fields with another parser than `text` send their value's text (`text_of`)
  when the region closes.
- A region value that is not call-shaped (`{"function": {"name": str, ...}}`) is not sent as a call.

Incremental arguments, reconciliation and the other operations come from the serving core
(`rtcompile.integrations.serving`, which vLLM's and SGLang's integrations run on too): where a call's
name, id and arguments come from is read from the field's `transform`; `json` arguments go out one
top-level member at a time, as soon as its value is complete, `xml-inline` ones when their tag
closes, `kv-lines` ones when their line ends, `python-call-list` ones at the "," or ")" after them;
at the region's close what was sent is reconciled with the parsed value (`serving.calls`). Prompt
text the parser held back at the prompt's end (a possible delimiter, `...<|chan`) is not sent when
the output shows it was none: it is the prompt's, not the model's.

Call ids: from the template when its transform gives the call an `id` (e.g. an open-pattern capture,
`"id": "{id}"`) and that id is not empty, else `call_` plus 24 random letters and digits; `seed=`
makes them deterministic and `call_id=` (a function of the call's index) replaces the policy. (An
id-like capture the transform does not use is not read: a parser reports captures only while their
region is open, so it would depend on the chunking.)

Cost, linear in the output: per chunk the work is proportional to the chunk, plus the parsing of
whatever values it completes (`serving.arguments`).

Standard library and `regex` only: servers import this at run time.
"""


from __future__ import annotations

import json
import os
import random
import string
from typing import Any, Callable

from rtcompile.runtime.coerce import tool_parameters

from .serving import Generation, Renderer, Route, ServingPlan, WholeOutput, call_parts, message_tool_calls, text_of
from .serving.arguments import to_json
from .serving.calls import MISSING

__all__ = [
    "OpenAIStream",
    "accumulate_deltas",
    "completion_chunk",
    "message_tool_calls",
    "text_of",
]

_ID_CHARS = string.ascii_letters + string.digits


def _random_call_id(index: int) -> str:
    """"call_" and 24 characters of _ID_CHARS, uniform, from the OS's random source in one read
    (SystemRandom.choices reads it once per character: 24 reads, 32 µs a call against 5). Bytes
    from 248 up are skipped, so that each kept one picks a character with equal chance."""
    chars: list[str] = []
    while len(chars) < 24:
        chars.extend(_ID_CHARS[b % 62] for b in os.urandom(32) if b < 248)
    return "call_" + "".join(chars[:24])


def completion_chunk(
    delta: dict,
    *,
    completion_id: str,
    model: str,
    created: int,
    finish_reason: str | None = None,
    index: int = 0,
) -> dict:
    """A `chat.completion.chunk` object (a JSON-ready dict) carrying one delta."""
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        ],
    }


def accumulate_deltas(deltas: list[dict]) -> dict:
    """The assistant message a client builds from `deltas` (text concatenated, tool calls merged by
    index), in the OpenAI response shape: what a server returns for `stream=False`. The deltas are
    replayed onto the serving core's whole-output accumulator (`serving.WholeOutput`). Raises
    `ValueError` for a tool-call entry whose index skips one (calls are announced in order)."""
    message: dict = {"role": "assistant"}
    whole = WholeOutput()
    for delta in deltas:
        for key, value in delta.items():
            if key == "tool_calls":
                for entry in value:
                    _replay_call_entry(whole, entry)
            elif key == "role":
                message["role"] = value
            else:
                message.setdefault(key, "")  # (keys in the order they first came)
                whole.text(key, value)
    for key in whole.keys():
        message[key] = whole.joined(key)
    if whole.calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in whole.calls
        ]
    return message


def _replay_call_entry(whole: WholeOutput, entry: dict) -> None:
    """One `tool_calls` entry of a delta onto the accumulator: a new index announces its call, an
    entry of a known one adds to it (name and id pieces, as a client concatenates them)."""
    index = entry["index"]
    function = entry.get("function", {})
    call = whole.call(index)
    if call is None:
        if index != len(whole.calls):
            raise ValueError(f"tool call index {index} skips an index: {len(whole.calls)} calls came before it")
        whole.call_started(index, function.get("name") or "", entry.get("id", ""))
    else:
        call.name += function.get("name") or ""
        call.id += entry.get("id", "")
    whole.arguments(index, function.get("arguments") or "")


# ---- the renderer: the core's operations as deltas, adjacent pieces of one kind merged -------------


class _Deltas(Renderer):
    """OpenAI deltas of a generation's operations. Keeps, per call, what the client was sent (for
    the check at the end), and the regions that failed (`errors`)."""

    def __init__(self, make_id: Callable[[int], str], tool_field: str) -> None:
        self.out: list[dict] = [{"role": "assistant"}]
        self.make_id = make_id
        self.tool_field = tool_field
        self.calls: list[list] = []  # per call: [id, name, argument fragments]
        self.errors: list[dict] = []

    def take(self) -> list[dict]:
        out, self.out = self.out, []
        return out

    def nothing(self) -> list[dict]:
        return []

    def text(self, key: str, text: str) -> None:
        if not text:
            return
        out = self.out
        if out and len(out[-1]) == 1 and key in out[-1]:
            out[-1][key] += text
        else:
            out.append({key: text})

    def call_started(self, index: int, name: str, template_id: str | None) -> None:
        call_id = template_id if template_id else self.make_id(index)
        self.calls.append([call_id, name, []])
        entry = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        self.out.append({"tool_calls": [entry]})

    def arguments(self, index: int, text: str) -> None:
        self.calls[index][2].append(text)
        out = self.out
        if out:
            last = out[-1]
            calls = last.get("tool_calls")
            if (
                calls is not None
                and len(last) == 1
                and len(calls) == 1
                and calls[0]["index"] == index
            ):
                calls[0]["function"]["arguments"] += text
                return
        out.append({"tool_calls": [{"index": index, "function": {"arguments": text}}]})

    def region_failed(self, field: str, raw: str, error: str, key: str, calls: list[int]) -> None:
        record = {"field": field, "raw": raw, "error": error, "sent_as": key}
        if field == self.tool_field:
            record["calls"] = calls
        self.errors.append(record)


def _loads_to(text: str, arguments: Any) -> bool:
    """Whether the arguments text sent loads to exactly the message's arguments (absent: {})."""
    # The usual case, at one encoding instead of a load and two sorted dumps: the members went out
    # in the message's order, each as json.dumps writes it.
    if isinstance(arguments, dict):
        try:
            if text == to_json(arguments):
                return True
        except (TypeError, ValueError):
            pass
    try:
        sent = json.loads(text)
    except ValueError:
        return False
    expected = {} if arguments is MISSING else arguments
    try:
        return json.dumps(sent, sort_keys=True) == json.dumps(expected, sort_keys=True)
    except (TypeError, ValueError):  # not JSON data after all (e.g. a value_parser's odd result)
        return sent == expected




def _namespace_of(parser: Any) -> dict | None:
    """The namespace of the generated module that defined the parser's class (where its TEMPLATE
    and its serving plan are)."""
    for cls in type(parser).__mro__:
        for attribute in vars(cls).values():
            function = getattr(attribute, "__func__", attribute)
            namespace = getattr(function, "__globals__", None)
            if namespace is not None and isinstance(namespace.get("TEMPLATE"), dict):
                return namespace
    return None


def _template_and_plan(parser: Any, template: dict | None) -> tuple[dict, ServingPlan]:
    """The stream's template (the parser's own unless given) and its serving plan: the parser's
    module keeps the plan; a template of its own gets one for this stream."""
    namespace = _namespace_of(parser)
    own = namespace["TEMPLATE"] if namespace is not None else None
    if template is None:
        template = own
        if template is None:
            raise TypeError("cannot find the parser's template: pass template=")
    if own is not None and (template is own or template == own):
        return template, ServingPlan.of(namespace)
    return template, ServingPlan.for_template(template)


def _call_ids(seed: int | None) -> Callable[[int], str]:
    """Call ids: random, or reproducible from `seed`."""
    if seed is None:
        return _random_call_id
    rng = random.Random(seed)

    def call_id(index: int) -> str:
        return "call_" + "".join(rng.choices(_ID_CHARS, k=24))

    return call_id


class OpenAIStream:
    """OpenAI chat-completion deltas from a response parser (see the module docstring).

    `parser`: a fresh parser (`rtcompile.ResponseParser(...)`, a generated module's `ResponseParser`,
    or anything with `initial_events`, `feed(text) -> events` and `finalize() -> (message, events)`),
    built with `tokenizer=` to be fed token ids;
    parsers that expose `current_field` and `region_captures` let names and ids from open-pattern
    captures go out when a region opens instead of at its close. Build parsers for servers with
    `errors="keep"`, so that a broken tool call does not end the stream.
    `template`: the response template; by default the parser's module's `TEMPLATE`.
    `content_field`, `reasoning_field` (default: `reasoning_content`, else `thinking`),
    `tool_calls_field`: the template's field names (a name the template does not have turns that
    part off). `reasoning_key`: the delta key for reasoning (vLLM's `reasoning_content` by default).
    `tools`: schemas for argument coercion, as the parser's `tools=`; by default the parser's own.
    `seed`: deterministic call ids; `call_id`: a function of the call's index that makes the ids.
    """

    def __init__(
        self,
        parser: Any,
        template: dict | None = None,
        *,
        content_field: str = "content",
        reasoning_field: str | None = None,
        tool_calls_field: str = "tool_calls",
        reasoning_key: str = "reasoning_content",
        tools: list | None = None,
        seed: int | None = None,
        call_id: Callable[[int], str] | None = None,
    ):
        template, plan = _template_and_plan(parser, template)
        self.parser = parser
        self.template = template
        self._plan = plan
        fields = plan.fields
        if reasoning_field is None:
            reasoning_field = next(
                (f for f in ("reasoning_content", "thinking") if f in fields), None
            )
        routes = {
            field: Route.message(key)
            for field, key in ((content_field, "content"), (reasoning_field, reasoning_key))
            if field is not None and field != tool_calls_field
        }
        if tool_calls_field in fields:  # (a call that fails to parse: its text is content)
            routes[tool_calls_field] = Route.calls("content")
        self._deltas = _Deltas(call_id or _call_ids(seed), tool_calls_field)
        self._generation = Generation(
            plan,
            self._deltas,
            routes,
            parser=parser,
            tool_parameters=tool_parameters(tools) if tools is not None else None,
            complete_closers=False,
            send_prompt_text=True,
        )
        self._has_tools = tool_calls_field in fields
        self._tool_field_name = tool_calls_field
        # Regions that failed to parse (errors="keep"): {"field", "raw", "error", "sent_as": the delta
        # key their raw text went out under, "calls": indices of calls announced before the failure}.
        self.errors: list[dict] = self._deltas.errors
        self.divergences: list[str] = self._generation.divergences  # where the stream could not follow
        self.finish_reason: str | None = None
        self.message: dict | None = None
        self._finished = False
        self.initial_deltas: list[dict] = self._generation.initial

    # ---- public API
    def feed(self, output: Any) -> list[dict]:
        """Feed the next piece of model output: text, or the token ids the model generated (one or
        many; lists, tuples, numpy arrays, tensors) for a parser built with a tokenizer. Returns the
        deltas it completes (possibly none)."""
        if self._finished:
            raise RuntimeError("OpenAIStream already finished")
        # (the generation reads the ids where its parser reads ids, else the text)
        return self._generation.feed(output, output)

    def read(self, field: str, text: str) -> list[dict]:
        """The deltas of `text` that the parser's `feed_text` read into `field`'s open region (the
        region_chunk event feed would have returned), for a caller that fed a text parser itself
        (a token parser keeps the text of ids `feed_text` declined for `feed_declined`: fed again,
        they would be decoded twice)."""
        if self._finished:
            raise RuntimeError("OpenAIStream already finished")
        return self._generation.read(field, text)

    def finish(self, length: bool = False) -> list[dict]:
        """End the stream (`length=True`: the generation hit its token limit). Returns the last
        deltas; `finish_reason` and `message` (the parser's final message) are set afterwards."""
        if self._finished:
            raise RuntimeError("OpenAIStream already finished")
        self._finished = True
        deltas = self._generation.finish()
        message = self.message = self._generation.message
        if self._has_tools:
            self._check_calls(message)
        if length:
            self.finish_reason = "length"
        elif self._deltas.calls:
            self.finish_reason = "tool_calls"
        else:
            self.finish_reason = "stop"
        return deltas

    def _check_calls(self, message: dict) -> None:
        final = message_tool_calls(message, self._plan, self._tool_field_name)
        failed = {index for error in self.errors for index in error.get("calls", ())}
        sent = [(index, call) for index, call in enumerate(self._deltas.calls) if index not in failed]
        if len(final) != len(sent):
            self.divergences.append(f"{len(sent)} calls were sent, the message has {len(final)}")
            return
        for (index, (call_id, name, fragments)), item in zip(sent, final):
            final_name, arguments, final_id = call_parts(item)
            if name != final_name or not _loads_to("".join(fragments), arguments):
                self.divergences.append(f"call {index} differs from the message's")
            elif final_id is not None and final_id != call_id:
                self.divergences.append(
                    f"call {index}: id {call_id!r} was sent, the message has {final_id!r}"
                )

"""What a host asks of a template's reasoning outside a running generation: whether output after a
prompt starts past the reasoning (`Reasoning.ended_after`), and how many of an output's tokens are
reasoning (`Reasoning.token_counter`). vLLM asks both (its structured-output engine starts
constraining where reasoning ends; its usage reports reasoning tokens).

Standard library and rtcompile's runtime only: servers import it at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .plan import FieldFacts, ServingPlan

__all__ = ["Reasoning", "ReasoningTokenCounter"]

_CONTENT_FIELD = "content"
_TOOL_FIELD = "tool_calls"


class Reasoning:
    """The reasoning field of a plan (`field`, None when the template has none; `facts`, its
    FieldFacts), and the fields with openers (made once per plan and field: `of`)."""

    def __init__(self, plan: ServingPlan, field: str | None):
        self.plan = plan
        self.field = field
        self.facts: FieldFacts | None = plan.fields.get(field) if field else None
        self.open_fields = frozenset(name for name, facts in plan.fields.items() if facts.has_opener)

    @classmethod
    def of(cls, plan: ServingPlan, field: str | None) -> "Reasoning":
        return plan.derived(f"reasoning:{field}", lambda base: cls(base, field))

    def ended_after(self, prompt_text: str | Callable[[], str], *, thinking_disabled: bool = False) -> bool:
        """Whether a generation after the prompt `prompt_text` starts past the reasoning (vLLM's
        rule): the template has no reasoning; or the prompt closed the reasoning region, or opened
        content or a tool call; or, with no reasoning region open, thinking is off. A reasoning
        field that repeats never ends; a prompt that cannot be read (parsed, or made by
        `prompt_text()`: a host decoding ids only when they are read) has not ended it."""
        field = self.field
        if field is None:
            return True
        if self.facts.repeats:
            return False
        try:
            text = prompt_text() if callable(prompt_text) else prompt_text
            parser = self.plan.parser_class(text, errors="keep")
        except Exception:
            return False
        active, closed = _prompt_state(parser.initial_events, field)
        if closed or active in (_CONTENT_FIELD, _TOOL_FIELD):
            return True
        probed = self._probe_held(parser)
        if probed is not None:
            return probed
        if active == field:
            return False
        return thinking_disabled

    def _probe_held(self, parser: Any) -> bool | None:
        """Resolve delimiters the parser holds back at the prompt's end: a NUL cannot occur in the
        model's output, so text containing it only probes what the prompt left open. True/False when
        what it resolves decides, None otherwise."""
        field = self.field
        for event in parser.feed("\0"):
            kind = event["type"]
            if kind == "region_open" and event["field"] in (_CONTENT_FIELD, _TOOL_FIELD) and event["field"] in self.open_fields:
                return True
            if event["field"] == field:
                if kind == "region_open":
                    return False
                if kind == "region_close":
                    return True
        return None

    def token_counter(self, prefix: str, decode: Callable[[list[int]], str]) -> "ReasoningTokenCounter":
        """A counter of the reasoning tokens of one output after the prompt `prefix` (its text),
        decoding each token with `decode([token_id])`. Needs a reasoning field."""
        return ReasoningTokenCounter(self.plan, self.field, prefix, decode)


def _prompt_state(events: list[dict], field: str) -> tuple[str | None, bool]:
    """(the field whose region the prompt leaves open, whether a region of `field` closed)."""
    active = None
    closed = False
    for event in events:
        if event["type"] == "region_open":
            active = event["field"]
        elif event["type"] == "region_close":
            closed |= event["field"] == field
            active = None
    return active, closed


class ReasoningTokenCounter:
    """Counts the reasoning tokens of one growing output, feeding each token's text once: a token
    counts when text of it comes out as reasoning (or it holds a whole empty reasoning region); text
    held back inside a reasoning region (it may start the closer) counts its token until the closer
    arrives. That is vLLM's count wherever the reasoning delimiters are whole tokens (special
    tokens, as in the models these templates serve).

    Held text is the end of what was fed (`unread_text`), and comes out in order: `runs` follows it
    token by token as [characters still held, counted already], so that the reasoning a later feed
    writes is credited to the tokens whose text it is."""

    def __init__(self, plan: ServingPlan, field: str, prefix: str, decode: Callable[[list[int]], str]) -> None:
        self.decode = decode
        self.field = field
        self.parser = plan.parser_class(prefix, errors="keep")
        self.token_ids: list[int] = []
        self.confirmed = 0
        self.runs: list[list] = []  # the held text inside reasoning, by token: [chars, counted]
        self.written = 0  # reasoning text the last feed wrote
        self.open = False
        self.body_started = False  # the open reasoning region has text (or held text) already
        self._events(self.parser.initial_events)
        prompt_held = len(self.parser.unread_text) if self.open else 0
        if prompt_held:  # (the prompt's text is no token of the output)
            self.runs.append([prompt_held, True])

    def continues(self, token_ids: Sequence[int]) -> bool:
        """Whether `token_ids` start with the ids counted so far (the same output, grown)."""
        return list(token_ids[: len(self.token_ids)]) == self.token_ids

    def count(self, token_ids: Sequence[int]) -> int:
        """The reasoning tokens of `token_ids`, an output that `continues` the ids counted so far."""
        new_ids = list(token_ids[len(self.token_ids) :])
        self.token_ids.extend(new_ids)
        for token_id in new_ids:
            text = self.decode([token_id])
            if not text:  # an empty token counts where it sits inside reasoning text
                if self.open and self.body_started:
                    self.runs.append([0, False])
                continue
            self._feed(text)
        return self.confirmed + sum(not counted for _, counted in self.runs)

    def _feed(self, text: str) -> None:
        opened, _, closed = self._events(self.parser.feed(text))
        # The reasoning written comes first from the held runs, in order, then from this token.
        left = self.written
        runs = self.runs
        while runs and left:
            run = runs[0]
            if not run[1]:
                self.confirmed += 1  # text of it (or text after an empty token) is reasoning
                run[1] = True
            taken = min(run[0], left)
            run[0] -= taken
            left -= taken
            if not run[0]:
                runs.pop(0)
        own = left > 0 or (opened and closed)  # (an empty region inside the token counts it too)
        if closed:
            runs.clear()  # what was still held was the closer
        held = len(self.parser.unread_text) if self.open else 0
        mine = held - sum(chars for chars, _ in runs)  # this token's own held text
        if mine > 0:
            runs.append([mine, own])
            self.body_started = True
        if own:
            self.confirmed += 1

    def _events(self, events: list[dict]) -> tuple[bool, bool, bool]:
        opened = wrote = closed = False
        self.written = 0
        for event in events:
            if event["field"] != self.field:
                continue
            kind = event["type"]
            if kind == "region_open":
                self.open = opened = True
                self.body_started = False
            elif kind == "region_chunk":
                if event["text"]:
                    wrote = self.body_started = True
                    self.written += len(event["text"])
            else:
                self.open = False
                closed = True
        return opened, wrote, closed

"""End to end on the CPU: a model generates under rtcompile's grammar, and what it writes parses.

For every bundled template, a tiny randomly initialised causal LM (transformers' Llama: one layer,
hidden size 32, the vocabulary of the family tokenizer from `grammar_walk.family_tokenizer`)
generates with `model.generate` under xgrammar's logits processor for transformers
(`xgrammar.contrib.hf.LogitsProcessor`), compiled from `rtcompile.structural_tag(template, TOOLS,
tool_choice=..., prefix=prompt_ids, tokenizer=tok, stop_tokens=stop_ids)`. Each output (the stop id
left out) must parse, by the transformers 5.25.0 interpreter in token-id mode, into a message with
at least one call, every call allowed by the request (`grammar_walk.check_calls`). Requests:
`tool_choice="required"` with parallel calls, a named tool, and "required" with
`parallel_tool_calls=False`.

A random model writes junk, so only the grammar makes the output valid. It samples from its whole
distribution (no top-k), seeded per generation, with one nudge: a constant bonus on the logits of
control tokens and one-character closers (`"`, `}`, `]`, `>`, ...). Without it, a free region
(reasoning, content, a string value) closes with a chance of about 1 in 700 per token, and half the
generations are still going after 1,500 tokens; with it nearly all end within a few hundred. The
bonus only changes the odds among the tokens the grammar allows. Every output is also replayed
through a fresh matcher, which must accept it (and the stop), so a failure here is the grammar's,
not the harness's.

The quick tier runs each request once per template with fixed seeds; the full tier runs several
fresh seeds per request and template (a failure prints them). A generation that never ends is a
grammar with a dead end (text after which nothing but more text is allowed, so a forced call can
never come): the last test checks the one these generations found directly, without a model.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pytest
import torch
import xgrammar as xgr
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LogitsProcessor,
    LogitsProcessorList,
)
from transformers.utils.chat_parsing import parse_response as interpreter_parse
from xgrammar.contrib.hf import LogitsProcessor as GrammarLogitsProcessor

import rtcompile
from grammar_walk import Walker, check_calls, family_tokenizer, message_calls
from rtcompile.library import template_names

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "exact": {"type": "boolean"},
                    "limit": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "filters": {
                        "type": "object",
                        "properties": {
                            "after": {"type": "string", "nullable": True},
                            "lang": {"type": "string", "enum": ["en", "de"]},
                        },
                        "additionalProperties": False,
                    },
                },
                "required": ["query", "exact"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "schedule",
            "parameters": {
                "type": "object",
                "properties": {
                    "when": {"type": ["string", "integer"]},
                    "minutes": {"type": ["integer", "null"]},
                    "attendees": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "optional": {"type": "boolean"},
                            },
                            "required": ["name"],
                        },
                    },
                },
                "required": ["when"],
                "additionalProperties": False,
            },
        },
    },
    {"type": "function", "function": {"name": "now"}},  # (no parameters)
]

# name -> (tool_choice, parallel_tool_calls)
REQUESTS = {
    "required": ("required", True),
    "named": ({"type": "function", "function": {"name": "schedule"}}, True),
    "single": ("required", False),
}

# New tokens per generation. With whitespace-run tokens kept out (so that the dead end tested below
# cannot happen), 690 generations (every template and request, 10 seeds) all ended: median 119
# tokens, 7 over 800, the longest 1,163.
BUDGET = 1_500
PREFERENCE = 3.0  # added to the logits of control tokens and one-character closers
FULL_SEEDS = 5  # per request and template, in the full tier
FULL_ENDED = 0.9  # the share of full-tier generations that must end within the budget


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: the model is tiny, and on a shared two-core machine torch's thread pool
    makes each step ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---- the model and its generations ---------------------------------------------------------------


@dataclass
class Family:
    name: str
    template: dict
    tokenizer: Any
    stop_ids: list[int]
    prompt_ids: list[int]
    model: Any
    walker: Walker
    preferred: torch.Tensor  # ids of control tokens and one-character closers


@lru_cache(maxsize=None)
def family(name: str) -> Family:
    template = rtcompile.template_for(name)
    tokenizer, stop_ids = family_tokenizer(template)
    torch.manual_seed(zlib.crc32(name.encode()))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        bos_token_id=None,
        eos_token_id=stop_ids,
        pad_token_id=stop_ids[0],
    )
    model = LlamaForCausalLM(config).eval()
    walker = Walker(tokenizer, stop_ids)
    prompt_ids = tokenizer.encode("Hi." + _anchor(template), add_special_tokens=False)
    preferred = torch.tensor(sorted(set(walker.control_ids) | walker.punctuation))
    return Family(name, template, tokenizer, stop_ids, prompt_ids, model, walker, preferred)


def _anchor(template: dict) -> str:
    anchor = template.get("start_anchor", "")
    return anchor[0] if isinstance(anchor, list) else anchor


class Preference(LogitsProcessor):
    """A constant bonus on the logits of some ids (before the grammar's mask)."""

    def __init__(self, ids: torch.Tensor, amount: float):
        self.ids = ids
        self.amount = amount

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores[:, self.ids] += self.amount
        return scores


class DeadEnd(Exception):
    """The grammar allowed no token: args[0] is every id so far, the prompt's included."""


class DeadEndCheck(LogitsProcessor):
    """After the grammar's mask: a step where no token is allowed at all stops the generation
    with the ids so far (sampling would fail on it with no word of where)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if torch.isneginf(scores).all():
            raise DeadEnd(input_ids[0].tolist())
        return scores


@lru_cache(maxsize=None)
def compiled(name: str, request: str) -> Any:
    model_family = family(name)
    choice, parallel = REQUESTS[request]
    tag = rtcompile.structural_tag(
        model_family.template,
        TOOLS,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        prefix=model_family.prompt_ids,
        tokenizer=model_family.tokenizer,
        stop_tokens=model_family.stop_ids,
    )
    return model_family.walker.compile(tag)


def generate(model_family: Family, grammar: Any, seed: int) -> tuple[list[int], bool]:
    """The ids generated (the stop id left out) and whether a stop id ended them; DeadEnd with
    the ids generated where the grammar allowed no token."""
    config = GenerationConfig(
        do_sample=True,
        top_k=0,
        top_p=1.0,
        temperature=1.0,
        max_new_tokens=BUDGET,
        eos_token_id=model_family.stop_ids,
        pad_token_id=model_family.stop_ids[0],
    )
    processors = LogitsProcessorList(
        [
            Preference(model_family.preferred, PREFERENCE),
            GrammarLogitsProcessor(grammar),
            DeadEndCheck(),
        ]
    )
    prompt = torch.tensor([model_family.prompt_ids])
    torch.manual_seed(seed)
    try:
        output = model_family.model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            generation_config=config,
            logits_processor=processors,
        )
    except DeadEnd as dead:
        raise DeadEnd(dead.args[0][prompt.shape[1] :]) from None
    ids = output[0, prompt.shape[1] :].tolist()
    if ids and ids[-1] in model_family.stop_ids:
        return ids[:-1], True
    return ids, False


@dataclass
class Outcome:
    name: str
    request: str
    seed: int
    ids: list[int]
    ended: bool
    problems: list[str]
    calls: int
    controls_at_end: list[
        str
    ]  # (of a generation that did not end: the control tokens still allowed)

    def describe(self, tokenizer: Any) -> str:
        text = tokenizer.decode(self.ids)
        shown = text if len(text) <= 1_500 else text[:500] + " [...] " + text[-1_000:]
        if self.ended:
            state = "ended"
        elif len(self.ids) < BUDGET:
            state = "stopped short"
        else:
            state = f"no end in {BUDGET} tokens, only {self.controls_at_end} of the controls allowed"
        where = f"{self.name}, request {self.request!r}, seed {self.seed}"
        return f"{where}: {len(self.ids)} tokens, {state}: {self.problems}\n{shown!r}"


def outcome(name: str, request: str, seed: int) -> Outcome:
    """One generation, replayed through a fresh matcher and parsed by the interpreter."""
    model_family = family(name)
    grammar = compiled(name, request)
    try:
        ids, ended = generate(model_family, grammar, seed)
    except DeadEnd as dead:
        problem = "a dead end: the grammar allows no token after these"
        return Outcome(name, request, seed, dead.args[0], False, [problem], 0, [])
    accepted, position = model_family.walker.accepts(grammar, ids, ended=ended)
    problems = [] if accepted else [f"the grammar refuses its own output at token {position}"]
    if not ended:
        controls = _allowed_controls(model_family.walker, grammar, ids) or set()
        names = sorted(model_family.tokenizer.convert_ids_to_tokens(sorted(controls)))
        return Outcome(name, request, seed, ids, ended, problems, 0, names)
    choice, parallel = REQUESTS[request]
    try:
        message = interpreter_parse(
            ids,
            model_family.template,
            prefix=model_family.prompt_ids,
            tools=TOOLS,
            tokenizer=model_family.tokenizer,
        )
    except Exception as error:  # a parse error is a finding: the grammar let the output through
        return Outcome(
            name, request, seed, ids, ended, [*problems, f"the interpreter raised {error!r}"], 0, []
        )
    problems += check_calls(message, TOOLS, choice, parallel)
    calls = len(message_calls(message))
    if calls == 0 and not problems:
        problems.append("no call")
    return Outcome(name, request, seed, ids, ended, problems, calls, [])


# ---- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", template_names())
def test_generations_under_the_grammar_parse_into_the_calls_the_request_allows(name):
    """Each request once, with fixed seeds: every generation ends within the budget and parses into
    at least one call that satisfies the request."""
    outcomes = [outcome(name, request, seed) for seed, request in enumerate(REQUESTS)]
    tokenizer = family(name).tokenizer
    failed = [o.describe(tokenizer) for o in outcomes if o.problems or not o.ended]
    assert not failed, "\n\n".join(failed)


@pytest.mark.full
@pytest.mark.parametrize("name", template_names())
def test_many_generations_under_the_grammar_parse_into_allowed_calls(name):
    """Several fresh seeds per request: every generation that ends parses into allowed calls, and
    nearly all end within the budget."""
    draw = random.SystemRandom().randrange
    outcomes = [
        outcome(name, request, draw(2**31)) for request in REQUESTS for _ in range(FULL_SEEDS)
    ]
    tokenizer = family(name).tokenizer
    invalid = [o.describe(tokenizer) for o in outcomes if o.problems]
    assert not invalid, "\n\n".join(invalid)
    unended = [o for o in outcomes if not o.ended]
    assert len(unended) <= (1 - FULL_ENDED) * len(outcomes), (
        f"{len(unended)} of {len(outcomes)} generations did not end within {BUDGET} tokens:\n\n"
        + "\n\n".join(o.describe(tokenizer) for o in unended)
    )


@pytest.mark.parametrize("name", template_names())
def test_free_text_never_closes_the_way_to_a_call(name):
    """Under "required", text written where free text is allowed leaves the same control tokens
    allowed after it, whatever its tokens: a run of whitespace that is one token (two spaces, a
    newline and an indent, as real vocabularies have), followed by more text, must not close the
    way to the call, or the model can never end (the generations above run out of tokens)."""
    model_family = family(name)
    grammar = compiled(name, "required")
    walker, tokenizer = model_family.walker, model_family.tokenizer
    runs = [
        i
        for i in range(len(tokenizer))
        if i not in walker.control_ids and _is_whitespace_run(tokenizer.decode([i]))
    ]
    assert runs, "the family tokenizer has no whitespace-run token"
    word, after = tokenizer.convert_tokens_to_ids("x"), tokenizer.convert_tokens_to_ids("b")
    start = _allowed_controls(walker, grammar, [word])
    assert (start is None) == (
        name in DELIMITER_FIRST
    ), "free text at the start of a required output"
    if start is None:
        return
    lost = {}
    for run in runs:
        after_run = _allowed_controls(walker, grammar, [word, run, after])
        if after_run != start:
            lost[repr(tokenizer.decode([run]))] = sorted(
                tokenizer.decode([i]) for i in start - (after_run or set())
            )
    assert (
        not lost
    ), f"after 'x', a whitespace-run token and 'b', these controls are no longer allowed: {lost}"


# Templates whose output under "required" starts with a delimiter (no free text before the call).
DELIMITER_FIRST = {
    "cohere_command_r7b",
    "gemma3_pythonic",
    "gpt_oss",
    "llama3_2_pythonic",
    "llama3_json",
    "llama4_pythonic",
}


def _is_whitespace_run(text: str) -> bool:
    return len(text) >= 2 and text.isspace()


def _allowed_controls(walker: Walker, grammar: Any, ids: list[int]) -> set[int] | None:
    """The control tokens allowed after `ids` (None: the grammar refuses `ids`)."""
    matcher = xgr.GrammarMatcher(grammar)
    if not all(matcher.accept_token(i) for i in ids):
        return None
    return {i for i in walker.allowed(matcher) if i in walker.control_ids}



def test_a_call_after_a_marker_leaves_the_way_open():
    """Under "required", a call, a marker between calls (ernie's `<response>`, written by id), a
    second call: then more calls, content, or the end are allowed. Content after the calls that
    could start by reading the marker's text made xgrammar's matcher allow no token at all there."""
    model_family = family("ernie")
    tokenizer = model_family.tokenizer
    ids_of = tokenizer.convert_tokens_to_ids
    opener, closer, marker = ids_of("<tool_call>"), ids_of("</tool_call>"), ids_of("<response>")
    arguments = tokenizer.encode('{"name": "now", "arguments": {}}', add_special_tokens=False)
    call = [opener, *arguments, closer]
    walker, grammar = model_family.walker, compiled("ernie", "required")
    matcher = xgr.GrammarMatcher(grammar)
    for token_id in [*call, marker, *call]:
        assert matcher.accept_token(token_id)
    allowed = set(walker.allowed(matcher))
    assert {opener, marker, *model_family.stop_ids} <= allowed
    assert tokenizer.encode("Done", add_special_tokens=False)[0] in allowed

"""Hypothesis strategies for token-id parsing: a template, a tokenizer whose added tokens include
the template's delimiters, and generations as token ids.

`token_cases()` draws a template plan (random templates from strategies.py, or the interpreter's
known formats), a base tokenizer from the pool (tokenizer_pool.py) and, per example, which strings
become added tokens and how each is a control token: special, written by the chat template,
listed in `chat_control_tokens`, or not at all. Generations are the plan's outputs turned into
ids, every occurrence of an added token written as its id or spelled out with ordinary tokens
(whole, in pieces, or byte by byte, splitting multi-byte characters), with now and then a random
id of the vocabulary, U+FDD2 (the marker) and U+FFFD in the text, an id that names no token
(beyond the vocabulary, below 2**32: decoded to nothing), and a bad id (negative, a float, 2**32:
the interpreter raises TypeError for those). Chunkings: whole, one id at a time, random
cuts, empty feeds; as lists or numpy arrays.

A case prints as Python that rebuilds it (`TokenCase(...)`); its tokenizer is rebuilt from the
recipe with `case.tokenizer()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

import numpy as np
from hypothesis import strategies as st

from strategies import (
    TemplatePlan,
    _known_format_plans,
    _samples,
    fresh_tree,
    one_in,
    outputs,
    prefixes,
    template_plans,
    tool_collections,
)
from tokenizer_pool import BASE_NAMES, AddedSpec, build_tokenizer, occurrences, ordinary_ids

# Control-token-like strings that every case may add besides its template's delimiters.
EXTRA_TOKENS = ("<|im_end|>", "<|x|>", "</a>", "<|", "|>", "[T]", "<a", "é<", "<😀>")


@dataclass(frozen=True)
class Recipe:
    """How a case's tokenizer is built from the pool (see tokenizer_pool.build_tokenizer)."""

    base: str
    added: tuple[AddedSpec, ...]
    named_templates: bool = False
    listed_mode: bool = False


@lru_cache(maxsize=64)
def tokenizer_for(recipe: Recipe) -> Any:
    """The tokenizer of a recipe (built once per recipe; the parsers never modify it)."""
    return build_tokenizer(
        recipe.base, list(recipe.added), named_templates=recipe.named_templates, listed_mode=recipe.listed_mode
    )


@dataclass
class TokenRun:
    """One pass: the prompt (None, a str, or ids), the generated ids in feeds, tools."""

    prefix: Any
    id_chunks: list[list[Any]]
    tools: Optional[list] = None
    after_finalize: Optional[str] = None
    as_numpy: bool = False

    @property
    def chunks(self) -> list[Any]:
        if not self.as_numpy:
            return self.id_chunks
        return [np.array(chunk, dtype=np.int64) if _all_ints(chunk) else chunk for chunk in self.id_chunks]

    @property
    def text(self) -> Any:
        """The whole generation, for one-shot parsing (`Run.text`'s role)."""
        ids = [token_id for chunk in self.id_chunks for token_id in chunk]
        return np.array(ids, dtype=np.int64) if self.as_numpy and _all_ints(ids) else ids

    def __repr__(self) -> str:
        return (
            f"TokenRun(prefix={self.prefix!r}, id_chunks={self.id_chunks!r}, tools={self.tools!r}, "
            f"after_finalize={self.after_finalize!r}, as_numpy={self.as_numpy!r})"
        )


def _all_ints(ids: list) -> bool:
    return all(type(i) is int and 0 <= i < 2**63 for i in ids)


@dataclass
class TokenCase:
    template: Any
    recipe: Recipe
    runs: list[TokenRun]

    def tokenizer(self) -> Any:
        return tokenizer_for(self.recipe)

    def __repr__(self) -> str:
        return f"TokenCase(template={self.template!r}, recipe={self.recipe!r}, runs={self.runs!r})"


def _usable(text: str) -> bool:
    """A string that can be an added token here: non-empty, short, no control characters but
    newlines (the chat template writes it as a Jinja string)."""
    return 0 < len(text) <= 12 and all(ch == "\n" or ch.isprintable() for ch in text)


def _plan_strings(plan: TemplatePlan) -> list[str]:
    found = []
    for fieldplan in plan.fields:
        for delimiter in (fieldplan.open, fieldplan.close):
            found += [s for s in _samples(delimiter) if _usable(s)]
    found += [s for s in _samples(plan.anchor) if _usable(s)]
    return sorted(set(found))


@st.composite
def recipes(draw, plan: TemplatePlan) -> Recipe:
    candidates = _plan_strings(plan)
    pool = st.sampled_from(candidates) if candidates else st.sampled_from(EXTRA_TOKENS)
    chosen = draw(
        st.lists(st.one_of(pool, pool, pool, st.sampled_from(EXTRA_TOKENS)), unique=True, min_size=1, max_size=6)
    )
    listed_mode = draw(one_in(3))
    # Mostly control tokens (special, or made so by the chat template / chat_control_tokens),
    # now and then an added token that is not one (or one listed the other way, which is not).
    roles = ["special"] * 2 + ["listed" if listed_mode else "template"] * 3 + ["plain", "template" if listed_mode else "listed"]
    added = tuple(AddedSpec(content, draw(st.sampled_from(roles))) for content in chosen)
    return Recipe(
        base=draw(st.sampled_from(BASE_NAMES)),
        added=added,
        named_templates=draw(one_in(5)),
        listed_mode=listed_mode,
    )


@st.composite
def generation_ids(draw, text: str, recipe: Recipe) -> list[Any]:
    """`text` as ids: added tokens as their ids or spelled out; the rest in random pieces."""
    tokenizer = tokenizer_for(recipe)
    added = [spec.content for spec in recipe.added]
    text = "".join(ch for ch in text if not "\ud800" <= ch <= "\udfff")  # (no token spells a lone surrogate)
    if added and draw(st.booleans()):  # the added tokens themselves, somewhere in the text
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(added)) + text[at:]
    if draw(one_in(6)):  # the marker and the replacement character, written by the model
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["\ufdd2", "\ufffd", "<\ufdd2", "\ufdd2\ufdd2"])) + text[at:]
    ids: list[Any] = []
    position = 0

    def ordinary(piece: str) -> list[int]:
        if not piece:
            return []
        cuts = draw(st.lists(st.integers(1, max(1, len(piece) - 1)), max_size=3))
        return ordinary_ids(recipe.base, piece, cuts, byte_wise=draw(one_in(4)))

    # How added tokens are written: all as their ids, all spelled out, or each one either way
    mode = draw(st.sampled_from(["ids", "spelled", "mixed", "mixed"]))
    for start, end, content in occurrences(text, added):
        ids += ordinary(text[position:start])
        if mode == "ids" or (mode == "mixed" and draw(st.booleans())):
            ids.append(tokenizer.convert_tokens_to_ids(content))
        else:
            ids += ordinary(content)
        position = end
    ids += ordinary(text[position:])
    if ids and draw(one_in(5)):  # a few ids of anything in the vocabulary (odd bytes, added tokens)
        for _ in range(draw(st.integers(1, 3))):
            ids.insert(draw(st.integers(0, len(ids))), draw(st.integers(0, len(tokenizer) - 1)))
    if recipe.base == "sentencepiece" and draw(one_in(3)):
        # byte-fallback bytes, valid then invalid (`;` then 0x80): tokenizers' DecodeStream fails
        # at the next id when they come one feed at a time, in both
        group = draw(st.sampled_from([b";\x80", b"a\xff", b"\xc3", b"\xe4\xb8", b" \x80\x80"]))
        at = draw(st.integers(0, len(ids)))
        ids[at:at] = [tokenizer.convert_tokens_to_ids(f"<0x{byte:02X}>") for byte in group]
    if draw(one_in(20)):  # ids that name no token: decoded to nothing by both
        size = len(tokenizer)
        for _ in range(draw(st.integers(1, 2))):
            ids.insert(draw(st.integers(0, len(ids))), draw(st.sampled_from([size, size + 3, 2**32 - 1])))
    if draw(one_in(40)):  # ids DecodeStream refuses: TypeError in both
        ids.insert(draw(st.integers(0, len(ids))), draw(st.sampled_from([-1, 2**32, 1.5])))
    return ids


@st.composite
def id_chunkings(draw, ids: list[Any]) -> list[list[Any]]:
    mode = draw(st.sampled_from(["whole", "each", "cuts", "cuts"]))
    if mode == "whole":
        chunks = [ids]
    elif mode == "each":
        chunks = [[token_id] for token_id in ids]
    else:
        cuts = sorted(draw(st.lists(st.integers(0, len(ids)), max_size=8)))
        bounds = [0, *cuts, len(ids)]
        chunks = [ids[start:end] for start, end in zip(bounds, bounds[1:])]
    if draw(one_in(5)):
        chunks.insert(draw(st.integers(0, len(chunks))), [])
    return chunks


@st.composite
def token_prefixes(draw, plan: TemplatePlan, recipe: Recipe) -> Any:
    text = draw(prefixes(plan))
    if text is None:
        return None
    kind = draw(st.sampled_from(["ids", "ids", "text", "empty_list"]))
    if kind == "text":
        return text  # encoded by the tokenizer (added tokens matched as ids)
    if kind == "empty_list":
        return []
    return draw(generation_ids(text, recipe))


@st.composite
def token_runs(draw, plan: TemplatePlan, recipe: Recipe) -> TokenRun:
    ids = draw(generation_ids(draw(outputs(plan)), recipe))
    return TokenRun(
        prefix=draw(token_prefixes(plan, recipe)),
        id_chunks=draw(id_chunkings(ids)),
        tools=draw(tool_collections) if draw(one_in(4)) else None,
        after_finalize=draw(st.sampled_from([None, None, "feed", "finalize"])),
        as_numpy=draw(one_in(4)),
    )


@lru_cache(maxsize=None)
def _known_plans() -> tuple[TemplatePlan, ...]:
    plans = _known_format_plans()
    return tuple(plans)


@st.composite
def token_cases(draw, *, known_only: bool = False, valid_only: bool = False) -> TokenCase:
    """valid_only: every template compiles (for tests that load it themselves rather than
    compare failures with the interpreter's)."""
    if known_only or draw(one_in(4)):
        plan = draw(st.sampled_from(_known_plans()))
    else:
        plan = draw(template_plans(valid_only=valid_only))
    recipe = draw(recipes(plan))
    runs = draw(st.lists(token_runs(plan, recipe), min_size=1, max_size=3))
    return TokenCase(template=fresh_tree(plan.template), recipe=recipe, runs=runs)

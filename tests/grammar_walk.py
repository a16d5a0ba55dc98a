"""Walking rtcompile's grammars with xgrammar's matcher on tokenizers built locally.

`Walker(tokenizer, stop_ids)` compiles a structural tag with xgrammar (on the CPU) and walks it:
at every step the matcher's bitmask says which ids may come next, and one is drawn. Draws favour
control tokens (where delimiters are), and where a control token is allowed the walk sometimes
tries to spell it out with ordinary tokens instead: a grammar that matches a delimiter as text lets
that through, and the parse then shows it. `accepts(ids)` replays a given sequence.

The checks of what a walked output means (`check_calls`) parse it with the transformers 5.25.0
interpreter in token-id mode and hold the message's calls against the request.
"""

from __future__ import annotations

import codecs
import json
import random
import re
from functools import lru_cache
from typing import Any

import torch
import xgrammar as xgr

from rtcompile.grammar.values import standard_schema


# Token-like pieces of delimiter text (what real tokenizers have as added tokens): <|x|>, <|x>,
# <x|>, [X_Y], <｜x｜>, <x>, </x>, ]~b], [e~[.
TOKEN_LIKE = re.compile(r"<\|[^|<>\s]*\|>|<\|[^<>\s|]+>|<[^<>\s|]+\|>|\[[A-Z_]+\]|<｜[^｜]+｜>|</?[a-z_:]+>|</s>|<eos>|\]~b\]|\[e~\[")


def family_tokenizer(template: dict, stops: tuple[str, ...] = (), base: str = "bpe") -> tuple[Any, list[int]]:
    """A byte-level BPE tokenizer with the template's token-like delimiter pieces (and `stops`) as
    special tokens, and the ids of `stops` (default: the token-like pieces that end a turn)."""
    from tokenizer_pool import AddedSpec, build_tokenizer

    text = json.dumps(template, ensure_ascii=False).replace("\\\\", "")
    controls = set(TOKEN_LIKE.findall(text)) | set(stops)
    stops = stops or tuple(sorted(c for c in controls if c in TURN_ENDS)) or (END_OF_OUTPUT,)
    controls = sorted(controls | set(stops))
    tokenizer = build_tokenizer(base, [AddedSpec(c, "special") for c in controls])
    return tokenizer, [tokenizer.convert_tokens_to_ids(s) for s in stops]


# The stop token of a tokenizer whose template names none (a server always has one).
END_OF_OUTPUT = "<|end_of_output|>"


TURN_ENDS = frozenset(
    {
        "<|im_end|>", "<|endoftext|>", "<|return|>", "<|call|>", "</s>", "<eos>", "<|eot_id|>", "<|eom_id|>",
        "<turn|>", "<end_of_turn>", "<｜end▁of▁sentence｜>", "<|user|>", "<|observation|>",
        "<|END_OF_TURN_TOKEN|>", "<|eot|>", "<|eom|>", "[e~[", "<|end|>",
    }
)


CLOSING = frozenset(['"', "'", "}", "]", ")", ">", ",", ":", "|"])


class Walker:
    def __init__(self, tokenizer: Any, stop_ids: list[int]):
        self.tokenizer = tokenizer
        self.stop_ids = list(stop_ids)
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer), stop_token_ids=self.stop_ids)
        self.compiler = xgr.GrammarCompiler(self.info, cache_enabled=False)
        self.token_bytes = list(self.info.decoded_vocab)  # (xgrammar builds the list on each read)
        self.control_ids = {
            token_id: added.content for token_id, added in tokenizer.added_tokens_decoder.items()
        }
        self._bits = torch.arange(32, dtype=torch.int32)
        # Tokens that close what is open (strings, objects, lists, calls, tags): drawn often, they
        # make walks end.
        self.punctuation = {
            token_id
            for token_id in range(len(tokenizer))
            if token_id not in self.control_ids and tokenizer.decode([token_id]) in CLOSING
        }

    def compile(self, tag: dict) -> Any:
        return self.compiler.compile_structural_tag(json.dumps(tag))

    def allowed(self, matcher: Any) -> list[int]:
        mask = xgr.allocate_token_bitmask(1, self.info.vocab_size)
        matcher.fill_next_token_bitmask(mask)
        bits = ((mask[0].unsqueeze(1) >> self._bits) & 1).flatten()[: self.info.vocab_size]
        return torch.nonzero(bits).flatten().tolist()

    def walk(self, grammar: Any, rng: random.Random, max_tokens: int = 300, spell: float = 0.3) -> tuple[list[int], bool]:
        """A random accepted sequence (the stop id that ended it left out) and whether it ended;
        AssertionError where the grammar allows no token at all (a dead end). Draws favour control
        tokens and one-character punctuation (which close strings, objects and lists), so that
        walks end; a stop is taken, when allowed, more and more often."""
        matcher = xgr.GrammarMatcher(grammar)
        text = codecs.getincrementaldecoder("utf-8")()  # (the bytes written so far, as UTF-8)
        ids: list[int] = []
        while len(ids) < max_tokens:
            allowed = self.allowed(matcher)
            if not allowed:  # (where the grammar may end, a stop id is allowed)
                raise AssertionError(f"a dead end: no token allowed after {text_of(self.tokenizer, ids)!r}")
            if any(i in self.stop_ids for i in allowed) and rng.random() < 0.05 + len(ids) / max_tokens:
                return ids, True
            candidates = [i for i in allowed if i not in self.stop_ids]
            if not candidates:
                return ids, True
            choice = self._draw_utf8(candidates, text, rng)
            if choice is None:  # (only bytes that form no character could follow)
                return ids, False
            if choice in self.control_ids and rng.random() < spell and self._spell(matcher, choice, ids):
                text.decode(self.control_ids[choice].encode())  # (spelled out: the same text)
                continue
            assert matcher.accept_token(choice)
            text.decode(self.token_bytes[choice])
            ids.append(choice)
        return ids, False

    def _draw_utf8(self, candidates: list[int], text: Any, rng: random.Random) -> int | None:
        """A draw after which the output is still UTF-8 (None: there is none). Free text in
        xgrammar 0.2.8 (`any_text` with excludes) also takes byte tokens that form no character (a
        lone lead byte, then `]`); a sentencepiece decoder turns that whole run of byte tokens into
        U+FFFD, delimiter characters among them, so the parser reads another text than the grammar
        matched. The grammar's free text means text: walks write UTF-8 (the measured behaviour is
        pinned in test_grammar_api.py)."""
        state = text.getstate()
        while candidates:
            choice = self._draw(candidates, rng)
            try:
                text.decode(self.token_bytes[choice])
                return choice
            except UnicodeDecodeError:
                candidates = [i for i in candidates if i != choice]
            finally:
                text.setstate(state)
        return None

    def _draw(self, candidates: list[int], rng: random.Random) -> int:
        roll = rng.random()
        if roll < 0.3:
            controls = [i for i in candidates if i in self.control_ids]
            if controls:
                return rng.choice(controls)
        if roll < 0.7:
            closing = [i for i in candidates if i in self.punctuation]
            if closing:
                return rng.choice(closing)
        return rng.choice(candidates)

    def _spell(self, matcher: Any, token_id: int, ids: list[int]) -> bool:
        """Try the control token's text as ordinary tokens; roll back if the grammar refuses."""
        pieces = ordinary_spelling(self.tokenizer, self.control_ids[token_id])
        accepted = 0
        for piece in pieces:
            if not matcher.accept_token(piece):
                matcher.rollback(accepted)
                return False
            accepted += 1
        ids.extend(pieces)
        return True

    def accepts(self, grammar: Any, ids: list[int], *, ended: bool = True) -> tuple[bool, int]:
        """Whether the grammar accepts `ids` (and, with `ended`, may stop right after), and where
        it refused."""
        matcher = xgr.GrammarMatcher(grammar)
        for position, token_id in enumerate(ids):
            if not matcher.accept_token(token_id):
                return False, position
        if ended and self.stop_ids and not matcher.accept_token(self.stop_ids[0]):
            return False, len(ids)
        return True, len(ids)


def text_of(tokenizer: Any, ids: list[int]) -> str:
    """The text of ids as a server's detokenizer gives it: decoded after the prompt (no clean-up of
    spaces, special tokens kept). Decoding them alone is not that: a sentencepiece decoder drops
    the space a text's first token starts with, which after a prompt is the output's own."""
    context = ordinary_spelling(tokenizer, "x")
    options = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}
    before = tokenizer.decode(context, **options)
    text = tokenizer.decode(context + list(ids), **options)
    assert text.startswith(before), (before, text)
    return text[len(before) :]


def ordinary_spelling(tokenizer: Any, text: str) -> list[int]:
    """`text` as ordinary tokens (the backend's model only: no added token)."""
    return _plain_backend(tokenizer).encode(text, add_special_tokens=False).ids


@lru_cache(maxsize=None)
def _plain_backend_of(serialized: str) -> Any:
    from tokenizers import Tokenizer

    data = json.loads(serialized)
    data["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(data))


def _plain_backend(tokenizer: Any) -> Any:
    return _plain_backend_of(tokenizer.backend_tokenizer.to_str())


# ---- what an output means -------------------------------------------------------------------------


def message_calls(message: dict) -> list[dict]:
    """The tool calls of a parsed message, flattened (a repeating field holds one value per
    region, transform_each a list per region)."""
    value = message.get("tool_calls")
    if value is None:
        return []
    out: list = []
    stack = value if isinstance(value, list) else [value]
    for item in stack:
        if isinstance(item, list):
            out.extend(item)
        else:
            out.append(item)
    return out


def check_calls(message: dict, tools: list[dict], tool_choice: Any, parallel: bool) -> list[str]:
    """What is wrong with the message's calls for this request (empty: nothing)."""
    import jsonschema

    problems = []
    calls = message_calls(message)
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    if tool_choice == "none" and calls:
        problems.append(f"tool_choice none, but {len(calls)} calls")
    forced = tool_choice == "required" or isinstance(tool_choice, dict)
    if forced and not calls:
        problems.append("a call was required, none was made")
    if not parallel and len(calls) > 1:
        problems.append(f"parallel_tool_calls=False, but {len(calls)} calls")
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or function.get("name") not in by_name:
            problems.append(f"not a call of a tool: {call!r}")
            continue
        if isinstance(tool_choice, dict) and function["name"] != tool_choice["function"]["name"]:
            problems.append(f"named {tool_choice['function']['name']!r}, called {function['name']!r}")
        arguments = function.get("arguments")
        schema = standard_schema(by_name[function["name"]].get("parameters") or {"type": "object"})
        try:
            jsonschema.validate(arguments, schema)
        except jsonschema.ValidationError as error:
            problems.append(f"arguments of {function['name']!r} invalid: {error.message}: {arguments!r}")
    return problems

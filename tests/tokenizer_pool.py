"""Tokenizers built locally for the token-id tests (no model hub), and generations as token ids.

A small pool of base tokenizers is trained once per test session (training takes a while); each
test example then copies one and adds its own control tokens, special and non-special, so that the
delimiters of a randomly drawn template can be control tokens:

* `bytes`: byte-level BPE without merges: every character is its UTF-8 bytes, one token each, so
  every multi-byte character arrives split.
* `bpe`: byte-level BPE trained on a small corpus of delimiter-like text, JSON, code and non-ASCII
  text; its merges cut across `<`, `|`, `/` and inside multi-byte characters.
* `bpe_words`: the same with GPT-2's word-splitting pre-tokenizer (merges stay inside words).
* `sentencepiece`: a Metaspace tokenizer with byte fallback (the Llama 2 / Gemma shape), which
  rtcompile decodes with DecodeStream itself, as the interpreter does.

`build_tokenizer(base, added, chat_template=..., chat_control_tokens=...)` wraps a copy in
`PreTrainedTokenizerFast`; `spell(...)` turns text into ids, writing each occurrence of an added
token either as its id or spelled out with ordinary tokens.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

BASE_NAMES = ("bytes", "bpe", "bpe_words", "sentencepiece")

# Text the trained tokenizers learn from: the test templates' delimiter alphabet, chat-template
# markup, JSON and code, and non-ASCII text (accents, CJK, emoji, combining marks, U+FDD2 and
# U+FFFD), so that merges span delimiter characters and split multi-byte characters.
_CORPUS_PIECES = (
    "<a></a><b></b><ab></ab>|a|<|a|><| |>a b\n\n</ab> <a> <|im_end|> <|im_start|>assistant\n",
    "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Zürich\", \"days\": 3}}\n</tool_call>",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n</parameter>\n</function>\n</tool_call>",
    "<|channel>thought\nplan<channel|><|tool_call>call:search{query:<|\"|>bikes<|\"|>}<tool_call|>",
    "<|start|>assistant<|channel|>analysis<|message|>Think.<|end|><|call|><|return|>",
    "[THINK]plan[/THINK][TOOL_CALLS]get_weather[ARGS]{\"a\": 1}",
    "def f(x):\n    return {'a': [1, 2, 3]}  # é 中文 😀 ünïcödé \u2028 \u0301 \ufdd2 \ufffd",
    "héllo wörld 中文字符 日本語 😀😃🚲 ✓ — “quotes” «guillemets» x < 3 > 2 a|b",
)


def _corpus() -> list[str]:
    rng = random.Random(7)
    lines = []
    for _ in range(400):
        lines.append("".join(rng.choice(_CORPUS_PIECES) for _ in range(3)))
    return lines


def _byte_level(vocab_size: int, use_regex: bool) -> Tokenizer:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(), trainer)
    return backend


def _bytes_only() -> Tokenizer:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    return backend


def _sentencepiece_like() -> Tokenizer:
    """Metaspace pre-tokenization, BPE with byte fallback (`<0xNN>` tokens), and the Llama 2
    decoder chain (Replace, ByteFallback, Fuse, Strip)."""
    trained = Tokenizer(models.BPE(unk_token=None))
    trained.normalizer = normalizers.Replace(" ", "▁")
    trained.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        initial_alphabet=list("abcdefghijklmnopqrstuvwxyz<>/|{}[]\":=,.\n▁"),
        limit_alphabet=60,
        show_progress=False,
    )
    trained.train_from_iterator(_corpus(), trainer)
    spec = json.loads(trained.to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    spec["model"]["byte_fallback"] = True
    spec["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    return Tokenizer.from_str(json.dumps(spec))


@lru_cache(maxsize=None)
def base_json(name: str) -> str:
    """A base tokenizer (no added tokens), serialized: built once per session."""
    if name == "bytes":
        backend = _bytes_only()
    elif name == "bpe":
        backend = _byte_level(700, use_regex=False)
    elif name == "bpe_words":
        backend = _byte_level(600, use_regex=True)
    elif name == "sentencepiece":
        backend = _sentencepiece_like()
    else:
        raise ValueError(name)
    return backend.to_str()


@lru_cache(maxsize=None)
def base_tokenizer(name: str) -> Tokenizer:
    return Tokenizer.from_str(base_json(name))


@dataclass(frozen=True)
class AddedSpec:
    """An added token: its text, whether it is special, and how it may become a control token:
    "special" (always), "template" (the chat template writes it), "listed" (chat_control_tokens),
    or "plain" (an added token that is never a control token)."""

    content: str
    role: str


def build_tokenizer(
    base: str,
    added: list[AddedSpec],
    *,
    named_templates: bool = False,
    listed_mode: bool = False,
) -> Any:
    """A PreTrainedTokenizerFast over a copy of the base tokenizer with `added` tokens. Control
    tokens come from a chat template that writes the "template" tokens, or (`listed_mode`) from
    `chat_control_tokens` naming the "listed" ones (which then replaces the template rule)."""
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_str(base_json(base))
    for spec in added:
        token = AddedToken(spec.content, special=spec.role == "special", normalized=False)
        if spec.role == "special":
            backend.add_special_tokens([token])
        else:
            backend.add_tokens([token])
    written = [spec.content for spec in added if spec.role == "template"]
    body = "{% for message in messages %}{{ message['content'] }}{% endfor %}" + "".join(
        "{{ " + json.dumps(content) + " }}" for content in written
    )
    chat_template: Any = body
    if named_templates:
        half = len(written) // 2
        chat_template = {
            "default": "{% for message in messages %}{{ message['content'] }}{% endfor %}"
            + "".join("{{ " + json.dumps(c) + " }}" for c in written[:half]),
            "tool_use": "".join("{{ " + json.dumps(c) + " }}" for c in written[half:]) or "x",
        }
    kwargs: dict = {}
    if listed_mode:
        kwargs["chat_control_tokens"] = [spec.content for spec in added if spec.role == "listed"]
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **kwargs)
    tokenizer.chat_template = chat_template
    return tokenizer


def ordinary_ids(base: str, text: str, cuts: list[int], byte_wise: bool) -> list[int]:
    """`text` as ordinary tokens of the base tokenizer (which has no added tokens), encoded in the
    pieces `cuts` makes, or one byte per token (`byte_wise`, byte-level tokenizers only)."""
    backend = base_tokenizer(base)
    if byte_wise and base != "sentencepiece":
        mapping = _byte_alphabet()
        return [backend.token_to_id(mapping[byte]) for byte in text.encode("utf-8")]
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(text)), len(text)]
    ids: list[int] = []
    for start, end in zip(bounds, bounds[1:]):
        if start < end:
            ids += backend.encode(text[start:end], add_special_tokens=False).ids
    return ids


@lru_cache(maxsize=None)
def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> character mapping (ByteLevel's alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    characters = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return {byte: chr(ch) for byte, ch in zip(printable, characters)}


def occurrences(text: str, tokens: list[str]) -> list[tuple[int, int, str]]:
    """Non-overlapping occurrences of `tokens` in `text`, leftmost first, longest at one place."""
    found = []
    position = 0
    ordered = sorted(set(t for t in tokens if t), key=len, reverse=True)
    while position < len(text):
        best: Optional[str] = None
        for token in ordered:
            if text.startswith(token, position):
                best = token
                break
        if best is None:
            position += 1
            continue
        found.append((position, position + len(best), best))
        position += len(best)
    return found

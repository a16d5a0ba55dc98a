"""Token-id parsing: rtcompile beside transformers' interpreter, both fed generated token ids.

`python -m bench --token-ids` runs this section alone (`--quick` for a smoke run); the full
`python -m bench` runs it after the text-mode sections.

Per template (qwen3, qwen3_5, gemma4, gpt_oss), a byte-level BPE tokenizer is trained locally on
generations rendered with that model's chat-template format (bench/workloads.py), and the template's
delimiter tokens are added to it as the model's tokenizer has them: special tokens, and non-special
control tokens (listed in `chat_control_tokens`). The workload's prompt and generation are encoded
with it, so every delimiter arrives as its id, as a model generates them.

Timed per size (1K / 16K / 128K characters), implementations interleaved, medians of process CPU
time with the heap frozen (as the text-mode sections):

* stream: a parser built with `tokenizer=`, fed one id per `feed`, then finalized (microseconds per
  id, construction included);
* whole: `parse_response(ids, template, prefix=prompt_ids, tools=..., tokenizer=tok)` (microseconds).

Beside them, the same generation as text (the text-mode speed-ups of this run, streamed in the
workload's 1-6 character chunks, and whole), which the token-id speed-ups are compared with.
Before anything is timed, every implementation's events (per feed) and message must equal the
interpreter's.
"""

from __future__ import annotations

import statistics
from functools import lru_cache
from typing import Any

from . import workloads

# The delimiter tokens of each family's real tokenizer: (special tokens, non-special control tokens).
CONTROL_TOKENS = {
    "qwen3": (["<|im_start|>", "<|im_end|>", "<|endoftext|>"], ["<think>", "</think>", "<tool_call>", "</tool_call>"]),
    "qwen3_5": (["<|im_start|>", "<|im_end|>", "<|endoftext|>"], ["<think>", "</think>", "<tool_call>", "</tool_call>"]),
    "gemma4": (
        ["<|turn>", "<turn|>"],
        ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<|tool_response>", "<tool_response|>"],
    ),
    "gpt_oss": (
        ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>", "<|constrain|>"],
        [],
    ),
}


@lru_cache(maxsize=None)
def tokenizer_for(template_name: str) -> Any:
    """A byte-level BPE tokenizer trained on this family's generations, with its control tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts, _ = workloads.batch_texts(template_name, 200, 2_000)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4_000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    backend.train_from_iterator(texts, trainer)
    special, control = CONTROL_TOKENS[template_name]
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in control])
    return PreTrainedTokenizerFast(tokenizer_object=backend, chat_control_tokens=control)


class TokenWorkload:
    def __init__(self, template_name: str, size_label: str):
        self.template_name = template_name
        self.size_label = size_label
        self.text_workload = workloads.build_workload(template_name, size_label)
        self.template, _ = workloads.load_template(template_name)
        self.tokenizer = tokenizer_for(template_name)
        encode = self.tokenizer.encode
        self.ids = encode(self.text_workload.text, add_special_tokens=False)
        self.prefix_ids = encode(self.text_workload.prefix, add_special_tokens=False)
        self.tools = self.text_workload.tools


def _parsers(workload: TokenWorkload) -> dict:
    """name -> (make a token parser, parse a whole message), for both implementations."""
    import rtcompile
    from transformers.utils.chat_parsing import ResponseParser, parse_response

    template, tokenizer = workload.template, workload.tokenizer
    module = rtcompile.load(template)
    return {
        "interpreter": (
            lambda: ResponseParser(template, workload.prefix_ids, tools=workload.tools, tokenizer=tokenizer),
            lambda: parse_response(workload.ids, template, prefix=workload.prefix_ids, tools=workload.tools, tokenizer=tokenizer),
        ),
        "rtcompile": (
            lambda: module.ResponseParser(workload.prefix_ids, tools=workload.tools, tokenizer=tokenizer),
            lambda: module.parse_response(workload.ids, prefix=workload.prefix_ids, tools=workload.tools, tokenizer=tokenizer),
        ),
    }


def _text_parsers(workload: TokenWorkload) -> dict:
    import rtcompile
    from transformers.utils.chat_parsing import ResponseParser, parse_response

    text = workload.text_workload
    module = rtcompile.load(workload.template)
    return {
        "interpreter": (
            lambda: ResponseParser(workload.template, text.prefix, tools=text.tools),
            lambda: parse_response(text.text, workload.template, prefix=text.prefix, tools=text.tools),
        ),
        "rtcompile": (
            lambda: module.ResponseParser(text.prefix, tools=text.tools),
            lambda: module.parse_response(text.text, prefix=text.prefix, tools=text.tools),
        ),
    }


def _stream(make, chunks) -> list:
    parser = make()
    steps = [parser.initial_events]
    for chunk in chunks:
        steps.append(parser.feed(chunk))
    steps.append(parser.finalize())
    return steps


def verify(workload: TokenWorkload) -> None:
    """Events per feed and messages equal the interpreter's, or the benchmark stops."""
    from .run import MismatchError

    parsers = _parsers(workload)
    one_by_one = [[token_id] for token_id in workload.ids]
    expected = _stream(parsers["interpreter"][0], one_by_one)
    expected_whole = parsers["interpreter"][1]()
    actual = _stream(parsers["rtcompile"][0], one_by_one)
    if actual != expected:
        raise MismatchError(f"token-id stream of {workload.template_name} {workload.size_label} differs")
    if parsers["rtcompile"][1]() != expected_whole:
        raise MismatchError(f"token-id parse_response of {workload.template_name} {workload.size_label} differs")


def measure(template_names, sizes, reps: int, whole_inner: int) -> list[dict]:
    from .run import _frozen_heap, _timed

    rows = []
    for name in template_names:
        for size in sizes:
            workload = TokenWorkload(name, size)
            verify(workload)
            token_parsers, text_parsers = _parsers(workload), _text_parsers(workload)
            one_by_one = [[token_id] for token_id in workload.ids]
            text_chunks = workload.text_workload.chunks
            samples: dict[str, list[float]] = {}
            with _frozen_heap():
                for rep in range(reps):
                    order = ["interpreter", "rtcompile"] if rep % 2 == 0 else ["rtcompile", "interpreter"]
                    for impl in order:
                        make, whole = token_parsers[impl]
                        samples.setdefault(f"{impl} stream", []).append(
                            _timed(lambda: _stream(make, one_by_one))[0] / len(one_by_one)
                        )
                        samples.setdefault(f"{impl} whole", []).append(
                            _timed(lambda: [whole() for _ in range(whole_inner)])[0] / whole_inner
                        )
                        make, whole = text_parsers[impl]
                        samples.setdefault(f"{impl} text stream", []).append(
                            _timed(lambda: _stream(make, text_chunks))[0] / len(text_chunks)
                        )
                        samples.setdefault(f"{impl} text whole", []).append(
                            _timed(lambda: [whole() for _ in range(whole_inner)])[0] / whole_inner
                        )
            medians = {key: statistics.median(values) * 1e6 for key, values in samples.items()}
            rows.append(
                {
                    "template": name,
                    "size": size,
                    "ids": len(workload.ids),
                    "characters": len(workload.text_workload.text),
                    "us": medians,
                }
            )
    return rows


def render(rows: list[dict], table) -> str:
    lines = [
        "Token ids (one id per feed; whole messages with parse_response(ids, ..., tokenizer=)): "
        "microseconds, CPU, interpreter / rtcompile, and the speed-up beside the text mode's",
    ]
    body = []
    for row in rows:
        us = row["us"]
        stream = us["interpreter stream"] / us["rtcompile stream"]
        text_stream = us["interpreter text stream"] / us["rtcompile text stream"]
        whole = us["interpreter whole"] / us["rtcompile whole"]
        text_whole = us["interpreter text whole"] / us["rtcompile text whole"]
        body.append(
            [
                row["template"],
                f"{row['size']} ({row['ids']} ids)",
                f"{us['interpreter stream']:.2f} / {us['rtcompile stream']:.2f} per id",
                f"{stream:.1f}x (text {text_stream:.1f}x)",
                f"{us['interpreter whole']:.0f} / {us['rtcompile whole']:.0f}",
                f"{whole:.1f}x (text {text_whole:.1f}x)",
            ]
        )
    lines.append(
        table(["template", "size", "stream, us", "stream speed-up", "whole, us", "whole speed-up"], body)
    )
    return "\n".join(lines)


def main(quick: bool, table) -> tuple[list[dict], str]:
    if quick:
        rows = measure(("qwen3", "gemma4"), ("1K",), reps=3, whole_inner=3)
    else:
        rows = []
        for size, reps, inner in (("1K", 15, 20), ("16K", 9, 5), ("128K", 5, 1)):
            rows += measure(workloads.TEMPLATE_NAMES, (size,), reps=reps, whole_inner=inner)
    return rows, render(rows, table)

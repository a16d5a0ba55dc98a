"""Token ids for the serving tests: a tokenizer per bundled template whose delimiter tokens are
control tokens, generations encoded with it (each delimiter as its id, or spelled out with ordinary
tokens), and the chunks a server hands its parser.

`CONTROL_TOKENS` lists, per bundled template, the added tokens of the model's real tokenizer that
its delimiters and anchors are made of: special tokens, and non-special ones the chat template
writes (`<think>`, `<tool_call>` in Qwen's tokenizers), both control tokens for transformers.
`tokenizer_for(name)` adds them to a byte-level BPE tokenizer trained locally (tests/tokenizer_pool.py),
so that a template's delimiters arrive as single ids exactly as from the model.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from hypothesis import strategies as st

from tokenizer_pool import AddedSpec, build_tokenizer, occurrences, ordinary_ids

# (special tokens, non-special control tokens the chat template writes), per bundled template.
CONTROL_TOKENS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cohere_command_r7b": (
        (
            "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|USER_TOKEN|>",
            "<|START_THINKING|>", "<|END_THINKING|>", "<|START_ACTION|>", "<|END_ACTION|>",
            "<|START_RESPONSE|>", "<|END_RESPONSE|>",
        ),
        (),
    ),
    "deepseek_r1": (
        (
            "<｜Assistant｜>", "<｜User｜>", "<｜end▁of▁sentence｜>", "<｜tool▁calls▁begin｜>",
            "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
            "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
        ),
        ("<think>", "</think>"),
    ),
    "deepseek_v3_1": (
        (
            "<｜Assistant｜>", "<｜User｜>", "<｜end▁of▁sentence｜>", "<｜tool▁calls▁begin｜>",
            "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
            "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
        ),
        ("<think>", "</think>"),
    ),
    "ernie": (
        ("<|im_start|>", "<|im_end|>", "<|end_of_sentence|>", "</s>"),
        ("<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>"),
    ),
    "gemma3_pythonic": (("<start_of_turn>", "<end_of_turn>", "<eos>"), ()),
    "gemma4": (
        ("<|turn>", "<turn|>", "<eos>"),
        ("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<|tool_response>", "<tool_response|>"),
    ),
    "glm4_5": (
        ("<|assistant|>", "<|user|>", "<|observation|>", "<|endoftext|>"),
        ("<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    ),
    "gpt_oss": (
        ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>", "<|constrain|>"),
        (),
    ),
    "hermes2_pro": (("<|im_start|>", "<|im_end|>", "<|endoftext|>"), ("<tool_call>", "</tool_call>")),
    "kimi_k2": (
        (
            "<|im_assistant|>", "<|im_user|>", "<|im_middle|>", "<|im_end|>", "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
        ),
        ("<think>", "</think>"),
    ),
    "lfm2_5": (
        ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|tool_call_start|>", "<|tool_call_end|>"),
        ("<think>", "</think>"),
    ),
    "llama3_2_pythonic": (
        ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>"),
        (),
    ),
    "llama3_json": (
        ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>"),
        (),
    ),
    "llama4_pythonic": (
        ("<|header_start|>", "<|header_end|>", "<|eot|>", "<|eom|>", "<|end_of_text|>", "<|python_start|>", "<|python_end|>"),
        (),
    ),
    "minimax_m2": (("]~b]", "[e~[", "]~!b["), ("<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>")),
    "ministral3": (
        ("[INST]", "[/INST]", "[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "</s>"),
        (),
    ),
    "mistral_nemo": (("[INST]", "[/INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "</s>"), ()),
    "mistral_small_3_2": (
        ("[INST]", "[/INST]", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "</s>"),
        (),
    ),
    "phi4_mini": (("<|assistant|>", "<|user|>", "<|end|>", "<|endoftext|>", "<|tool_call|>", "<|/tool_call|>"), ()),
    "qwen3": (("<|im_start|>", "<|im_end|>", "<|endoftext|>"), ("<think>", "</think>", "<tool_call>", "</tool_call>")),
    "qwen3_5": (("<|im_start|>", "<|im_end|>", "<|endoftext|>"), ("<think>", "</think>", "<tool_call>", "</tool_call>")),
    "qwen3_coder": (("<|im_start|>", "<|im_end|>", "<|endoftext|>"), ("<tool_call>", "</tool_call>")),
    "smollm3": (("<|im_start|>", "<|im_end|>", "<|endoftext|>"), ("<think>", "</think>", "<tool_call>", "</tool_call>")),
}

BASE = "bpe"  # the pool's byte-level BPE: its merges cut across `<`, `|` and `/`


def control_tokens(name: str) -> tuple[str, ...]:
    special, written = CONTROL_TOKENS[name]
    return special + written


@lru_cache(maxsize=None)
def tokenizer_for(name: str) -> Any:
    """A fast transformers tokenizer for the bundled template `name`: its control tokens added, the
    special ones as special tokens, the others written by the tokenizer's chat template."""
    special, written = CONTROL_TOKENS[name]
    added = [AddedSpec(token, "special") for token in special] + [AddedSpec(token, "template") for token in written]
    return build_tokenizer(BASE, added)


def encode(name: str, text: str) -> list[int]:
    """`text` as the model generates it: every control token as its id, the rest ordinary tokens."""
    return tokenizer_for(name).encode(text, add_special_tokens=False)


def spelled(text: str, cuts: list[int] = ()) -> list[int]:
    """`text` written with ordinary tokens only (no added token matched), cut where `cuts` say."""
    return ordinary_ids(BASE, text, list(cuts), byte_wise=False)


def spelled_out(name: str, text: str) -> list[int]:
    """`text` with ordinary tokens only, every control token in it cut in two (the base vocabulary
    may hold a control token's spelling as one token, which is then the control token's id)."""
    cuts = [(start + end) // 2 for start, end, _ in occurrences(text, list(control_tokens(name)))]
    return spelled(text, cuts)


@st.composite
def generation_ids(draw, name: str, text: str) -> list[int]:
    """`text` as ids, each occurrence of a control token written as its id or spelled out with
    ordinary tokens (all one way, or each either way), the text between in random pieces."""
    tokenizer = tokenizer_for(name)
    mode = draw(st.sampled_from(["ids", "spelled", "mixed", "mixed"]))
    ids: list[int] = []
    position = 0

    def ordinary(piece: str) -> list[int]:
        if not piece:
            return []
        cuts = draw(st.lists(st.integers(1, max(1, len(piece) - 1)), max_size=3))
        return spelled(piece, cuts)

    for start, end, token in occurrences(text, list(control_tokens(name))):
        ids += ordinary(text[position:start])
        if mode == "ids" or (mode == "mixed" and draw(st.booleans())):
            ids.append(tokenizer.convert_tokens_to_ids(token))
        else:
            ids += ordinary(token)
        position = end
    ids += ordinary(text[position:])
    return ids


@st.composite
def id_chunks(draw, ids: list[int]) -> list[list[int]]:
    """The ids in the feeds a server makes: one per feed, or several (speculative decoding, a stream
    interval), now and then none."""
    if draw(st.booleans()):
        chunks = [[token_id] for token_id in ids]
    else:
        cuts = sorted(draw(st.lists(st.integers(0, len(ids)), max_size=12)))
        bounds = [0, *cuts, len(ids)]
        chunks = [ids[start:end] for start, end in zip(bounds, bounds[1:])]
    return chunks


def detokenized(name: str, chunks: list[list[int]]) -> list[str]:
    """Each chunk's text as vLLM's detokenizer hands it out with skip_special_tokens off: tokenizers'
    DecodeStream, id by id (text of an incomplete character waits for the ids that complete it)."""
    from tokenizers.decoders import DecodeStream

    backend = tokenizer_for(name).backend_tokenizer
    stream = DecodeStream(skip_special_tokens=False)
    texts = []
    for chunk in chunks:
        texts.append("".join(stream.step(backend, token_id) or "" for token_id in chunk))
    return texts


def interpreter_run(template: dict, prompt: Any, chunks: list, tools: Any = None, tokenizer: Any = None) -> Any:
    """(message, events) of transformers' interpreter fed `chunks` after `prompt` (text, or with
    `tokenizer` token ids), or the exception it raised."""
    from transformers.utils.chat_parsing import ResponseParser

    options = {"tokenizer": tokenizer} if tokenizer is not None else {}
    try:
        parser = ResponseParser(template, prompt, tools=tools, **options)
        events = list(parser.initial_events)
        for chunk in chunks:
            events += parser.feed(chunk)
        message, last = parser.finalize()
    except Exception as error:
        return error
    return message, events + last

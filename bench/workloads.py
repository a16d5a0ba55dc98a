"""Benchmark workloads: realistic generations for the main template families, fixed seeds.

A workload is what a server sees for one request: the rendered prompt (`prefix`, ending where
the assistant turn starts), the text the model then writes (`text`), the tools offered, and the
text cut into token-like chunks of 1 to 6 characters. Every generation has long reasoning, some
content and one to three tool calls, and is rendered the way the model family's own chat
template renders an assistant turn, so the delimiters, separators and escaping are the real
ones. `render_assistant_turn` is checked against the real chat templates in
tests/bench/test_bench_quick.py.

Per family, what a generation is:

* qwen3: `<think>\\n{reasoning}\\n</think>\\n\\n{content}\\n<tool_call>\\n{json}\\n</tool_call>...<|im_end|>`
* qwen3_5: the prompt ends with `<think>\\n`; the model writes `{reasoning}\\n</think>\\n\\n{content}`
  then `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n...` calls, `<|im_end|>`.
* gemma4 (thinking on): `<|channel>thought\\n{reasoning}\\n<channel|>`, the calls
  `<|tool_call>call:NAME{key:<|"|>text<|"|>,...}<tool_call|>`, then the content, and
  `<|tool_response>` (the chat template writes content after the calls).
* gpt_oss (harmony): analysis message, one message per call
  (`<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{json}<|call|>`),
  then the final answer ending `<|return|>`. A real harmony generation stops at the first
  `<|call|>`; here one agent turn's messages are concatenated into one stream so a single
  generation exercises every field, as for the other families.
"""

from __future__ import annotations

import json
import os
import random
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

TEMPLATE_NAMES = ("qwen3", "qwen3_5", "gpt_oss", "gemma4")
SIZES = {"1K": 1_000, "16K": 16_000, "128K": 128_000, "1M": 1_000_000}
CHUNK_SIZES = (1, 2, 3, 4, 5, 6)

REPO_ROOT = Path(__file__).resolve().parent.parent
# The real chat templates, kept byte for byte with the tests; used to render realistic prompts.
CHAT_TEMPLATE_DIR = Path(
    os.environ.get(
        "RTCOMPILE_CHAT_TEMPLATES", REPO_ROOT / "tests" / "template_cases" / "chat_templates"
    )
)

TOOLS: list[dict] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "City name, e.g. Lisbon"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web and return the top results.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Search terms"},
                    "max_results": {"type": "integer", "description": "How many results to return"},
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_python",
            "description": "Run a Python snippet in a sandbox and return what it prints.",
            "parameters": {
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "The code to run"},
                    "timeout": {
                        "type": "number",
                        "description": "Seconds before the run is stopped",
                    },
                },
                "required": ["code"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write text to a file in the workspace.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the workspace"},
                    "content": {"type": "string", "description": "The full file content"},
                    "overwrite": {"type": "boolean", "description": "Replace an existing file"},
                },
                "required": ["path", "content"],
            },
        },
    },
]

SYSTEM_PROMPT = "You are a careful assistant. Think step by step and use the tools when they help."
USER_QUERY = (
    "I'm planning a week of cycling between Lyon and Zurich. Check the weather, look up the "
    "route, work out the daily distances, and save a plan to plan.md."
)

# ---- text pieces ---------------------------------------------------------------------------------

_TOPICS = (
    "the weather in Lisbon next week",
    "a memory leak in the upload service",
    "the quarterly sales figures",
    "compound interest on a 30-year loan",
    "the fastest route from Lyon to Zürich",
    "a flaky integration test",
    "sorting ten million records",
    "the café's opening hours",
    "the daily distance for each stage",
    "the elevation profile of the Jura pass",
)
_SUBJECTS = (
    "the cache",
    "the user",
    "this approach",
    "the second option",
    "the API",
    "the query",
    "the loop",
    "my estimate",
    "the forecast",
    "the route planner",
    "the retry logic",
    "the first stage",
)
_THINGS = (
    "the rate limit",
    "the time zone",
    "rounding errors",
    "the headwind",
    "rest days",
    "the return value",
    "edge cases with empty input",
    "the unit conversion",
    "the train connection at Genève",
    "how long the climb takes",
    "the naïve estimate",
    "the total budget",
)
_VERBS = ("break", "slow down", "double count", "miss a case", "time out", "overflow", "drift")
_ADJECTIVES = ("reasonable", "too optimistic", "a bit tight", "plausible", "off by one", "fine")
_CITIES = ("Lyon", "Genève", "Lausanne", "Bern", "Zürich", "Annecy", "Besançon", "Basel")
_UNITS = ("km", "m", "hours", "°C", "km/h", "MB", "ms")
_IDENTIFIERS = ("plan_stage", "fetch_forecast", "total_km", "retry_after", "parse_row", "elapsed")
_TITLES = ("Route", "Weather", "Distances", "Budget", "Risks", "Next steps", "Timing")


def _reasoning_sentence(rng: random.Random) -> str:
    form = rng.randrange(12)
    if form == 0:
        return f"Okay, the user wants to know about {rng.choice(_TOPICS)}."
    if form == 1:
        return f"Let me think about {rng.choice(_THINGS)} first."
    if form == 2:
        return f"Hmm, {rng.choice(_SUBJECTS)} might {rng.choice(_VERBS)} if {rng.choice(_THINGS)} changes."
    if form == 3:
        return f"Wait, that's not right: {rng.choice(_SUBJECTS)} only matters when {rng.choice(_THINGS)} is known."
    if form == 4:
        a, b = rng.randint(2, 120), rng.randint(2, 9)
        unit = rng.choice(_UNITS)
        return f"If we take {a} {unit} and multiply by {b}, we get {a * b} {unit}."
    if form == 5:
        a, b = rng.randint(1, 50), rng.randint(51, 400)
        return f"So the constraint is x < {b} and x >= {a}, which leaves {b - a} cases to check."
    if form == 6:
        tool = rng.choice(("get_weather", "search_web", "run_python", "write_file"))
        return f"Maybe I should call {tool} to check {rng.choice(_THINGS)} instead of guessing."
    if form == 7:
        return f"Actually, the earlier figure of {rng.uniform(1, 500):.2f} was off by about {rng.randint(2, 40)}%."
    if form == 8:
        return f"`{rng.choice(_IDENTIFIERS)}()` returns {rng.choice(_THINGS)}, so {rng.choice(_SUBJECTS)} should be fine."
    if form == 9:
        a, b = rng.sample(_CITIES, 2)
        return f"From {a} to {b} is roughly {rng.randint(40, 180)} km — that's {rng.choice(_ADJECTIVES)} for one day."
    if form == 10:
        return f"I think the answer is {rng.choice(_ADJECTIVES)}, but let me double-check {rng.choice(_THINGS)}."
    return f"One more thing to consider is {rng.choice(_THINGS)}; {rng.choice(_SUBJECTS)} depends on it."


def _reasoning_paragraph(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return "\n".join(f"{i}. {_reasoning_sentence(rng)}" for i in range(1, rng.randint(3, 5)))
    return " ".join(_reasoning_sentence(rng) for _ in range(rng.randint(3, 7)))


def _content_block(rng: random.Random) -> str:
    form = rng.randrange(4)
    if form == 0:
        bullets = "\n".join(
            f"- **{rng.choice(_TITLES)}**: {_reasoning_sentence(rng)}"
            for _ in range(rng.randint(2, 4))
        )
        return f"Here's what I found about {rng.choice(_TOPICS)}:\n\n{bullets}"
    if form == 1:
        a, b = rng.sample(_CITIES, 2)
        return (
            f"## Stage {rng.randint(1, 7)}: {a} → {b}\n\n"
            f"About {rng.randint(60, 140)} km with {rng.randint(300, 1900)} m of climbing. "
            f"Expect {rng.randint(8, 24)} °C and a {rng.choice(('light', 'steady', 'strong'))} wind."
        )
    if form == 2:
        return f"```python\n{_code_snippet(rng)}\n```"
    return " ".join(_reasoning_sentence(rng) for _ in range(rng.randint(2, 4)))


def _code_snippet(rng: random.Random) -> str:
    name = rng.choice(_IDENTIFIERS)
    limit = rng.randint(10, 500)
    return (
        f"def {name}(rows):\n"
        f'    """Sum the distances, skipping rest days."""\n'
        f"    total = 0\n"
        f"    for row in rows:\n"
        f"        if row['km'] < {limit} and row.get('note') != \"rest\":\n"
        f"            total += row['km']\n"
        f"    return total\n\n"
        f"print({name}([{{'km': {rng.randint(40, 150)}}}, {{'km': {rng.randint(40, 150)}}}]))"
    )


def _fill(rng: random.Random, target: int, make_piece, separator: str) -> str:
    pieces: list[str] = []
    length = 0
    while length < target:
        piece = make_piece(rng)
        pieces.append(piece)
        length += len(piece) + len(separator)
    return separator.join(pieces)


# ---- messages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Generation:
    """The assistant message a model means to write (before any chat-template rendering)."""

    reasoning: str
    content: str
    calls: tuple[tuple[str, dict], ...]

    def expected_message(self) -> dict:
        """What parsing the rendered generation must give back."""
        message: dict[str, Any] = {"role": "assistant"}
        if self.reasoning.strip():
            message["reasoning_content"] = self.reasoning.strip()
        if self.content.strip():
            message["content"] = self.content.strip()
        if self.calls:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": name, "arguments": arguments}}
                for name, arguments in self.calls
            ]
        return message


def _tool_call(rng: random.Random, name: str, body_chars: int) -> tuple[str, dict]:
    if name == "get_weather":
        return name, {
            "location": rng.choice(_CITIES),
            "unit": rng.choice(("celsius", "fahrenheit")),
        }
    if name == "search_web":
        return name, {
            "query": f"{rng.choice(_TOPICS)} {rng.randint(2024, 2026)}",
            "max_results": rng.randint(3, 10),
        }
    if name == "run_python":
        code = _fill(rng, body_chars, _code_snippet, "\n\n")
        return name, {"code": code, "timeout": float(rng.choice((10, 30, 60)))}
    text = _fill(rng, body_chars, _content_block, "\n\n")
    return name, {"path": "plan.md", "content": text, "overwrite": rng.random() < 0.5}


def make_generation(rng: random.Random, target_chars: int) -> Generation:
    """Long reasoning (~75%), some content (~20%) and one to three tool calls (the rest)."""
    names = rng.sample([tool["function"]["name"] for tool in TOOLS], rng.randint(1, 3))
    body_chars = max(40, target_chars // 25)  # the code / file body of a bigger call
    calls = tuple(_tool_call(rng, name, body_chars) for name in names)
    content = _fill(rng, max(60, target_chars // 5), _content_block, "\n\n")
    call_chars = sum(len(json.dumps(arguments)) + 40 for _, arguments in calls)
    reasoning = _fill(
        rng, max(200, target_chars - len(content) - call_chars - 60), _reasoning_paragraph, "\n\n"
    )
    return Generation(reasoning, content, calls)


# ---- rendering, per family -----------------------------------------------------------------------


def _tojson(value: Any) -> str:
    # What the chat templates' `tojson` filter writes (transformers: ensure_ascii=False).
    return json.dumps(value, ensure_ascii=False)


def _jinja_string(value: Any) -> str:
    # Jinja's `|string` / `{{ value }}` on a Python value.
    return str(value)


def _gemma_value(value: Any) -> str:
    if isinstance(value, str):
        return '<|"|>' + value + '<|"|>'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{_gemma_value(value[key])}" for key in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_gemma_value(item) for item in value) + "]"
    return str(value)


def render_assistant_turn(template_name: str, generation: Generation) -> str:
    """The assistant turn as the family's chat template writes it, from the assistant-turn
    opener (`<|im_start|>assistant\\n`, `<|turn>model\\n`, `<|start|>assistant`) to the token
    the model stops on."""
    reasoning, content, calls = generation.reasoning, generation.content, generation.calls
    if template_name == "qwen3":
        parts = [
            "<|im_start|>assistant\n<think>\n",
            reasoning.strip("\n"),
            "\n</think>\n\n",
            content.lstrip("\n"),
        ]
        for index, (name, arguments) in enumerate(calls):
            if index or content:
                parts.append("\n")
            parts.append(
                f'<tool_call>\n{{"name": "{name}", "arguments": {_tojson(arguments)}}}\n</tool_call>'
            )
        parts.append("<|im_end|>")
        return "".join(parts)
    if template_name == "qwen3_5":
        content = content.strip()
        parts = ["<|im_start|>assistant\n<think>\n", reasoning.strip(), "\n</think>\n\n", content]
        for index, (name, arguments) in enumerate(calls):
            if index:
                parts.append("\n")
            elif content:
                parts.append("\n\n")
            parts.append(f"<tool_call>\n<function={name}>\n")
            for key, value in arguments.items():
                rendered = (
                    _tojson(value) if isinstance(value, (dict, list)) else _jinja_string(value)
                )
                parts.append(f"<parameter={key}>\n{rendered}\n</parameter>\n")
            parts.append("</function>\n</tool_call>")
        parts.append("<|im_end|>")
        return "".join(parts)
    if template_name == "gemma4":
        parts = ["<|turn>model\n", "<|channel>thought\n", reasoning, "\n<channel|>"]
        for name, arguments in calls:
            rendered = ",".join(
                f"{key}:{_gemma_value(arguments[key])}" for key in sorted(arguments)
            )
            parts.append(f"<|tool_call>call:{name}{{{rendered}}}<tool_call|>")
        parts.append(content.strip())
        parts.append("<|tool_response>")
        return "".join(parts)
    if template_name == "gpt_oss":
        parts = ["<|start|>assistant<|channel|>analysis<|message|>", reasoning, "<|end|>"]
        for name, arguments in calls:
            parts.append(
                f"<|start|>assistant to=functions.{name}<|channel|>commentary json<|message|>"
                f"{_tojson(arguments)}<|call|>"
            )
        if content:
            parts.append(f"<|start|>assistant<|channel|>final<|message|>{content}<|return|>")
        return "".join(parts)
    raise KeyError(f"no workload renderer for template {template_name!r}")


GENERATION_PROMPTS = {
    "qwen3": "<|im_start|>assistant\n",
    "qwen3_5": "<|im_start|>assistant\n<think>\n",
    "gemma4": "<|turn>model\n",
    "gpt_oss": "<|start|>assistant",
}


def split_generation(template_name: str, turn: str) -> str:
    """The part of a rendered assistant turn the model writes (after the generation prompt)."""
    opener = GENERATION_PROMPTS[template_name]
    if not turn.startswith(opener):
        raise ValueError(
            f"{template_name}: rendered turn does not start with the generation prompt"
        )
    return turn[len(opener) :]


def render_generation(template_name: str, generation: Generation) -> str:
    return split_generation(template_name, render_assistant_turn(template_name, generation))


# ---- prompts -------------------------------------------------------------------------------------


def _conversation() -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": USER_QUERY}]


def render_with_chat_template(
    template_name: str, messages: list[dict], *, add_generation_prompt: bool
) -> str:
    """Render with the family's real chat template (transformers' renderer, no tokenizer)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    source = (CHAT_TEMPLATE_DIR / f"{template_name}.jinja").read_text(encoding="utf-8")
    (rendered,), _ = render_jinja_template(
        conversations=[messages],
        tools=TOOLS,
        chat_template=source,
        add_generation_prompt=add_generation_prompt,
        bos_token="",
        eos_token="",
        enable_thinking=True,
    )
    return rendered


def _synthetic_prompt(template_name: str) -> str:
    # Without the chat templates at hand: the same turns, without the tool declarations.
    if template_name in ("qwen3", "qwen3_5"):
        turns = f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{USER_QUERY}<|im_end|>\n"
    elif template_name == "gemma4":
        turns = (
            f"<|turn>system\n<|think|>\n{SYSTEM_PROMPT}<turn|>\n<|turn>user\n{USER_QUERY}<turn|>\n"
        )
    else:
        turns = (
            f"<|start|>system<|message|>Reasoning: medium<|end|>"
            f"<|start|>developer<|message|># Instructions\n\n{SYSTEM_PROMPT}\n\n<|end|>"
            f"<|start|>user<|message|>{USER_QUERY}<|end|>"
        )
    return turns + GENERATION_PROMPTS[template_name]


@lru_cache(maxsize=None)
def prompt_prefix(template_name: str) -> tuple[str, str]:
    """(prefix, how it was made): the rendered prompt ending where the model starts writing."""
    if (CHAT_TEMPLATE_DIR / f"{template_name}.jinja").exists():
        prefix = render_with_chat_template(
            template_name, _conversation(), add_generation_prompt=True
        )
        if not prefix.endswith(GENERATION_PROMPTS[template_name]):
            raise ValueError(f"{template_name}: the chat template's generation prompt changed")
        return prefix, "chat template"
    return _synthetic_prompt(template_name), "synthetic (chat templates not found)"


# ---- templates -----------------------------------------------------------------------------------


def load_template(name: str) -> tuple[dict, str]:
    """(response template, where it came from). Bundled templates first; the transformers
    fallbacks only while a bundled one is missing."""
    try:
        from rtcompile.library import template_for

        return template_for(name), "bundled"
    except ImportError:
        pass
    path = REPO_ROOT / "templates" / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8")), "bundled"
    from transformers.cli.serving.utils import _RESPONSE_TEMPLATE_FALLBACKS

    for model_types, template in _RESPONSE_TEMPLATE_FALLBACKS.items():
        if name in model_types:
            return template, "transformers fallback"
    raise KeyError(f"no response template for {name!r} (no templates/{name}.json, no fallback)")


# ---- workloads -----------------------------------------------------------------------------------


def stable_seed(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def chunk_text(text: str, seed: int) -> list[str]:
    """Token-like chunks: 1 to 6 characters each, sizes from a fixed-seed RNG."""
    rng = random.Random(seed)
    chunks: list[str] = []
    position = 0
    while position < len(text):
        for size in rng.choices(CHUNK_SIZES, k=max(16, (len(text) - position) // 3)):
            chunks.append(text[position : position + size])
            position += size
            if position >= len(text):
                break
    return chunks


@dataclass
class Workload:
    template_name: str
    size_label: str
    prefix: str
    text: str
    tools: list[dict]
    generation: Generation
    chunks: list[str] = field(repr=False)


# The generations contain a few non-ASCII characters, as model output usually does (one is
# enough for CPython to store the whole text with 2 bytes per character, which doubles the cost
# of every copy of it). `ascii_only=True` replaces them, for comparison with ASCII-only figures.
_ASCII_REPLACEMENTS = str.maketrans(
    {"ü": "u", "è": "e", "é": "e", "ï": "i", "°": "deg", "—": "-", "→": "->", "ç": "c"}
)


def _ascii_value(value: Any) -> Any:
    if isinstance(value, str):
        return value.translate(_ASCII_REPLACEMENTS)
    if isinstance(value, dict):
        return {key: _ascii_value(item) for key, item in value.items()}
    return value


def ascii_generation(generation: Generation) -> Generation:
    return Generation(
        _ascii_value(generation.reasoning),
        _ascii_value(generation.content),
        tuple((name, _ascii_value(arguments)) for name, arguments in generation.calls),
    )


def build_workload(template_name: str, size_label: str, *, ascii_only: bool = False) -> Workload:
    rng = random.Random(stable_seed("generation", template_name, size_label))
    generation = make_generation(rng, SIZES[size_label])
    if ascii_only:
        generation = ascii_generation(generation)
    text = render_generation(template_name, generation)
    prefix, _ = prompt_prefix(template_name)
    chunks = chunk_text(text, stable_seed("chunks", template_name, size_label))
    return Workload(template_name, size_label, prefix, text, TOOLS, generation, chunks)


def batch_texts(
    template_name: str, count: int, size: int = 1_000, *, ascii_only: bool = False
) -> tuple[list[str], list[Generation]]:
    """`count` different finished generations of about `size` characters."""
    rng = random.Random(stable_seed("batch", template_name, count, size))
    generations = [make_generation(rng, size) for _ in range(count)]
    if ascii_only:
        generations = [ascii_generation(generation) for generation in generations]
    return [render_generation(template_name, generation) for generation in generations], generations

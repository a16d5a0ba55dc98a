"""The grammar backend's speed: building structural tags, and xgrammar compiling and walking them.

    python -m bench --grammar          # this section alone (about three minutes on 2 cores)
    python -m bench --grammar --quick  # a smoke run: 3 repetitions, one new process, one vocabulary

Three parts, each a median of process CPU time over interleaved repetitions (wall time in brackets),
with the heap frozen as in the other sections:

* Building: `rtcompile.structural_tag(template, TOOLS, tool_choice="required", prefix=prompt_ids,
  tokenizer=tok, stop_tokens=stops)` for 8 tools of varied schemas, the prompt rendered by the
  family's chat template and encoded with the family's token-id tokenizer (bench/token_ids.py).
  Uncached (`rtcompile.grammar._CACHE` cleared before each call) and cached (the same request
  again), alternating; and the first call of a fresh process (which imports the grammar backend,
  loads the template's parser module and lowers its IR; median over a few processes).
* Compiling: xgrammar's `GrammarCompiler(TokenizerInfo.from_huggingface(tok, ...),
  cache_enabled=False).compile_structural_tag(...)` of rtcompile's qwen3 tag (control tokens by id,
  and text only) beside xgrammar's built-in `get_model_structural_tag("qwen_3", ...)` (reasoning
  "auto": an optional think block, as rtcompile's grammar allows after this prompt), for the same
  tools and tool choices ("auto", "required"), on the same tokenizer: the family's, and a 32K
  vocabulary trained on the standard library's sources with the same control tokens.
* Walking: one fixed qwen3 output (reasoning, two calls, the stop), which every grammar must
  accept before anything is timed: `fill_next_token_bitmask` and `accept_token` per token.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from . import workloads

TEMPLATES = ("qwen3", "qwen3_5", "gemma4", "gpt_oss")
STOPS = {
    "qwen3": ["<|im_end|>", "<|endoftext|>"],
    "qwen3_5": ["<|im_end|>", "<|endoftext|>"],
    "gemma4": ["<turn|>"],
    "gpt_oss": ["<|return|>", "<|call|>"],
}
BUILD_TARGET_MS = 1.0
COMPILE_RATIO_TARGET = 1.5
CHOICES = ("auto", "required")


def _function(
    name: str, properties: dict | None = None, required: tuple[str, ...] = (), **extra: Any
) -> dict:
    function: dict = {"name": name, "description": f"The {name.replace('_', ' ')} tool."}
    if properties is not None:
        function["parameters"] = {
            "type": "object",
            "properties": properties,
            "required": list(required),
            **extra,
        }
    return {"type": "function", "function": function}


_STRING = {"type": "string"}
TOOLS = [
    _function(
        "get_weather",
        {
            "city": _STRING,
            "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["c", "f"]},
        },
        ("city",),
    ),
    _function(
        "search",
        {
            "query": _STRING,
            "exact": {"type": "boolean"},
            "limit": {"type": "number"},
            "tags": {"type": "array", "items": _STRING},
            "filters": {
                "type": "object",
                "properties": {
                    "after": {"type": "string", "nullable": True},
                    "lang": {"type": "string", "enum": ["en", "de"]},
                },
            },
        },
        ("query", "exact"),
    ),
    _function(
        "schedule",
        {
            "when": {"type": ["string", "integer"]},
            "attendees": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": _STRING, "optional": {"type": "boolean"}},
                    "required": ["name"],
                },
            },
        },
        ("when",),
        additionalProperties=False,
    ),
    _function(
        "send_email",
        {"to": {"type": "array", "items": _STRING}, "subject": _STRING, "body": _STRING},
        ("to", "subject"),
    ),
    _function(
        "calculate",
        {"expression": _STRING, "precision": {"type": ["integer", "null"]}},
        ("expression",),
    ),
    _function(
        "write_file",
        {"path": _STRING, "content": _STRING, "overwrite": {"type": "boolean"}},
        ("path", "content"),
    ),
    _function(
        "translate",
        {
            "text": _STRING,
            "source": {"type": "string", "enum": ["en", "fr", "de"]},
            "target": {"type": "string", "enum": ["en", "fr", "de"]},
        },
        ("text", "target"),
    ),
    _function("now"),
]

# An output every qwen3 grammar here accepts: reasoning, then two calls (arguments in the declared
# order, which xgrammar's built-in tag keeps; no text before the first call, which its "required"
# tag refuses), then the stop.
WALKED_OUTPUT = (
    "<think>\nThe user wants the weather in Bern and a search for bike routes. "
    "I will call both tools.\n</think>\n\n"
    '<tool_call>\n{"name": "get_weather", "arguments": '
    '{"city": "Bern", "days": 3, "unit": "c"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "search", "arguments": '
    '{"query": "bike routes near Bern", "exact": false, "limit": 5, '
    '"tags": ["cycling", "maps"]}}\n</tool_call>'
)


# ---- tokenizers and requests ---------------------------------------------------------------------


@lru_cache(maxsize=None)
def family_tokenizer(name: str) -> Any:
    from . import token_ids

    return token_ids.tokenizer_for(name)


@lru_cache(maxsize=None)
def stdlib_tokenizer(name: str, vocab_size: int = 32_000) -> Any:
    """A byte-level BPE of `vocab_size` tokens trained on the standard library's top-level modules
    (about 4.7 MB of Python, a second or two), with the family's control tokens."""
    import sysconfig

    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from . import token_ids

    sources = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    texts = [path.read_text(encoding="utf-8", errors="replace") for path in sources]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer)
    special, control = token_ids.CONTROL_TOKENS[name]
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in control])
    return PreTrainedTokenizerFast(tokenizer_object=backend, chat_control_tokens=control)


class Request:
    """One `structural_tag` request: the template's prompt (text and ids) and stop tokens."""

    def __init__(self, name: str, tokenizer: Any):
        self.name = name
        self.tokenizer = tokenizer
        self.prompt = workloads.prompt_prefix(name)[0]
        self.prompt_ids = tokenizer.encode(self.prompt, add_special_tokens=False)
        self.stop_ids = tokenizer.convert_tokens_to_ids(STOPS[name])

    def tag(self, choice: str = "required", *, token_ids: bool = True) -> dict:
        import rtcompile

        if token_ids:
            return rtcompile.structural_tag(
                self.name,
                TOOLS,
                tool_choice=choice,
                prefix=self.prompt_ids,
                tokenizer=self.tokenizer,
                stop_tokens=self.stop_ids,
            )
        return rtcompile.structural_tag(
            self.name, TOOLS, tool_choice=choice, prefix=self.prompt, stop_tokens=STOPS[self.name]
        )


def builtin_qwen3_tag(choice: str) -> str:
    import xgrammar as xgr

    return xgr.get_model_structural_tag(
        "qwen_3", tools=TOOLS, tool_choice=choice, reasoning="auto"
    ).model_dump_json()


# ---- timing --------------------------------------------------------------------------------------


def _median(samples: list[tuple[float, float]], scale: float) -> dict:
    return {
        "cpu": statistics.median(cpu for cpu, _ in samples) * scale,
        "wall": statistics.median(wall for _, wall in samples) * scale,
        "samples_cpu": [cpu * scale for cpu, _ in samples],
    }


def _inner_count(action: Callable[[], Any], seconds: float) -> int:
    """How many calls make a sample last about `seconds` (two untimed calls to calibrate)."""
    action()
    started = time.perf_counter()
    action()
    return max(1, int(seconds / max(time.perf_counter() - started, 1e-6)))


def _sample(action: Callable[[], Any], inner: int) -> tuple[float, float]:
    from .run import _timed

    cpu, wall = _timed(lambda: [action() for _ in range(inner)])
    return cpu / inner, wall / inner


def interleaved(
    actions: dict[str, Callable[[], Any]], reps: int, sample_seconds: float
) -> dict[str, dict]:
    """Median seconds per call of each action (ms figures: scaled by the caller), each repetition
    running every action once, starting point rotated."""
    from .run import _frozen_heap

    names = list(actions)
    inner = {name: _inner_count(action, sample_seconds) for name, action in actions.items()}
    samples: dict[str, list] = {name: [] for name in names}
    with _frozen_heap():
        for rep in range(reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(_sample(actions[name], inner[name]))
    return {name: {**_median(samples[name], 1.0), "inner": inner[name]} for name in names}


# ---- building the tag ----------------------------------------------------------------------------


def measure_building(
    reps: int, sample_seconds: float, first_call_runs: int, first_call_templates
) -> list[dict]:
    import rtcompile.grammar

    rows = []
    for name in TEMPLATES:
        request = Request(name, family_tokenizer(name))
        request.tag()  # (the template's module and IR loaded: the first call is measured apart)

        def uncached(request=request):
            rtcompile.grammar._CACHE.clear()
            request.tag()

        figures = interleaved({"uncached": uncached, "cached": request.tag}, reps, sample_seconds)
        first = measure_first_call(name, first_call_runs) if name in first_call_templates else None
        rows.append(
            {
                "template": name,
                "tools": len(TOOLS),
                "prompt_ids": len(request.prompt_ids),
                "tag_chars": len(json.dumps(request.tag())),
                "uncached_ms": figures["uncached"]["cpu"] * 1e3,
                "uncached_wall_ms": figures["uncached"]["wall"] * 1e3,
                "cached_ms": figures["cached"]["cpu"] * 1e3,
                "cached_wall_ms": figures["cached"]["wall"] * 1e3,
                "first_call_ms": first,
            }
        )
    return rows


_FIRST_CALL = """
import json, sys, time
from transformers import PreTrainedTokenizerFast
from bench.grammar import Request
request = Request(sys.argv[1], PreTrainedTokenizerFast.from_pretrained(sys.argv[2]))
started = time.process_time()
request.tag()
print(json.dumps({"first_call_s": time.process_time() - started}))
"""


def measure_first_call(name: str, runs: int) -> float:
    """Median CPU milliseconds of the first `structural_tag` call in a new process (the tokenizer
    loaded and the prompt encoded before it; nothing of rtcompile's grammar imported yet)."""
    repo_root = Path(__file__).resolve().parents[1]
    figures = []
    with tempfile.TemporaryDirectory(prefix="rtcompile-bench-grammar-") as directory:
        family_tokenizer(name).save_pretrained(directory)
        for _ in range(runs):
            completed = subprocess.run(
                [sys.executable, "-c", _FIRST_CALL, name, directory],
                cwd=repo_root,
                capture_output=True,
                text=True,
                timeout=300,
                env=os.environ.copy(),
            )
            if completed.returncode != 0:
                raise RuntimeError(f"first-call probe of {name} failed: {completed.stderr[-2000:]}")
            figures.append(
                json.loads(completed.stdout.strip().splitlines()[-1])["first_call_s"] * 1e3
            )
    return statistics.median(figures)


# ---- compiling and walking -----------------------------------------------------------------------


def qwen3_grammars(tokenizer: Any) -> tuple[Any, dict[str, dict[str, str]], list[int]]:
    """(xgrammar TokenizerInfo, {choice: {implementation: tag JSON}}, stop ids) for qwen3."""
    import xgrammar as xgr

    request = Request("qwen3", tokenizer)
    info = xgr.TokenizerInfo.from_huggingface(
        tokenizer, vocab_size=len(tokenizer), stop_token_ids=request.stop_ids
    )
    tags = {
        choice: {
            "xgrammar qwen_3": builtin_qwen3_tag(choice),
            "rtcompile ids": json.dumps(request.tag(choice)),
            "rtcompile text": json.dumps(request.tag(choice, token_ids=False)),
        }
        for choice in CHOICES
    }
    return info, tags, request.stop_ids


def walk(matcher: Any, bitmask: Any, ids: list[int]) -> bool:
    for token_id in ids:
        matcher.fill_next_token_bitmask(bitmask)
        if not matcher.accept_token(token_id):
            return False
    return True


def check_walk(grammar: Any, ids: list[int], label: str) -> None:
    """The grammar accepts the walked output and ends at its stop, or nothing is timed."""
    import xgrammar as xgr

    from .run import MismatchError

    matcher = xgr.GrammarMatcher(grammar)
    if (
        not walk(matcher, xgr.allocate_token_bitmask(1, grammar.tokenizer_info.vocab_size), ids)
        or not matcher.is_terminated()
    ):
        raise MismatchError(f"{label} refuses the walked output (or does not end after its stop)")


def measure_compiling(vocabularies: dict[str, Any], reps: int, sample_seconds: float) -> list[dict]:
    import xgrammar as xgr

    rows = []
    for vocabulary, tokenizer in vocabularies.items():
        info, tags, stop_ids = qwen3_grammars(tokenizer)
        compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        walked = tokenizer.encode(WALKED_OUTPUT, add_special_tokens=False) + [stop_ids[0]]
        for choice, by_implementation in tags.items():
            grammars = {
                impl: compiler.compile_structural_tag(tag)
                for impl, tag in by_implementation.items()
            }
            for impl, grammar in grammars.items():
                check_walk(grammar, walked, f"{impl} ({choice}, {vocabulary})")
            compile_figures = interleaved(
                {
                    impl: (lambda tag=tag: compiler.compile_structural_tag(tag))
                    for impl, tag in by_implementation.items()
                },
                reps,
                sample_seconds,
            )
            bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
            matchers = {impl: xgr.GrammarMatcher(grammar) for impl, grammar in grammars.items()}
            walk_figures = interleaved(
                {
                    impl: (
                        lambda matcher=matcher: (matcher.reset(), walk(matcher, bitmask, walked))
                    )
                    for impl, matcher in matchers.items()
                },
                reps,
                sample_seconds,
            )
            rows.append(
                {
                    "vocabulary": vocabulary,
                    "vocab_size": len(tokenizer),
                    "choice": choice,
                    "walked_tokens": len(walked),
                    "compile_ms": {
                        impl: figures["cpu"] * 1e3 for impl, figures in compile_figures.items()
                    },
                    "compile_wall_ms": {
                        impl: figures["wall"] * 1e3 for impl, figures in compile_figures.items()
                    },
                    "mask_us_per_token": {
                        impl: figures["cpu"] * 1e6 / len(walked)
                        for impl, figures in walk_figures.items()
                    },
                    "tag_chars": {impl: len(tag) for impl, tag in by_implementation.items()},
                }
            )
    return rows


# ---- the section ---------------------------------------------------------------------------------


def _versions() -> dict:
    import platform
    from importlib import metadata

    return {
        "python": platform.python_version(),
        **{
            package: metadata.version(package)
            for package in ("xgrammar", "transformers", "tokenizers")
        },
        "cpus": os.cpu_count(),
    }


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def measure(quick: bool) -> dict:
    reps, sample_seconds = (3, 0.01) if quick else (15, 0.05)
    load_before = _load()
    first_call_templates = ("qwen3",) if quick else TEMPLATES
    started = time.perf_counter()
    building = measure_building(reps, sample_seconds, 1 if quick else 3, first_call_templates)
    print(
        f"  measured building ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True
    )
    vocabularies = {"family": family_tokenizer("qwen3")}
    if not quick:
        vocabularies["stdlib 32K"] = stdlib_tokenizer("qwen3")
    started = time.perf_counter()
    compiling = measure_compiling(vocabularies, reps, sample_seconds)
    print(
        f"  measured compiling ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True
    )
    return {
        "building": building,
        "compiling": compiling,
        "tools": len(TOOLS),
        "reps": reps,
        "versions": _versions(),
        "load": f"{load_before} -> {_load()}",
    }


def render(results: dict, table, book) -> str:
    versions = results["versions"]
    lines = [
        f"rtcompile grammar benchmark - Python {versions['python']}, "
        f"xgrammar {versions['xgrammar']}, transformers {versions['transformers']}, "
        f"tokenizers {versions['tokenizers']}, {versions['cpus']} CPUs, "
        f"load average {results['load']}; medians of {results['reps']} interleaved repetitions",
        "",
        f"Building the structural tag ({results['tools']} tools, tool_choice required, "
        "prompt ids as prefix): milliseconds, CPU (wall)",
    ]
    body = []
    for row in results["building"]:
        first = "-" if row["first_call_ms"] is None else f"{row['first_call_ms']:.1f}"
        body.append(
            [
                row["template"],
                str(row["prompt_ids"]),
                str(row["tag_chars"]),
                first,
                f"{row['uncached_ms']:.3f} ({row['uncached_wall_ms']:.3f})",
                book.check(
                    f"grammar build uncached {row['template']} ms",
                    row["uncached_ms"],
                    BUILD_TARGET_MS,
                    at_least=False,
                ),
                f"{row['cached_ms']:.3f} ({row['cached_wall_ms']:.3f})",
                book.check(
                    f"grammar build cached {row['template']} ms",
                    row["cached_ms"],
                    BUILD_TARGET_MS,
                    at_least=False,
                ),
            ]
        )
    lines.append(
        table(
            [
                "template",
                "prompt ids",
                "tag chars",
                "first call in a process",
                "uncached",
                "target",
                "cached",
                "target",
            ],
            body,
        )
    )
    lines.append("")
    lines.append(_render_compiling(results["compiling"], table, book))
    return "\n".join(lines)


def _render_compiling(rows: list[dict], table, book) -> str:
    lines = [
        "xgrammar on qwen3: compile (GrammarCompiler, cache off) in ms, CPU; mask + accept per "
        "token of one walked output in us, CPU. Beside xgrammar's built-in qwen_3 tag (reasoning "
        "auto): rtcompile's tag "
        "with control tokens by id, and text only",
    ]
    implementations = ["xgrammar qwen_3", "rtcompile ids", "rtcompile text"]
    body = []
    for row in rows:
        compile_ms, mask = row["compile_ms"], row["mask_us_per_token"]
        ratio = compile_ms["rtcompile ids"] / compile_ms["xgrammar qwen_3"]
        label = f"{row['vocabulary']} ({row['vocab_size']})"
        body.append(
            [
                label,
                row["choice"],
                " / ".join(f"{compile_ms[impl]:.1f}" for impl in implementations),
                f"{ratio:.2f}x",
                book.check(
                    f"grammar compile ratio {row['vocabulary']} {row['choice']}",
                    ratio,
                    COMPILE_RATIO_TARGET,
                    at_least=False,
                ),
                f"{compile_ms['rtcompile text'] / compile_ms['xgrammar qwen_3']:.2f}x",
                " / ".join(f"{mask[impl]:.1f}" for impl in implementations),
                f"{mask['rtcompile ids'] / mask['xgrammar qwen_3']:.2f}x",
            ]
        )
    headers = [
        "vocabulary",
        "tool_choice",
        "compile ms: built-in / ids / text",
        "ids/built-in",
        "target",
        "text/built-in",
        "mask us/token: built-in / ids / text",
        "ids/built-in",
    ]
    lines.append(table(headers, body))
    return "\n".join(lines)


def main(quick: bool, table, book) -> tuple[dict, str]:
    results = measure(quick)
    return results, render(results, table, book)

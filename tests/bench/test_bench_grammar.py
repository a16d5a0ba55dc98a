"""The grammar backend's benchmark section (bench/grammar.py) runs and reports every figure; no
timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # bench/ is a folder of the repository, not of the package
    sys.path.insert(0, str(REPO_ROOT))

from bench import grammar  # noqa: E402


def test_quick_grammar_section_reports_building_compiling_and_walking(tmp_path):
    output = tmp_path / "grammar.json"
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--grammar", "--quick", "--json", str(output)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    results = json.loads(output.read_text(encoding="utf-8"))["grammar"]
    assert [row["template"] for row in results["building"]] == list(grammar.TEMPLATES)
    for row in results["building"]:
        assert row["tools"] == 8 and row["prompt_ids"] > 100 and row["tag_chars"] > 0
        assert row["uncached_ms"] > 0 and row["cached_ms"] > 0
    assert results["building"][0]["first_call_ms"] > 0
    assert {(row["vocabulary"], row["choice"]) for row in results["compiling"]} == {
        ("family", "auto"),
        ("family", "required"),
    }
    for row in results["compiling"]:
        implementations = {"xgrammar qwen_3", "rtcompile ids", "rtcompile text"}
        assert set(row["compile_ms"]) == set(row["mask_us_per_token"]) == implementations
        assert all(
            value > 0 for value in [*row["compile_ms"].values(), *row["mask_us_per_token"].values()]
        )
    assert (
        "Building the structural tag" in completed.stdout
        and "xgrammar on qwen3" in completed.stdout
    )


def test_every_qwen3_grammar_accepts_the_walked_output_and_a_refused_one_stops_the_run():
    """What the section walks is checked first: each grammar accepts it and ends at its stop; an
    output one grammar refuses raises instead of being timed."""
    import xgrammar as xgr

    from bench.run import MismatchError

    tokenizer = grammar.family_tokenizer("qwen3")
    info, tags, stop_ids = grammar.qwen3_grammars(tokenizer)
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    walked = tokenizer.encode(grammar.WALKED_OUTPUT, add_special_tokens=False) + [stop_ids[0]]
    for choice, by_implementation in tags.items():
        for implementation, tag in by_implementation.items():
            grammar.check_walk(
                compiler.compile_structural_tag(tag), walked, f"{implementation} {choice}"
            )
    refused = tokenizer.encode("Free text before a call.", add_special_tokens=False) + walked
    with_text_first = compiler.compile_structural_tag(tags["required"]["xgrammar qwen_3"])
    with pytest.raises(MismatchError, match="built-in required refuses"):
        grammar.check_walk(with_text_first, refused, "built-in required")

"""The benchmark report (bench/run.py's render_report), rendered from hand-made figures: every
section in its place, and every target compared, in order, with the verdict its figures call for.
No timing happens here."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # bench/ is a folder of the repository, not of the package
    sys.path.insert(0, str(REPO_ROOT))

from bench import run  # noqa: E402


def figure(cpu: float, method: str = "1 whole stream(s) per sample") -> dict:
    return {"cpu": cpu, "wall": cpu * 1.5, "method": method}


# (interpreter, rtcompile, handwritten) CPU per chunk / per message; None: not run
STREAMING = {
    "qwen3": {"1K": (10.0, 0.5, 0.4), "16K": (14.0, 2.0, 1.0), "1M": (300.0, 2.4, 1.2)},
    "gemma4": {"1K": (10.0, 4.0, None), "16K": (14.0, 1.0, None), "1M": (300.0, 2.0, None)},
}
WHOLE = {
    "qwen3": {"1K": (100.0, 25.0, 20.0), "16K": (1000.0, 100.0, 100.0), "1M": (9e4, 9e3, 8e3)},
    "gemma4": {"1K": (100.0, 10.0, None), "16K": (1000.0, 100.0, None), "1M": (9e4, 9e3, None)},
}
for per_template in (*STREAMING.values(), *WHOLE.values()):  # the quick mode's largest size
    per_template["128K"] = per_template["1M"]


def per_implementation(values: tuple, size: str) -> dict:
    entries = {}
    for impl, value in zip(run.IMPLEMENTATIONS, values):
        if value is not None:
            windowed = impl == "interpreter" and size == "1M"
            entries[impl] = figure(value, "4 windows x 1000 chunks" if windowed else "1 parse(s)")
    return entries


def made_up_results(sizes: tuple[str, ...]) -> dict:
    return {
        "quick": False,
        "ascii_only": False,
        "environment": {
            "python": "3.11.7",
            "transformers": "5.25.0",
            "cpus": 2,
            "load_before": "0.10 0.20 0.30",
            "load_after": "0.40 0.50 0.60",
        },
        "templates": {
            "qwen3": {"source": "bundled", "prefix_source": "chat template", "missing": {}},
            "gemma4": {
                "source": "bundled",
                "prefix_source": "chat template",
                "missing": {"handwritten": "no hand-written streaming parser"},
            },
        },
        "workloads": {name: {size: {"chunks": 300} for size in sizes} for name in STREAMING},
        "streaming": {
            name: {size: per_implementation(per_size[size], size) for size in sizes}
            for name, per_size in STREAMING.items()
        },
        "whole_message": {
            name: {size: per_implementation(per_size[size], size) for size in sizes}
            for name, per_size in WHOLE.items()
        },
        "batch": {
            "qwen3": {
                "interpreter": {"cpu": 1000.0, "wall": 900.0, "messages": 10_000},
                "rtcompile": {"cpu": 9000.0, "wall": 8000.0, "messages": 10_000},
                "handwritten": {"cpu": 10_000.0, "wall": 9000.0, "messages": 10_000},
            },
        },
        "import": {
            "qwen3": {
                "module_cpu_s": 0.010,
                "module_wall_s": 0.012,
                "regex_cpu_s": 0.004,
                "regex_wall_s": 0.005,
                "heavy_imports": [],
            },
        },
        "compile": {
            "qwen3": {
                "compile_cold_cpu": 0.2,
                "compile_cold_wall": 0.25,
                "compile_warm_cpu": 0.1,
                "load_first_cpu": 0.21,
                "load_memo_same_object_cpu": 1e-5,
                "load_memo_equal_copy_cpu": 2e-5,
                "load_new_process_warm_cache_cpu": 0.05,
                "load_new_process_warm_cache_wall": 0.06,
                "cache_hit_cpu": 0.003,
                "cache_hit_wall": 0.004,
                "first_parse_after_hit_cpu": 0.001,
                "next_parse_after_hit_cpu": 0.0001,
                "cache_dir_files_after_first_load": ["a", "b"],
            },
        },
        "verification": {
            "rtcompile": {"whole_message": 6, "streams_full": 4},
            "handwritten": {"whole_message": 3},
        },
    }


def rendered(sizes: tuple[str, ...]) -> tuple[str, list[dict]]:
    config = run.Config(**{**run.asdict(run.FULL), "sizes": sizes})
    book = run.TargetBook()
    return run.render_report(made_up_results(sizes), config, book), book.entries


def test_every_section_of_the_full_report_in_order():
    report, _ = rendered(("1K", "16K", "1M"))
    section_starts = [
        "rtcompile benchmark (full) - Python 3.11.7, transformers 5.25.0, 2 CPUs, load average "
        "0.10 0.20 0.30 -> 0.40 0.50 0.60",
        "  gemma4: template bundled, prompt from chat template; not run: handwritten: no "
        "hand-written streaming parser",
        "Streaming in token-like chunks of 1-6 characters: microseconds per chunk",
        "  interpreter streamed on windows of consecutive chunks at 1M (4 windows x 1000 chunks);"
        " everything else on whole streams",
        "Growth: per-chunk CPU cost at 1M / at 16K\n",
        "Whole message (parse_response): microseconds per message",
        "Batch: 10,000 finished ~1K generations parsed one after another: messages/s",
        "Import of a generated module in a fresh interpreter",
        "Compile and load (ms, CPU; wall in brackets)",
        "Equality checks passed before timing (per implementation): rtcompile: streams_full 4, "
        "whole_message 6; handwritten: whole_message 3",
    ]
    assert "\n\n\n" not in report  # one blank line between sections
    positions = [report.find(start) for start in section_starts]
    assert -1 not in positions, [s for s, p in zip(section_starts, positions) if p == -1]
    assert positions == sorted(positions)
    lines = report.splitlines()
    # one row per figure, its ratio and its verdict beside it (columns split on runs of spaces)
    rows = {
        tuple(line.split("  ")[0:1])
        + tuple(cell.strip() for cell in line.split("  ") if cell)[1:3]: line
        for line in lines
    }
    assert rows[("qwen3", "1K", "300")].split()[-6:] == [
        "20.0x",
        ">=4",
        "ok",
        "1.25x",
        "<=1.5",
        "ok",
    ]
    assert rows[("gemma4", "1K", "300")].endswith("2.5x        >=4 MISS  -")
    assert rows[("gemma4", "rtcompile", "1.000")].endswith("2.00    <=1.3 MISS")
    assert rows[("qwen3", "handwritten", "1.000")].endswith("1.20")  # no target but rtcompile's
    assert rows[("qwen3", "1K", "100.0 (150.0)")].endswith("4.0x        >=5 MISS  1.25x <=1.3 ok")
    assert rows[("qwen3", "10000", "1000 (900)")].endswith("9.0x")
    assert rows[("qwen3", "10.0 (12.0)", "4.0 (5.0)")].endswith("<=15 ok  none <=0 ok")
    assert "3.00 (4.00)  <=2 MISS" in rows[("qwen3", "200 (250)", "<=300 ok")]


def test_every_target_is_compared_once_in_report_order_with_its_verdict():
    _, entries = rendered(("1K", "16K", "1M"))
    expected = [
        ("streaming ratio qwen3 1K", True),  # 10 / 0.5 = 20 >= 4
        ("streaming rtcompile/handwritten qwen3 1K", True),  # 0.5 / 0.4 = 1.25 <= 1.5
        ("streaming ratio qwen3 16K", True),  # 14 / 2 = 7 >= 7
        ("streaming rtcompile/handwritten qwen3 16K", False),  # 2 / 1 = 2 > 1.5
        ("streaming ratio qwen3 1M", True),  # 300 / 2.4 = 125 >= 100
        ("streaming rtcompile/handwritten qwen3 1M", False),
        ("streaming ratio gemma4 1K", False),  # 10 / 4 = 2.5 < 4
        ("streaming ratio gemma4 16K", True),
        ("streaming ratio gemma4 1M", True),  # 300 / 2 = 150
        ("growth rtcompile qwen3 1M/16K", True),  # 2.4 / 2 = 1.2 <= 1.3
        ("growth rtcompile gemma4 1M/16K", False),  # 2 / 1 = 2 > 1.3
        ("whole-message ratio qwen3 1K", False),  # 100 / 25 = 4 < 5
        ("whole-message rtcompile/handwritten qwen3 1K", True),  # 25 / 20 = 1.25 <= 1.3
        ("whole-message ratio qwen3 16K", True),
        ("whole-message rtcompile/handwritten qwen3 16K", True),
        ("whole-message ratio gemma4 1K", True),
        ("whole-message ratio gemma4 16K", True),
        ("import ms qwen3", True),  # 10 ms <= 15
        ("heavy imports qwen3", True),  # none
        ("cold compile ms qwen3", True),  # 200 ms <= 300
        ("cache hit ms qwen3", False),  # 3 ms > 2
    ]
    assert [(entry["target"], entry["met"]) for entry in entries] == expected
    assert entries[0]["value"] == 20.0 and entries[0]["goal"] == ">= 4"
    report, _ = rendered(("1K", "16K", "1M"))
    missed = [name for name, met in expected if not met]
    tally = f"Targets: {len(expected) - len(missed)} of {len(expected)} met"
    assert report.splitlines()[-1] == f"{tally}; missed: {', '.join(missed)}"


def test_without_1m_the_growth_table_has_no_target_and_the_tally_counts_what_was_compared():
    report, entries = rendered(("1K", "16K", "128K"))
    assert (
        "Growth: per-chunk CPU cost at 128K / at 16K (quick mode: 1M not run, no target)" in report
    )
    assert not any(entry["target"].startswith("growth") for entry in entries)
    # 128K has no interpreter ratio target, only the hand-written one every size has
    at_128k = [entry["target"] for entry in entries if entry["target"].endswith(" 128K")]
    assert at_128k == ["streaming rtcompile/handwritten qwen3 128K"]
    assert "interpreter streamed on windows" not in report
    assert report.splitlines()[-1].startswith(
        f"Targets: {sum(e['met'] for e in entries)} of {len(entries)} met"
    )


def test_sections_without_figures_are_left_out():
    results = made_up_results(("1K", "16K"))
    results["import"], results["compile"] = {}, {}
    config = run.Config(**{**run.asdict(run.QUICK), "sizes": ("1K", "16K")})
    book = run.TargetBook()
    report = run.render_report(results, config, book)
    for absent in ("Growth:", "Import of a generated module", "Compile and load"):
        assert absent not in report
    assert "Batch: 1,000 finished" in report
    assert "\n\n\n" not in report  # (a left-out section leaves no blank line behind)
    assert report.splitlines()[-3] == ""
    assert not any(
        entry["target"].startswith(("import ms", "heavy imports", "cold compile", "cache hit"))
        for entry in book.entries
    )

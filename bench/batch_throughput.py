"""Batch throughput: rows per second for a dataset of finished generations of mixed sizes.

    python -m bench --batch-only                 # 100,000 rows, qwen3_5 (the default template)
    python -m bench --quick --batch-only         # 2,000 rows

Side by side, on the same rows (prompt, generation, tools as a JSON string), interleaved, medians:

* interpreter loop: `for row in rows: parse_response(text, template, prefix=..., tools=...)`, the
  loop users write today (template validated once, tools decoded once per row, as a loader would);
* API, 1 and 2 jobs: `rtcompile.batch.parse_table` on the rows as a pyarrow Table in memory;
* parse command, 1 and 2 jobs: `python -m rtcompile parse rows.parquet -o out.parquet`, a fresh
  process reading and writing Parquet (start-up, workers and I/O included).

Several processes are involved, so the headline is wall time (rows per second); the CPU time of
the process and its children is reported beside it. Before anything is timed, every message the
API and the command produce is checked against the interpreter loop's.
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import workloads

# Size mix of the rows (characters, weight): mostly short answers, some long reasoning.
SIZE_MIX = ((500, 30), (1_000, 35), (2_000, 20), (4_000, 10), (16_000, 5))
DISTINCT = 2_000  # distinct generations; the rows cycle through them
REPO_ROOT = Path(__file__).resolve().parent.parent


def make_rows(template_name: str, count: int) -> list[dict]:
    rng = random.Random(workloads.stable_seed("batch-throughput", template_name, count))
    sizes = [size for size, weight in SIZE_MIX for _ in range(weight)]
    prefix = workloads.prompt_prefix(template_name)[0]
    tools = json.dumps(workloads.TOOLS)
    distinct = [
        workloads.render_generation(template_name, workloads.make_generation(rng, rng.choice(sizes)))
        for _ in range(min(count, DISTINCT))
    ]
    return [{"id": i, "prompt": prefix, "completion": distinct[i % len(distinct)], "tools": tools} for i in range(count)]


def _cpu_with_children() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(action) -> tuple[float, float, object]:
    cpu, wall = _cpu_with_children(), time.perf_counter()
    result = action()
    return time.perf_counter() - wall, _cpu_with_children() - cpu, result


def measure(template_name: str, count: int, reps: int, jobs_options=(1, 2)) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers.utils.chat_parsing import parse_response
    from transformers.utils.chat_parsing.response_templates import load_response_template

    from rtcompile import batch

    template = workloads.load_template(template_name)[0]
    rows = make_rows(template_name, count)
    table = pa.Table.from_pylist(rows)
    spec = load_response_template(template)

    def interpreter_loop() -> list:
        out = []
        for row in rows:
            out.append(parse_response(row["completion"], spec, prefix=row["prompt"], tools=json.loads(row["tools"])))
        return out

    with tempfile.TemporaryDirectory(prefix="rtcompile-batch-bench-") as work:
        work = Path(work)
        pq.write_table(table, work / "rows.parquet")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}

        def command(jobs: int):
            def run():
                completed = subprocess.run(
                    [sys.executable, "-m", "rtcompile", "parse", str(work / "rows.parquet"), "-o", str(work / f"out{jobs}.parquet"),
                     "--template", template_name, "--jobs", str(jobs)],
                    capture_output=True, text=True, env=env,
                )
                if completed.returncode != 0:
                    raise RuntimeError(f"parse command failed: {completed.stderr[-2000:]}")
                return work / f"out{jobs}.parquet"

            return run

        implementations = {"interpreter loop": interpreter_loop}
        for jobs in jobs_options:
            implementations[f"API, {jobs} job{'s' if jobs > 1 else ''}"] = (lambda jobs=jobs: batch.parse_table(table, template, jobs=jobs))
        for jobs in jobs_options:
            implementations[f"parse command, {jobs} job{'s' if jobs > 1 else ''}"] = command(jobs)

        # Verify first: the same messages everywhere, no errors.
        expected = interpreter_loop()
        for name, action in implementations.items():
            if name == "interpreter loop":
                continue
            result = action()
            out = pq.read_table(result) if isinstance(result, Path) else result
            messages = out.column("message").to_pylist()
            errors = out.column("error").null_count
            if errors != out.num_rows or [json.loads(m) for m in messages] != expected:
                raise AssertionError(f"batch throughput: {name} differs from the interpreter loop")

        samples = {name: [] for name in implementations}
        names = list(implementations)
        for rep in range(reps):
            order = names[rep % len(names):] + names[: rep % len(names)]
            for name in order:
                wall, cpu, _ = _timed(implementations[name])
                samples[name].append((wall, cpu))
    results = {}
    for name, runs in samples.items():
        wall = statistics.median(run[0] for run in runs)
        cpu = statistics.median(run[1] for run in runs)
        results[name] = {"rows": count, "rows_per_s": count / wall, "cpu_rows_per_s": count / cpu, "samples": runs}
    return {"template": template_name, "rows": count, "distinct": min(count, DISTINCT), "size_mix": SIZE_MIX, "reps": reps, "results": results}


def render(entry: dict, table) -> str:
    base = entry["results"]["interpreter loop"]["rows_per_s"]
    rows = [
        [name, f"{figures['rows_per_s']:,.0f}", f"{figures['cpu_rows_per_s']:,.0f}", f"{figures['rows_per_s'] / base:.1f}x"]
        for name, figures in entry["results"].items()
    ]
    mix = ", ".join(f"{size // 1000 if size >= 1000 else size / 1000:g}K {weight}%" for size, weight in entry["size_mix"])
    return (
        f"Batch throughput: {entry['rows']:,} rows of {entry['template']} generations ({mix}; {entry['distinct']:,} distinct), "
        f"median of {entry['reps']}: rows/s of wall time, rows/s per CPU-second of the process and its children\n"
        + table(["implementation", "rows/s", "rows/CPU-s", "vs interpreter"], rows)
    )

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

The JSONL command, start-up included (what a small file pays):

    python -m bench.batch_throughput --jsonl-command                 # 6,000 rows of qwen3, 7 reps
    python -m bench.batch_throughput --jsonl-command --profile       # and where its start-up goes

* interpreter loop: as above, in this process (rows in memory);
* `python -m rtcompile parse rows.jsonl -o out.jsonl` with every core (the default) and with one
  job: a fresh process each time, CPU of the process and its workers (`RUSAGE_CHILDREN`);
* start-up: the command on the file's first 10 rows, beside `python -c pass`.

Process CPU time is the headline here (the ratio the target is about); wall time is beside it. The
command runs as an installed package does, with the bytecode of its modules cached: `pip install`
writes it, and the command's environment here drops PYTHONDONTWRITEBYTECODE so that the first,
untimed run writes it (without it, every process compiles rtcompile's modules from source).
"""

from __future__ import annotations

import io
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


def _interpreter_loop(parse_response, spec, rows: list[dict]) -> list:
    """The loop users write today: the template validated once, tools decoded once per row."""
    out = []
    for row in rows:
        out.append(parse_response(row["completion"], spec, prefix=row["prompt"], tools=json.loads(row["tools"])))
    return out


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

    template = workloads.load_template(template_name)[0]
    rows = make_rows(template_name, count)
    table = pa.Table.from_pylist(rows)
    spec = load_response_template(template)

    def interpreter_loop() -> list:
        return _interpreter_loop(parse_response, spec, rows)

    with tempfile.TemporaryDirectory(prefix="rtcompile-batch-bench-") as work:
        work = Path(work)
        pq.write_table(table, work / "rows.parquet")
        implementations = _implementations(
            interpreter_loop, table, template, template_name, work, jobs_options
        )
        _verify_implementations(implementations)
        samples = _interleaved_samples(implementations, reps)
    results = {}
    for name, runs in samples.items():
        wall = statistics.median(run[0] for run in runs)
        cpu = statistics.median(run[1] for run in runs)
        results[name] = {"rows": count, "rows_per_s": count / wall, "cpu_rows_per_s": count / cpu, "samples": runs}
    return {"template": template_name, "rows": count, "distinct": min(count, DISTINCT), "size_mix": SIZE_MIX, "reps": reps, "results": results}


def _implementations(
    interpreter_loop, table, template: dict, template_name: str, work: Path, jobs_options
) -> dict:
    """name -> action: the interpreter loop, the API and the parse command with each job count."""
    from rtcompile import batch

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    implementations = {"interpreter loop": interpreter_loop}
    for jobs in jobs_options:
        implementations[f"API, {jobs} job{'s' if jobs > 1 else ''}"] = (lambda jobs=jobs: batch.parse_table(table, template, jobs=jobs))
    for jobs in jobs_options:
        implementations[f"parse command, {jobs} job{'s' if jobs > 1 else ''}"] = _parquet_command(
            work, template_name, jobs, env
        )
    return implementations


def _parquet_command(work: Path, template_name: str, jobs: int, env: dict):
    """An action running the parse command on rows.parquet in a fresh process; returns its output."""

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


def _verify_implementations(implementations: dict) -> None:
    """Before anything is timed: the same messages as the interpreter loop's, no errors."""
    import pyarrow.parquet as pq

    expected = implementations["interpreter loop"]()
    for name, action in implementations.items():
        if name == "interpreter loop":
            continue
        result = action()
        out = pq.read_table(result) if isinstance(result, Path) else result
        messages = out.column("message").to_pylist()
        errors = out.column("error").null_count
        if errors != out.num_rows or [json.loads(m) for m in messages] != expected:
            raise AssertionError(f"batch throughput: {name} differs from the interpreter loop")


def _interleaved_samples(implementations: dict, reps: int) -> dict[str, list]:
    """(wall, CPU) seconds of every repetition; each runs every implementation once, rotated."""
    samples = {name: [] for name in implementations}
    names = list(implementations)
    for rep in range(reps):
        order = names[rep % len(names):] + names[: rep % len(names)]
        for name in order:
            wall, cpu, _ = _timed(implementations[name])
            samples[name].append((wall, cpu))
    return samples


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


# ---- the JSONL command, start-up included ---------------------------------------------------------

STARTUP_ROWS = 10


def _command_environment() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # (as installed: see the module's docstring)
    return env


def _command(arguments: list[str], env: dict):
    """An action running `python -m rtcompile ARGUMENTS` in a fresh process."""

    def run():
        completed = subprocess.run([sys.executable, "-m", "rtcompile", *arguments], capture_output=True, text=True, env=env)
        if completed.returncode != 0:
            raise RuntimeError(f"parse command failed: {completed.stderr[-2000:]}")

    return run


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _check_jsonl_output(path: Path, expected: list, name: str) -> None:
    with open(path, encoding="utf-8") as f:
        out = [json.loads(line) for line in f]
    if [row["message"] for row in out] != expected or any(row["error"] is not None for row in out):
        raise AssertionError(f"batch throughput: {name} differs from the interpreter loop")


def measure_jsonl_command(template_name: str, count: int, reps: int) -> dict:
    """The JSONL command against the interpreter loop, interleaved, process CPU time (start-up,
    workers and I/O included) and wall time; every message checked first."""
    from transformers.utils.chat_parsing import parse_response
    from transformers.utils.chat_parsing.response_templates import load_response_template

    spec = load_response_template(workloads.load_template(template_name)[0])
    rows = make_rows(template_name, count)
    env = _command_environment()
    with tempfile.TemporaryDirectory(prefix="rtcompile-batch-bench-") as work:
        work = Path(work)
        _write_jsonl(work / "rows.jsonl", rows)
        _write_jsonl(work / "small.jsonl", rows[:STARTUP_ROWS])
        parse = ["parse", str(work / "rows.jsonl"), "--template", template_name]
        implementations = {
            "interpreter loop": lambda: _interpreter_loop(parse_response, spec, rows),
            "parse command, every core": _command([*parse, "-o", str(work / "every.jsonl")], env),
            "parse command, 1 job": _command([*parse, "-o", str(work / "one.jsonl"), "--jobs", "1"], env),
        }
        startup = {
            "python -c pass": lambda: subprocess.run([sys.executable, "-c", "pass"], check=True, env=env),
            f"parse command, {STARTUP_ROWS} rows": _command(
                ["parse", str(work / "small.jsonl"), "-o", str(work / "small_out.jsonl"), "--template", template_name], env
            ),
        }
        expected = implementations["interpreter loop"]()
        for name, output in (("parse command, every core", "every.jsonl"), ("parse command, 1 job", "one.jsonl")):
            implementations[name]()  # (the first run also writes the bytecode cache)
            _check_jsonl_output(work / output, expected, name)
        samples = _interleaved({**implementations, **startup}, reps)
    results = {name: _figures(runs, count) for name, runs in samples.items() if name in implementations}
    startup_ms = {name: {"cpu_ms": 1000 * statistics.median(run[1] for run in runs), "wall_ms": 1000 * statistics.median(run[0] for run in runs)}
                  for name, runs in samples.items() if name in startup}
    return {"template": template_name, "rows": count, "reps": reps, "cpu_count": os.cpu_count(), "results": results, "startup": startup_ms}


def _interleaved(actions: dict, reps: int) -> dict:
    """(wall, cpu) samples of every action, each repetition in a rotated order."""
    samples = {name: [] for name in actions}
    names = list(actions)
    for rep in range(reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            wall, cpu, _ = _timed(actions[name])
            samples[name].append((wall, cpu))
    return samples


def _figures(runs: list, count: int) -> dict:
    wall = statistics.median(run[0] for run in runs)
    cpu = statistics.median(run[1] for run in runs)
    return {"rows": count, "rows_per_s": count / wall, "cpu_rows_per_s": count / cpu, "samples": runs}


def render_jsonl_command(entry: dict, table) -> str:
    base = entry["results"]["interpreter loop"]["cpu_rows_per_s"]
    rows = [
        [name, f"{figures['cpu_rows_per_s']:,.0f}", f"{figures['rows_per_s']:,.0f}", f"{figures['cpu_rows_per_s'] / base:.2f}x"]
        for name, figures in entry["results"].items()
    ]
    startup = [[name, f"{figures['cpu_ms']:.0f}", f"{figures['wall_ms']:.0f}"] for name, figures in entry["startup"].items()]
    return (
        f"JSONL command: {entry['rows']:,} rows of {entry['template']} generations, start-up included "
        f"({entry['cpu_count']} cores), median of {entry['reps']}, interleaved: rows per CPU-second of the process "
        "and its workers, rows/s of wall time\n"
        + table(["implementation", "rows/CPU-s", "rows/s", "vs interpreter (CPU)"], rows)
        + "\n\nStart-up: CPU and wall milliseconds\n"
        + table(["command", "CPU ms", "wall ms"], startup)
    )


def profile_startup(template_name: str, top: int = 25) -> str:
    """Where the command's start-up goes: the biggest imports of the parent (`-X importtime`,
    cumulative) and a cProfile of the parent, on a 10-row file with one job."""
    import cProfile  # noqa: F401 (run as `-m cProfile` in the child)
    import pstats

    env = _command_environment()
    with tempfile.TemporaryDirectory(prefix="rtcompile-batch-profile-") as work:
        work = Path(work)
        _write_jsonl(work / "small.jsonl", make_rows(template_name, STARTUP_ROWS))
        arguments = ["parse", str(work / "small.jsonl"), "-o", str(work / "out.jsonl"), "--template", template_name, "--jobs", "1"]
        subprocess.run([sys.executable, "-m", "rtcompile", *arguments], check=True, capture_output=True, env=env)  # warm
        imports = subprocess.run([sys.executable, "-X", "importtime", "-m", "rtcompile", *arguments], check=True, capture_output=True, text=True, env=env).stderr
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(work / "profile"), "-m", "rtcompile", *arguments], check=True, capture_output=True, env=env)
        stream = io.StringIO()
        pstats.Stats(str(work / "profile"), stream=stream).sort_stats("cumulative").print_stats(top)
    timed = []
    for line in imports.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            timed.append((int(parts[1]), parts[2].rstrip()))
    biggest = "\n".join(f"{micros / 1000:8.1f} ms  {name}" for micros, name in sorted(timed, reverse=True)[:top])
    return f"Imports of the parent, cumulative (-X importtime, {STARTUP_ROWS} rows, one job):\n{biggest}\n\ncProfile of the parent:\n{stream.getvalue().strip()}"


def main(argv: list[str] | None = None) -> int:
    import argparse

    from .run import _table

    parser = argparse.ArgumentParser(prog="python -m bench.batch_throughput", description=__doc__.split("\n")[0])
    parser.add_argument("--jsonl-command", action="store_true", help="the JSONL command, start-up included, against the interpreter loop")
    parser.add_argument("--template", choices=workloads.TEMPLATE_NAMES, default="qwen3")
    parser.add_argument("--rows", type=int, default=6_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="also print where the command's start-up goes")
    parser.add_argument("--json", metavar="FILE", help="write every figure and sample here")
    arguments = parser.parse_args(argv)
    if not arguments.jsonl_command:
        parser.error("choose a mode: --jsonl-command (the full batch table is `python -m bench --batch-only`)")
    entry = measure_jsonl_command(arguments.template, arguments.rows, arguments.reps)
    print(render_jsonl_command(entry, _table))
    if arguments.profile:
        print("\n" + profile_startup(arguments.template))
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(entry, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

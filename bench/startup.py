"""Start-up costs, each measured in fresh interpreters (subprocesses).

* Import time of a generated module: in a fresh `python`, time `import regex`, then time the
  import of the generated module on top of it. The figure reported is the second one, the cost
  above a bare `import regex`. One untimed import first writes the bytecode cache, as a deployed
  module would have it. The probe also lists which heavy packages the import pulled in.
* Compile time: the first `rtcompile.compile_template` in a fresh process (cold: nothing cached,
  the compiler's own lazy imports included), a second one in the same process (warm), the first
  `rtcompile.load` with an empty cache directory, `load` again in-process (memo hit), and `load`
  in a new process sharing the now-warm cache directory (RTCOMPILE_CACHE_DIR), first with every
  import that first use brings, then (the cache hit proper) with the loader and runtime imported.

The probe scripts import nothing but `sys` and `time` before the timed imports, so modules
like `json` are not loaded ahead of the code under test.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HEAVY_PACKAGES = ("jinja2", "black", "transformers")

_IMPORT_PROBE = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
started = time.process_time(), time.perf_counter()
import regex
after_regex = time.process_time(), time.perf_counter()
__import__(sys.argv[2])
after_module = time.process_time(), time.perf_counter()
heavy = sorted(name for name in ("jinja2", "black", "transformers") if name in sys.modules)
rtcompile_modules = sorted(name for name in sys.modules if name == "rtcompile" or name.startswith("rtcompile."))
import json
print(json.dumps({
    "regex_cpu": after_regex[0] - started[0], "regex_wall": after_regex[1] - started[1],
    "module_cpu": after_module[0] - after_regex[0], "module_wall": after_module[1] - after_regex[1],
    "heavy_imports": heavy, "rtcompile_modules": rtcompile_modules,
}))
"""

_COLD_COMPILE_PROBE = r"""
import sys, time
def timed(action):
    c, w = time.process_time(), time.perf_counter()
    result = action()
    return result, time.process_time() - c, time.perf_counter() - w
_, import_cpu, import_wall = timed(lambda: __import__("rtcompile"))
import json, rtcompile
with open(sys.argv[1], encoding="utf-8") as handle:
    template = json.load(handle)
source, first_cpu, first_wall = timed(lambda: rtcompile.compile_template(template))
_, second_cpu, second_wall = timed(lambda: rtcompile.compile_template(template))
print(json.dumps({
    "import_rtcompile_cpu": import_cpu, "import_rtcompile_wall": import_wall,
    "compile_cold_cpu": first_cpu, "compile_cold_wall": first_wall,
    "compile_warm_cpu": second_cpu, "compile_warm_wall": second_wall,
    "source_chars": len(source),
}))
"""

_LOAD_PROBE = r"""
import sys, time, copy
def timed(action):
    c, w = time.process_time(), time.perf_counter()
    result = action()
    return result, time.process_time() - c, time.perf_counter() - w
import json, rtcompile
if len(sys.argv) > 2:  # a process that has used rtcompile already: loader and runtime imported
    import rtcompile.api, rtcompile.cache, rtcompile.runtime
with open(sys.argv[1], encoding="utf-8") as handle:
    template = json.load(handle)
module, load_cpu, load_wall = timed(lambda: rtcompile.load(template))
_, again_cpu, again_wall = timed(lambda: rtcompile.load(template))
equal_copy = copy.deepcopy(template)
_, copy_cpu, copy_wall = timed(lambda: rtcompile.load(equal_copy))
# The first parse after loading (it compiles the regex patterns it needs: see LazyRegex), then a
# second parse of the same message for comparison.
with open(sys.argv[1] + ".sample.json", encoding="utf-8") as handle:
    sample = json.load(handle)
parse = lambda: module.parse_response(sample["text"], prefix=sample["prefix"], tools=sample["tools"])
_, first_parse_cpu, first_parse_wall = timed(parse)
_, next_parse_cpu, next_parse_wall = timed(parse)
print(json.dumps({
    "load_first_cpu": load_cpu, "load_first_wall": load_wall,
    "load_same_object_cpu": again_cpu, "load_same_object_wall": again_wall,
    "load_equal_copy_cpu": copy_cpu, "load_equal_copy_wall": copy_wall,
    "first_parse_cpu": first_parse_cpu, "first_parse_wall": first_parse_wall,
    "next_parse_cpu": next_parse_cpu, "next_parse_wall": next_parse_wall,
}))
"""


def _run_probe(
    script: str, args: list[str], env_extra: dict[str, str] | None = None, cwd: str | None = None
) -> dict:
    env = dict(os.environ)
    # Measure as an installed package runs: with bytecode cached (some environments, this one
    # included, set PYTHONDONTWRITEBYTECODE, which would recompile every module at each import).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(env_extra or {})
    completed = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"start-up probe failed ({completed.returncode}):\n{completed.stderr[-3000:]}"
        )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _median_of(samples: list[dict], key: str) -> float:
    return statistics.median(sample[key] for sample in samples)


def measure_import(module_source: str, module_name: str, runs: int, work_dir: str) -> dict:
    """Import cost of `module_source` saved as `module_name`.py, above `import regex`."""
    path = Path(work_dir) / f"{module_name}.py"
    path.write_text(module_source, encoding="utf-8")
    first = _run_probe(_IMPORT_PROBE, [work_dir, module_name])  # writes __pycache__
    samples = [_run_probe(_IMPORT_PROBE, [work_dir, module_name]) for _ in range(runs)]
    return {
        "runs": runs,
        "module_cpu_s": _median_of(samples, "module_cpu"),
        "module_wall_s": _median_of(samples, "module_wall"),
        "regex_cpu_s": _median_of(samples, "regex_cpu"),
        "regex_wall_s": _median_of(samples, "regex_wall"),
        "first_import_with_bytecode_compile_wall_s": first["module_wall"],
        "heavy_imports": samples[-1]["heavy_imports"],
        "rtcompile_modules": samples[-1]["rtcompile_modules"],
        "samples": samples,
    }


def measure_compile(template: dict, work_dir: str, sample: dict) -> dict:
    """Cold and warm compile, first load, memo hit and warm-cache load in a new process; `sample`
    (text, prefix, tools) is parsed right after a hit, to show what the first parse adds."""
    template_path = Path(work_dir) / "template.json"
    template_path.write_text(json.dumps(template), encoding="utf-8")
    Path(str(template_path) + ".sample.json").write_text(json.dumps(sample), encoding="utf-8")
    cold_cache = tempfile.mkdtemp(prefix="cache-cold-", dir=work_dir)
    cold = _run_probe(
        _COLD_COMPILE_PROBE, [str(template_path)], {"RTCOMPILE_CACHE_DIR": cold_cache}
    )
    shared_cache = tempfile.mkdtemp(prefix="cache-shared-", dir=work_dir)
    first_process = _run_probe(
        _LOAD_PROBE, [str(template_path)], {"RTCOMPILE_CACHE_DIR": shared_cache}
    )
    cache_files = sorted(
        str(p.relative_to(shared_cache)) for p in Path(shared_cache).rglob("*") if p.is_file()
    )
    second_process = _run_probe(
        _LOAD_PROBE, [str(template_path)], {"RTCOMPILE_CACHE_DIR": shared_cache}
    )
    # The hit itself: in a process where the cache code and the runtime are imported already (as
    # after any earlier parser), so that first-use imports (`regex` alone is ~10 ms) are not in it.
    hits = [
        _run_probe(
            _LOAD_PROBE, [str(template_path), "preloaded"], {"RTCOMPILE_CACHE_DIR": shared_cache}
        )
        for _ in range(3)
    ]
    return {
        **cold,
        "load_first_cpu": first_process["load_first_cpu"],
        "load_first_wall": first_process["load_first_wall"],
        "load_memo_same_object_cpu": first_process["load_same_object_cpu"],
        "load_memo_same_object_wall": first_process["load_same_object_wall"],
        "load_memo_equal_copy_cpu": first_process["load_equal_copy_cpu"],
        "load_memo_equal_copy_wall": first_process["load_equal_copy_wall"],
        "load_new_process_warm_cache_cpu": second_process["load_first_cpu"],
        "load_new_process_warm_cache_wall": second_process["load_first_wall"],
        "cache_hit_cpu": _median_of(hits, "load_first_cpu"),
        "cache_hit_wall": _median_of(hits, "load_first_wall"),
        "first_parse_after_hit_cpu": _median_of(hits, "first_parse_cpu"),
        "next_parse_after_hit_cpu": _median_of(hits, "next_parse_cpu"),
        "cache_dir_files_after_first_load": cache_files,
    }

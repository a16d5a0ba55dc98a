"""Importing a generated parser loads the runtime only: no compiler, jinja2, black or transformers."""

import json
import subprocess
import sys

import rtcompile
import rtcompile.runtime
from rtcompile.codegen import RUNTIME_ABI

FORBIDDEN = ("jinja2", "black", "transformers", "rtcompile.api", "rtcompile.codegen", "rtcompile.frontend", "rtcompile.cache")


def _modules_after(statement: str) -> list[str]:
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def _forbidden(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]


def test_runtime_alone_loads_no_compiler_module():
    assert _forbidden(_modules_after("import rtcompile.runtime")) == []


def test_checked_in_generated_module_imports_runtime_only():
    modules = _modules_after("from rtcompile.generated import qwen3\nassert qwen3.parse_response('hi', prefix='')['content'] == 'hi'")
    assert "rtcompile.generated.qwen3" in modules
    assert _forbidden(modules) == []


def test_a_written_module_imports_runtime_only(tmp_path):
    source = rtcompile.compile_template(rtcompile.template_for("gpt_oss"))
    (tmp_path / "gpt_parser.py").write_text(source, encoding="utf-8")
    modules = _modules_after(f"import sys; sys.path.insert(0, {str(tmp_path)!r})\nimport gpt_parser")
    assert "gpt_parser" in modules
    assert _forbidden(modules) == []


def test_generator_and_runtime_agree_on_the_abi():
    assert RUNTIME_ABI == rtcompile.runtime.RUNTIME_ABI


def test_a_module_for_another_abi_refuses_to_import():
    source = rtcompile.compile_template(rtcompile.template_for("qwen3")).replace(
        f"check_abi({RUNTIME_ABI})", f"check_abi({RUNTIME_ABI + 1})"
    )
    namespace: dict = {}
    try:
        exec(compile(source, "<stale>", "exec"), namespace)
    except ImportError as e:
        assert "regenerate" in str(e)
    else:
        raise AssertionError("a module built for another runtime ABI imported")


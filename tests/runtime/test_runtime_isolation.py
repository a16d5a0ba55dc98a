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



def test_importing_a_parser_compiles_no_regex_until_a_pattern_is_used():
    """Delimiter and tag patterns are LazyRegex: a parser loads (from the cache too) without paying
    for regex compilation; each pattern is compiled once, when first needed, with the same result."""
    code = (
        "import regex, json\n"
        "compiled = []\n"
        "real = regex.compile\n"
        "regex.compile = lambda *a, **k: compiled.append(a[0]) or real(*a, **k)\n"
        "from rtcompile.generated import gpt_oss, qwen3_5, gemma4\n"
        "at_import = len(compiled)\n"
        "text = '<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>'\n"
        "first = gpt_oss.parse_response(text, prefix='')\n"
        "after_first = len(compiled)\n"
        "assert gpt_oss.parse_response(text, prefix='') == first\n"
        "print(json.dumps([at_import, after_first, len(compiled), first]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    at_import, after_first, after_second, message = json.loads(out.splitlines()[-1])
    assert at_import == 0
    assert after_first >= 1 and after_second == after_first  # compiled once, then reused
    assert message["tool_calls"][0]["function"]["name"] == "f"


def test_a_lazy_pattern_behaves_as_the_compiled_one_and_an_invalid_one_fails_on_each_use():
    import pytest
    import regex

    from rtcompile.runtime import LazyRegex

    lazy = LazyRegex(r"\s*<(?P<tag>\w+)>")
    compiled = regex.compile(r"\s*<(?P<tag>\w+)>", regex.DOTALL)
    text = "a <b> c\n<d>"
    assert lazy.search(text, 1).span() == compiled.search(text, 1).span()
    assert lazy.match(text, 1).group("tag") == "b"
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in compiled.finditer(text)]
    assert lazy.sub("_", text) == compiled.sub("_", text)
    assert lazy.compiled() is lazy.compiled()
    broken = LazyRegex("(")
    for _ in range(2):
        with pytest.raises(regex.error):
            broken.search("x")

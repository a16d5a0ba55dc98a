"""The command line, run as users run it: `python -m rtcompile ...` in a subprocess.

Every run gets a private RTCOMPILE_CACHE_DIR, and generated files are imported from disk and
checked against the interpreter, so "exit 0" always comes with a module that really works.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers.utils.chat_parsing import parse_response as interpreter_parse

import rtcompile.generated
from rtcompile.library import list_templates, template_for

TEMPLATE = {
    "start_anchor": "<|assistant|>",
    "defaults": {"role": "assistant"},
    "fields": {
        "reasoning_content": {
            "open": "<think>",
            "close": "</think>",
            "content": "text",
            "content_args": {"strip": True},
        },
        "tool_calls": {
            "open": "<call>",
            "close": "</call>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close": "<|end|>", "content": "text"},
    },
}
SAMPLE_OUTPUTS = [
    "<think> plan </think>Hello<|end|>",
    'Sure.<call>{"name": "f", "arguments": {"x": [1, 2]}}</call><call>{"name": "g", "arguments": {}}</call><|end|>',
    "<think>cut off in the mid",
]


@pytest.fixture
def cli(tmp_path):
    cache_dir = tmp_path / "cache"

    def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "rtcompile", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=cwd or tmp_path,
            env={**os.environ, "RTCOMPILE_CACHE_DIR": str(cache_dir)},
        )

    return run


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def import_file(path: Path, name: str = "cli_generated_parser"):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module_from_text(source: str):
    namespace: dict = {"__name__": "cli_stdout_parser"}
    exec(compile(source, "<stdout>", "exec"), namespace)
    return namespace


def assert_parses_like_interpreter(
    parse, template: dict, outputs=SAMPLE_OUTPUTS, prefix=""
) -> None:
    for output in outputs:
        assert parse(output, prefix=prefix) == interpreter_parse(
            output, template, prefix=prefix
        ), output


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rtcompile: error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


# ---- inputs -------------------------------------------------------------------------------------


def test_template_file_to_stdout(cli, tmp_path):
    path = write_json(tmp_path / "mine.json", TEMPLATE)
    result = cli(path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    namespace = module_from_text(result.stdout)
    assert namespace["TEMPLATE"] == TEMPLATE
    assert_parses_like_interpreter(namespace["parse_response"], TEMPLATE)


def test_template_file_to_a_file_equals_stdout(cli, tmp_path):
    path = write_json(tmp_path / "mine.json", TEMPLATE)
    output = tmp_path / "out" / "parser.py"
    output.parent.mkdir()
    result = cli(path, "-o", output)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert output.read_text(encoding="utf-8") == cli(path).stdout
    assert_parses_like_interpreter(import_file(output).parse_response, TEMPLATE)
    assert sorted(p.name for p in output.parent.iterdir()) == ["parser.py"]  # no temporary left


def test_long_output_option(cli, tmp_path):
    path = write_json(tmp_path / "mine.json", TEMPLATE)
    result = cli(path, "--output", tmp_path / "p.py")
    assert result.returncode == 0, result.stderr
    assert import_file(tmp_path / "p.py").TEMPLATE == TEMPLATE


def test_tokenizer_config_and_tokenizer_directory(cli, tmp_path):
    directory = tmp_path / "my-tokenizer"
    directory.mkdir()
    write_json(
        directory / "tokenizer_config.json",
        {"eos_token": "<|end|>", "response_template": TEMPLATE, "model_max_length": 4096},
    )
    from_config = cli(directory / "tokenizer_config.json")
    from_directory = cli(directory)
    assert from_config.returncode == 0 and from_directory.returncode == 0, (
        from_config.stderr + from_directory.stderr
    )
    for result in (from_config, from_directory):
        namespace = module_from_text(result.stdout)
        assert namespace["TEMPLATE"] == TEMPLATE
        assert_parses_like_interpreter(namespace["parse_response"], TEMPLATE)


@pytest.mark.parametrize("name", ["qwen3", "qwen3_moe", "gpt_oss"])
def test_bundled_template_by_name_or_model_type(cli, tmp_path, name):
    output = tmp_path / "parser.py"
    result = cli(name, "-o", output)
    assert result.returncode == 0, result.stderr
    template = template_for(name)
    module = import_file(output, f"cli_bundled_{name}")
    assert module.TEMPLATE == template
    assert_parses_like_interpreter(
        module.parse_response,
        template,
        outputs=[
            "<think>\nwhy\n</think>\n\nHi!<|im_end|>",
            "plain<|im_end|>",
            "<|channel|>final<|message|>hey<|return|>",
        ],
    )


def test_a_file_named_like_a_subcommand(cli, tmp_path):
    write_json(tmp_path / "list", TEMPLATE)
    result = cli("./list", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert module_from_text(result.stdout)["TEMPLATE"] == TEMPLATE


def test_a_local_file_wins_over_a_bundled_name(cli, tmp_path):
    write_json(tmp_path / "qwen3", TEMPLATE)
    result = cli("qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert module_from_text(result.stdout)["TEMPLATE"] == TEMPLATE


# ---- --check and --strict -----------------------------------------------------------------------

LINTED = {
    "start_anchor": "<a>",
    "fields": {
        "tool_calls": {
            "open_pattern": r"<call name=(?P<name>\w+)>",
            "close": "</call>",
            "content": "xml-inline",
            "transform": {"name": "{name}", "args": "{content}", "id": "{call_id}"},
        },
        "content": {"close_pattern": r"(\s+)+<end>", "content": "text"},
    },
}


def test_check_on_a_clean_template(cli, tmp_path):
    path = write_json(tmp_path / "clean.json", TEMPLATE)
    for args in ((path, "--check"), (path, "--check", "--strict")):
        result = cli(*args)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            f"{path}: ok (3 fields, 0 warning(s))",
            f"{path}: parse_response reads whole messages with the one-shot reader",
        ]
        assert result.stderr == ""
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_check_prints_warnings_and_succeeds(cli, tmp_path):
    path = write_json(tmp_path / "linted.json", LINTED)
    result = cli(path, "--check")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"{path}: ok (2 fields, 3 warning(s))"
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 3
    assert all(line.startswith(f"rtcompile: warning: {path}: ") for line in warnings)
    text = result.stderr
    assert "fields.tool_calls.content_args: xml-inline needs 'tag_pattern'" in text
    assert "fields.tool_calls.transform.id" in text and "{call_id}" in text
    assert "fields.content.close_pattern: nested unbounded quantifiers" in text


def test_strict_turns_warnings_into_an_error(cli, tmp_path):
    path = write_json(tmp_path / "linted.json", LINTED)
    result = cli(path, "--check", "--strict")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 4
    assert lines[-1] == f"rtcompile: error: {path}: 3 warning(s) under --strict"
    assert result.stdout == ""


def test_strict_without_check_refuses_to_write_a_linted_template(cli, tmp_path):
    path = write_json(tmp_path / "linted.json", LINTED)
    output = tmp_path / "parser.py"
    result = cli(path, "--strict", "-o", output)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"rtcompile: error: {path}: 3 warning(s) under --strict"
    assert not output.exists()
    clean = cli(write_json(tmp_path / "clean.json", TEMPLATE), "--strict", "-o", output)
    assert clean.returncode == 0 and output.exists()


def test_compiling_prints_the_warnings_it_writes_the_module_anyway(cli, tmp_path):
    """A transform placeholder that can never resolve makes every region raise: compiling says so."""
    typo = {"start_anchor": "x", "fields": {"content": {"transform": "{contnt}"}}}
    path = write_json(tmp_path / "typo.json", typo)
    output = tmp_path / "parser.py"
    result = cli(path, "-o", output)
    assert result.returncode == 0 and output.exists()
    (warning,) = result.stderr.strip().splitlines()
    assert warning.startswith(f"rtcompile: warning: {path}: fields.content.transform") and "{contnt}" in warning


def test_an_output_in_a_missing_directory_names_that_directory(cli, tmp_path):
    output = tmp_path / "no" / "such" / "parser.py"
    result = cli("qwen3", "-o", output)
    assert_one_line_error(result, str(output), f"no such directory: {output.parent}")
    assert ".tmp" not in result.stderr


def test_cache_show_says_which_template_each_entry_is(cli, tmp_path):
    path = write_json(tmp_path / "mine.json", TEMPLATE)
    for spec in ("qwen3", path):
        program = f"import rtcompile; rtcompile.load({str(spec)!r})"
        subprocess.run([sys.executable, "-c", program], check=True, env={**os.environ, "RTCOMPILE_CACHE_DIR": str(tmp_path / "cache")})
    result = cli("cache", "show")
    assert result.returncode == 0, result.stderr
    entries = [line.strip() for line in result.stdout.splitlines() if line.startswith("  tmpl_")]
    descriptions = sorted(line.split("  ", 1)[1] for line in entries)
    assert descriptions == ["bundled 'qwen3'", "fields 'reasoning_content', 'tool_calls', 'content'; start anchor '<|assistant|>'"]


def test_check_writes_nothing(cli, tmp_path):
    path = write_json(tmp_path / "linted.json", LINTED)
    output = tmp_path / "parser.py"
    result = cli(path, "--check", "-o", output)
    assert result.returncode == 0
    assert not output.exists()


def test_bundled_templates_pass_the_check(cli):
    result = cli("qwen3", "--check", "--strict")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "qwen3: ok (3 fields, 0 warning(s))",
        "qwen3: parse_response reads whole messages with the one-shot reader",
    ]


def test_check_says_when_parse_response_stays_on_the_streaming_machine(cli, tmp_path):
    # \G matches where a search starts: the one-shot reader searches from other places
    template = {"start_anchor": "S", "fields": {"a": {"open_pattern": r"\G<a>", "close": "</a>"}, "b": {}}}
    path = write_json(tmp_path / "anchored.json", template)
    result = cli(path, "--check")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == (
        f"{path}: parse_response reads whole messages with the streaming machine "
        "(fields[0].open_pattern: \\G matches where a search starts, and the one-shot reader searches elsewhere)"
    )


# ---- errors -------------------------------------------------------------------------------------

INVALID = {
    "start_anchor": "<a>",
    "fields": {"tool_calls": {"open_pattern": "<(?P<name>", "close": "</a>"}},
}


def test_missing_file(cli, tmp_path):
    missing = tmp_path / "nope.json"
    result = cli(missing, "-o", tmp_path / "parser.py")
    assert_one_line_error(result, str(missing), "no such file")
    assert not (tmp_path / "parser.py").exists()


def test_unknown_bundled_name(cli, tmp_path):
    result = cli("surely_not_a_model")
    assert_one_line_error(result, "surely_not_a_model", "no bundled response template")


def test_invalid_json(cli, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"start_anchor": "<a>", "fields": {', encoding="utf-8")
    result = cli(path)
    assert_one_line_error(result, str(path), "not valid JSON", "line 1")


def test_not_utf8(cli, tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes('{"start_anchor": "é"}'.encode("latin-1"))
    assert_one_line_error(cli(path), str(path))


@pytest.mark.parametrize(
    "template, json_path",
    [
        (INVALID, "fields.tool_calls.open_pattern"),
        (
            {"start_anchor": "<a>", "fields": {"content": {"content": "yaml"}}},
            "fields.content.content",
        ),
        ({"fields": {"content": {"content": "text"}}}, "start_anchor"),
        ({"start_anchor": "<a>", "fields": {"a": {"close": "x"}, "b": {"close": "y"}}}, "fields"),
        ([1, 2], "response_template must be a dict"),
    ],
    ids=["bad_regex", "unknown_parser", "no_anchor", "two_implicit", "not_a_dict"],
)
def test_invalid_template_names_file_and_json_path(cli, tmp_path, template, json_path):
    path = write_json(tmp_path / "bad.json", template)
    output = tmp_path / "parser.py"
    for args in ((path,), (path, "-o", output), (path, "--check")):
        result = cli(*args)
        assert_one_line_error(result, str(path), json_path)
    assert not output.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["bad.json"]


def test_an_error_leaves_an_existing_output_file_unchanged(cli, tmp_path):
    output = tmp_path / "parser.py"
    output.write_text("# the previous, working parser\n", encoding="utf-8")
    before = output.stat()
    for bad_input in (
        write_json(tmp_path / "bad.json", INVALID),
        tmp_path / "missing.json",
        "not_a_template_name",
    ):
        assert_one_line_error(cli(bad_input, "-o", output))
        assert output.read_text(encoding="utf-8") == "# the previous, working parser\n"
        assert output.stat().st_ino == before.st_ino  # not even replaced by a copy
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".py", ".tmp")) == [
        "parser.py"
    ]


def test_a_successful_run_replaces_an_existing_output_file(cli, tmp_path):
    output = tmp_path / "parser.py"
    output.write_text("# old\n", encoding="utf-8")
    result = cli(write_json(tmp_path / "mine.json", TEMPLATE), "-o", output)
    assert result.returncode == 0, result.stderr
    assert import_file(output).TEMPLATE == TEMPLATE


def test_tokenizer_config_without_a_template(cli, tmp_path):
    directory = tmp_path / "tok"
    directory.mkdir()
    write_json(
        directory / "tokenizer_config.json", {"eos_token": "</s>", "response_template": None}
    )
    result = cli(directory)
    assert_one_line_error(result, "response_template")
    write_json(directory / "tokenizer_config.json", {"eos_token": "</s>"})
    result = cli(directory)
    assert_one_line_error(result, str(directory))


def test_a_tokenizer_config_without_the_key_says_it_has_no_template(cli, tmp_path):
    directory = tmp_path / "tok"
    directory.mkdir()
    write_json(directory / "tokenizer_config.json", {"eos_token": "</s>", "model_max_length": 4096})
    for source in (directory, directory / "tokenizer_config.json"):
        assert_one_line_error(cli(source), str(source), "no response template")


def test_directory_without_a_tokenizer_config(cli, tmp_path):
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    assert_one_line_error(cli(empty), str(empty))


def test_unwritable_output_location(cli, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = cli(write_json(tmp_path / "mine.json", TEMPLATE), "-o", blocker / "parser.py")
    assert_one_line_error(result, "cannot write")


def test_usage_errors_are_one_line_in_the_tools_own_format(cli):
    """argparse's errors read like the command's own: `rtcompile: error: [SUBCOMMAND: ]...`."""
    assert_one_line_error(cli(), "required: TEMPLATE", "python -m rtcompile --help")
    assert_one_line_error(cli("qwen3", "--frobnicate"), "unrecognized arguments: --frobnicate")
    for subcommand in ("list", "regenerate", "cache", "parse", "verify", "infer"):
        assert_one_line_error(cli(subcommand, "--frobnicate"), f"rtcompile: error: {subcommand}: ", f"python -m rtcompile {subcommand} --help")
    assert_one_line_error(cli("cache", "wipe"), "cache: argument action: invalid choice")


# ---- subcommands and help -----------------------------------------------------------------------


def test_list(cli):
    result = cli("list")
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split() == ["TEMPLATE", "MODEL", "TYPES"]
    entries = list_templates()
    assert len(lines) == len(entries)
    for line, entry in zip(lines, entries):
        name, _, model_types = line.partition("  ")
        assert name.strip() == entry["name"]
        assert model_types.strip() == (", ".join(entry["model_types"]) or "(by name)")
    assert any(line.split()[0] == "qwen3" and "qwen3_moe" in line for line in lines)


def test_regenerate_check_on_a_clean_tree(cli):
    generated = Path(rtcompile.generated.__file__).parent
    before = {p.name: p.read_bytes() for p in generated.glob("*.py")}
    result = cli("regenerate", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    assert {
        p.name: p.read_bytes() for p in generated.glob("*.py")
    } == before  # --check writes nothing


def test_help(cli):
    result = cli("--help")
    assert result.returncode == 0
    for word in ("TEMPLATE", "--output", "--check", "--strict", "list", "regenerate", "cache", "parse", "verify", "infer", "serve"):
        assert word in result.stdout
    for subcommand in ("list", "regenerate", "cache", "parse"):
        sub = cli(subcommand, "--help")
        assert sub.returncode == 0 and f"python -m rtcompile {subcommand}" in sub.stdout


def test_version(cli):
    result = cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"rtcompile {rtcompile.__version__}"


def test_console_script_entry_point_is_main():
    from importlib.metadata import entry_points

    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "rtcompile"]
    assert script.value == "rtcompile.__main__:main"


# ---- a closed pipe and the mode of written files ------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("qwen3",),
        ("qwen3", "--check"),
        ("cache",),
        ("--help",),
        ("list", "--help"),
        ("--version",),
    ],
    ids=lambda args: " ".join(args),
)
def test_a_reader_that_closed_the_pipe_ends_the_command_quietly(tmp_path, args):
    """`python -m rtcompile list | head`: the reader is gone before the command writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "rtcompile", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={**os.environ, "RTCOMPILE_CACHE_DIR": str(tmp_path / "cache")},
        )
    finally:
        os.close(write_end)
    assert result.stderr == ""  # no BrokenPipeError traceback, not even "Exception ignored"
    # argparse's --help and --version swallow the write error themselves and exit 0.
    assert result.returncode == (0 if "--help" in args or "--version" in args else 1)


def test_head_of_list_in_a_shell_pipeline(tmp_path):
    result = subprocess.run(
        f"{sys.executable} -m rtcompile list | head -n 2; exit ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.stderr == ""
    assert result.stdout.splitlines()[1].split()[0] == list_templates()[0]["name"]  # (after the header)
    assert result.returncode in (0, 1)  # 0 when all of the list fit in the pipe before head left


def run_with_umask(umask: int, command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, preexec_fn=lambda: os.umask(umask), capture_output=True, text=True, timeout=300, **kwargs
    )


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_an_output_file_gets_the_mode_of_any_new_file_of_the_user(tmp_path, umask, mode):
    output = tmp_path / "parser.py"
    result = run_with_umask(
        umask,
        [sys.executable, "-m", "rtcompile", "qwen3", "-o", str(output)],
        env={**os.environ, "RTCOMPILE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.returncode == 0, result.stderr
    assert output.stat().st_mode & 0o777 == mode
    # The cache stays private under the same umask: it holds Python that gets executed.
    loaded = run_with_umask(
        umask,
        [sys.executable, "-c", "import rtcompile; rtcompile.load('qwen3')"],
        env={**os.environ, "RTCOMPILE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert loaded.returncode == 0, loaded.stderr
    cache_files = list((tmp_path / "cache").iterdir())
    assert cache_files and all(p.stat().st_mode & 0o777 == 0o600 for p in cache_files)
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700


def test_regenerate_writes_modules_with_the_users_mode(tmp_path, monkeypatch):
    from rtcompile import regenerate as bundled

    monkeypatch.setattr(bundled, "generated_dir", lambda: tmp_path)
    monkeypatch.setattr(bundled, "expected_sources", lambda: {"one": "X = 1\n", "two": "Y = 2\n"})
    (tmp_path / "two.py").write_text("Y = 2\n")
    old = os.umask(0o027)
    try:
        assert bundled.regenerate() == ["one"]
    finally:
        os.umask(old)
    assert (tmp_path / "one.py").stat().st_mode & 0o777 == 0o640


def test_user_file_mode_reads_the_umask_without_changing_it():
    from rtcompile.cache import user_file_mode

    old = os.umask(0o037)
    try:
        assert (user_file_mode(), user_file_mode(directory=True)) == (0o640, 0o740)
        assert os.umask(0o037) == 0o037
    finally:
        os.umask(old)

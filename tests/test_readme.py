"""The README's two set-up commands stay true: CI runs the test command's install steps, and the
transformers it installs is the release the generated parsers implement. Its facts that follow the
code stay true too: the command-line block names every subcommand, the grammar section counts the
bundled templates, and the files the README and the changelog point at exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from rtcompile.library import template_names
from rtcompile.version import INTERPRETER_RELEASE

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
CI = (REPO / ".ci" / "run").read_text(encoding="utf-8")


def setup_commands() -> list[str]:
    """The shell blocks of the README's "Set up" section, one command each."""
    section = README.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    return [block.strip() for block in blocks]


def steps(command: str) -> list[list[str]]:
    return [shlex.split(step) for step in command.split("&&")]


def test_there_are_exactly_two_one_line_set_up_commands():
    main_job, tests = setup_commands()
    assert "\n" not in main_job and "\n" not in tests
    first, last = steps(main_job)[0], steps(main_job)[-1]
    assert first[:3] == ["python3", "-m", "venv"]
    # the main job: compile a bundled template into a parser module
    assert last[:3] == ["python", "-m", "rtcompile"] and last[3] in template_names() and "-o" in last
    assert steps(tests)[0][:3] == ["python3", "-m", "venv"]
    assert steps(tests)[-1] == ["python", "-m", "pytest", "-q"]


def test_ci_runs_the_readme_test_commands_install_steps():
    installs = [step for step in steps(setup_commands()[1]) if step[:2] == ["pip", "install"]]
    assert installs, "the test command installs nothing"
    ci_installs = [
        shlex.split(line)[5:]  # after `python -m pip install --quiet`
        for line in CI.splitlines()
        if line.startswith("python -m pip install --quiet ") and "--upgrade pip" not in line
    ]
    assert [step[2:] for step in installs] == ci_installs[: len(installs)]
    assert "python -m pytest -q --full" in CI


def test_the_test_command_installs_the_reference_interpreter():
    pins = [arg for step in steps(setup_commands()[1]) for arg in step if arg.startswith("transformers==")]
    assert pins == [f"transformers=={INTERPRETER_RELEASE}"]


def test_the_test_command_installs_the_xgrammar_the_grammar_extra_pins():
    """The grammar tests walk grammars with the xgrammar release the `grammar` extra names."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pins = [arg for step in steps(setup_commands()[1]) for arg in step if arg.startswith("xgrammar==")]
    assert pins == extras["grammar"]


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_command_line_block_names_every_subcommand():
    from rtcompile.__main__ import SUBCOMMANDS

    block = re.search(r"```text\n(.*?)```", section("Command line"), re.DOTALL).group(1)
    named = {line.split()[3] for line in block.splitlines() if line.startswith("python -m rtcompile ")}
    assert named - {"TEMPLATE"} == set(SUBCOMMANDS)


def test_the_grammar_section_counts_the_bundled_templates():
    """It says how many bundled templates build tags: the number bundled."""
    counts = re.findall(r"All (\d+) build tags", section("Forcing tool calls: the grammar backend"))
    assert counts == [str(len(template_names()))]


def test_links_and_test_paths_in_the_readme_and_changelog_exist():
    """A moved file or test shows up here, not as a dead link for a reader."""
    for name in ("README.md", "CHANGELOG.md"):
        text = (REPO / name).read_text(encoding="utf-8")
        links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
        paths = re.findall(r"`(tests/[^`\s]+)`", text)
        missing = [path for path in links + paths if not (REPO / path).exists()]
        assert links and not missing, (name, missing)

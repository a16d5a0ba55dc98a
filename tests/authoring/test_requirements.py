"""verify and infer need transformers (the sandboxed renderer, and the interpreter `--interpreter`
compares with) and hypothesis (the generated cases). The test environment must have both and the
extras that install them must list them: without them the authoring tests prove nothing, and that
fails here, never skips (CI installs them through the README's test command: the `test` extra,
then transformers itself)."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

from rtcompile.version import INTERPRETER_RELEASE

REPO = Path(__file__).resolve().parents[2]


def missing_modules(names: tuple[str, ...]) -> list[str]:
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def test_the_authoring_tests_have_transformers_and_hypothesis():
    missing = missing_modules(
        (
            "transformers",
            "transformers.utils.chat_template_utils",  # render_jinja_template: the sandbox
            "transformers.utils.chat_parsing",  # the interpreter
            "hypothesis",
        )
    )
    assert not missing, (
        f"{', '.join(missing)} cannot be imported: install the `test` extra and transformers=={INTERPRETER_RELEASE} "
        "(the README's test command)"
    )


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def test_the_extras_install_what_verify_and_infer_need():
    from packaging.specifiers import SpecifierSet

    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert {"transformers", "hypothesis"} <= requirement_names(extras["verify"])
    # The test extra brings hypothesis; transformers comes from the README's pinned install
    # (tests/test_readme.py), which the verify extra's bound must admit.
    assert "hypothesis" in requirement_names(extras["test"])
    bound = next(r for r in extras["verify"] if requirement_names([r]) == {"transformers"})
    assert SpecifierSet(bound[len("transformers") :]).contains(INTERPRETER_RELEASE), bound

"""Which transformers release each feature needs (rtcompile.releases), the one-line refusal of any
other, and the extras that install them (pyproject.toml).

The installed transformers is 5.25.0 here; other releases are simulated by patching its
`__version__`, which is what every check reads.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

transformers = pytest.importorskip(
    "transformers", reason="the checks read transformers (the `test` extra installs it)"
)

import rtcompile  # noqa: E402
from rtcompile import releases  # noqa: E402
from rtcompile.__main__ import main as rtcompile_main  # noqa: E402
from rtcompile.integrations.transformers import serve  # noqa: E402
from rtcompile.integrations.transformers.tokenizers import accelerate, is_accelerated  # noqa: E402
from rtcompile.runtime import token_ids  # noqa: E402
from rtcompile.version import INTERPRETER_RELEASE  # noqa: E402
from token_serving import encode, tokenizer_for  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = rtcompile.template_for("qwen3")
PREFIX = "<|im_start|>assistant\n"
OUTPUT = "<think>plan</think>\n\nSure.<|im_end|>"


def one_line(error: BaseException) -> str:
    message = str(error)
    assert message and "\n" not in message
    return message


def test_the_installed_transformers_is_supported_by_every_feature():
    """The suite runs against the release every feature supports."""
    installed = transformers.__version__
    assert installed == INTERPRETER_RELEASE
    for supported in (
        releases.ACCELERATE_RELEASES,
        releases.SERVE_RELEASES,
        releases.AUTHORING_RELEASES,
    ):
        assert installed in supported
    first, last = releases.TOKEN_ID_RELEASES
    assert first <= tuple(int(part) for part in installed.split(".")[:2]) <= last


# ---- token ids ----------------------------------------------------------------------------------


def parse_ids(tokenizer) -> dict:
    token_ids.forget(tokenizer)  # (the release is checked when a tokenizer is first read)
    ids = encode("qwen3", OUTPUT)
    return rtcompile.parse_response(
        ids, TEMPLATE, prefix=encode("qwen3", PREFIX), tokenizer=tokenizer
    )


@pytest.mark.parametrize("version", ["5.20.0", "5.22.2", "5.24.0", "5.25.0", "5.25.1"])
def test_token_ids_parse_with_a_tokenizer_of_transformers_5_20_to_5_25(version, monkeypatch):
    tokenizer = tokenizer_for("qwen3")
    expected = parse_ids(tokenizer)
    assert expected["reasoning_content"] == "plan" and expected["content"] == "Sure."
    monkeypatch.setattr(transformers, "__version__", version)
    assert parse_ids(tokenizer) == expected


@pytest.mark.parametrize("version", ["5.19.0", "5.26.0", "5.26.0.dev0", "4.57.1", "6.0.0"])
def test_token_ids_refuse_a_tokenizer_of_another_release_with_one_line(version, monkeypatch):
    tokenizer = tokenizer_for("qwen3")
    monkeypatch.setattr(transformers, "__version__", version)
    with pytest.raises(releases.UnsupportedTransformersError) as refused:
        parse_ids(tokenizer)
    message = one_line(refused.value)
    assert f"transformers {version} is installed" in message and "5.20 to 5.25" in message
    token_ids.forget(tokenizer)
    with pytest.raises(releases.UnsupportedTransformersError):
        rtcompile.ResponseParser(TEMPLATE, encode("qwen3", PREFIX), tokenizer=tokenizer)
    token_ids.forget(tokenizer)
    monkeypatch.undo()
    assert parse_ids(tokenizer)["content"] == "Sure."  # (nothing was left half made)


# ---- accelerate ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["5.24.0", "5.25.1", "5.26.0.dev0", "4.57.1"])
def test_accelerate_refuses_another_release_with_one_line_and_patches_nothing(version, monkeypatch):
    tokenizer = tokenizer_for("qwen3")
    assert not is_accelerated(tokenizer)
    monkeypatch.setattr(transformers, "__version__", version)
    with pytest.raises(releases.UnsupportedTransformersError) as refused:
        rtcompile.accelerate(tokenizer, "qwen3")
    message = one_line(refused.value)
    assert message.startswith("rtcompile.accelerate supports transformers 5.25.0 only")
    assert f"transformers {version} is installed" in message
    assert not is_accelerated(tokenizer) and "parse_response" not in vars(tokenizer)
    assert getattr(tokenizer, "response_template", None) is None


def test_accelerate_without_transformers_says_so(monkeypatch):
    tokenizer = tokenizer_for("qwen3")
    monkeypatch.setitem(sys.modules, "transformers", None)  # (`import transformers` raises)
    with pytest.raises(
        releases.UnsupportedTransformersError, match="transformers is not installed"
    ):
        accelerate(tokenizer, "qwen3")
    assert not is_accelerated(tokenizer)


def test_for_tokenizer_needs_no_particular_release(monkeypatch):
    """It reads the tokenizer's `response_template` and nothing else of transformers."""
    monkeypatch.setattr(transformers, "__version__", "5.19.0")
    tokenizer = tokenizer_for("qwen3")
    module = rtcompile.for_tokenizer(tokenizer, "qwen3")
    assert module.parse_response(OUTPUT, prefix=PREFIX)["content"] == "Sure."


# ---- serve, verify and infer --------------------------------------------------------------------


def test_serve_refuses_through_the_shared_check(monkeypatch):
    """The serve integration's own names are the shared ones (its own tests cover the refusal)."""
    assert serve.UnsupportedTransformersError is releases.UnsupportedTransformersError
    assert serve.SUPPORTED_TRANSFORMERS_RELEASES == releases.SERVE_RELEASES
    monkeypatch.setattr(transformers, "__version__", "5.24.0")
    with pytest.raises(releases.UnsupportedTransformersError) as refused:
        serve.check_transformers_release()
    assert one_line(refused.value).startswith(
        "rtcompile's transformers serve integration supports transformers 5.25.0 only"
    )


@pytest.mark.parametrize("command", ["verify", "infer"])
def test_verify_and_infer_refuse_another_release_with_one_error_line(command, monkeypatch, capsys):
    chat_template = REPO / "tests" / "template_cases" / "chat_templates" / "hermes2_pro.jinja"
    argv = (
        ["verify", "hermes2_pro", "--chat-template", str(chat_template)]
        if command == "verify"
        else ["infer", str(chat_template)]
    )
    monkeypatch.setattr(transformers, "__version__", "5.24.0")
    assert rtcompile_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(
        "rtcompile: error: rtcompile's template authoring (verify, infer) supports transformers "
        "5.25.0 only, but transformers 5.24.0 is installed"
    )


def test_the_chat_renderer_refuses_another_release(monkeypatch):
    from rtcompile.authoring.chat_render import ChatRenderer, load_chat_template

    chat_template = load_chat_template(
        REPO / "tests" / "template_cases" / "chat_templates" / "hermes2_pro.jinja"
    )
    monkeypatch.setattr(transformers, "__version__", "5.26.0")
    with pytest.raises(
        releases.UnsupportedTransformersError, match="transformers 5.26.0 is installed"
    ):
        ChatRenderer(chat_template)


# ---- the extras ---------------------------------------------------------------------------------


def test_the_extras_install_the_release_each_feature_needs():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]

    def pins(extra: str) -> list[str]:
        return [
            requirement for requirement in extras[extra] if requirement.startswith("transformers")
        ]

    # accelerate and serve, the `transformers` extra; verify and infer, the `verify` extra
    assert releases.ACCELERATE_RELEASES == releases.SERVE_RELEASES
    assert pins("transformers") == [
        f"transformers=={release}" for release in releases.SERVE_RELEASES
    ]
    assert pins("verify") == [f"transformers=={release}" for release in releases.AUTHORING_RELEASES]
    # the test extra leaves transformers to the README's --no-deps step (test_readme.py)
    assert pins("test") == []

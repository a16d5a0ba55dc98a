"""The bundled template library: templates/*.json, templates/index.json and rtcompile.library."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from transformers.cli.serving.utils import _RESPONSE_TEMPLATE_FALLBACKS
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
from transformers.utils import chat_parsing
from transformers.utils.chat_parsing.response_templates import load_response_template

from rtcompile.library import (
    UnknownTemplateError,
    list_templates,
    template_for,
    template_names,
    template_path,
)

# The bundled templates as installed: the source tree's templates/ under an editable install,
# site-packages/rtcompile/templates/ under a regular one, where the tests may run from a copy
# outside the source tree (as packagers run them).
TEMPLATES_DIR = Path(str(resources.files("rtcompile.templates")))
# The source tree's templates/, when these tests run from a checkout.
SOURCE_TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "templates"
CHAT_TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "template_cases" / "chat_templates"
INDEX_KEYS = {
    "name",
    "file",
    "families",
    "model_types",
    "documented_by",
    "status",
    "notes",
    "limitations",
}
# model_type values of checkpoints that ship their own modelling code (trust_remote_code), so
# transformers' config registry does not know them.
REMOTE_CODE_MODEL_TYPES = {"kimi_k2"}


def _template_files() -> set[str]:
    return {path.name for path in TEMPLATES_DIR.glob("*.json")} - {"index.json"}


def _raw_index() -> dict:
    return json.loads((TEMPLATES_DIR / "index.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------
# The index and the files agree


def test_every_template_file_is_indexed_and_every_entry_has_a_file():
    indexed = {entry["file"] for entry in _raw_index()["templates"]}
    assert indexed == _template_files()


def test_index_entries_are_complete_and_well_formed():
    entries = _raw_index()["templates"]
    names = [entry["name"] for entry in entries]
    assert len(names) == len(set(names)), "names must be unique"
    for entry in entries:
        assert set(entry) == INDEX_KEYS, entry["name"]
        assert entry["file"] == f"{entry['name']}.json"
        assert entry["families"] and all(isinstance(f, str) and f for f in entry["families"])
        assert all(isinstance(t, str) and t for t in entry["model_types"])
        assert entry["status"] in {"complete", "partial"}
        assert isinstance(entry["notes"], str) and entry["notes"]
        assert all(isinstance(item, str) and item for item in entry["limitations"])
        sources = entry["documented_by"]
        assert set(sources) == {"chat_templates", "parsers"}
        assert sources["chat_templates"] or sources["parsers"], f"{entry['name']} cites no source"
        if entry["status"] == "partial":
            assert entry["limitations"], f"{entry['name']} is partial but lists no limitation"


def test_cited_chat_templates_exist():
    available = {path.name for path in CHAT_TEMPLATES_DIR.glob("*.jinja")}
    cited = {
        name
        for entry in _raw_index()["templates"]
        for name in entry["documented_by"]["chat_templates"]
    }
    assert cited <= available
    # Every real chat template we keep backs some bundled template.
    assert cited == available


def test_a_template_without_a_chat_template_says_so():
    for entry in _raw_index()["templates"]:
        if not entry["documented_by"]["chat_templates"]:
            assert entry["status"] == "partial"
            assert "chat template" in entry["notes"]


def test_model_types_are_unique_so_lookup_is_unambiguous():
    owners: dict[str, str] = {}
    for entry in _raw_index()["templates"]:
        for model_type in entry["model_types"]:
            assert (
                model_type not in owners
            ), f"{model_type} listed by {owners[model_type]} and {entry['name']}"
            owners[model_type] = entry["name"]
    # A name that is also a model_type must belong to the same entry, or that model_type would be
    # shadowed by the name lookup.
    for name in template_names():
        assert owners.get(name, name) == name


def test_model_types_are_real_config_model_types():
    for entry in _raw_index()["templates"]:
        for model_type in entry["model_types"]:
            assert (
                model_type in CONFIG_MAPPING_NAMES or model_type in REMOTE_CODE_MODEL_TYPES
            ), model_type


def test_every_model_type_transformers_serving_knows_is_served():
    """transformers' serving code has fallback templates for some model types; so do we."""
    fallback_types = {model_type for types in _RESPONSE_TEMPLATE_FALLBACKS for model_type in types}
    served = {
        model_type for entry in _raw_index()["templates"] for model_type in entry["model_types"]
    }
    assert fallback_types <= served


# --------------------------------------------------------------------------------------------
# Every template is plain interpreter input


@pytest.mark.parametrize("name", template_names())
def test_template_is_accepted_by_the_interpreter(name):
    template = template_for(name)
    load_response_template(template)  # raises on unknown keys, bad patterns, bad transforms
    parsed = chat_parsing.parse_response("", template, prefix="")
    assert parsed == {"role": "assistant"}


@pytest.mark.parametrize("name", template_names())
def test_template_file_is_exactly_what_template_for_returns(name):
    on_disk = json.loads(Path(template_path(name)).read_text(encoding="utf-8"))
    assert on_disk == template_for(name)
    assert Path(template_path(name)) == TEMPLATES_DIR / f"{name}.json"


def test_installed_templates_are_the_source_trees():
    """An install (editable or not) ships every template file, index.json included, unchanged."""
    if not (SOURCE_TEMPLATES_DIR / "index.json").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the tests from a checkout, but {SOURCE_TEMPLATES_DIR} is missing")
        pytest.skip("the tests run outside a source checkout: there is no templates/ to compare")
    source = {path.name: path.read_bytes() for path in SOURCE_TEMPLATES_DIR.glob("*.json")}
    installed = {path.name: path.read_bytes() for path in TEMPLATES_DIR.glob("*.json")}
    assert installed == source


@pytest.mark.parametrize("name", template_names())
def test_templates_parse_back_reasoning_content_not_thinking(name):
    fields = template_for(name)["fields"]
    assert "thinking" not in fields and "reasoning" not in fields
    assert template_for(name)["defaults"] == {"role": "assistant"}


# --------------------------------------------------------------------------------------------
# Lookup


@pytest.mark.parametrize("entry", _raw_index()["templates"], ids=lambda entry: entry["name"])
def test_template_for_finds_every_model_type(entry):
    expected = template_for(entry["name"])
    for model_type in entry["model_types"]:
        assert template_for(model_type) == expected
        assert Path(template_path(model_type)) == Path(template_path(entry["name"]))


def test_template_for_examples():
    assert template_for("qwen3_moe") == template_for("qwen3")
    assert template_for("qwen3_5_moe") == template_for("qwen3_5")
    assert template_for("llama") == template_for("llama3_json")
    assert template_for("deepseek_v3") == template_for("deepseek_v3_1")
    assert template_for("qwen3_coder") != template_for("qwen3")


def test_template_for_returns_independent_copies():
    first = template_for("qwen3")
    first["fields"]["content"]["close"] = "mutated"
    first["defaults"]["role"] = "mutated"
    second = template_for("qwen3")
    assert second["defaults"] == {"role": "assistant"}
    assert "close" not in second["fields"]["content"]
    assert second is not template_for("qwen3")


def test_list_templates_returns_the_index_as_copies():
    listed = list_templates()
    assert listed == _raw_index()["templates"]
    assert [entry["name"] for entry in listed] == [
        entry["name"] for entry in _raw_index()["templates"]
    ]
    listed[0]["model_types"].append("mutated")
    listed.pop()
    assert list_templates() == _raw_index()["templates"]


def test_template_names_are_sorted_and_match_the_index():
    assert template_names() == sorted(entry["name"] for entry in _raw_index()["templates"])


def test_unknown_name_raises_a_helpful_key_and_value_error():
    with pytest.raises(UnknownTemplateError) as info:
        template_for("qwen9")
    error = info.value
    assert isinstance(error, KeyError) and isinstance(error, ValueError)
    message = str(error)
    assert message.startswith("no bundled response template")
    assert "'qwen9'" in message
    for name in template_names():
        assert name in message
    assert "qwen3_moe" in message  # model types are listed too
    assert error.requested == "qwen9"
    with pytest.raises(KeyError):
        template_path("qwen9")


def test_lookup_is_exact():
    for near_miss in ("Qwen3", " qwen3", "qwen3.json", ""):
        with pytest.raises(UnknownTemplateError):
            template_for(near_miss)


def test_non_string_lookup_is_a_type_error():
    with pytest.raises(TypeError):
        template_for(None)  # type: ignore[arg-type]


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except ValueError:  # NUL
        return False


@given(st.text(max_size=30))
def test_any_string_either_resolves_or_raises_unknown_template_error(requested):
    known = set(template_names()) | {
        model_type for entry in _raw_index()["templates"] for model_type in entry["model_types"]
    }
    assume(not _is_file(requested))  # (an existing file is read as a template)
    if requested in known:
        assert template_for(requested)["fields"]
    else:
        with pytest.raises(UnknownTemplateError):
            template_for(requested)

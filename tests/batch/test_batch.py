"""`python -m rtcompile parse` and rtcompile.batch: datasets of finished generations.

Every message is checked against the interpreter (transformers' parse_response), every kind of bad
row must come out as an error record on its own row, in order, and failures must leave no output
and no temporary file behind. pyarrow and datasets are in the `test` extra: locally a missing one
skips its tests, in CI (CI=true) it fails them.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import tracemalloc
from pathlib import Path

import pytest
from transformers.utils.chat_parsing import parse_response as interpreter_parse

import rtcompile
from rtcompile import batch
from rtcompile.batch import jsonl
from rtcompile.library import template_for


def _require(name: str):
    try:
        return __import__(name)
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")


QWEN3 = template_for("qwen3")
ASSISTANT = "<|im_start|>assistant\n"
PROMPT = "<|im_start|>user\nWhat is the weather?<|im_end|>\n" + ASSISTANT
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
        },
    }
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Bern", "days": "3"}}\n</tool_call>'
GOOD = [
    {"prompt": PROMPT, "completion": "<think>\nplan\n</think>\n\nSunny.<|im_end|>"},
    {"prompt": PROMPT, "completion": "<think>\nneed a tool\n</think>\n\n" + CALL + "<|im_end|>", "tools": TOOLS},
    {"prompt": PROMPT, "completion": "cut off in the mid", "tools": json.dumps(TOOLS)},
    {"prompt": "", "completion": "<think>\nno prompt\n</think>\n\nok<|im_end|>"},
    # Written twice: the interpreter keeps the last content, keep mode joins both.
    {"prompt": PROMPT, "completion": "Let me check." + CALL + "It is sunny.<|im_end|>", "tools": TOOLS},
]
# Rows the interpreter raises on (a region that is not JSON).
BROKEN_CALL = {"prompt": PROMPT, "completion": "Checking.<tool_call>\n{not json}\n</tool_call>Later.<|im_end|>"}
# Each bad input, with the kind and column of its error record.
BAD = [
    ({"prompt": PROMPT}, "missing", "completion"),
    ({"prompt": PROMPT, "completion": None}, "missing", "completion"),
    ({"completion": "hi"}, "missing", "prompt"),
    ({"prompt": None, "completion": "hi"}, "missing", "prompt"),
    ({"prompt": PROMPT, "completion": 42}, "type", "completion"),
    ({"prompt": PROMPT, "completion": ["a"]}, "type", "completion"),
    ({"prompt": 7, "completion": "hi"}, "type", "prompt"),
    ({"prompt": PROMPT, "completion": "hi", "tools": "[{oops"}, "tools_json", "tools"),
    ({"prompt": PROMPT, "completion": "hi", "tools": {"name": "f"}}, "type", "tools"),
    ({"prompt": PROMPT, "completion": "hi", "tools": '{"name": "f"}'}, "type", "tools"),
]
# Prompts without the template's start anchor: the interpreter parses the whole prompt as the
# assistant's text, followed by the generation. The first parses; in the second, the prompt opens a
# tool call the generation closes with text that is not JSON, and the interpreter raises.
NO_ANCHOR = {"prompt": "<|im_start|>user\nno assistant turn", "completion": "hi"}
NO_ANCHOR_BROKEN = {"prompt": "<|im_start|>user\n<tool_call>\n{oops", "completion": "</tool_call>hi<|im_end|>"}
NO_ANCHOR_PROMPTS = (NO_ANCHOR["prompt"], NO_ANCHOR_BROKEN["prompt"])


def interpreter_message(row: dict):
    tools = row.get("tools")
    if isinstance(tools, str):
        tools = json.loads(tools)
    return interpreter_parse(row["completion"], QWEN3, prefix=row["prompt"], tools=tools)


def assert_no_anchor_row(row: dict, message, error: dict | None) -> None:
    """A row whose prompt lacks the start anchor carries what the interpreter gives for it (the
    message, or where it raises the usual parse error record), noted as missing its anchor."""
    tools = json.loads(row["tools"]) if isinstance(row.get("tools"), str) else row.get("tools")
    try:
        expected = interpreter_message(row)
    except ValueError:
        expected = None
    assert error is not None and error["column"] in ("prompt", None), error
    assert "does not contain the template's start anchor" in error["detail"], error
    if expected is not None:
        assert message == expected
        assert message == rtcompile.parse_response(row["completion"], QWEN3, prefix=row["prompt"], tools=tools)
        assert (error["kind"], error["column"], error["exception"]) == ("prefix_without_anchor", "prompt", None)
    else:
        with pytest.raises(ValueError):
            rtcompile.parse_response(row["completion"], QWEN3, prefix=row["prompt"], tools=tools)
        assert (error["kind"], error["exception"]) == ("parse", "RegionParseError"), error
        assert message["rtcompile_parse_errors"][0]["field"] == "tool_calls"  # what keep mode recovers


def write_jsonl(path: Path, rows) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def run_cli(*args, cwd: Path, env_extra: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtcompile", "parse", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "RTCOMPILE_CACHE_DIR": str(cwd / "cache"), **(env_extra or {})},
        **kwargs,
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rtcompile: error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# ---- JSONL: every row, in order, with the interpreter's messages ---------------------------------


def mixed_rows() -> list[dict]:
    rows = []
    for index in range(12):
        rows.append({"id": len(rows), **GOOD[index % len(GOOD)]})
        if index % 3 == 0:
            rows.append({"id": len(rows), **BAD[index % len(BAD)][0]})
    rows.append({"id": len(rows), **BROKEN_CALL})
    rows.extend({"id": len(rows) + i, **row} for i, (row, _, _) in enumerate(BAD))
    rows.extend({"id": len(rows) + i, **row} for i, row in enumerate((NO_ANCHOR, NO_ANCHOR_BROKEN)))
    return rows


@pytest.mark.parametrize("jobs", [1, 2])
def test_jsonl_keeps_every_row_in_order_with_the_interpreters_messages(tmp_path, jobs):
    rows = mixed_rows()
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    result = run_cli(source, "-o", tmp_path / "out.jsonl", "--template", "qwen3", "--jobs", jobs, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = read_jsonl(tmp_path / "out.jsonl")
    assert len(out) == len(rows)
    expected_bad = {json.dumps(row, sort_keys=True): (kind, column) for row, kind, column in BAD}
    kinds = collections.Counter()
    for row, parsed in zip(rows, out):
        assert list(parsed) == [*row, "message", "error"]  # every input column, in its order
        assert {k: parsed[k] for k in row} == row
        bad = expected_bad.get(json.dumps({k: v for k, v in row.items() if k != "id"}, sort_keys=True))
        if bad is not None:
            kinds[bad[0]] += 1
            assert parsed["message"] is None
            assert (parsed["error"]["kind"], parsed["error"]["column"]) == bad, parsed["error"]
            assert parsed["error"]["detail"]
        elif row["prompt"] in NO_ANCHOR_PROMPTS:
            kinds["prefix_without_anchor" if row["prompt"] == NO_ANCHOR["prompt"] else "parse"] += 1
            assert_no_anchor_row(row, parsed["message"], parsed["error"])
        elif row["completion"] == BROKEN_CALL["completion"]:
            kinds["parse"] += 1
            with pytest.raises(ValueError):
                interpreter_message(row)
            assert parsed["error"]["kind"] == "parse"
            assert parsed["error"]["exception"] == "RegionParseError"
            # ... and what keep mode recovers: the text around it and the failed region's record.
            assert parsed["message"]["content"] == "Checking.\n\nLater."
            assert parsed["message"]["rtcompile_parse_errors"][0]["field"] == "tool_calls"
        else:
            assert parsed["error"] is None
            assert parsed["message"] == interpreter_message(row)
    assert kinds["parse"] == 2 and kinds["prefix_without_anchor"] == 1 and kinds["missing"] >= 4, kinds
    by_count = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items(), key=lambda item: (-item[1], item[0])))
    summary = f"{tmp_path / 'out.jsonl'}: {len(rows)} rows, {sum(kinds.values())} with an error ({by_count})"
    assert result.stderr.strip() == summary  # the last line counts the rows with an error by kind
    assert leftovers(tmp_path) == []


def test_one_two_and_three_jobs_write_the_same_bytes_across_many_batches(tmp_path):
    mixed = mixed_rows()
    rows = [{**mixed[i % len(mixed)], "n": i} for i in range(3 * batch.BATCH_ROWS + 17)]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    outputs, summaries = [], []
    for jobs in (1, 2, 3):
        output = tmp_path / f"out{jobs}.jsonl"
        result = run_cli(source, "-o", output, "--template", "qwen3", "--jobs", jobs, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        outputs.append(output.read_bytes())
        summaries.append(result.stderr.strip().removeprefix(str(output)))
    assert outputs[0] == outputs[1] == outputs[2]
    assert summaries[0] == summaries[1] == summaries[2]
    assert [row["n"] for row in read_jsonl(tmp_path / "out2.jsonl")] == list(range(len(rows)))


def test_a_prompt_without_the_start_anchor_in_keep_and_strict_modes(tmp_path):
    parser = batch.RowParser(QWEN3, errors="keep")
    message, error = parser.parse_row(NO_ANCHOR["completion"], NO_ANCHOR["prompt"])
    assert message == interpreter_message(NO_ANCHOR)  # (no field written twice: keep agrees)
    assert (error["kind"], error["column"]) == ("prefix_without_anchor", "prompt")
    message, error = parser.parse_row(NO_ANCHOR_BROKEN["completion"], NO_ANCHOR_BROKEN["prompt"])
    assert error["kind"] == "region" and "start anchor" in error["detail"]
    assert message["rtcompile_parse_errors"][0]["field"] == "tool_calls"
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[0], NO_ANCHOR])
    with pytest.raises(batch.RowError, match=r"row 1 \(line 2\): column 'prompt': .*start anchor") as caught:
        batch.parse_file(source, tmp_path / "out.jsonl", QWEN3, errors="strict", jobs=1, progress=False)
    assert caught.value.record["kind"] == "prefix_without_anchor"
    assert not (tmp_path / "out.jsonl").exists()


def test_lines_that_are_not_objects_are_kept_in_their_error_records(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[0], "not json at all", "", "[1, 2]", GOOD[3]])
    result = run_cli(source, "-o", tmp_path / "out.jsonl", "--template", "qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = read_jsonl(tmp_path / "out.jsonl")
    assert len(out) == 4  # the blank line is no row
    assert out[0]["message"] == interpreter_message(GOOD[0])
    assert out[1] == {
        "message": None,
        "error": {
            "kind": "invalid_line",
            "column": None,
            "exception": None,
            "detail": out[1]["error"]["detail"],
            "line": "not json at all",
        },
    }
    assert "line 2 is not valid JSON" in out[1]["error"]["detail"]
    assert out[2]["error"]["line"] == "[1, 2]" and "line 4" in out[2]["error"]["detail"]
    assert out[3]["message"] == interpreter_message(GOOD[3])


def test_keep_mode_keeps_both_texts_and_marks_failed_regions(tmp_path):
    rows = [GOOD[4], BROKEN_CALL, GOOD[0]]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    default = run_cli(source, "-o", tmp_path / "default.jsonl", "--template", "qwen3", cwd=tmp_path)
    keep = run_cli(source, "-o", tmp_path / "keep.jsonl", "--template", "qwen3", "--errors", "keep", cwd=tmp_path)
    assert default.returncode == 0 and keep.returncode == 0, default.stderr + keep.stderr
    by_default, kept = read_jsonl(tmp_path / "default.jsonl"), read_jsonl(tmp_path / "keep.jsonl")
    # The interpreter keeps only the text after the call; keep mode joins both.
    assert by_default[0]["message"] == interpreter_message(GOOD[4])
    assert by_default[0]["message"]["content"] == "It is sunny."
    assert kept[0]["message"]["content"] == "Let me check.\n\nIt is sunny."
    assert kept[0]["error"] is None
    assert kept[1]["message"] == by_default[1]["message"]
    assert kept[1]["error"]["kind"] == "region" and "tool_calls" in kept[1]["error"]["detail"]
    assert kept[2] == by_default[2]


def test_strict_mode_stops_at_the_first_bad_row_and_writes_nothing(tmp_path):
    rows = [GOOD[0], GOOD[1], BROKEN_CALL, BAD[0][0]]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    output = tmp_path / "out.jsonl"
    for jobs in (1, 2):
        result = run_cli(source, "-o", output, "--template", "qwen3", "--errors", "strict", "--jobs", jobs, cwd=tmp_path)
        assert_one_line_error(result, str(source), "row 2 (line 3)", "RegionParseError", "tool_calls")
        assert not output.exists()
        assert leftovers(tmp_path) == []
    write_jsonl(source, [GOOD[0], BAD[4][0]])
    result = run_cli(source, "-o", output, "--template", "qwen3", "--errors", "strict", cwd=tmp_path)
    assert_one_line_error(result, "row 1 (line 2)", "column 'completion'", "not a string")


def test_column_options_and_no_prefix(tmp_path):
    rows = [{"gen": GOOD[1]["completion"], "ctx": PROMPT, "fns": TOOLS}, {"gen": "plain<|im_end|>", "ctx": PROMPT}]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    result = run_cli(
        source, "-o", tmp_path / "out.jsonl", "--template", "qwen3",
        "--text-column", "gen", "--prefix-column", "ctx", "--tools-column", "fns",
        "--message-column", "parsed", "--error-column", "problem", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    out = read_jsonl(tmp_path / "out.jsonl")
    assert list(out[0]) == ["gen", "ctx", "fns", "parsed", "problem"]
    assert out[0]["parsed"] == interpreter_parse(rows[0]["gen"], QWEN3, prefix=PROMPT, tools=TOOLS)
    assert out[0]["parsed"]["tool_calls"][0]["function"]["arguments"] == {"city": "Bern", "days": 3}
    assert out[1]["problem"] is None
    no_prefix = write_jsonl(tmp_path / "whole.jsonl", [{"completion": "<think>\na\n</think>\n\nb<|im_end|>"}])
    result = run_cli(no_prefix, "-o", tmp_path / "whole_out.jsonl", "--template", "qwen3", "--no-prefix", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (row,) = read_jsonl(tmp_path / "whole_out.jsonl")
    assert row["message"] == interpreter_parse("<think>\na\n</think>\n\nb<|im_end|>", QWEN3, prefix="")
    assert row["message"]["reasoning_content"] == "a"


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_text_column_that_no_row_has_stops_the_job_and_writes_nothing(tmp_path, jobs):
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[0], "not json", GOOD[1]] * 3)
    output = tmp_path / "out.jsonl"
    output.write_text("previous results\n", encoding="utf-8")
    result = run_cli(source, "-o", output, "--template", "qwen3", "--text-column", "output", "--jobs", jobs, cwd=tmp_path)
    assert_one_line_error(result, str(source), "no row has a column 'output'", "prompt, completion", "--text-column")
    assert output.read_text(encoding="utf-8") == "previous results\n"
    assert leftovers(tmp_path) == []
    # A column that some rows lack is a `missing` error on those rows; lines that are no objects
    # at all, or no lines, are no reason to stop.
    some = write_jsonl(tmp_path / "some.jsonl", [GOOD[0], {"prompt": PROMPT, "output": "x"}])
    result = run_cli(some, "-o", tmp_path / "some_out.jsonl", "--template", "qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [row["error"] and row["error"]["kind"] for row in read_jsonl(tmp_path / "some_out.jsonl")] == [None, "missing"]
    for name, lines in (("no_objects", ["[1]", "not json"]), ("empty", [])):
        result = run_cli(write_jsonl(tmp_path / f"{name}.jsonl", lines), "-o", tmp_path / f"{name}_out.jsonl", "--template", "qwen3", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert len(read_jsonl(tmp_path / f"{name}_out.jsonl")) == len(lines)


def test_an_input_that_already_has_a_message_column_is_refused(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [{**GOOD[0], "message": "mine"}])
    result = run_cli(source, "-o", tmp_path / "out.jsonl", "--template", "qwen3", cwd=tmp_path)
    assert_one_line_error(result, "already has a 'message'", "--message-column")
    assert not (tmp_path / "out.jsonl").exists() and leftovers(tmp_path) == []


def test_a_lone_surrogate_in_the_input_is_written_escaped(tmp_path):
    (tmp_path / "in.jsonl").write_text(
        json.dumps({"prompt": PROMPT, "completion": "odd \\ud800 text<|im_end|>"}).replace("\\\\ud800", "\\ud800") + "\n",
        encoding="utf-8",
    )
    result = run_cli(tmp_path / "in.jsonl", "-o", tmp_path / "out.jsonl", "--template", "qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (row,) = read_jsonl(tmp_path / "out.jsonl")
    assert row["message"]["content"] == "odd \ud800 text" and row["error"] is None


def test_each_input_object_is_written_as_it_was_with_the_two_columns_appended(tmp_path):
    """Byte for byte: spacing, key order and escapes of the input line stay, on a line whose message
    holds a lone surrogate (written as its escape) as on any other."""
    lines = [
        '  {"completion" :"<think>\\nplan\\n</think>\\n\\nSunny.<|im_end|>",  "prompt": ' + json.dumps(PROMPT) + ', "n": 1.50}  ',
        '{"prompt": ' + json.dumps(PROMPT) + ', "completion": "odd \\ud800 text<|im_end|>", "caf\\u00e9": "\u00fc"}',
        "{}",
    ]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_cli(tmp_path / "in.jsonl", "-o", tmp_path / "out.jsonl", "--template", "qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "out.jsonl").read_bytes().decode("utf-8").splitlines()
    assert len(written) == len(lines)
    for line, out in zip(lines, written):
        head = line.rstrip()[:-1].rstrip()
        separator = "" if head == "{" else ", "
        assert out.startswith(head + separator + '"message": '), (line, out)
        parsed = json.loads(out)
        assert list(parsed)[-2:] == ["message", "error"]
    assert '"content": "odd \\ud800 text"' in written[1]  # the lone surrogate, escaped
    assert json.loads(written[1])["message"] == interpreter_message(json.loads(lines[1]))
    assert json.loads(written[2])["error"]["kind"] == "missing" and json.loads(written[2])["message"] is None


# ---- I/O errors: one line, exit 2, nothing half-written ------------------------------------------


def test_io_errors_are_one_line_and_leave_no_output(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[0]])
    assert_one_line_error(
        run_cli(tmp_path / "missing.jsonl", "-o", tmp_path / "o.jsonl", "--template", "qwen3", cwd=tmp_path),
        "missing.jsonl", "No such file",
    )
    assert_one_line_error(
        run_cli(source, "-o", tmp_path / "no_dir" / "o.jsonl", "--template", "qwen3", cwd=tmp_path),
        "no_dir", "no such directory",
    )
    assert_one_line_error(
        run_cli(source, "-o", tmp_path / "o.jsonl", "--template", "no_such_template", cwd=tmp_path),
        "no_such_template",
    )
    assert_one_line_error(run_cli(source, "-o", source, "--template", "qwen3", cwd=tmp_path), "replace the input")
    assert_one_line_error(run_cli(source, "-o", tmp_path / "o.txt", "--template", "qwen3", cwd=tmp_path), "--output-format")
    assert_one_line_error(run_cli(tmp_path / "in.data", "-o", tmp_path / "o.jsonl", "--template", "qwen3", cwd=tmp_path), "in.data")
    directory = tmp_path / "readonly"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        if os.access(directory, os.W_OK):  # root writes anywhere: a file in the way instead
            directory.chmod(0o700)
            directory = tmp_path / "a_file"
            directory.write_text("")
        result = run_cli(source, "-o", directory / "o.jsonl", "--template", "qwen3", cwd=tmp_path)
        assert_one_line_error(result)
    finally:
        if directory.is_dir():
            directory.chmod(0o700)
    assert not (tmp_path / "o.jsonl").exists()
    assert leftovers(tmp_path) == []


def test_an_output_directory_that_cannot_be_written_is_named_not_the_temporary_file(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[0]])
    (tmp_path / "a_file").write_text("")
    result = run_cli(source, "-o", tmp_path / "a_file" / "out.jsonl", "--template", "qwen3", cwd=tmp_path)
    assert_one_line_error(result, f"{tmp_path / 'a_file'}: not a directory")
    # /proc takes no new files, from root either.
    result = run_cli(source, "-o", "/proc/out.jsonl", "--template", "qwen3", cwd=tmp_path)
    assert_one_line_error(result, "/proc: cannot write out.jsonl there: ")
    assert ".tmp" not in result.stderr
    assert leftovers(tmp_path) == []


def _locked(monkeypatch, directory: Path) -> None:
    """Creating files and folders in `directory` fails as in a directory the user may not write."""
    real_open, real_mkdir = os.open, os.mkdir

    def refuse(real):
        def call(path, *args, **kwargs):
            if Path(path).parent == directory:
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real(path, *args, **kwargs)

        return call

    monkeypatch.setattr(os, "open", refuse(real_open))
    monkeypatch.setattr(os, "mkdir", refuse(real_mkdir))


@pytest.mark.parametrize("output_name", ["out.jsonl", "out.parquet", "out_folder"])
def test_an_unwritable_output_directory_is_named_in_every_format(tmp_path, monkeypatch, output_name):
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[0]])
    if output_name != "out.jsonl":  # (Arrow outputs need Arrow input)
        pa = _require("pyarrow")
        import pyarrow.parquet as pq

        source = tmp_path / "in.parquet"
        pq.write_table(pa.Table.from_pylist([GOOD[0]]), source)
    locked = tmp_path / "locked"
    locked.mkdir()
    _locked(monkeypatch, locked)
    with pytest.raises(batch.BatchError) as caught:
        batch.parse_file(source, locked / output_name, QWEN3, jobs=1, progress=False)
    assert str(caught.value) == f"{locked}: cannot write {output_name} there: Permission denied"
    assert list(locked.iterdir()) == []


def test_an_error_leaves_an_existing_output_unchanged(tmp_path):
    output = tmp_path / "out.jsonl"
    output.write_text("previous results\n", encoding="utf-8")
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[0], BROKEN_CALL])
    result = run_cli(source, "-o", output, "--template", "qwen3", "--errors", "strict", cwd=tmp_path)
    assert_one_line_error(result, "row 1")
    assert output.read_text(encoding="utf-8") == "previous results\n"
    assert leftovers(tmp_path) == []


def test_a_failure_while_writing_removes_the_temporary_file(tmp_path, monkeypatch):
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[0]] * 3)

    def full_disk(parser, batch_):
        raise OSError(28, "No space left on device", str(tmp_path / "out.jsonl"))

    monkeypatch.setattr(jsonl, "encode_batch", full_disk)
    with pytest.raises(batch.BatchError, match="No space left"):
        batch.parse_file(source, tmp_path / "out.jsonl", QWEN3, jobs=1, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_the_output_gets_the_users_mode(tmp_path, umask, mode):
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[0]])
    result = run_cli(
        source, "-o", tmp_path / "out.jsonl", "--template", "qwen3", cwd=tmp_path, preexec_fn=lambda: os.umask(umask)
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.jsonl").stat().st_mode & 0o777 == mode


# ---- the progress bar: a terminal only ---------------------------------------------------------


def test_progress_bar_on_a_terminal_and_nothing_on_a_pipe(tmp_path):
    _require("tqdm")
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[i % len(GOOD)] for i in range(50)])
    piped = run_cli(source, "-o", tmp_path / "piped.jsonl", "--template", "qwen3", "--jobs", 1, cwd=tmp_path)
    assert piped.returncode == 0
    assert piped.stderr == f"{tmp_path / 'piped.jsonl'}: 50 rows, 0 with an error\n"
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a real screen's size
    process = subprocess.Popen(
        [sys.executable, "-m", "rtcompile", "parse", str(source), "-o", str(tmp_path / "tty.jsonl"), "--template", "qwen3", "--jobs", "1"],
        stdout=subprocess.PIPE,
        stderr=terminal,
        cwd=tmp_path,
        env={**os.environ, "RTCOMPILE_CACHE_DIR": str(tmp_path / "cache")},
    )
    os.close(terminal)
    screen = b""
    while True:
        try:
            data = os.read(controller, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not data:
            break
        screen += data
    os.close(controller)
    assert process.wait(timeout=300) == 0
    text = screen.decode("utf-8", "replace")
    assert "rows/s" in text, text  # the rate
    assert "100%" in text and "50.0/50.0" in text and "<00:00" in text, text  # a known total, time left
    assert process.stdout.read() == b""
    assert read_jsonl(tmp_path / "tty.jsonl") == read_jsonl(tmp_path / "piped.jsonl")


# ---- memory does not grow with the input -------------------------------------------------------


def _peak_bytes(function) -> int:
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_number_of_rows(tmp_path):
    peaks = {}
    for count in (2 * batch.BATCH_ROWS, 8 * batch.BATCH_ROWS):
        source = write_jsonl(tmp_path / f"in{count}.jsonl", [GOOD[i % len(GOOD)] for i in range(count)])
        output = tmp_path / f"out{count}.jsonl"
        peaks[count] = _peak_bytes(lambda: batch.parse_file(source, output, QWEN3, jobs=1, progress=False))
        assert len(read_jsonl(output)) == count
    small, large = peaks.values()
    assert large < 1.5 * small, peaks  # four times the rows, not four times the memory


# ---- how many worker processes -----------------------------------------------------------------


def test_the_job_parses_in_its_own_process_and_spawns_workers_only_for_a_second_batch(tmp_path, monkeypatch):
    import multiprocessing

    small = write_jsonl(tmp_path / "small.jsonl", GOOD)
    large = write_jsonl(tmp_path / "large.jsonl", [GOOD[i % len(GOOD)] for i in range(2 * batch.BATCH_ROWS + 1)])
    pools = []
    real_get_context = multiprocessing.get_context

    def recording_get_context(method=None):
        context = real_get_context(method)

        class Recording:
            def Pool(self, processes, **kwargs):  # noqa: N802 (multiprocessing's name)
                pools.append((method, processes))
                return context.Pool(processes, **kwargs)

        return Recording()

    monkeypatch.setattr(multiprocessing, "get_context", recording_get_context)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    for source in (small, large):
        batch.parse_file(source, tmp_path / f"one_{source.name}", QWEN3, jobs=1, progress=False)
    assert pools == []
    batch.parse_file(small, tmp_path / "default_small.jsonl", QWEN3, progress=False)
    assert pools == []  # one batch: no worker's start-up to pay
    batch.parse_file(large, tmp_path / "default_large.jsonl", QWEN3, progress=False)
    assert pools == [("spawn", 2)]  # every core: this process and two clean workers
    for name in ("small.jsonl", "large.jsonl"):
        assert (tmp_path / f"one_{name}").read_bytes() == (tmp_path / f"default_{name}").read_bytes()


@pytest.mark.parametrize("jobs", ["0", "-2"])
@pytest.mark.parametrize("engine", ["local", "ray"])
def test_fewer_than_one_job_is_refused(tmp_path, jobs, engine):
    source = write_jsonl(tmp_path / "in.jsonl", [GOOD[0]])
    result = run_cli(source, "-o", tmp_path / "out.jsonl", "--template", "qwen3", "--jobs", jobs, "--engine", engine, cwd=tmp_path)
    assert_one_line_error(result, f"--jobs must be at least 1, not {jobs}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
    with pytest.raises(ValueError, match=f"jobs must be at least 1, not {jobs}"):
        batch.parse_file(source, tmp_path / "out.jsonl", QWEN3, jobs=int(jobs), progress=False)
    with pytest.raises(ValueError, match=f"concurrency must be at least 1, not {jobs}"):
        batch.parse_with_ray(str(source), tmp_path / "out", QWEN3, concurrency=int(jobs))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_rows_with_different_tools_strings_each_get_their_own_schema():
    as_integer = json.dumps(TOOLS)
    as_string = json.dumps([{**TOOLS[0], "function": {**TOOLS[0]["function"], "parameters": {"type": "object", "properties": {"days": {"type": "string"}}}}}])
    parser = batch.RowParser(QWEN3)
    text = GOOD[1]["completion"]
    for tools, days in [(as_integer, 3), (as_integer, 3), (as_string, "3"), (as_integer, 3), ("[broken", None)]:
        message, error = parser.parse_row(text, PROMPT, tools)
        if days is None:
            assert message is None and error["kind"] == "tools_json"
        else:
            assert error is None
            assert message["tool_calls"][0]["function"]["arguments"]["days"] == days
            assert message == interpreter_parse(text, QWEN3, prefix=PROMPT, tools=json.loads(tools))


def test_importing_the_package_loads_none_of_its_optional_dependencies():
    code = "import sys, rtcompile.batch; print(sorted({m.split('.')[0] for m in sys.modules} & {'pyarrow', 'tqdm', 'ray', 'datasets'}))"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"


# A job run in a fresh process, which then prints its exit status and the modules it imported.
_MODULES_OF_A_JOB = """
import json, sys
from rtcompile.__main__ import main
status = main(["parse", *sys.argv[1:]])
print(json.dumps([status, sorted(sys.modules)]))
"""
_OPTIONAL = {"pyarrow", "pandas", "numpy", "tqdm", "ray", "datasets"}


def job_modules(cwd: Path, *arguments) -> set:
    """The modules the parse command with `arguments` imports (in its own process)."""
    completed = subprocess.run(
        [sys.executable, "-c", _MODULES_OF_A_JOB, *map(str, arguments)],
        capture_output=True, text=True, timeout=300, cwd=cwd, env={**os.environ, "RTCOMPILE_CACHE_DIR": str(cwd / "cache")},
    )
    assert completed.returncode == 0, completed.stderr
    status, modules = json.loads(completed.stdout.splitlines()[-1])
    assert status == 0, completed.stderr
    return set(modules)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_jsonl_job_imports_neither_pyarrow_nor_pandas_nor_tqdm(tmp_path, jobs):
    for name in ("pyarrow", "pandas", "tqdm"):
        _require(name)  # installed, and still not imported
    mixed = mixed_rows()
    source = write_jsonl(tmp_path / "in.jsonl", [mixed[i % len(mixed)] for i in range(2 * batch.BATCH_ROWS + 1)])
    modules = job_modules(tmp_path, source, "-o", tmp_path / "out.jsonl", "--template", "qwen3", "--jobs", jobs)
    assert len(read_jsonl(tmp_path / "out.jsonl")) == 2 * batch.BATCH_ROWS + 1
    assert {name.split(".")[0] for name in modules} & _OPTIONAL == set()
    arrow_code = {"rtcompile.batch.arrow", "rtcompile.batch.parquet", "rtcompile.batch.datasets_folder", "rtcompile.batch.ray"}
    assert modules & arrow_code == set()
    assert "rtcompile.frontend.lint" not in modules  # (the compile command's, not a job's)

"""rtcompile.batch on Arrow data: Parquet files, `datasets` folders, pyarrow Tables and
`datasets.Dataset.map(..., num_proc=2)`. Messages are checked against the interpreter; bad rows
must come out as error records on their own rows, in order."""

from __future__ import annotations

import json
import os

import pytest

from hypothesis import given
from hypothesis import strategies as st

from rtcompile import batch
from rtcompile.batch.arrow import error_array, error_type, string_array
from test_batch import (
    BROKEN_CALL,
    GOOD,
    NO_ANCHOR,
    NO_ANCHOR_BROKEN,
    NO_ANCHOR_PROMPTS,
    PROMPT,
    QWEN3,
    TOOLS,
    _require,
    assert_no_anchor_row,
    assert_one_line_error,
    interpreter_message,
    job_modules,
    leftovers,
    read_jsonl,
    run_cli,
)

pa = _require("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

COLUMNS = ("id", "prompt", "completion", "tools", "score")


def arrow_rows() -> list[dict]:
    """Good rows, a broken one, every bad input that a typed column can hold and the prompts
    without a start anchor, with a column the parser does not read (`score`) that must come
    through untouched."""
    rows = [dict(row) for row in GOOD] + [dict(BROKEN_CALL)]
    rows += [
        {"prompt": PROMPT, "completion": None},
        {"prompt": None, "completion": "hi"},
        {"prompt": PROMPT, "completion": "hi", "tools": "[{oops"},
        {"prompt": PROMPT, "completion": "hi", "tools": '{"name": "f"}'},
        dict(NO_ANCHOR),
        dict(NO_ANCHOR_BROKEN),
    ]
    for index, row in enumerate(rows):
        tools = row.get("tools")
        row["tools"] = tools if tools is None or isinstance(tools, str) else json.dumps(tools)
        row.update(id=index, score=index / 2)
    return [{name: row.get(name) for name in COLUMNS} for row in rows]


BASE_ROWS = len(arrow_rows())
EXPECTED_ERRORS = {6: ("missing", "completion"), 7: ("missing", "prompt"), 8: ("tools_json", "tools"), 9: ("type", "tools")}
ROWS_WITH_AN_ERROR = 7  # the broken call, four bad inputs and two prompts without an anchor


def check_parsed(rows: list[dict], out: list[dict], message_is_text: bool) -> None:
    assert [row["id"] for row in out] == [row["id"] for row in rows]
    for row, parsed in zip(rows, out):
        assert list(parsed) == [*COLUMNS, "message", "error"]
        assert {name: parsed[name] for name in COLUMNS} == row
        message = parsed["message"]
        if message_is_text and message is not None:
            message = json.loads(message)
        expected_error = EXPECTED_ERRORS.get(row["id"] % BASE_ROWS)  # (ids beyond the base rows repeat them)
        if expected_error is not None:
            assert message is None
            assert (parsed["error"]["kind"], parsed["error"]["column"]) == expected_error
        elif row["prompt"] in NO_ANCHOR_PROMPTS:
            assert_no_anchor_row(row, message, parsed["error"])
        elif row["completion"] == BROKEN_CALL["completion"]:
            assert parsed["error"]["exception"] == "RegionParseError"
            assert message["content"] == "Checking.\n\nLater."
        else:
            assert parsed["error"] is None, parsed["error"]
            assert message == interpreter_message(row)


@pytest.mark.parametrize("jobs", [1, 2])
def test_parquet_in_and_out(tmp_path, jobs):
    rows = arrow_rows()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    result = run_cli(tmp_path / "in.parquet", "-o", tmp_path / "out.parquet", "--template", "qwen3", "--jobs", jobs, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.schema.field("message").type == pa.string()  # a JSON string
    assert table.schema.field("error").type == error_type()  # a record
    check_parsed(rows, table.to_pylist(), message_is_text=True)
    assert leftovers(tmp_path) == []


def test_tools_as_a_list_column(tmp_path):
    rows = [{"prompt": PROMPT, "completion": GOOD[1]["completion"], "tools": TOOLS}, {"prompt": PROMPT, "completion": "x<|im_end|>", "tools": None}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    result = run_cli(tmp_path / "in.parquet", "-o", tmp_path / "out.parquet", "--template", "qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    first, second = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert json.loads(first["message"]) == interpreter_message(rows[0])
    assert json.loads(first["message"])["tool_calls"][0]["function"]["arguments"]["days"] == 3  # coerced by the schema
    assert second["error"] is None


def test_a_column_of_the_wrong_type_and_a_missing_column(tmp_path):
    pq.write_table(pa.table({"prompt": [PROMPT, PROMPT], "completion": [1, 2]}), tmp_path / "ints.parquet")
    result = run_cli(tmp_path / "ints.parquet", "-o", tmp_path / "ints_out.parquet", "--template", "qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = pq.read_table(tmp_path / "ints_out.parquet").to_pylist()
    assert [(r["completion"], r["message"], r["error"]["kind"], r["error"]["column"]) for r in out] == [
        (1, None, "type", "completion"),
        (2, None, "type", "completion"),
    ]
    # A text column the table does not have: stopped before any row is parsed, nothing written.
    pq.write_table(pa.table({"prompt": [PROMPT], "text": ["hi"]}), tmp_path / "other.parquet")
    for output in ("other_out.parquet", "other_out.jsonl", "other_out"):
        result = run_cli(tmp_path / "other.parquet", "-o", tmp_path / output, "--template", "qwen3", cwd=tmp_path)
        assert_one_line_error(result, "other.parquet", "no column 'completion'", "prompt, text", "--text-column")
        assert not (tmp_path / output).exists() and leftovers(tmp_path) == []
    # ... and the same column, null in every row: a `missing` error on each row.
    pq.write_table(pa.table({"prompt": [PROMPT], "completion": pa.array([None], pa.string())}), tmp_path / "nulls.parquet")
    result = run_cli(tmp_path / "nulls.parquet", "-o", tmp_path / "nulls_out.parquet", "--template", "qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (row,) = pq.read_table(tmp_path / "nulls_out.parquet").to_pylist()
    assert row["error"]["kind"] == "missing" and row["error"]["column"] == "completion"


def test_parquet_to_jsonl_writes_messages_as_objects(tmp_path):
    rows = arrow_rows()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    result = run_cli(tmp_path / "in.parquet", "-o", tmp_path / "out.jsonl", "--template", "qwen3", "--jobs", 2, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    check_parsed(rows, read_jsonl(tmp_path / "out.jsonl"), message_is_text=False)


def test_strict_mode_on_parquet(tmp_path):
    pq.write_table(pa.Table.from_pylist(arrow_rows()), tmp_path / "in.parquet")
    result = run_cli(tmp_path / "in.parquet", "-o", tmp_path / "out.parquet", "--template", "qwen3", "--errors", "strict", cwd=tmp_path)
    assert_one_line_error(result, "row 5", "RegionParseError")
    assert not (tmp_path / "out.parquet").exists() and leftovers(tmp_path) == []


def test_a_damaged_parquet_file_is_one_line_and_no_output(tmp_path):
    pq.write_table(pa.Table.from_pylist(arrow_rows()), tmp_path / "in.parquet")
    data = (tmp_path / "in.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    result = run_cli(tmp_path / "cut.parquet", "-o", tmp_path / "out.parquet", "--template", "qwen3", cwd=tmp_path)
    assert_one_line_error(result, "cut.parquet")
    assert not (tmp_path / "out.parquet").exists() and leftovers(tmp_path) == []


def test_jsonl_to_parquet_is_refused_clearly(tmp_path):
    (tmp_path / "in.jsonl").write_text(json.dumps(GOOD[0]) + "\n", encoding="utf-8")
    result = run_cli(tmp_path / "in.jsonl", "-o", tmp_path / "out.parquet", "--template", "qwen3", cwd=tmp_path)
    assert_one_line_error(result, "JSONL input is written as JSONL")


# ---- datasets folders ---------------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_datasets_folder_in_and_out(tmp_path, jobs):
    datasets = _require("datasets")
    rows = arrow_rows()
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "in_ds"))
    result = run_cli(tmp_path / "in_ds", "-o", tmp_path / "out_ds", "--template", "qwen3", "--jobs", jobs, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    loaded = datasets.load_from_disk(str(tmp_path / "out_ds"))
    assert loaded.features["message"] == datasets.Value("string")
    check_parsed(rows, loaded.to_list(), message_is_text=True)
    # And from the folder into Parquet, and back into a new folder from Parquet.
    result = run_cli(tmp_path / "in_ds", "-o", tmp_path / "out.parquet", "--template", "qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    check_parsed(rows, pq.read_table(tmp_path / "out.parquet").to_pylist(), message_is_text=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    result = run_cli(tmp_path / "in.parquet", "-o", tmp_path / "from_parquet", "--template", "qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    check_parsed(rows, datasets.load_from_disk(str(tmp_path / "from_parquet")).to_list(), message_is_text=True)
    assert leftovers(tmp_path) == []


def test_a_failed_job_leaves_an_existing_datasets_folder_alone(tmp_path):
    datasets = _require("datasets")
    datasets.Dataset.from_list(arrow_rows()).save_to_disk(str(tmp_path / "in_ds"))
    datasets.Dataset.from_list([{"old": 1}]).save_to_disk(str(tmp_path / "out_ds"))
    result = run_cli(tmp_path / "in_ds", "-o", tmp_path / "out_ds", "--template", "qwen3", "--errors", "strict", cwd=tmp_path)
    assert_one_line_error(result, "row 5")
    assert datasets.load_from_disk(str(tmp_path / "out_ds")).to_list() == [{"old": 1}]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    result = run_cli(tmp_path / "in_ds", "-o", tmp_path / "out_ds", "--template", "qwen3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(datasets.load_from_disk(str(tmp_path / "out_ds"))) == len(arrow_rows())
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_folder_that_is_not_a_dataset_is_never_replaced(tmp_path):
    pq.write_table(pa.Table.from_pylist(arrow_rows()), tmp_path / "in.parquet")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "notes.txt").write_text("mine")
    result = run_cli(tmp_path / "in.parquet", "-o", tmp_path / "results", "--template", "qwen3", cwd=tmp_path)
    assert_one_line_error(result, "not a folder this job writes")
    assert (tmp_path / "results" / "notes.txt").read_text() == "mine"


# ---- the Python API ----------------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 2])
def test_parse_table(jobs):
    rows = arrow_rows() * 3
    table = pa.Table.from_pylist(rows)
    out = batch.parse_table(table, "qwen3", jobs=jobs)
    assert out.num_rows == table.num_rows
    check_parsed(rows, out.to_pylist(), message_is_text=True)


def test_parse_table_refuses_fewer_than_one_job():
    with pytest.raises(ValueError, match="jobs must be at least 1, not 0"):
        batch.parse_table(pa.Table.from_pylist(arrow_rows()), QWEN3, jobs=0)


def test_parse_table_and_parse_dataset_refuse_a_text_column_they_do_not_have():
    table = pa.Table.from_pylist(arrow_rows())
    with pytest.raises(batch.BatchError, match="no column 'output' .*id, prompt, completion, tools, score"):
        batch.parse_table(table, QWEN3, columns=batch.Columns(text="output"))
    datasets = _require("datasets")
    with pytest.raises(batch.BatchError, match="no column 'output'"):
        batch.parse_dataset(datasets.Dataset.from_list(arrow_rows()), QWEN3, columns=batch.Columns(text="output"))


def test_parse_table_strict_names_the_row():
    with pytest.raises(batch.RowError, match="row 5: RegionParseError") as caught:
        batch.parse_table(pa.Table.from_pylist(arrow_rows()), QWEN3, errors="strict")
    assert caught.value.row == 5


def test_parse_table_of_no_rows_has_the_columns():
    out = batch.parse_table(pa.Table.from_pylist(arrow_rows()).slice(0, 0), QWEN3)
    assert out.num_rows == 0 and out.schema.names == [*COLUMNS, "message", "error"]


def test_dataset_map_with_two_processes(tmp_path):
    datasets = _require("datasets")
    os.environ.setdefault("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    rows = arrow_rows() * 4
    dataset = datasets.Dataset.from_list(rows)
    parser = batch.RowParser(QWEN3)
    mapped = dataset.map(parser, batched=True, batch_size=7, num_proc=2, features=parser.output_features(dataset.features))
    check_parsed(rows, mapped.to_list(), message_is_text=True)
    assert batch.parse_dataset(dataset, "qwen3", num_proc=2).to_list() == mapped.to_list()


def test_row_parser_pickles_as_its_template_only():
    import pickle

    parser = batch.RowParser(QWEN3, errors="keep")
    parser.module  # loaded: still not part of what is pickled
    data = pickle.dumps(parser)
    assert b"parse_response" not in data and b"ResponseParser" not in data
    again = pickle.loads(data)
    assert again.template == QWEN3 and again.errors == "keep"
    assert again.parse_row(GOOD[0]["completion"], PROMPT) == (interpreter_message(GOOD[0]), None)


# ---- memory does not grow with the input (Arrow buffers included) ---------------------------------

_PEAK_RSS = """
import sys
from rtcompile import batch
from rtcompile.batch.parquet import ParquetWriter
ParquetWriter.ROW_GROUP_BYTES = 8 << 20  # so that the test's inputs are many row groups long
batch.parse_file(sys.argv[1], sys.argv[2], "qwen3", jobs=1, progress=False)
# VmHWM, not ru_maxrss: Linux carries the forked parent's peak into ru_maxrss across exec.
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def test_parquet_memory_does_not_grow_with_the_number_of_rows(tmp_path):
    """Peak resident memory of a whole job in a fresh process, for 8K and for 64K rows that each
    carry 2 KB besides a short generation (16 MB against 128 MB of input), with row groups of
    8 MB written."""
    import subprocess
    import sys

    peaks = {}
    for count in (8_192, 65_536):
        rows = [{"prompt": PROMPT, "completion": GOOD[0]["completion"], "padding": "x" * 2048, "n": i} for i in range(count)]
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"in{count}.parquet", row_group_size=8_192)
        del rows
        completed = subprocess.run(
            [sys.executable, "-c", _PEAK_RSS, str(tmp_path / f"in{count}.parquet"), str(tmp_path / f"out{count}.parquet")],
            capture_output=True, text=True, timeout=600, env={**os.environ, "RTCOMPILE_CACHE_DIR": str(tmp_path / "cache")},
        )
        assert completed.returncode == 0, completed.stderr
        peaks[count] = int(completed.stdout.split()[-1]) * 1024  # in KiB
        out = pq.ParquetFile(tmp_path / f"out{count}.parquet")
        assert out.metadata.num_rows == count
        # Row groups gather batches (up to 64 MB each here), not one per batch of 512 rows.
        assert out.metadata.num_row_groups <= 1 + count * 2_100 // (8 << 20)
    small, large = peaks[8_192], peaks[65_536]
    assert large - small < 48 << 20, peaks  # 112 MB more input: holding it would not fit in this


# ---- what an Arrow job imports, and the added columns built without pa.array ---------------------


@pytest.mark.parametrize("output", ["out.parquet", "out_folder", "out.jsonl"])
def test_an_arrow_job_imports_pyarrow_but_not_pandas(tmp_path, output):
    _require("pandas")  # installed, and still not imported: pa.array would import it
    pq.write_table(pa.Table.from_pylist(arrow_rows() * 3), tmp_path / "in.parquet")
    modules = job_modules(tmp_path, tmp_path / "in.parquet", "-o", tmp_path / output, "--template", "qwen3", "--jobs", 1)
    top = {name.split(".")[0] for name in modules}
    assert "pyarrow" in top
    assert top & {"pandas", "tqdm", "ray", "datasets"} == set()
    if output == "out_folder":  # a datasets folder, read back as the job's input
        modules = job_modules(tmp_path, tmp_path / output, "-o", tmp_path / "again.parquet", "--template", "qwen3", "--jobs", 1, "--message-column", "m2", "--error-column", "e2")
        assert {name.split(".")[0] for name in modules} & {"pandas", "tqdm", "ray", "datasets"} == set()


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)  # (Arrow strings are UTF-8)


@given(st.lists(st.none() | _TEXT, max_size=40))
def test_string_array_equals_pa_array(values):
    built = string_array(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, pa.string()))
    assert built.to_pylist() == values


_RECORDS = st.lists(st.none() | st.fixed_dictionaries({name: st.none() | _TEXT for name in batch.ERROR_FIELDS}), max_size=40)


@given(_RECORDS)
def test_error_array_equals_pa_array(records):
    built = error_array(records)
    built.validate(full=True)
    assert built.equals(pa.array(records, error_type()))
    assert built.to_pylist() == records

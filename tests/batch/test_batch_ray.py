"""`--engine ray`: the parse job on Ray Data, on a local Ray instance with two CPUs and small data.

The parser reaches Ray's workers as the template (plain data in the task's arguments); each
worker loads it from its own cache. Messages are checked against the interpreter, rows must keep
their order, and bad rows their error records; both engines must write the same output."""

from __future__ import annotations

import io
import json
import os
import pickle
import types

import pytest

from rtcompile import batch
from rtcompile.batch.ray import ray_encode_lines, ray_parse_batch
from test_batch import GOOD, QWEN3, _locked, _require, assert_one_line_error, mixed_rows, read_jsonl, run_cli, write_jsonl
from test_batch_arrow import ROWS_WITH_AN_ERROR, arrow_rows, check_parsed

ray = _require("ray")
pa = _require("pyarrow")
import pyarrow.parquet as pq  # noqa: E402


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local instance
    cache = tmp_path_factory.mktemp("ray_cache")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"RTCOMPILE_CACHE_DIR": str(cache)}},
    )
    yield
    ray.shutdown()


@pytest.mark.full  # (starts a local Ray instance)
def test_parquet_on_ray_keeps_rows_in_order_with_the_interpreters_messages(local_ray, tmp_path):
    rows = [dict(row, id=i) for i, row in enumerate(arrow_rows() * 40)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet", row_group_size=100)
    summary = batch.parse_with_ray(str(tmp_path / "in.parquet"), tmp_path / "out.parquet", QWEN3, concurrency=2)
    assert summary.rows == len(rows)
    assert summary.errors == 40 * ROWS_WITH_AN_ERROR == sum(summary.kinds.values())
    check_parsed(rows, pq.read_table(tmp_path / "out.parquet").to_pylist(), message_is_text=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "out.parquet"]  # no temporary left


def mixed_lines() -> list[str]:
    """Good and bad rows, rows of different columns, lines that are not objects, a blank line."""
    rows = [json.dumps(row, ensure_ascii=False) for row in mixed_rows()]
    extra = ['{"completion": "<think>\\nx\\n</think>\\n\\nok", "prompt": "", "meta": {"nested": [1, 2.5, null]}}']
    return rows[:5] + ["not json", "", "[1, 2]"] + rows[5:] + extra


@pytest.mark.full  # (starts a local Ray instance)
def test_both_engines_write_the_same_files(local_ray, tmp_path):
    """JSONL: the same bytes (the message an object in both); Parquet: the same schema, its metadata
    included, and the same values; the same summary."""
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(mixed_lines() * 30) + "\n", encoding="utf-8")
    local = batch.parse_file(source, tmp_path / "local.jsonl", QWEN3, jobs=1, progress=False)
    on_ray = batch.parse_with_ray(str(source), tmp_path / "ray.jsonl", QWEN3, concurrency=2)
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert str(on_ray) == str(local) and "invalid_line 60" in str(local)
    assert all(row["message"] is None or isinstance(row["message"], dict) for row in read_jsonl(tmp_path / "ray.jsonl"))

    table = pa.Table.from_pylist([dict(row, id=i) for i, row in enumerate(arrow_rows() * 30)])
    features = {name: {"dtype": "string", "_type": "Value"} for name in table.schema.names}
    table = table.replace_schema_metadata({b"huggingface": json.dumps({"info": {"features": features}}).encode()})
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=50)
    for output in ("out.parquet", "out.jsonl"):
        local = batch.parse_file(tmp_path / "in.parquet", tmp_path / f"local_{output}", QWEN3, jobs=1, progress=False)
        on_ray = batch.parse_with_ray(str(tmp_path / "in.parquet"), tmp_path / f"ray_{output}", QWEN3, concurrency=2)
        assert str(on_ray) == str(local)
        if output.endswith(".jsonl"):
            assert (tmp_path / f"ray_{output}").read_bytes() == (tmp_path / f"local_{output}").read_bytes()
            continue
        written, expected = pq.read_table(tmp_path / f"ray_{output}"), pq.read_table(tmp_path / f"local_{output}")
        assert written.schema.equals(expected.schema, check_metadata=True)
        assert b"message" in written.schema.metadata[b"huggingface"]  # the features, extended by the two columns
        assert written.equals(expected)


@pytest.mark.full  # (starts a local Ray instance)
def test_object_storage_gets_files_of_the_same_lines(local_ray, tmp_path):
    """A URI output (file:// here, s3:// on a cluster): a folder of files written by Ray's write
    tasks, holding the local engine's lines; the summary counted by the tasks."""
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(mixed_lines() * 30) + "\n", encoding="utf-8")
    local = batch.parse_file(source, tmp_path / "local.jsonl", QWEN3, jobs=1, progress=False)
    on_ray = batch.parse_with_ray(str(source), f"file://{tmp_path / 'out'}", QWEN3, output_format="jsonl", concurrency=2)
    assert str(on_ray) == str(local)
    written = [line for path in sorted((tmp_path / "out").iterdir()) for line in path.read_bytes().splitlines()]
    assert sorted(written) == sorted((tmp_path / "local.jsonl").read_bytes().splitlines())
    pq.write_table(pa.Table.from_pylist(arrow_rows()), tmp_path / "in.parquet")
    summary = batch.parse_with_ray(str(tmp_path / "in.parquet"), f"file://{tmp_path / 'out_parquet'}", QWEN3)
    assert (summary.rows, summary.errors) == (len(arrow_rows()), ROWS_WITH_AN_ERROR)
    check_parsed(arrow_rows(), pq.read_table(tmp_path / "out_parquet").sort_by("id").to_pylist(), message_is_text=True)


@pytest.mark.full  # (starts a local Ray instance)
def test_jsonl_refusals_on_ray_leave_nothing(local_ray, tmp_path):
    """What stops a local JSONL job stops it on Ray too, with the same line, and nothing is written
    (a local output is never renamed into place; files written to object storage are removed)."""
    has_message = write_jsonl(tmp_path / "message.jsonl", [GOOD[0], {**GOOD[1], "message": 1}])
    without_text = write_jsonl(tmp_path / "output.jsonl", [{"output": "a", "prompt": ""}, {"output": "b"}])
    for source in (has_message, without_text):
        with pytest.raises(batch.BatchError) as local:
            batch.parse_file(source, tmp_path / "local.jsonl", QWEN3, jobs=1, progress=False)
        for output in (tmp_path / "ray.jsonl", f"file://{tmp_path / 'folder'}"):
            with pytest.raises(batch.BatchError) as on_ray:
                batch.parse_with_ray(str(source), output, QWEN3, output_format="jsonl")
            assert str(on_ray.value) == str(local.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["message.jsonl", "output.jsonl"]


@pytest.mark.full  # (starts a local Ray instance)
def test_an_earlier_output_is_replaced_and_anything_else_is_not(local_ray, tmp_path):
    pq.write_table(pa.Table.from_pylist(arrow_rows()), tmp_path / "in.parquet")
    for _ in range(2):
        summary = batch.parse_with_ray(str(tmp_path / "in.parquet"), tmp_path / "out.parquet", QWEN3)
        assert summary.rows == len(arrow_rows())
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(batch.BatchError, match="not replacing it"):
        batch.parse_with_ray(str(tmp_path / "in.parquet"), tmp_path / "mine", QWEN3)  # (a datasets folder's name)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    with pytest.raises(batch.BatchError, match="the output would replace the input"):
        batch.parse_with_ray(str(tmp_path / "in.parquet"), tmp_path / "in.parquet", QWEN3)


@pytest.mark.full  # (starts a local Ray instance)
def test_a_text_column_the_input_does_not_have_is_refused_before_anything_is_written(local_ray, tmp_path):
    pq.write_table(pa.Table.from_pylist(arrow_rows()), tmp_path / "in.parquet")
    with pytest.raises(batch.BatchError, match="no column 'output'"):
        batch.parse_with_ray(str(tmp_path / "in.parquet"), tmp_path / "out", QWEN3, columns=batch.Columns(text="output"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


@pytest.mark.full  # (starts a local Ray instance)
def test_an_unwritable_output_directory_is_named_not_the_temporary_folder(local_ray, tmp_path, monkeypatch):
    pq.write_table(pa.Table.from_pylist(arrow_rows()), tmp_path / "in.parquet")
    locked = tmp_path / "locked"
    locked.mkdir()
    _locked(monkeypatch, locked)
    with pytest.raises(batch.BatchError) as caught:
        batch.parse_with_ray(str(tmp_path / "in.parquet"), locked / "out", QWEN3)
    assert str(caught.value) == f"{locked}: cannot write out there: Permission denied"
    assert list(locked.iterdir()) == []


def test_the_task_arguments_hold_the_template_not_code():
    """What Ray pickles for each task besides the module-level functions (pickled by name)."""

    class NoCode(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, (types.CodeType, types.FunctionType, types.ModuleType)):
                raise AssertionError(f"code in the task arguments: {obj!r}")
            return NotImplemented

    arguments = {"template": QWEN3, "columns": batch.Columns(), "errors": "default", "timeout": None, "target_format": "jsonl"}
    buffer = io.BytesIO()
    NoCode(buffer).dump(arguments)
    assert pickle.loads(buffer.getvalue())["template"] == QWEN3
    for function in (ray_parse_batch, ray_encode_lines):
        assert pickle.loads(pickle.dumps(function)) is function


@pytest.mark.full  # (starts a local Ray instance)
def test_the_command_with_engine_ray_writes_what_the_default_engine_writes(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(mixed_lines()) + "\n", encoding="utf-8")
    results = {}
    for engine in ("local", "ray"):
        result = run_cli(source, "-o", tmp_path / f"{engine}.jsonl", "--template", "qwen3", "--engine", engine, "--jobs", "2",
                         cwd=tmp_path, env_extra={"RAY_AUTH_MODE": "disabled"})
        assert result.returncode == 0, result.stderr
        results[engine] = result.stderr.strip().splitlines()[-1].split(": ", 1)[1]
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert results["ray"] == results["local"] and "invalid_line 2" in results["ray"]
    strict = run_cli(source, "-o", tmp_path / "o2.jsonl", "--template", "qwen3", "--engine", "ray", "--errors", "strict", cwd=tmp_path)
    assert_one_line_error(strict, "--engine local")

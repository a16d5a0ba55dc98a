"""`--engine ray`: the parse job on Ray Data, on a local Ray instance with two CPUs and small data.

The parser reaches Ray's workers as the template (plain data in the task's arguments); each
worker loads it from its own cache. Messages are checked against the interpreter, rows must keep
their order, and bad rows their error records."""

from __future__ import annotations

import io
import json
import os
import pickle
import types

import pytest

from rtcompile import batch
from rtcompile.batch.ray import ray_parse_batch
from test_batch import GOOD, QWEN3, _locked, _require, assert_one_line_error, interpreter_message, run_cli
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
    summary = batch.parse_with_ray(str(tmp_path / "in.parquet"), tmp_path / "out", QWEN3, concurrency=2)
    assert summary.rows == len(rows)
    assert summary.errors == 40 * ROWS_WITH_AN_ERROR
    table = pq.read_table(sorted((tmp_path / "out").iterdir()))
    check_parsed(rows, table.to_pylist(), message_is_text=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "out"]  # no temporary left


@pytest.mark.full  # (starts a local Ray instance)
def test_jsonl_on_ray(local_ray, tmp_path):
    rows = [{"id": i, "prompt": GOOD[i % 4]["prompt"], "completion": GOOD[i % 4]["completion"]} for i in range(30)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    summary = batch.parse_with_ray(str(tmp_path / "in.jsonl"), tmp_path / "out.jsonl", "qwen3")
    assert (summary.rows, summary.errors) == (30, 0)
    out = [json.loads(line) for path in sorted((tmp_path / "out.jsonl").iterdir()) for line in path.read_text().splitlines()]
    assert [row["id"] for row in out] == list(range(30))
    for row, parsed in zip(rows, out):
        assert json.loads(parsed["message"]) == interpreter_message(row)
        assert parsed["error"] is None


@pytest.mark.full  # (starts a local Ray instance)
def test_an_earlier_ray_output_is_replaced_and_anything_else_is_not(local_ray, tmp_path):
    pq.write_table(pa.Table.from_pylist(arrow_rows()), tmp_path / "in.parquet")
    for _ in range(2):
        summary = batch.parse_with_ray(str(tmp_path / "in.parquet"), tmp_path / "out", QWEN3)
        assert summary.rows == len(arrow_rows())
    assert len(list((tmp_path / "out").iterdir())) >= 1
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(batch.BatchError, match="not replacing it"):
        batch.parse_with_ray(str(tmp_path / "in.parquet"), tmp_path / "mine", QWEN3)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


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
    """What Ray pickles for each task besides the module-level function (pickled by name)."""

    class NoCode(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, (types.CodeType, types.FunctionType, types.ModuleType)):
                raise AssertionError(f"code in the task arguments: {obj!r}")
            return NotImplemented

    arguments = {"template": QWEN3, "columns": batch.Columns(), "errors": "default", "timeout": None}
    buffer = io.BytesIO()
    NoCode(buffer).dump(arguments)
    assert pickle.loads(buffer.getvalue())["template"] == QWEN3
    assert pickle.loads(pickle.dumps(ray_parse_batch)) is ray_parse_batch


@pytest.mark.full  # (starts a local Ray instance)
def test_the_command_with_engine_ray(tmp_path):
    pq.write_table(pa.Table.from_pylist(arrow_rows()), tmp_path / "in.parquet")
    result = run_cli(
        tmp_path / "in.parquet", "-o", tmp_path / "out", "--template", "qwen3", "--engine", "ray", "--jobs", "2",
        cwd=tmp_path, env_extra={"RAY_AUTH_MODE": "disabled"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"{tmp_path / 'out'}: {len(arrow_rows())} rows, {ROWS_WITH_AN_ERROR} with an error"
    check_parsed(arrow_rows(), pq.read_table(sorted((tmp_path / "out").iterdir())).to_pylist(), message_is_text=True)
    strict = run_cli(tmp_path / "in.parquet", "-o", tmp_path / "o2", "--template", "qwen3", "--engine", "ray", "--errors", "strict", cwd=tmp_path)
    assert_one_line_error(strict, "--engine local")

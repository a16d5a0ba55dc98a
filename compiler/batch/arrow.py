"""Arrow record batches: each batch's inputs read as Python values, parsed, and the batch given back
with the message column (a JSON string) and the error column (a struct) appended; and the jobs on
Arrow data in memory, `parse_table` (a pyarrow Table) and `parse_dataset` (a datasets.Dataset).

pyarrow is imported here only when a function needs it, so that JSONL jobs run without it.
"""

from __future__ import annotations

import json
from typing import Any

from .rows import ERROR_FIELDS, MISSING, BatchError, Columns, RowParser, check_output_columns, check_text_column
from .workers import BATCH_ROWS, BATCH_TEXT_BYTES, check_jobs, run_in_order


def pyarrow():
    """The pyarrow module, or a one-line BatchError saying how to install it."""
    try:
        import pyarrow
    except ImportError:
        raise BatchError("Parquet, datasets folders and tables need pyarrow: pip install 'rtcompile[batch]'") from None
    return pyarrow


def error_type():
    """The Arrow type of the error column: a struct of ERROR_FIELDS, all strings."""
    pa = pyarrow()
    return pa.struct([(name, pa.string()) for name in ERROR_FIELDS])


def arrow_inputs(batch, columns: Columns) -> tuple[list, list | None, list | None]:
    """The text, prefix and tools columns of a record batch as Python values (None: absent)."""
    names = batch.schema.names

    def column(name):
        return batch.column(names.index(name)).to_pylist() if name is not None and name in names else None

    texts = column(columns.text)
    if texts is None:
        texts = [MISSING] * batch.num_rows
    return texts, column(columns.prefix), column(columns.tools)


def batch_tasks(batches, columns: Columns):
    """`(batch, task)` pairs for `workers.run_in_order`: the parent keeps the record batch, a
    worker gets its inputs as Python values and the index of its first row."""
    first_row = 0
    for batch in batches:
        yield batch, (arrow_inputs(batch, columns), first_row)
        first_row += batch.num_rows


def parse_inputs(parser: RowParser, task) -> tuple[list, list]:
    """The worker task for one record batch: its messages (JSON strings) and error records."""
    inputs, first_row = task
    return parser.parse_columns(*inputs, first_row=first_row)


def with_results(batch, columns: Columns, messages: list, errors: list):
    """The record batch with the message and error columns appended."""
    pa = pyarrow()
    arrays = [*batch.columns, pa.array(messages, pa.string()), pa.array(errors, error_type())]
    schema = batch.schema.append(pa.field(columns.message, pa.string())).append(pa.field(columns.error, error_type()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema.with_metadata(_output_metadata(batch.schema, columns)))


def output_schema(schema, columns: Columns):
    """The schema of the output for an input of `schema`: the two columns appended."""
    pa = pyarrow()
    empty = pa.RecordBatch.from_arrays([pa.array([], field.type) for field in schema], schema=schema)
    return with_results(empty, columns, [], []).schema


def _output_metadata(schema, columns: Columns) -> dict | None:
    """The schema's metadata, with the datasets features (if any) extended by the two columns."""
    metadata = dict(schema.metadata or {})
    raw = metadata.get(b"huggingface")
    if raw is not None:
        try:
            info = json.loads(raw)
            features = info["info"]["features"]
            features[columns.message] = {"dtype": "string", "_type": "Value"}
            features[columns.error] = {name: {"dtype": "string", "_type": "Value"} for name in ERROR_FIELDS}
            metadata[b"huggingface"] = json.dumps(info).encode()
        except (ValueError, KeyError, TypeError):
            del metadata[b"huggingface"]  # features we cannot extend: datasets infers them instead
    return metadata or None


def split_batches(batches, columns: Columns):
    """Record batches cut so that none holds more than about BATCH_TEXT_BYTES of generations."""
    for batch in batches:
        names = batch.schema.names
        size = batch.column(names.index(columns.text)).nbytes if columns.text in names else 0
        pieces = max(1, -(-size // BATCH_TEXT_BYTES))
        step = max(1, -(-batch.num_rows // pieces))
        for start in range(0, batch.num_rows, step):
            yield batch.slice(start, step)


def parse_table(table, template: Any, *, columns: Columns = Columns(), errors: str = "default", jobs: int = 1, timeout: float | None = None):
    """A pyarrow Table with the message and error columns appended (rows in the same order)."""
    check_jobs(jobs)
    pa = pyarrow()
    check_output_columns(table.schema.names, columns)
    check_text_column(table.schema.names, columns)
    parser = RowParser(template, columns, errors, timeout)
    parser.module  # an invalid template fails here, once
    batches = split_batches(table.to_batches(max_chunksize=BATCH_ROWS), columns)
    results = run_in_order(parser, parse_inputs, batch_tasks(batches, columns), jobs)
    return pa.Table.from_batches(
        [with_results(batch, columns, messages, found) for batch, (messages, found) in results],
        schema=output_schema(table.schema, columns),
    )


def parse_dataset(dataset, template: Any, *, columns: Columns = Columns(), errors: str = "default", num_proc: int | None = None, timeout: float | None = None, **map_kwargs):
    """A datasets.Dataset with the message and error columns added, through `Dataset.map`
    (batched, `num_proc` worker processes, each loading the parser from the template)."""
    parser = RowParser(template, columns, errors, timeout)
    parser.module
    check_output_columns(dataset.column_names, columns)
    check_text_column(dataset.column_names, columns)
    return dataset.map(
        parser, batched=True, num_proc=num_proc, features=parser.output_features(dataset.features), **map_kwargs
    )

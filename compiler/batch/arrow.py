"""Arrow record batches: each batch's inputs read as Python values, parsed, and the batch given back
with the message column (a JSON string) and the error column (a struct) appended; and the jobs on
Arrow data in memory, `parse_table` (a pyarrow Table) and `parse_dataset` (a datasets.Dataset).

pyarrow is imported here only when a function needs it, so that JSONL jobs run without it.
"""

from __future__ import annotations

import json
from typing import Any

from .rows import ERROR_FIELDS, MISSING, BatchError, Columns, RowParser, existing_columns_message
from .workers import BATCH_ROWS, BATCH_TEXT_BYTES, ordered


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


def arrow_results(parser: RowParser, inputs: tuple, first_row: int) -> tuple[list, list]:
    return parser.parse_columns(*inputs, first_row=first_row)


def arrow_task(parser: RowParser, task):
    inputs, first_row = task
    return arrow_results(parser, inputs, first_row)


def with_results(batch, columns: Columns, messages: list, errors: list):
    """The record batch with the message and error columns appended."""
    pa = pyarrow()
    arrays = [*batch.columns, pa.array(messages, pa.string()), pa.array(errors, error_type())]
    schema = batch.schema.append(pa.field(columns.message, pa.string())).append(pa.field(columns.error, error_type()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema.with_metadata(_output_metadata(batch.schema, columns)))


def check_output_columns(schema, columns: Columns) -> None:
    if columns.message in schema.names or columns.error in schema.names:
        raise BatchError(existing_columns_message(columns))


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


def parse_table(table, template: Any, *, columns: Columns = Columns(), errors: str = "default", jobs: int = 1, timeout: float | None = None):
    """A pyarrow Table with the message and error columns appended (rows in the same order)."""
    pa = pyarrow()
    check_output_columns(table.schema, columns)
    parser = RowParser(template, columns, errors, timeout)
    parser.module  # an invalid template fails here, once
    batches = [b for b in split_batches(table.to_batches(max_chunksize=BATCH_ROWS), columns)]
    offsets = _offsets(b.num_rows for b in batches)
    tasks = ((arrow_inputs(b, columns), first) for b, first in zip(batches, offsets))
    out = [with_results(b, columns, *result) for b, result in zip(batches, ordered(parser, arrow_task, tasks, jobs))]
    if not out:
        return pa.Table.from_batches([], schema=with_results(empty_batch(table.schema), columns, [], []).schema)
    return pa.Table.from_batches(out)


def empty_batch(schema):
    pa = pyarrow()
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def _offsets(counts) -> list[int]:
    out, total = [], 0
    for count in counts:
        out.append(total)
        total += count
    return out


def split_batches(batches, columns: Columns):
    """Record batches cut so that none holds more than about BATCH_TEXT_BYTES of generations."""
    for batch in batches:
        names = batch.schema.names
        size = batch.column(names.index(columns.text)).nbytes if columns.text in names else 0
        pieces = max(1, -(-size // BATCH_TEXT_BYTES))
        step = max(1, -(-batch.num_rows // pieces))
        for start in range(0, batch.num_rows, step):
            yield batch.slice(start, step)


def parse_dataset(dataset, template: Any, *, columns: Columns = Columns(), errors: str = "default", num_proc: int | None = None, timeout: float | None = None, **map_kwargs):
    """A datasets.Dataset with the message and error columns added, through `Dataset.map`
    (batched, `num_proc` worker processes, each loading the parser from the template)."""
    parser = RowParser(template, columns, errors, timeout)
    parser.module
    check_output_columns_names(dataset.column_names, columns)
    return dataset.map(
        parser, batched=True, num_proc=num_proc, features=parser.output_features(dataset.features), **map_kwargs
    )


def check_output_columns_names(names, columns: Columns) -> None:
    if columns.message in names or columns.error in names:
        raise BatchError(existing_columns_message(columns))

"""Arrow record batches: each batch's inputs read as Python values, parsed, and the batch given back
with the message column (a JSON string) and the error column (a struct) appended; and the jobs on
Arrow data in memory, `parse_table` (a pyarrow Table) and `parse_dataset` (a datasets.Dataset).

pyarrow is imported here only when a function needs it, so that JSONL jobs run without it. The two
added columns are built from their buffers (`string_array`, `error_array`), not with `pa.array`:
pyarrow imports pandas, where installed, the first time `pa.array` converts Python values (to check
whether they are pandas objects), which would cost a Parquet job about 0.2 s of start-up for a
library it never uses.
"""

from __future__ import annotations

import json
from array import array
from itertools import accumulate
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


_MAX_STRING_BYTES = 2**31 - 1  # what the 32-bit offsets of Arrow's string type address


def string_array(values: list):
    """An Arrow string array of `values` (str or None), equal to `pa.array(values, pa.string())`."""
    pa = pyarrow()
    encoded = [b"" if value is None else value.encode("utf-8") for value in values]
    lengths = list(map(len, encoded))
    if sum(lengths) > _MAX_STRING_BYTES:
        return pa.array(values, pa.string())  # (it raises, or chunks the column, as it always did)
    offsets = array("i", [0])
    offsets.extend(accumulate(lengths))
    validity, nulls = _validity(values)
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.string(), len(values), buffers, null_count=nulls)


def error_array(records: list):
    """The error column: a struct array of ERROR_FIELDS from error records (dicts) or None."""
    pa = pyarrow()
    if records.count(None) == len(records):  # (most batches: no row has an error)
        return pa.nulls(len(records), error_type())
    children = [string_array([None if record is None else record.get(name) for record in records]) for name in ERROR_FIELDS]
    validity, nulls = _validity(records)
    return pa.Array.from_buffers(error_type(), len(records), [validity], null_count=nulls, children=children)


def _validity(values: list):
    """The validity bitmap of `values` (a bit per value, set where it is not None; None when no
    value is None) and the number of nulls."""
    nulls = values.count(None)
    if nulls == 0:
        return None, 0
    # The bits as one binary numeral, the first value's the lowest (Arrow's bit order).
    flags = "".join(["0" if value is None else "1" for value in reversed(values)])
    bitmap = int(flags, 2).to_bytes((len(values) + 7) // 8, "little")
    return pyarrow().py_buffer(bitmap), nulls


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
    """The record batch (or table) with the message and error columns appended."""
    pa = pyarrow()
    arrays = [*batch.columns, string_array(messages), error_array(errors)]
    kind = pa.Table if isinstance(batch, pa.Table) else pa.RecordBatch
    return kind.from_arrays(arrays, schema=output_schema(batch.schema, columns))


def output_schema(schema, columns: Columns):
    """The schema of the output for an input of `schema`: the two columns appended, and the
    datasets features (if any) in its metadata extended by them."""
    pa = pyarrow()
    extended = schema.append(pa.field(columns.message, pa.string())).append(pa.field(columns.error, error_type()))
    return extended.with_metadata(_output_metadata(schema, columns))


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

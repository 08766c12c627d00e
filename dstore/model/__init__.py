"""The data model: field kinds, batch columns, kind inference, the schema, field and split
names (escaped for every store) and user attributes (numpy only)."""

from __future__ import annotations

from .columns import (
    Column,
    VarColumn,
    column_len,
    concat_columns,
    empty_column,
    raw_record,
    record,
    slice_column,
    take_column,
    to_column,
)
from .infer import infer_column, numpy_strings_to_column
from .kinds import (
    IMAGE_ENCODINGS,
    Bytes,
    Image,
    Kind,
    Ragged,
    String,
    StringList,
    Tensor,
    check_numeric_dtype,
    kind_from_json,
)

__all__ = [
    "IMAGE_ENCODINGS",
    "Bytes",
    "Column",
    "Image",
    "Kind",
    "Ragged",
    "String",
    "StringList",
    "Tensor",
    "VarColumn",
    "check_numeric_dtype",
    "column_len",
    "concat_columns",
    "empty_column",
    "infer_column",
    "kind_from_json",
    "numpy_strings_to_column",
    "raw_record",
    "record",
    "slice_column",
    "take_column",
    "to_column",
]

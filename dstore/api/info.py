"""What a dataset holds: :func:`info` and its :class:`InfoReport` text."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..abc.reader import DEFAULT_SPLIT_NOTE
from ..model.precision import describe_precision
from ..model.schema import DEFAULT_SPLIT, Schema
from ..registry import infer_codec
from ..sources.opening import open_reader, size_or_zero
from ..sources.permuted import SHUFFLE_ATTR
from ._text import fmt_bytes, printable, shown

__all__ = ["InfoReport", "dtype_name", "info"]


def dtype_name(dtype: np.dtype) -> str:
    """numpy's name (``uint8``, ``float32``), with the byte order only where it is not native."""
    if dtype.name == "bfloat16":
        return "bfloat16"
    if dtype.kind in "USVO" or dtype.fields:  # numpy's names ("str96") say less than "U3"
        return dtype.str.lstrip("<>|=") if not dtype.fields else str(dtype)
    name = dtype.newbyteorder("=").name if not dtype.isnative else dtype.name
    if dtype.isnative or dtype.itemsize == 1:
        return name
    return f"{name} ({'big' if dtype.byteorder == '>' else 'little'}-endian)"


@dataclass
class InfoReport:
    path: str
    format: str
    bytes_on_disk: int
    schema: Schema
    details: list[str]

    def lines(self) -> list[str]:
        out = [
            (
                f"{printable(self.path)}: {self.format}, {fmt_bytes(self.bytes_on_disk)} on disk, "
                f"{fmt_bytes(self.schema.nbytes)} raw{_varying_note(self.schema)}, "
                f"{self.schema.records} records"
            )
        ]
        out.extend(_order_lines(self.schema))
        width = max(
            [8]
            + [
                len(dtype_name(f.dtype))
                for s in self.schema.splits.values()
                for f in s.fields.values()
                if f.dense
            ]
        )
        for split in self.schema.splits.values():
            out.append(
                f"  split {shown(split.name)}: {split.count} records, {fmt_bytes(split.nbytes)}"
                + _varying_note(Schema({split.name: split}))
                + (f" ({DEFAULT_SPLIT_NOTE})" if split.name == DEFAULT_SPLIT else "")
            )
            for f in split.fields.values():
                key = f"  (key {shown(f.key)})" if f.key and f.key != f.name else ""
                name = shown(f.name)
                if not f.dense:  # records vary: the kind says what each one is
                    out.append(f"    {name:<16} {f.kind.describe():<31} {split.count} records{key}")
                    continue
                lossy = describe_precision(f)
                out.append(
                    f"    {name:<16} {dtype_name(f.dtype):<{width}} {(split.count, *f.shape)!s:<24}"
                    f" {fmt_bytes(f.record_bytes * split.count)}{key}"
                    + (f"  [{lossy}]" if lossy else "")
                )
        out.extend(self.details)
        return out


def _order_lines(schema: Schema) -> list[str]:
    """What ``dstore info`` says of a shuffle at conversion the records went through."""
    seed = schema.attrs.get(SHUFFLE_ATTR)
    out = []
    if seed is not None:
        whose = " (version 1's records)" if schema.versions else ""
        out.append(
            f"  order: shuffled at conversion with seed {seed}{whose}: each split's record i "
            f"is record permutation({seed}, split, count)[i] of the dataset converted"
        )
    for v in schema.versions:
        if v.get("shuffle_seed") is not None:
            out.append(
                f"  order: the records appended as version {v.get('version')} shuffled among "
                f"themselves with seed {v['shuffle_seed']}"
            )
    return out


def _varying_note(schema: Schema) -> str:
    """`` + image, text (size varies, not read)`` for the fields whose decoded size the
    schema does not give: the raw size before it counts only the others (their records
    would have to be read; a conversion measures them)."""
    names = list(dict.fromkeys(n for s in schema.splits.values() for n in s.varying))
    if not names:
        return ""
    return f" + {', '.join(names)} (size varies, not read)"


def info(path: str | os.PathLike[str], *, format: str | None = None, **options: Any) -> InfoReport:
    """Splits, fields, shapes, dtypes and sizes of a dataset, plus codec details
    (``options`` are the reading codec's, e.g. ``drop="meta"`` for npz, and
    ``follow_links=True``, which reads what links to other files lead to)."""
    path = os.fspath(path)
    with open_reader(path, format=format, **options) as reader:
        return InfoReport(
            path,
            getattr(reader, "format", None) or format or infer_codec(path),
            getattr(reader, "bytes_in", None) or size_or_zero(path),
            reader.schema,
            # how the input was read: a columnar JSON document, columns dropped, ...
            [*reader.describe(), *(f"note: {note}" for note in reader.notes)],
        )

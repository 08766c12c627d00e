"""Comparisons and helpers the tests share: datasets compared field by field and
byte by byte, outputs compared file by file, the ``dstore`` command in a child
process, the DataLoader a format needs."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

from .. import api
from ..fs import sha256_file
from ..model import Column, VarColumn

__all__ = [
    "append_leftovers",
    "assert_columns_equal",
    "assert_datasets_equal",
    "cli_command",
    "data_loader",
    "file_digests",
    "read_all",
]


def file_digests(path: str | os.PathLike[str]) -> dict[str, str]:
    """sha256 of every file under ``path`` (or of ``path`` itself), by relative name:
    equal dicts mean byte-identical outputs."""
    path = os.fspath(path)
    files = (
        [path]
        if os.path.isfile(path)
        else sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs)
    )
    return {
        os.path.relpath(name, path) if name != path else os.path.basename(path): sha256_file(name)[
            1
        ]
        for name in files
    }


def cli_command(*argv: str) -> list[str]:
    """``python -m dstore.cli ARGV`` in which Ctrl-C (SIGINT) raises KeyboardInterrupt
    even when the tests run in a background job, whose children start with SIGINT
    ignored: a test that interrupts a run then tests dstore, not the shell."""
    code = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from dstore.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", code, *argv]


def read_all(path: str) -> dict[str, dict[str, Column]]:
    with api.open(path) as ds:
        return {split: ds[split].read() for split in ds}


def assert_columns_equal(exp: Any, act: Any, where: Any = "") -> None:
    """Same kind of column, dtype, shape and bytes (NaNs compared by bit pattern)."""
    if isinstance(exp, VarColumn) or isinstance(act, VarColumn):
        assert isinstance(exp, VarColumn) and isinstance(act, VarColumn), (
            where,
            type(exp),
            type(act),
        )
        if isinstance(exp.values, VarColumn) or isinstance(act.values, VarColumn):
            assert act.lengths.tolist() == exp.lengths.tolist(), (where, "list lengths")
            assert_columns_equal(exp.values, act.values, (where, "strings"))
            return
        assert act.values.dtype == exp.values.dtype, (where, act.values.dtype, exp.values.dtype)
        assert act.values.shape[1:] == exp.values.shape[1:], (
            where,
            act.values.shape,
            exp.values.shape,
        )
        assert act.lengths.tolist() == exp.lengths.tolist(), (where, "record lengths")
        assert (
            np.ascontiguousarray(act.values).tobytes() == np.ascontiguousarray(exp.values).tobytes()
        ), where
        assert (act.shapes is None) == (exp.shapes is None), (where, "shapes")
        if exp.shapes is not None and act.shapes is not None:
            assert act.shapes.tolist() == exp.shapes.tolist(), (where, "record shapes")
        return
    assert act.dtype == exp.dtype, (where, act.dtype, exp.dtype)
    assert act.shape == exp.shape, (where, act.shape, exp.shape)
    assert np.ascontiguousarray(act).tobytes() == np.ascontiguousarray(exp).tobytes(), where


def assert_datasets_equal(
    expected: dict[str, dict[str, Any]], actual: dict[str, dict[str, Any]]
) -> None:
    """Same splits, fields, dtypes, shapes and bytes (NaNs compared by bit pattern)."""
    assert sorted(expected) == sorted(actual)
    for split, fields in expected.items():
        assert sorted(fields) == sorted(actual[split]), split
        for name, exp in fields.items():
            assert_columns_equal(exp, actual[split][name], (split, name))


def data_loader(dataset: Any, **kwargs: Any) -> Any:
    """:func:`dstore.readers.torch.data_loader`: a DataLoader started as a user must
    start one for the dataset's format."""
    from ..readers.torch import data_loader as make

    return make(dataset, **kwargs)


def append_leftovers(dst: str) -> list[str]:
    """What a killed append could leave behind at the local dataset ``dst``: pending
    folders beside it or in ``.dstore-versions/``, lock or claim files, ``.partial``
    files, and a store's growing mark in its root metadata. Empty when it left nothing."""
    parent, base = os.path.split(os.path.abspath(dst))
    found = [n for n in os.listdir(parent) if n.startswith(f".{base}.dstore")]
    versions = os.path.join(dst, ".dstore-versions")
    if os.path.isdir(versions):
        found += [n for n in os.listdir(versions) if n.startswith("pending-")]
    for root, _, files in os.walk(dst):
        found += [os.path.join(root, n) for n in files if n.endswith(".partial")]
    meta = os.path.join(dst, "zarr.json")  # a zarr store's root metadata
    if os.path.isfile(meta):
        with open(meta) as f:
            if "dstore_appending" in json.load(f).get("attributes", {}):
                found.append("zarr.json: dstore_appending")
    return found

"""Files written by earlier dstore versions (tests/golden/<version>/) still read, value for value."""

from __future__ import annotations

import os
import sys

import pytest

import dstore
from dstore.testing import assert_datasets_equal, read_all

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
sys.path.insert(0, HERE)
from generate import golden_data

GOLDEN = sorted(
    os.path.join(version, name)
    for version in os.listdir(HERE)
    if os.path.isdir(os.path.join(HERE, version)) and not version.startswith("__")
    for name in os.listdir(os.path.join(HERE, version))
)


def test_golden_files_exist() -> None:
    """At least one file per registered format, so a lost folder cannot pass silently."""
    formats = {dstore.infer_codec(p) for p in GOLDEN}
    assert formats >= {"npz", "zarr", "hdf5", "tfrecord"}, formats


@pytest.mark.parametrize("rel", GOLDEN)
def test_golden_file_reads_back(rel: str) -> None:
    case = os.path.basename(rel).split(".", 1)[0]
    path = os.path.join(HERE, rel)
    try:
        got = read_all(path)
    except dstore.MissingDependencyError as e:
        pytest.skip(str(e))
    expected = dstore.api.ArrayReader(
        golden_data()[case]
    )  # lists of records -> columns of their kind
    assert_datasets_equal({split: expected.read(split) for split in expected.schema.splits}, got)
    assert dstore.api.check(path).ok, dstore.api.check(path).lines()

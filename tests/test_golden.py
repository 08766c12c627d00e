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


@pytest.mark.parametrize("rel", [r for r in GOLDEN if r.endswith((".npz", ".zarr", ".h5"))])
def test_golden_checksums_read_from_their_old_place(rel: str) -> None:
    """0.1.0 kept the field checksums in ``attrs['dstore.sha256']``: they are read into
    the schema's checksum slot, checked by verify, and never shown as an attribute."""
    from dstore.model.checksums import CHECKSUM_ATTR

    path = os.path.join(HERE, rel)
    with dstore.api.open_reader(path) as reader:
        assert CHECKSUM_ATTR not in reader.schema.attrs
        assert reader.schema.checksums, rel
        fields = {(s, n) for s, spec in reader.schema.splits.items() for n in spec.fields}
    report = dstore.api.check(path)
    checked = {(r.split, r.field) for r in report.results if r.ok and r.field != "*"}
    assert report.ok and fields <= checked, report.lines()

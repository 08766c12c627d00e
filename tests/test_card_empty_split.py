"""The card of a dataset with an empty split (no file holds its records): mlcroissant
loads it, the empty split's record set yields no record, the others theirs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles
from dstore.registry import available_codecs

mlc = pytest.importorskip("mlcroissant")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "tfrecord"])
def test_an_empty_splits_fields_have_a_source_matching_no_file(tmp_path: Path, fmt: str) -> None:
    if available_codecs()[fmt] is not None:
        pytest.skip(f"{fmt} is not installed")
    x, y = photo_tiles(12, 8, seed=5)
    out = tmp_path / f"d.{fmt}"
    dstore.save({"train": {"x": x, "y": y}, "empty": {"x": x[:0], "y": y[:0]}}, str(out))
    # failed before: "Field empty/x does not define `source` or `value`" refused the card
    ds = mlc.Dataset(jsonld=str(out / "croissant.json"))
    assert not ds.metadata.ctx.issues.errors
    assert list(ds.records(record_set="empty")) == []
    sets = [d for d in ds.metadata.distribution if d.uuid == "fileset/empty"]
    assert len(sets) == 1 and not any(
        p.name.startswith(sets[0].includes[0].split(".")[0]) for p in out.iterdir()
    ), os.listdir(out)
    if fmt != "tfrecord":  # records a Croissant reader extracts: the train split's, whole
        records = list(ds.records(record_set="train"))
        labels = np.array([r["train/y"] for r in records])
        assert labels.tolist() == y.tolist()


def test_splits_and_fields_named_dot_dot_keep_their_record_sets(tmp_path: Path) -> None:
    x, y = photo_tiles(12, 8, seed=5)
    out = tmp_path / "d.jsonl"
    dstore.save({"..": {"x": x[:6], "..": y[:6]}, ".": {"x": x[6:], "..": y[6:]}}, str(out))
    # failed before: ids "..", "fileset/..", "../.." resolved away, mlcroissant refused the card
    ds = mlc.Dataset(jsonld=str(out / "croissant.json"))
    assert not ds.metadata.ctx.issues.errors
    for rs, want in zip(ds.metadata.record_sets, (y[:6], y[6:]), strict=True):
        records = list(ds.records(record_set=rs.uuid))
        assert np.array([r[f"{rs.uuid}/%2E%2E"] for r in records]).tolist() == want.tolist()

"""Columnar JSON documents, ``{"features": [[...]], "labels": [...]}``, written by the
standard library's ``json`` module from arrays' ``.tolist()``: read as one split whose
fields are the lists, value for value; lists of another length are attributes, noted;
lists whose lengths tie are refused in one line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.errors import SchemaError
from dstore.model.schema import DEFAULT_SPLIT
from dstore.testing import read_all


def _dump(path, doc) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return str(path)


def test_a_columnar_document_is_one_split_of_its_lists(tmp_path, capsys, features):
    feats, labels = features
    path = _dump(tmp_path / "feats.json", {"features": feats.tolist(), "labels": labels.tolist()})
    with dstore.open(path) as ds:
        assert list(ds) == [DEFAULT_SPLIT]
        assert ds.schema.splits[DEFAULT_SPLIT].count == len(feats)
    got = read_all(path)[DEFAULT_SPLIT]
    # JSON numbers are float64: float32 values written by repr come back exactly
    assert got["features"].dtype == np.float64 and got["features"].shape == feats.shape
    np.testing.assert_array_equal(got["features"], feats.astype(np.float64))
    np.testing.assert_array_equal(got["labels"], labels)
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "read as columns: fields features, labels (120 records each)" in out
    npz = str(tmp_path / "feats.npz")
    assert main(["convert", path, npz, "--dtype", "float32"]) == 0
    with np.load(npz) as z:
        np.testing.assert_array_equal(z["features"], feats)
        np.testing.assert_array_equal(z["labels"], labels)


def test_lists_of_another_length_are_attributes_and_noted(tmp_path, capsys, features):
    """scikit-learn's Bunch as JSON: data and target are the fields; target_names (one
    per class) and a scalar are attributes, which the conversion notes."""
    feats, labels = features
    names = [f"photo {i}" for i in range(int(labels.max()) + 1)]
    doc = {"data": feats.tolist(), "target": labels.tolist(), "target_names": names, "dim": 48}
    path = _dump(tmp_path / "bunch.json", doc)
    got = read_all(path)[DEFAULT_SPLIT]
    assert set(got) == {"data", "target"}
    np.testing.assert_array_equal(got["target"], labels)
    h5 = str(tmp_path / "bunch.h5")
    assert main(["convert", path, h5]) == 0
    out = capsys.readouterr().out
    assert "lists of another length kept as attributes: target_names (7 values)" in out
    h5py = pytest.importorskip("h5py")
    with h5py.File(h5, "r") as f:
        # h5py has no list of strings: the attribute is its JSON text
        assert json.loads(f.attrs["target_names"]) == names and f.attrs["dim"] == 48


def test_lists_of_tied_lengths_are_refused_in_one_line(tmp_path, capsys, features):
    feats, labels = features
    path = _dump(
        tmp_path / "bad.json", {"features": feats.tolist(), "labels": labels[:-1].tolist()}
    )
    with pytest.raises(SchemaError, match=r"features \(120 values\), labels \(119 values\)"):
        dstore.open(path)
    out = str(tmp_path / "out.npz")
    assert main(["convert", path, out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "they need one length" in err, err
    assert sorted(os.listdir(tmp_path)) == ["bad.json"]


def test_records_still_win_over_columns(tmp_path):
    """A document with a list of objects is read by the records rule, its other lists
    attributes, as before."""
    doc = {"points": [{"x": 1, "y": 2}, {"x": 3, "y": 4}], "valid": [True, True]}
    got = read_all(_dump(tmp_path / "p.json", doc))[DEFAULT_SPLIT]
    assert set(got) == {"x", "y"}
    np.testing.assert_array_equal(got["x"], [1, 3])

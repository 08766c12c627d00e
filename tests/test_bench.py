"""dstore bench on real-image features: lossless rows are exact, float16 costs what it costs,
and the harness can show a loss (values below float16 resolution) or a refusal (overflow)."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

import dstore
from dstore.bench import save_plot, save_report
from dstore.cli import main
from dstore.demo import hog_features

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def feats_npz(tmp_path_factory):
    feats, labels = hog_features(400, seed=3)
    path = str(tmp_path_factory.mktemp("bench") / "features.npz")
    np.savez(path, features_train=feats[:300], labels_train=labels[:300],
             features_test=feats[300:], labels_test=labels[300:])
    return path, feats, labels


def test_bench_rows_and_honesty(feats_npz, tmp_path):
    path, _, _ = feats_npz
    report = dstore.bench(path, formats=["npz", "zarr", "hdf5", "tfrecord"], dtypes=["keep", "float16"], repeats=1)
    assert report.task.features == "features" and report.task.labels == "labels"
    assert 0.3 < report.baseline_accuracy <= 1.0
    assert len(report.cells) == 8
    for cell in report.cells:
        assert cell.error is None, cell.error
        assert cell.bytes > 0 and cell.write_s > 0 and cell.read_s > 0
        if cell.dtype == "keep":
            assert cell.bit_exact and cell.accuracy == report.baseline_accuracy and cell.accuracy_delta == 0
        else:
            assert not cell.bit_exact and 0 < cell.max_abs_error < 0.01
    keep = {c.format: c.bytes for c in report.cells if c.dtype == "keep"}
    half = {c.format: c.bytes for c in report.cells if c.dtype == "float16"}
    assert all(half[f] < 0.7 * keep[f] for f in keep)  # the float16 cast is what halves the size
    assert report.recommendation is not None and report.reason

    for ext in (".json", ".csv", ".md"):
        out = str(tmp_path / f"r{ext}")
        save_report(report, out)
        assert os.path.getsize(out) > 0
    with open(tmp_path / "r.json") as f:
        data = json.load(f)
    assert len(data["cells"]) == 8 and data["machine"]["cores"] and data["settings"]["dtypes"] == ["keep", "float16"]
    with open(tmp_path / "r.csv") as f:
        assert len(list(csv.DictReader(f))) == 8
    save_plot(report, str(tmp_path / "p.png"))
    with open(tmp_path / "p.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bench_shows_a_float16_loss(feats_npz, tmp_path):
    """Class signal in differences below float16 resolution (offset 1000: spacing 0.5)."""
    _, feats, labels = feats_npz
    path = str(tmp_path / "fine.npz")
    fine = 1000.0 + feats.astype(np.float64) * 0.05
    np.savez(path, features_train=fine[:300], labels_train=labels[:300],
             features_test=fine[300:], labels_test=labels[300:])
    report = dstore.bench(path, formats=["npz"], dtypes=["keep", "float32", "float16"], repeats=1)
    by = {c.dtype: c for c in report.cells}
    assert by["float32"].accuracy_delta > -5
    assert by["float16"].accuracy_delta < -10 and not by["float16"].within_noise
    assert report.recommendation.dtype != "float16"


def test_bench_refuses_float16_overflow(feats_npz, tmp_path):
    _, feats, labels = feats_npz
    path = str(tmp_path / "big.npz")
    np.savez(path, features=feats * 1e6, labels=labels)
    report = dstore.bench(path, formats=["npz"], dtypes=["keep", "float16"], repeats=1)
    by = {c.dtype: c for c in report.cells}
    assert by["float16"].error and "overflow" in by["float16"].error and path in by["float16"].error
    assert report.task.test is None  # no test split: a seeded hold-out was made
    assert report.recommendation.dtype == "keep"


def test_user_evaluate_replaces_probe(feats_npz):
    path, _, _ = feats_npz
    calls = []

    def evaluate(data):
        calls.append(sorted(data))
        return float(np.mean(data["test"]["features"]))

    report = dstore.bench(path, formats=["npz"], dtypes=["keep", "float16"], evaluate=evaluate, repeats=1)
    assert calls[0] == ["test", "train"] and len(calls) == 3
    assert report.task is None
    assert report.cells[0].accuracy == report.baseline_accuracy


def test_cli_bench(feats_npz, tmp_path, capsys):
    path, _, _ = feats_npz
    rc = main(["bench", path, "--formats", "npz,zarr", "--dtypes", "keep,float16", "--repeats", "1",
               "--report", str(tmp_path / "b.md")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "recommendation:" in out and "float16" in out and "zarr" in out
    assert (tmp_path / "b.md").read_text().count("|") > 20

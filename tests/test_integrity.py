"""`dstore verify PATH`: stored sha256 of every field catches damage the formats' own checks miss."""

from __future__ import annotations

import os

import numpy as np
import pytest

import dstore
from dstore.api import check
from dstore.cli import main
from dstore.integrity import CHECKSUM_ATTR


@pytest.fixture
def src(tmp_path, features):
    feats, labels = features
    path = str(tmp_path / "f.npz")
    np.savez(path, x_train=np.tile(feats, (20, 1)), y_train=np.tile(labels, 20))
    return path


@pytest.mark.parametrize("ext", [".npz", ".zarr", ".h5"])
def test_every_output_carries_field_checksums(tmp_path, src, ext, capsys):
    out = str(tmp_path / f"o{ext}")
    dstore.convert(src, out)
    with dstore.api.open_reader(out) as r:
        sums = r.schema.checksums
        assert CHECKSUM_ATTR not in r.schema.attrs  # dstore's own, not among the user's
    assert set(sums["train"]) == {"x", "y"}
    assert main(["verify", out]) == 0
    text = capsys.readouterr().out
    assert "ok  train/x: sha256 of the values matches" in text and "all passed" in text


def test_swapped_zarr_chunks_decode_but_fail_the_checksum(tmp_path, src, capsys):
    """Two valid blosc chunks exchanged: every chunk decodes, the values are wrong."""
    out = str(tmp_path / "o.zarr")
    dstore.convert(src, out, options={"chunk_mb": "0.01"})
    chunk_dir = os.path.join(out, "train", "x", "c")
    chunks = sorted(os.path.join(r, f) for r, _, fs in os.walk(chunk_dir) for f in fs)
    assert len(chunks) >= 3
    a, b = chunks[0], chunks[1]
    with open(a, "rb") as fa, open(b, "rb") as fb:
        data_a, data_b = fa.read(), fb.read()
    assert data_a != data_b
    with open(a, "wb") as fa, open(b, "wb") as fb:
        fa.write(data_b)
        fb.write(data_a)
    assert main(["verify", out]) == 1
    text = capsys.readouterr().out
    assert "MISMATCH  train/x: sha256 of the values differs" in text
    assert "ok  train/y: sha256 of the values matches" in text


def test_hdf5_edited_by_another_tool_fails_the_checksum(tmp_path, src):
    h5py = pytest.importorskip("h5py")
    out = str(tmp_path / "o.h5")
    dstore.convert(src, out)
    with h5py.File(out, "r+") as f:
        name = next(k for k in f["train"] if k.startswith("x") or k == "x")
        ds = f["train"][name]
        ds[7] = ds[7] + 1
    report = check(out)
    assert not report.ok
    assert [r.field for r in report.results if not r.ok] == ["x"]


def test_checksums_follow_the_cast(tmp_path, src):
    """float16 output: the stored sums are of the float16 values, not the source's."""
    out16 = str(tmp_path / "o16.zarr")
    dstore.convert(src, out16, dtype="float16")
    assert check(out16).ok
    back = str(tmp_path / "back.npz")
    dstore.convert(out16, back)
    assert check(back).ok

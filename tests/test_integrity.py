"""`dstore verify PATH`: stored sha256 of every field catches damage the formats' own checks miss."""

from __future__ import annotations

import os

import numpy as np
import pytest

import dstore
from dstore.api import check
from dstore.cli import main
from dstore.model.checksums import CHECKSUM_ATTR
from dstore.model.schema import schema_digest


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
    chunk_dir = os.path.join(out, "train", "x")  # chunk files c.0.0.0.0, c.1.0.0.0, ...
    chunks = sorted(os.path.join(chunk_dir, f) for f in os.listdir(chunk_dir) if f[:2] == "c.")
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


# ------------------------------------------- checksums in a slot of their own, not attrs


def _h5_with_attrs(path: str, feats: np.ndarray) -> None:
    """A file with the user's attributes, written by h5py."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "photo features"
        f.attrs["version"] = np.int32(3)
        g = f.create_group("train")
        g.attrs["source"] = "camera"
        x = g.create_dataset("x", data=feats)
        x.attrs["units"] = "m"


def test_user_attrs_round_trip_without_checksum_keys(tmp_path, features):
    """The checksums were kept in ``schema.attrs['dstore.sha256']``: every file dstore
    wrote showed them among the user's attributes (failed before for npz, zarr, json)."""
    src = str(tmp_path / "a.h5")
    _h5_with_attrs(src, features[0])
    with dstore.api.open_reader(src) as r:
        want, want_x = r.schema.attrs, r.schema.splits["train"].fields["x"].attrs
    assert want and CHECKSUM_ATTR not in want
    prev = src
    for ext in (".npz", ".zarr", ".json", ".tfrecords", ".h5"):
        out = str(tmp_path / f"b{ext}")
        dstore.convert(prev, out)
        with dstore.api.open_reader(out) as r:
            assert r.schema.attrs == want, ext
            assert r.schema.splits["train"].fields["x"].attrs == want_x, ext
            assert ext in (".tfrecords", ".h5") or set(r.schema.checksums["train"]) == {"x"}
        assert dstore.verify(src, out).ok
        assert main(["verify", out]) == 0
        prev = out
    h5py = pytest.importorskip("h5py")
    with h5py.File(prev) as f:  # what h5py users see: their attributes, no dstore keys
        assert sorted(k for k in f.attrs if k != "dstore_schema") == ["title", "version"]


def _old_layout(path: str, ext: str, edit=None) -> None:
    """Rewrite the stored schema of ``path`` as dstore wrote it before the checksums had
    a slot: ``checksums`` moved into ``attrs['dstore.sha256']``; ``edit`` changes it."""
    import json

    def legacy(stored: dict) -> dict:
        stored = dict(stored)
        stored.pop("digest", None)  # schemas of that time carried no digest
        stored["attrs"] = {**stored.get("attrs", {}), CHECKSUM_ATTR: stored.pop("checksums")}
        if edit is not None:
            edit(stored["attrs"][CHECKSUM_ATTR])
        return stored

    if ext == ".h5":
        h5py = pytest.importorskip("h5py")
        with h5py.File(path, "r+") as f:
            f.attrs["dstore_schema"] = json.dumps(legacy(json.loads(f.attrs["dstore_schema"])))
    elif ext == ".zarr":
        zarr = pytest.importorskip("zarr")
        root = zarr.open_group(path, mode="r+")
        root.attrs["dstore_schema"] = legacy(dict(root.attrs["dstore_schema"]))
    else:
        import zipfile

        from dstore.codecs.npz.options import _COMMENT_PREFIX

        with zipfile.ZipFile(path, "a") as z:
            stored = json.loads(z.comment[len(_COMMENT_PREFIX) :])
            z.comment = _COMMENT_PREFIX + json.dumps(legacy(stored)).encode()


@pytest.mark.parametrize("ext", [".npz", ".zarr", ".h5"])
def test_a_file_with_the_old_checksum_layout_still_verifies(tmp_path, src, ext, capsys):
    out = str(tmp_path / f"o{ext}")
    dstore.convert(src, out)
    _old_layout(out, ext)
    with dstore.api.open_reader(out) as r:
        assert CHECKSUM_ATTR not in r.schema.attrs  # moved to the slot when read
        assert set(r.schema.checksums["train"]) == {"x", "y"}
    capsys.readouterr()
    assert main(["verify", out]) == 0
    text = capsys.readouterr().out
    assert "ok  train/x: sha256 of the values matches" in text and "all passed" in text
    # written again, it is in the new layout
    again = str(tmp_path / f"again{ext}")
    dstore.convert(out, again)
    assert main(["verify", again]) == 0


@pytest.mark.parametrize("layout", ["new", "old"])
def test_a_damaged_stored_checksum_fails_verify(tmp_path, src, layout, capsys):
    import json
    import zipfile

    from dstore.codecs.npz.options import _COMMENT_PREFIX

    out = str(tmp_path / "o.npz")
    dstore.convert(src, out)

    def damage(sums: dict) -> None:
        digest = sums["train"]["x"]
        sums["train"]["x"] = ("0" if digest[0] != "0" else "1") + digest[1:]

    if layout == "old":
        _old_layout(out, ".npz", damage)
    else:
        with zipfile.ZipFile(out, "a") as z:
            stored = json.loads(z.comment[len(_COMMENT_PREFIX) :])
            damage(stored["checksums"])
            # a consistent edit (digest recomputed): the checksum itself must catch it
            stored.pop("digest")
            stored["digest"] = schema_digest(stored)
            z.comment = _COMMENT_PREFIX + json.dumps(stored).encode()
    capsys.readouterr()
    assert main(["verify", out]) == 1
    text = capsys.readouterr().out
    assert "MISMATCH  train/x: sha256 of the values differs" in text
    assert "ok  train/y: sha256 of the values matches" in text

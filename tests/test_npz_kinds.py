"""npz field kinds: what dstore writes opens in plain ``np.load`` (no pickle), and foreign
``<U``/``S`` members and object arrays (through the restricted unpickler) read as kinds."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dstore
from dstore.errors import CodecIOError, SchemaError
from dstore.model import Bytes, Ragged, String


def _boxes(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.random((k, 4)).astype(np.float32) for k in rng.integers(0, 6, n)]


def test_np_load_reads_what_dstore_writes(tmp_path: Any) -> None:
    names = ["a.png", "", "é/x", "日本"]
    blobs = [b"\x01", b"", b"\xff\xfe", b"zz"]
    boxes = _boxes(4)
    path = tmp_path / "k.npz"
    dstore.save(
        {"train": {"names": names, "blobs": blobs, "boxes": boxes, "y": np.arange(4)}}, path
    )
    with np.load(path, allow_pickle=False) as z:
        assert z["names_train"].dtype.kind == "U" and z["names_train"].tolist() == names
        assert z["blobs_train"].dtype.kind == "S" and z["blobs_train"].tolist() == blobs
        values, splits = z["boxes_train.values"], z["boxes_train.row_splits"]
        assert splits.tolist() == [0, *np.cumsum([len(b) for b in boxes]).tolist()]
        for i, b in enumerate(boxes):
            np.testing.assert_array_equal(values[splits[i] : splits[i + 1]], b)
    with dstore.open(path) as ds:
        assert ds["train"]["names"].kind == String()
        assert ds["train"]["names"][2] == "é/x"
        assert ds["train"]["blobs"][2] == b"\xff\xfe"
        np.testing.assert_array_equal(ds["train"]["boxes"][3], boxes[3])


def test_trailing_nuls_survive(tmp_path: Any) -> None:
    """numpy's fixed-width strings drop trailing NULs: such fields use values + row splits."""
    texts, blobs = ["a\x00", "b", ""], [b"\x00", b"x\x00\x00", b""]
    path = tmp_path / "n.npz"
    dstore.save({"t": texts, "b": blobs}, path)
    with np.load(path) as z:
        assert "t.values" in z and "b.row_splits" in z
    with dstore.open(path) as ds:
        assert [ds["data"]["t"][i] for i in range(3)] == texts
        assert ds["data"]["b"][:] == blobs


def test_foreign_string_members(tmp_path: Any) -> None:
    path = tmp_path / "f.npz"
    np.savez(
        path,
        names_train=np.array(["x", "yé", ""]),
        ids_train=np.array([b"a", b"\x00b", b""]),
        x_train=np.arange(3),
    )
    with dstore.open(path) as ds:
        assert ds["train"]["names"].kind == String() and ds["train"]["names"][:] == ["x", "yé", ""]
        assert ds["train"]["ids"].kind == Bytes() and ds["train"]["ids"][1] == b"\x00b"
    out = tmp_path / "o.npz"
    dstore.convert(path, out)
    assert dstore.verify(path, out).ok


def test_object_arrays_of_arrays_read_as_ragged(tmp_path: Any) -> None:
    """np.savez of a list of arrays is how many users save ragged labels."""
    boxes = _boxes(5, seed=3)
    labels = np.empty(5, dtype=object)
    labels[:] = [np.arange(len(b)) for b in boxes]
    path = tmp_path / "obj.npz"
    np.savez(
        path,
        boxes=np.array(boxes, dtype=object),
        labels=labels,
        words=np.array(["a", "bb", "c", "", "é"], dtype=object),
    )
    with dstore.open(path) as ds:
        data = ds["data"]
        assert data["boxes"].kind == Ragged(np.dtype("float32"), (4,))
        for i, b in enumerate(boxes):
            np.testing.assert_array_equal(data["boxes"][i], b)
        assert data["labels"].kind == Ragged(np.dtype("int64"), ())
        assert data["words"][:] == ["a", "bb", "c", "", "é"]
    out = tmp_path / "plain.npz"
    dstore.convert(path, out)  # the output holds no pickle at all
    with np.load(out, allow_pickle=False) as z:
        assert sorted(z.files) == sorted(
            ["boxes.values", "boxes.row_splits", "labels.values", "labels.row_splits", "words"]
        )


class _Evil:
    def __init__(self, canary: str) -> None:
        self.canary = canary

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (f"touch {self.canary}",)


def test_hostile_object_member_never_runs(tmp_path: Any) -> None:
    canary = str(tmp_path / "canary")
    evil = np.empty(2, dtype=object)
    evil[:] = [np.arange(2), _Evil(canary)]
    path = tmp_path / "evil.npz"
    np.savez(path, y=evil)
    before = path.read_bytes()
    out = tmp_path / "out.npz"
    proc = subprocess.run(
        [sys.executable, "-m", "dstore.cli", "convert", str(path), str(out)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert "refused to unpickle" in proc.stderr and "system" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not os.path.exists(canary)
    assert not out.exists() and path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["evil.npz"]


def test_mixed_object_member_is_one_clear_error(tmp_path: Any) -> None:
    path = tmp_path / "mixed.npz"
    np.savez(path, m=np.array(["a", np.arange(3)], dtype=object))
    with pytest.raises(SchemaError, match=r"mixed.npz: key 'm', record 1"):
        dstore.open(path)


def test_row_splits_that_do_not_match_the_values(tmp_path: Any) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **{"b.values": np.arange(5.0), "b.row_splits": np.array([0, 3, 2, 5])})
    with dstore.open(path) as ds, pytest.raises(CodecIOError, match=r"field 'b'.*row splits"):
        ds["data"]["b"][:]
    np.savez(path, **{"b.values": np.arange(5.0), "b.row_splits": np.array([0, 3, 9])})
    with dstore.open(path) as ds, pytest.raises(CodecIOError, match="row splits"):
        ds["data"]["b"][:]


def test_field_names_that_collide_with_member_suffixes(tmp_path: Any) -> None:
    data = {"a": [np.arange(2), np.arange(3)], "a.values": np.arange(2)}
    with pytest.raises(SchemaError, match="both be stored"):
        dstore.save(data, tmp_path / "c.npz")
    assert os.listdir(tmp_path) == []


@given(
    st.lists(st.text(max_size=6), min_size=1, max_size=12),
    st.lists(st.binary(max_size=6), min_size=1, max_size=12),
    st.integers(1, 5),
)
@settings(max_examples=40, deadline=None)
def test_strings_and_bytes_roundtrip(texts: list[str], blobs: list[bytes], batch: int) -> None:
    import tempfile

    n = min(len(texts), len(blobs))
    texts, blobs = texts[:n], blobs[:n]
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "s.npz")
        dstore.save({"t": texts, "b": blobs, "i": np.arange(n)}, src)
        out = os.path.join(tmp, "o.npz")
        dstore.convert(src, out, batch_bytes=batch)  # many small batches through the spools
        with dstore.open(out) as ds:
            assert ds["data"]["t"][:] == texts
            assert ds["data"]["b"][:] == blobs


def test_batch_cut_does_not_change_the_file(tmp_path: Any) -> None:
    """Spooled var fields give the same bytes however the records arrive."""
    boxes = _boxes(40, seed=9)
    words = [("w" * (i % 7)) + "é" for i in range(40)]
    src = tmp_path / "s.npz"
    dstore.save({"boxes": boxes, "w": words}, src)
    digests = set()
    for batch_bytes in (1, 300, 1 << 30):
        out = tmp_path / f"o{batch_bytes}.npz"
        dstore.convert(src, out, batch_bytes=batch_bytes)
        digests.add(out.read_bytes())
    assert len(digests) == 1


def test_plain_files_never_reach_the_unpickler(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only object members go through the (restricted) unpickler; strings and ragged fields never do."""
    from dstore.codecs.npz import archive as npz

    path = tmp_path / "p.npz"
    dstore.save({"w": ["a", "b"], "r": [np.arange(2), np.arange(1)]}, path)

    def refuse(*args: object) -> None:
        raise AssertionError("unpickler called for a plain file")

    monkeypatch.setattr(npz, "load_object_array", refuse)
    with dstore.open(path) as ds:
        assert ds["data"]["w"][:] == ["a", "b"]
        assert [r.tolist() for r in ds["data"]["r"][:]] == [[0, 1], [0]]

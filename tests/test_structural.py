"""Targeted structural damage: lying sizes and shapes, truncation at every boundary.

Random mutations (test_fuzz.py) rarely hit the few bytes that matter most:
size and shape fields. Here they are set on purpose to extreme values. The
reader must answer with a DstoreError (or the right data), quickly, and
without allocating memory in proportion to what a header claims.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

import dstore
from dstore.testing import read_all

MAX_ALLOC = 64 * 1024 * 1024  # far below any claimed size, far above a real batch here


def read_bounded(path: str):
    """read_all, asserting the peak Python/numpy allocation stays small."""
    tracemalloc.start()
    try:
        return read_all(str(path))
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < MAX_ALLOC, f"reading allocated {peak / 1e6:.0f} MB"


def expect_error_or_data(path, data) -> str:
    try:
        got = read_bounded(path)
    except dstore.DstoreError as e:
        assert str(e) and "\n" not in str(e)
        return "error"
    for split, fields in data.items():
        for name, arr in fields.items():
            np.testing.assert_array_equal(got[split][name], arr)
    return "data"


# ----------------------------------------------------------------------- npz


def _npz_with_header(path, header: dict, payload: bytes) -> None:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x_train.npy", buf.getvalue() + payload)
        y = io.BytesIO()
        np.save(y, np.arange(4))
        z.writestr("y_train.npy", y.getvalue())


@pytest.mark.parametrize(
    "shape", [(10**12, 3), (4, 10**12), (2**62, 2**62), (3, 10**6, 10**6), (-1, 3), (4, -3)]
)
def test_npy_header_claiming_huge_or_negative_shapes(tmp_path, shape):
    path = tmp_path / "h.npz"
    _npz_with_header(path, {"descr": "<f8", "fortran_order": False, "shape": shape}, b"\0" * 96)
    with pytest.raises(dstore.DstoreError) as e:
        read_bounded(path)
    # one line that names the file, the member and what its header claims
    message = str(e.value)
    assert "\n" not in message and "h.npz" in message and "x_train" in message
    assert str(shape) in message, message
    assert "free space" not in message


@pytest.mark.parametrize(
    "descr", ["<f8" * 1000, "|V1000000000000", "<U999999999", "|O", "<M8[s]", "xyz"]
)
def test_npy_header_with_extreme_dtypes(tmp_path, descr):
    path = tmp_path / "d.npz"
    _npz_with_header(path, {"descr": descr, "fortran_order": False, "shape": (4,)}, b"\0" * 32)
    with pytest.raises(dstore.DstoreError):
        read_bounded(path)


def _central_entries(blob: bytes) -> list[int]:
    out, pos = [], blob.find(b"PK\x01\x02")
    while pos != -1:
        out.append(pos)
        pos = blob.find(b"PK\x01\x02", pos + 4)
    return out


@pytest.fixture
def npz_blob(tmp_path):
    data = {"train": {"x": np.arange(600, dtype=np.float32).reshape(100, 6), "y": np.arange(100)}}
    for compress in (False, True):
        path = tmp_path / f"v{int(compress)}.npz"
        dstore.save(data, path, compress=compress)
    return data, {c: (tmp_path / f"v{int(c)}.npz").read_bytes() for c in (False, True)}


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("field_offset", [20, 24], ids=["compressed_size", "file_size"])
@pytest.mark.parametrize("value", [0, 1, 2**31 - 1, 2**32 - 1])
def test_zip_members_with_lying_sizes(tmp_path, npz_blob, compress, field_offset, value):
    data, blobs = npz_blob
    outcomes = set()
    for entry in _central_entries(blobs[compress]):
        buf = bytearray(blobs[compress])
        struct.pack_into("<I", buf, entry + field_offset, value)
        # the local header carries the sizes too (4 bytes earlier): lie there as well
        local = struct.unpack_from("<I", buf, entry + 42)[0]
        struct.pack_into("<I", buf, local + field_offset - 2, value)
        path = tmp_path / "lying.npz"
        path.write_bytes(bytes(buf))
        outcomes.add(expect_error_or_data(path, data))
    assert outcomes  # every member was tried


@pytest.mark.parametrize("compress", [False, True])
def test_npz_truncated_at_every_structure_boundary(tmp_path, npz_blob, compress):
    data, blobs = npz_blob
    blob = blobs[compress]
    cuts = {0, 1, len(blob) - 1, len(blob) - 22}
    for sig in (b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06", b"\x93NUMPY"):
        pos = blob.find(sig)
        while pos != -1:
            cuts.update({pos, pos + 4, pos + 30})
            pos = blob.find(sig, pos + 1)
    directory = blob.rfind(b"PK\x05\x06")
    outcomes = {}
    for cut in sorted(c for c in cuts if 0 <= c < len(blob)):
        path = tmp_path / "cut.npz"
        path.write_bytes(blob[:cut])
        outcomes[cut] = expect_error_or_data(path, data)
    # Only a cut inside the trailing zip comment (dstore's schema; the schema
    # is then inferred from the members) can still give the data.
    assert all(o == "error" for c, o in outcomes.items() if c < directory + 22), outcomes


# ------------------------------------------------------------------ tfrecord


@pytest.fixture
def tfrecord_dir(tmp_path, tiles):
    pytest.importorskip("imagecodecs")
    x, y = tiles
    data = {"train": {"x": x[:12], "y": y[:12]}}
    path = tmp_path / "v.tfrecords"
    dstore.save(data, path)
    return data, path, path / "train-00000-of-00001.tfrecord"


def _record_offsets(blob: bytes) -> list[tuple[int, int]]:
    out, pos = [], 0
    while pos < len(blob):
        (length,) = struct.unpack_from("<Q", blob, pos)
        out.append((pos, length))
        pos += 16 + length
    return out


@pytest.mark.parametrize("claimed", [2**40, 2**63, 2**64 - 1, 10**12])
def test_tfrecord_length_claiming_terabytes(tmp_path, tfrecord_dir, claimed):
    from dstore.codecs.tfrecord.io import masked_crc

    _data, valid, shard = tfrecord_dir
    blob = shard.read_bytes()
    for pos, _ in _record_offsets(blob)[:3]:
        buf = bytearray(blob)
        head = struct.pack("<Q", claimed)
        buf[pos : pos + 8] = head
        buf[pos + 8 : pos + 12] = struct.pack(
            "<I", masked_crc(head)
        )  # a valid CRC: only the size lies
        for where in ("dir", "bare"):
            if where == "dir":
                target = tmp_path / "d.tfrecords"
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(valid, target)
                (target / shard.name).write_bytes(bytes(buf))
            else:
                target = tmp_path / "train.tfrecord"
                target.write_bytes(bytes(buf))
            # in a dstore folder the shard no longer matches its manifest's sha256: refused
            # before a frame is read; alone, its framing is
            why = r"the manifest lists" if where == "dir" else r"implausible|truncated"
            with pytest.raises(dstore.DstoreError, match=why):
                read_bounded(target)


def test_tfrecord_truncated_at_every_record_boundary(tmp_path, tfrecord_dir):
    _data, valid, shard = tfrecord_dir
    blob = shard.read_bytes()
    cuts = set()
    for pos, length in _record_offsets(blob):
        cuts.update({pos, pos + 8, pos + 12, pos + 12 + length, pos + 16 + length - 1})
    cuts.discard(len(blob))
    target = tmp_path / "d.tfrecords"
    for cut in sorted(cuts):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(valid, target)
        (target / shard.name).write_bytes(blob[:cut])
        with pytest.raises(dstore.DstoreError):  # the manifest knows the count: shorter is an error
            read_bounded(target)


def test_tfrecord_manifest_with_extreme_counts(tmp_path, tfrecord_dir):
    _data, valid, _shard = tfrecord_dir
    for count in (10**12, -1, 0, 13):
        target = tmp_path / "m.tfrecords"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(valid, target)
        manifest = json.loads((target / "dstore.json").read_text())
        manifest["splits"]["train"]["shards"][0]["records"] = count
        manifest["splits"]["train"]["count"] = count
        manifest["schema"]["splits"]["train"]["count"] = count
        (target / "dstore.json").write_text(json.dumps(manifest))
        with pytest.raises(dstore.DstoreError):
            read_bounded(target)


# ---------------------------------------------------------------------- zarr


@pytest.fixture
def zarr_store(tmp_path, features):
    pytest.importorskip("zarr")
    feats, labels = features
    data = {"train": {"x": feats, "y": labels}}
    path = tmp_path / "v.zarr"
    dstore.save(data, path, chunk_mb="0.005")
    return data, path


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("shape", [10**12, 48]),
        ("shape", [120, 10**12]),
        ("shape", [-5, 48]),
        ("shape", [2**63, 2**63]),
        ("chunk_shape", [0, 48]),
        ("chunk_shape", [10**12, 48]),
        ("data_type", "float1024"),
        ("data_type", "int8"),
    ],
)
def test_zarr_metadata_with_extreme_values(tmp_path, zarr_store, key, value):
    data, valid = zarr_store
    target = tmp_path / "m.zarr"
    shutil.copytree(valid, target)
    meta_path = target / "train" / "x" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    if key == "chunk_shape":
        meta["chunk_grid"]["configuration"]["chunk_shape"] = value
    else:
        meta[key] = value
    meta_path.write_text(json.dumps(meta))
    expect_error_or_data(target, data)  # asserts: DstoreError, or the very same data


def test_zarr_chunks_truncated_or_emptied(tmp_path, zarr_store):
    _data, valid = zarr_store
    chunk_root = valid / "train" / "x" / "c"
    chunks = sorted(
        os.path.relpath(os.path.join(r, f), valid) for r, _, fs in os.walk(chunk_root) for f in fs
    )
    for rel in chunks[:3]:
        for cut in (0, 1, 15, 16, -1):
            target = tmp_path / "t.zarr"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(valid, target)
            blob = (valid / rel).read_bytes()
            (target / rel).write_bytes(blob[:cut] if cut >= 0 else blob[:-1])
            with pytest.raises(dstore.DstoreError):
                read_bounded(target)


def test_every_dask_cluster_takes_a_free_dashboard_port():
    """A LocalCluster with ``dashboard_address=None`` still binds :8787; on a shared machine
    another run holds it, and the warning is an error under filterwarnings=error (the flake
    test_resume met). Every cluster the code, tests and benchmarks start says ``":0"``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = 0
    for folder in ("dstore", "tests", "benchmarks"):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in files:
                if not f.endswith(".py"):
                    continue
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    text = fh.read()
                for m in re.finditer(r"LocalCluster\((.*?)\)", text, re.S):
                    found += 1
                    assert 'dashboard_address=":0"' in m.group(1), (f, m.group(0)[:120])
    assert found >= 3  # the tests' clusters at least

"""dstore.to_torch: every record exactly once per epoch, over every format, through real DataLoaders."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections import Counter
from tempfile import TemporaryDirectory

import numpy as np
import pytest

import dstore
from dstore.codecs.tfrecord import io as rio
from dstore.errors import CodecIOError, SchemaError

torch = pytest.importorskip("torch")
import itertools

from dstore.readers.torch import collate, pad_collate
from dstore.testing import data_loader as DataLoader
from dstore.testing import parts_options, usable_formats

# The whole module is slow: DataLoader worker processes, each importing torch (~26 s); `pytest -m "not slow"` leaves it out.
pytestmark = pytest.mark.slow

N = 60
RANGE_MB = 0.05  # ~4 tiles of 64x64x3 per range: many ranges from small files


def _formats(stem: str, shard_mb: float, chunk_mb: float) -> dict[str, tuple[str, dict[str, str]]]:
    """format -> (file name, codec options making several chunks / shards) for every
    registered format, plus a deflated npz (it only streams)."""
    out = {
        name: (stem + ext, parts_options(name, shard_mb=shard_mb, chunk_mb=chunk_mb))
        for name, ext in usable_formats().items()
    }
    out["npz"] = (f"{stem}.npz", {"compress": "false"})
    out["npz-deflated"] = (f"{stem}z.npz", {"compress": "true"})
    return out


FORMATS = _formats("d", shard_mb=0.15, chunk_mb=0.03)


@pytest.fixture(scope="module")
def data(tiles):
    x, y = tiles
    # ``k`` makes every record distinct even if two crops happened to coincide
    return {"x": x, "y": y, "k": np.arange(N, dtype=np.int64) * 7 - 3}


@pytest.fixture(scope="module")
def stores(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("torch")
    out = {}
    for fmt, (name, opts) in FORMATS.items():
        path = str(root / name)
        dstore.save({"train": data, "test": {k: v[:5] for k, v in data.items()}}, path, **opts)
        out[fmt] = path
    return out


def _key(x, y, k) -> bytes:
    return np.asarray(x).tobytes() + np.asarray(y).tobytes() + np.asarray(k).tobytes()


def _expected(data) -> Counter:
    return Counter(_key(data["x"][i], data["y"][i], data["k"][i]) for i in range(N))


def _from_loader(loader) -> list[bytes]:
    keys = []
    for batch in loader:
        for i in range(len(batch["k"])):
            keys.append(_key(batch["x"][i].numpy(), batch["y"][i].numpy(), batch["k"][i].numpy()))
    return keys


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_ranges_cover_the_split_in_storage_units(stores, fmt):
    reader = dstore.api.open_reader(stores[fmt])
    with reader:
        ranges = reader.record_ranges("train", int(RANGE_MB * 2**20))
        assert ranges[0][0] == 0 and ranges[-1][1] == N and len(ranges) >= 3
        assert all(a < b for a, b in ranges)
        assert all(p[1] == q[0] for p, q in itertools.pairwise(ranges))
        if hasattr(reader, "arrays"):  # chunked (zarr, HDF5): ranges start on chunks
            chunk = reader.arrays[("train", "x")].chunks[0]
            assert all(a % chunk == 0 for a, _ in ranges)
        if hasattr(reader, "shards"):  # sharded: no range crosses a shard boundary
            bounds = np.cumsum([s.records for s in reader.shards["train"]])
            assert len(bounds) > 1
            assert all(not (a < e < b) for a, b in ranges for e in bounds)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("shuffle", [0, 16])
def test_two_workers_read_every_record_once(stores, data, fmt, shuffle):
    ds = dstore.to_torch(stores[fmt], "train", shuffle=shuffle, seed=3, range_mb=RANGE_MB)
    got = _from_loader(DataLoader(ds, batch_size=8, num_workers=2))
    assert Counter(got) == _expected(data)
    first = next(iter(DataLoader(ds, batch_size=N, num_workers=0)))
    assert first["x"].dtype == torch.uint8 and tuple(first["x"].shape[1:]) == data["x"].shape[1:]
    assert first["k"].dtype == torch.int64


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_two_ranks_of_two_workers_read_every_record_once_per_epoch(stores, data, fmt):
    orders = []
    for epoch in (0, 1):
        keys: list[bytes] = []
        for rank in (0, 1):
            ds = dstore.to_torch(
                stores[fmt], "train", shuffle=8, seed=11, rank=rank, world_size=2, range_mb=RANGE_MB
            )
            ds.set_epoch(epoch)
            keys += _from_loader(DataLoader(ds, batch_size=5, num_workers=2))
        assert Counter(keys) == _expected(data), (fmt, epoch)
        orders.append(keys)
    assert orders[0] != orders[1]


@pytest.mark.parametrize("fmt", list(usable_formats()))
def test_set_epoch_reshuffles_deterministically(stores, data, fmt):
    def order(seed: int, epoch: int) -> list[int]:
        ds = dstore.to_torch(stores[fmt], "train", shuffle=10, seed=seed, range_mb=RANGE_MB)
        ds.set_epoch(epoch)
        return [int(r["k"]) for r in ds]

    plain = [int(r["k"]) for r in dstore.to_torch(stores[fmt], "train", range_mb=RANGE_MB)]
    assert plain == list(data["k"])  # no shuffle: storage order
    a = order(5, 0)
    assert sorted(a) == sorted(plain)
    assert a == order(5, 0)  # same seed and epoch: same order
    assert a != order(5, 1) and a != plain
    assert order(6, 0) != a


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("workers", [4, 5])
def test_more_workers_than_ranges(stores, data, fmt, workers):
    ds = dstore.to_torch(stores[fmt], "train", range_mb=100)  # one range per shard / file
    workers = max(workers, len(ds.source.ranges) + 1)  # however many shards the format cut
    got = _from_loader(DataLoader(ds, batch_size=7, num_workers=workers))
    assert Counter(got) == _expected(data)


def test_streaming_npz_gives_each_worker_one_block():
    from dstore.readers.plan import consumer_ranges

    ranges = [(i * 10, i * 10 + 10) for i in range(7)]
    for consumers in range(1, 10):
        seen = []
        for c in range(consumers):
            mine = consumer_ranges(
                ranges, c, consumers, shuffle=True, seed=0, epoch=0, streaming=True
            )
            assert all(p[1] == q[0] for p, q in itertools.pairwise(mine))  # contiguous, forwards
            seen += mine
        assert sorted(seen) == ranges


def _sequential(path: str) -> bool:
    """Storage read only in order, of a format that makes no random-access copy of it
    (a deflated npz does: its members stored)."""
    with dstore.api.open_reader(path) as reader:
        sequential = reader.sequential_reason or not reader.random_access
    with TemporaryDirectory() as folder:  # the copy, made to tell; removed with the folder
        copy = dstore.get_codec_class(dstore.infer_codec(path)).random_access_copy(path, folder)
    return bool(sequential) and copy is None


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_map_style(stores, data, fmt):
    if _sequential(stores[fmt]):
        pytest.skip("sequential storage: test_map_style_refuses_sequential_storage")
    ds = dstore.to_torch(stores[fmt], "train", map_style=True, range_mb=RANGE_MB)
    assert len(ds) == N
    for i in [*list(range(N)), -1, -N]:
        rec = ds[i]
        np.testing.assert_array_equal(rec["x"].numpy(), data["x"][i])
        np.testing.assert_array_equal(rec["y"].numpy(), data["y"][i])
        assert int(rec["k"]) == data["k"][i]
    with pytest.raises(IndexError):
        ds[N]
    got = _from_loader(DataLoader(ds, batch_size=8, shuffle=True, num_workers=2))
    assert Counter(got) == _expected(data)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_map_style_shuffled_reads_one_record_per_index(stores, data, fmt):
    """In a shuffled order ``ds[i]`` asks the source for record i alone, never a range
    (it read, and decoded, the whole range holding i: a shuffled epoch of a 1,600-tile
    TFRecord took 622 s through two workers); what a format reads for one record is
    tested in tests/test_read_positions.py."""
    if _sequential(stores[fmt]):
        pytest.skip("sequential storage: test_map_style_refuses_sequential_storage")
    asked: list[list[int]] = []
    ds = dstore.to_torch(stores[fmt], "train", map_style=True, range_mb=RANGE_MB)
    read = ds.source.read_records

    def counting(indexes):  # the real read, the positions asked noted
        asked.append([int(i) for i in indexes])
        return read(indexes)

    def no_ranges(*args):
        raise AssertionError(f"a range was read: {args}")

    ds.source.read_records = counting
    ds.source.batches = no_ranges
    assert len(ds.source.ranges) > 2
    order = [int(i) for i in np.random.default_rng(0).permutation(N)]
    for i in order:
        rec = ds[i]
        np.testing.assert_array_equal(rec["x"].numpy(), data["x"][i])
        assert int(rec["k"]) == data["k"][i]
    assert asked == [[i] for i in order]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_map_style_refuses_sequential_storage(stores, fmt):
    if not _sequential(stores[fmt]):
        assert len(dstore.to_torch(stores[fmt], "train", map_style=True)) == N
        return
    with pytest.raises(SchemaError, match="map_style=True needs random access"):
        dstore.to_torch(stores[fmt], "train", map_style=True)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_bad_split_and_fields_name_what_exists(stores, fmt):
    with pytest.raises(SchemaError) as e:
        dstore.to_torch(stores[fmt], "nope")
    msg = str(e.value)
    assert "\n" not in msg and "'nope'" in msg and "train" in msg and "test" in msg
    with pytest.raises(SchemaError) as e:
        dstore.to_torch(stores[fmt], "train", fields=["x", "z"])
    msg = str(e.value)
    assert "\n" not in msg and "'z'" in msg and "fields: x, y, k" in msg


def test_fields_subset(stores, data):
    recs = list(dstore.to_torch(stores["zarr"], "train", fields=["k"]))
    assert [set(r) for r in recs[:1]] == [{"k"}]
    assert [int(r["k"]) for r in recs] == list(data["k"])


def _corrupt_record(path: str, shard_index: int, record: int) -> str:
    shard = sorted(
        f for f in os.listdir(path) if f.startswith("train-") and f.endswith(".tfrecord")
    )[shard_index]
    full = os.path.join(path, shard)
    with rio.RecordFile(full) as rf:
        rf.skip(record)
        offset = rf.offset
    with open(full, "r+b") as f:
        f.seek(offset + 12 + 40)  # inside the record's data: its data CRC fails
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    return shard


def test_corrupt_shard_mid_epoch_names_shard_and_record(tmp_path, data, caplog):
    path = str(tmp_path / "c.tfrecords")
    dstore.save({"train": data}, path, shard_mb="0.15")
    shard = _corrupt_record(path, 1, 2)
    with pytest.raises(CodecIOError) as e:
        for _ in DataLoader(dstore.to_torch(path, "train", range_mb=RANGE_MB), batch_size=4):
            pass
    assert shard in str(e.value) and "record 2" in str(e.value)

    for shuffle in (0, 9):
        ds = dstore.to_torch(path, "train", shuffle=shuffle, on_error="skip", range_mb=RANGE_MB)
        with caplog.at_level(logging.WARNING, logger="dstore"):
            recs = list(ds)
        assert ds.skipped == 1 and len(recs) == N - 1
        assert any(shard in m and "record 2" in m for m in caplog.messages)
        keys = Counter(_key(r["x"].numpy(), r["y"].numpy(), r["k"].numpy()) for r in recs)
        expected = _expected(data)
        missing = expected - keys
        assert sum(missing.values()) == 1 and not keys - expected
    with pytest.raises(ValueError, match="on_error"):
        dstore.to_torch(path, "train", on_error="ignore")


def test_collate_keeps_ragged_and_strings_and_pads_with_a_mask():
    rng = np.random.default_rng(0)
    recs = [
        {
            "boxes": torch.from_numpy(rng.random((n, 4), dtype=np.float32)),
            "name": f"img{n}",
            "x": torch.full((2, 2), n),
        }
        for n in (3, 0, 5, 1)
    ]
    batch = collate(recs)
    assert batch["name"] == ["img3", "img0", "img5", "img1"]
    assert isinstance(batch["boxes"], list) and [len(b) for b in batch["boxes"]] == [3, 0, 5, 1]
    assert batch["x"].shape == (4, 2, 2)
    padded = pad_collate(recs)
    assert padded["boxes"].shape == (4, 5, 4)
    assert padded["boxes_mask"].tolist() == [[j < n for j in range(5)] for n in (3, 0, 5, 1)]
    for i, r in enumerate(recs):
        n = len(r["boxes"])
        torch.testing.assert_close(padded["boxes"][i, :n], r["boxes"])
        assert not padded["boxes"][i, n:].any()
    loader = DataLoader(recs, batch_size=2, num_workers=2, collate_fn=pad_collate)
    assert [b["boxes"].shape[1] for b in loader] == [3, 5]


def test_worker_rss_stays_under_300_mb(tmp_path, tiles):
    """Peak RSS of each DataLoader worker (shuffle buffer included) while reading 197 MB of tiles."""
    from dstore.demo import photo_tiles

    x, y = photo_tiles(200, 256, seed=1)
    path = str(tmp_path / "big.zarr")
    dstore.save({"train": {"x": np.concatenate([x] * 5), "y": np.concatenate([y] * 5)}}, path)
    del x
    code = f"""
import psutil, torch, dstore
ds = dstore.to_torch({path!r}, "train", shuffle=64)
loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2)
me = psutil.Process()
peak = {{}}
n = 0
for batch in loader:
    n += len(batch["x"])
    for child in me.children():
        try:
            peak[child.pid] = max(peak.get(child.pid, 0), child.memory_info().rss)
        except psutil.NoSuchProcess:
            pass
print(n, len(peak), max(peak.values()) // 2**20)
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(dstore.__file__)))
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    n, workers, peak_mb = map(int, out.stdout.split())
    assert (n, workers) == (1000, 2)
    assert peak_mb < 300, peak_mb


def test_string_bytes_and_ragged_columns_become_lists_then_pad():
    """Batches of the variable-size kinds (values + row offsets) as records, then collated.

    The columns are built as a reader yields them, with big-endian values and empty records."""
    from dstore.model import Bytes, Ragged, String, Tensor, VarColumn
    from dstore.readers.torch import _records

    rng = np.random.default_rng(1)
    lengths = [2, 0, 3, 1]
    boxes = [rng.random((n, 4)).astype(">f4") for n in lengths]
    names = ["a.png", "", "ünï.png", "d"]
    blobs = [b"\x00\x01", b"", b"xyz", b"\xff"]
    batch = {
        "boxes": VarColumn(np.concatenate(boxes), np.cumsum([0, *lengths])),
        "name": VarColumn.from_strings(names),
        "raw": VarColumn.from_bytes(blobs),
        "k": np.arange(4, dtype=np.int16),
    }
    kinds = {
        "boxes": Ragged(np.dtype(">f4"), (4,)),
        "name": String(),
        "raw": Bytes(),
        "k": Tensor(np.dtype(np.int16), ()),
    }
    for copy in (False, True):
        recs = list(_records(iter([batch]), kinds, copy))
        assert [r["name"] for r in recs] == names and [r["raw"] for r in recs] == blobs
        for r, ref in zip(recs, boxes, strict=True):
            assert r["boxes"].dtype == torch.float32 and tuple(r["boxes"].shape) == ref.shape
            np.testing.assert_array_equal(r["boxes"].numpy(), ref)
        out = pad_collate(recs)
        assert out["name"] == names and out["k"].tolist() == [0, 1, 2, 3]
        assert out["boxes"].shape == (4, 3, 4)
        assert out["boxes_mask"].sum(1).tolist() == lengths


@pytest.mark.parametrize("compress", ["false", "true"])
def test_ragged_and_string_fields_from_npz(tmp_path, compress):
    """npz stores ragged and string fields: they arrive as tensors of varying length and str,
    each record once through 2 workers, and pad_collate masks the ragged one."""
    rng = np.random.default_rng(2)
    n = 40
    boxes = [rng.random((int(k), 4)).astype(np.float32) for k in rng.integers(0, 5, n)]
    names = [f"tile-{i:03d}-é" for i in range(n)]
    path = str(tmp_path / f"kinds-{compress}.npz")
    dstore.save(
        {"train": {"boxes": boxes, "name": names, "k": np.arange(n)}}, path, compress=compress
    )
    ds = dstore.to_torch(path, "train", range_mb=0.0005)
    assert len(ds.source.ranges) > 2
    seen = {}
    for batch in DataLoader(ds, batch_size=6, num_workers=2, collate_fn=ds.collate_fn(pad=True)):
        for j, k in enumerate(batch["k"].tolist()):
            assert k not in seen
            m = int(batch["boxes_mask"][j].sum())
            seen[k] = (batch["name"][j], batch["boxes"][j, :m].numpy())
            assert not batch["boxes"][j, m:].any()
    assert sorted(seen) == list(range(n))
    plain = next(iter(DataLoader(ds, batch_size=4, collate_fn=ds.collate_fn())))
    assert isinstance(plain["boxes"], list) and plain["name"] == names[:4]
    for k, (name, box) in seen.items():
        assert name == names[k]
        np.testing.assert_array_equal(box, boxes[k])


KIND_FORMATS = _formats("k", shard_mb=0.01, chunk_mb=0.002)


@pytest.fixture(scope="module")
def kinds_data(tiles):
    """Every field kind with values that differ per record: ragged float boxes (n_i, 4) and
    uint64 lists (some empty), UTF-8 strings, bytes, raw images of varying height, and
    encoded PNGs (which to_torch hands over as bytes)."""
    from imagecodecs import png_encode

    from dstore.model import Image

    x, _ = tiles
    rng = np.random.default_rng(7)
    n = 36
    data = {
        "boxes": [rng.random((int(k), 4)).astype(np.float32) for k in rng.integers(0, 6, n)],
        "ids": [np.array([2**64 - 1 - i] * (i % 3), np.uint64) for i in range(n)],
        "name": [f"tile-{i:03d}-é" for i in range(n)],
        "blob": [bytes([i, 0, 255]) * (i % 4) for i in range(n)],
        "img": [x[i % len(x)][: 8 + i, :24].copy() for i in range(n)],
        "png": [png_encode(x[i % len(x)][:10, : 5 + i]) for i in range(n)],
        "k": np.arange(n, dtype=np.int64),
    }
    kinds = {
        ("train", "img"): Image(np.dtype(np.uint8), 3, None, 24, "raw"),
        ("train", "png"): Image(np.dtype(np.uint8), 3, 10, None, "png"),
    }
    return data, kinds


@pytest.fixture(scope="module")
def kind_stores(tmp_path_factory, kinds_data):
    data, kinds = kinds_data
    root = tmp_path_factory.mktemp("kinds")
    out = {}
    for fmt, (name, opts) in KIND_FORMATS.items():
        out[fmt] = str(root / name)
        dstore.save({"train": data}, out[fmt], kinds=kinds, **opts)
    return out


@pytest.mark.parametrize("fmt", list(KIND_FORMATS))
def test_every_kind_through_two_workers_on_every_format(kind_stores, kinds_data, fmt):
    """Strings as lists of str, bytes and encoded images as lists of bytes, ragged fields
    and raw images of varying size as lists of tensors -- or padded with a mask -- each
    record once through 2 DataLoader workers, on every format that stores the kinds."""
    data, _ = kinds_data
    n = len(data["k"])
    ds = dstore.to_torch(kind_stores[fmt], "train", range_mb=0.002)
    if fmt != "hdf5":  # HDF5 keeps these small variable-length datasets in one chunk
        assert len(ds.source.ranges) > 2
    seen: dict[int, dict] = {}
    for batch in DataLoader(ds, batch_size=5, num_workers=2, collate_fn=ds.collate_fn()):
        assert all(isinstance(batch[f], list) for f in ("boxes", "ids", "name", "blob", "img"))
        for j, k in enumerate(batch["k"].tolist()):
            assert k not in seen
            seen[k] = {f: batch[f][j] for f in data if f != "k"}
    assert sorted(seen) == list(range(n))
    for k, rec in seen.items():
        assert rec["name"] == data["name"][k] and isinstance(rec["name"], str)
        assert rec["blob"] == data["blob"][k] and isinstance(rec["blob"], bytes)
        assert rec["png"] == data["png"][k]
        assert rec["ids"].dtype == torch.uint64
        for f in ("boxes", "ids", "img"):
            assert tuple(rec[f].shape) == data[f][k].shape, (f, k)
            np.testing.assert_array_equal(rec[f].numpy(), data[f][k])

    padded = dstore.to_torch(kind_stores[fmt], "train", fields=["boxes", "img", "name", "k"])
    got = 0
    for batch in DataLoader(padded, batch_size=7, collate_fn=padded.collate_fn(pad=True)):
        for j, k in enumerate(batch["k"].tolist()):
            for f in ("boxes", "img"):
                m = int(batch[f"{f}_mask"][j].sum())
                assert m == len(data[f][k])
                np.testing.assert_array_equal(batch[f][j, :m].numpy(), data[f][k])
                assert not batch[f][j, m:].any()
            assert batch["name"][j] == data["name"][k]
            got += 1
    assert got == n


def _corrupt_chunk(path: str, fmt: str, index: int) -> tuple[int, int]:
    """Damage the first compressed chunk of field x from ``index`` on; returns its records."""
    if fmt == "zarr":
        import zarr

        rows = zarr.open_group(path, mode="r")["train/x"].chunks[0]
        while True:
            chunk = os.path.join(path, "train", "x", f"c.{index}.0.0.0")
            with open(chunk, "rb") as f:
                head = f.read(16)
            # blosc stores an incompressible chunk as is (flag 0x02) and checks nothing
            # then: such a chunk reads back damaged without an error -- zarr's nature
            if not head[2] & 0x02:
                break
            index += 1
        size = os.path.getsize(chunk)
        with open(chunk, "r+b") as f:
            f.seek(size // 2)
            f.write(b"\xff" * (size - size // 2))
    else:
        import h5py

        with h5py.File(path, "r") as h:
            x = h["train/x"]
            rows = x.chunks[0]
            info = x.id.get_chunk_info_by_coord((index * rows, 0, 0, 0))
        with open(path, "r+b") as f:
            f.seek(info.byte_offset + 20)
            f.write(b"\xff" * 20)
    return index * rows, (index + 1) * rows


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_corrupt_chunk_mid_epoch_names_file_field_and_records(tmp_path, data, fmt, caplog):
    """A chunk that does not decompress, met mid-epoch: one error naming the file, split,
    field and records; on_error="skip" leaves out exactly that chunk's records, counted."""
    name, opts = FORMATS[fmt]
    path = str(tmp_path / name)
    dstore.save({"train": data}, path, **opts)
    lo, hi = _corrupt_chunk(path, fmt, 3)
    assert 0 < lo < hi < N
    with pytest.raises(CodecIOError) as e:
        for _ in DataLoader(dstore.to_torch(path, "train", range_mb=RANGE_MB), batch_size=4):
            pass
    msg = str(e.value)
    assert "\n" not in msg and path in msg and "'train'" in msg and "'x'" in msg
    a, b = map(int, re.search(r"records (\d+)\.\.(\d+)", msg).groups())
    assert a <= lo and hi - 1 <= b  # the range read when it failed holds the damaged chunk
    for shuffle in (0, 9):
        ds = dstore.to_torch(path, "train", shuffle=shuffle, on_error="skip", range_mb=RANGE_MB)
        with caplog.at_level(logging.WARNING, logger="dstore"):
            recs = list(ds)
        assert ds.skipped == hi - lo and len(recs) == N - (hi - lo)
        assert sorted(int(r["k"]) for r in recs) == [
            int(k) for i, k in enumerate(data["k"]) if not lo <= i < hi
        ]
        for r in recs:  # what was kept is intact
            i = int(np.flatnonzero(data["k"] == int(r["k"]))[0])
            np.testing.assert_array_equal(r["x"].numpy(), data["x"][i])


def test_corrupt_deflated_npz_is_never_skipped_silently(tmp_path, data):
    """A deflated member is checked as a whole (its CRC-32): the error names the file, field,
    member and records, and on_error="skip" refuses rather than pass the rest on."""
    import zipfile

    path = str(tmp_path / "z.npz")
    dstore.save({"train": data}, path, compress="true")
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("x_train.npy")
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 100 + info.compress_size // 2)
        f.write(b"\xff" * 20)
    for on_error in ("raise", "skip"):
        ds = dstore.to_torch(path, "train", on_error=on_error, range_mb=RANGE_MB)
        try:
            for _ in ds:
                pass
        except CodecIOError as e:
            msg = str(e)
        else:
            raise AssertionError("no error")
        finally:
            ds.source.close()
        assert "\n" not in msg and path in msg and "'x'" in msg and "x_train" in msg, msg
        assert "records" in msg
        if on_error == "skip":
            assert "cannot leave out single records" in msg


def test_stored_npz_records_are_writeable_and_private(stores, data):
    """Records of a stored npz are tensors over a private copy-on-write mapping: writing one
    in place (a transform) changes neither the file nor the next epoch's records."""
    ds = dstore.to_torch(stores["npz"], "train", range_mb=RANGE_MB)
    first = [r["x"] for r in ds]
    for t in first:
        t.zero_()
    again = [r["x"].numpy() for r in ds]
    np.testing.assert_array_equal(np.stack(again), data["x"])
    loader = DataLoader(ds, batch_size=16, num_workers=2)
    np.testing.assert_array_equal(
        np.sort(np.concatenate([b["k"].numpy() for b in loader])), np.sort(data["k"])
    )

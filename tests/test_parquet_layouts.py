"""Parquet of any layout reads back record for record: dstore's (an Image's PNG bytes
plain and uncompressed, the other columns zstd) through pyarrow and datasets; what
pyarrow and datasets write (other row groups, pages, compressions, dictionaries)
through dstore in storage order, globally shuffled and map-style. A map-style batch
decodes its records together: a damaged one is still named by its own number."""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import shutil

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles
from dstore.errors import CodecIOError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

N = 40


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """40 photo tiles of 64x64x3 and their position ``k``, in row groups of ~6 records."""
    x, _ = photo_tiles(N, 64, seed=3)
    data = {"x": x, "k": np.arange(N, dtype=np.int64)}
    path = str(tmp_path_factory.mktemp("layouts") / "tiles.parquet")
    dstore.save({"train": data}, path, row_group_mb=0.05)
    return data, path


def _shards(path: str) -> list[str]:
    return sorted(glob.glob(os.path.join(path, "*.parquet")))


def _pixels(value) -> np.ndarray:
    """A record's image: dstore decodes its own; a foreign Image's PNG bytes decoded here."""
    if isinstance(value, bytes):
        return np.asarray(Image.open(io.BytesIO(value)))
    return value.numpy()


def _read_every_way(path: str, split: str, x: np.ndarray) -> None:
    """Every record equal to ``x[k]``: in storage order, globally shuffled, and in a
    DataLoader's shuffled batches of a map-style dataset."""
    ordered = [(int(r["k"]), _pixels(r["x"])) for r in dstore.to_torch(path, split)]
    assert [k for k, _ in ordered] == list(range(N))
    glob_ = dstore.to_torch(path, split, shuffle="global", seed=5)
    shuffled = [(int(r["k"]), _pixels(r["x"])) for r in glob_]
    assert sorted(k for k, _ in shuffled) == list(range(N))
    assert [k for k, _ in shuffled] != list(range(N))
    for k, img in ordered + shuffled:
        np.testing.assert_array_equal(img, x[k])
    mapped = dstore.to_torch(path, split, map_style=True)
    order = np.random.default_rng(1).permutation(N).tolist()
    for at in range(0, N, 8):
        batch = order[at : at + 8]
        recs = mapped.__getitems__(batch)
        assert [int(r["k"]) for r in recs] == batch
        for k, r in zip(batch, recs, strict=True):
            np.testing.assert_array_equal(_pixels(r["x"]), x[k])


def _rewrite(src: str, dst: str, change) -> None:
    """dstore's folder ``src`` copied to ``dst``, each shard's table rewritten by
    ``change(table, path)``, the manifest given the new files' sizes and sha256."""
    shutil.copytree(src, dst)
    manifest = os.path.join(dst, "dstore.json")
    with open(manifest) as f:
        meta = json.load(f)
    for entry in meta["splits"]["train"]["shards"]:
        shard = os.path.join(dst, entry["file"])
        change(pq.read_table(shard), shard)
        with open(shard, "rb") as f:
            entry["bytes"], entry["sha256"] = os.path.getsize(shard), hashlib.sha256(f.read())
        entry["sha256"] = entry["sha256"].hexdigest()
    with open(manifest, "w") as f:
        json.dump(meta, f)


def test_default_layout_is_read_by_pyarrow_and_datasets(store, tmp_path, monkeypatch):
    data, path = store
    (shard,) = _shards(path)
    meta = pq.ParquetFile(shard).metadata
    assert meta.num_row_groups >= 5
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        chunks = {group.column(c).path_in_schema: group.column(c) for c in range(3)}
        assert chunks["x.bytes"].compression == "UNCOMPRESSED"
        assert chunks["x.bytes"].encodings == ("RLE", "PLAIN")  # RLE: the null levels
        assert chunks["x.path"].compression == chunks["k"].compression == "ZSTD"
    table = pq.read_table(shard)
    assert table.column("k").to_pylist() == list(range(N))
    for k, img in enumerate(table.column("x").to_pylist()):
        np.testing.assert_array_equal(_pixels(img["bytes"]), data["x"][k])
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    hf = datasets.load_dataset("parquet", data_files=[shard], cache_dir=str(tmp_path / "hf"))
    train = hf["train"]
    assert isinstance(train.features["x"], datasets.Image) and len(train) == N
    for k in range(N):
        rec = train[k]
        assert rec["k"] == k
        np.testing.assert_array_equal(np.asarray(rec["x"]), data["x"][k])


LAYOUTS = {
    "groups of 1, zstd": {"row_group_size": 1, "compression": "zstd"},
    "groups of 7, gzip, 4 kB pages": {
        "row_group_size": 7,
        "compression": "gzip",
        "data_page_size": 4096,
    },
    "one group, snappy, no dictionary": {"compression": "snappy", "use_dictionary": False},
    "groups of 13, uncompressed, dictionaries": {"row_group_size": 13, "compression": "none"},
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_dstore_folders_rewritten_by_pyarrow_read_every_way(store, tmp_path, layout):
    data, path = store
    other = str(tmp_path / "other.parquet")
    _rewrite(path, other, lambda table, shard: pq.write_table(table, shard, **layout))
    _read_every_way(other, "train", data["x"])


def test_files_datasets_and_pyarrow_write_read_every_way(store, tmp_path, monkeypatch):
    data, _ = store
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(
        {"x": [Image.fromarray(t) for t in data["x"]], "k": data["k"].tolist()}
    ).cast_column("x", datasets.Image())
    theirs = str(tmp_path / "theirs.parquet")
    ds.to_parquet(theirs)
    _read_every_way(theirs, "data", data["x"])
    brotli = str(tmp_path / "brotli.parquet")
    pq.write_table(pq.read_table(theirs), brotli, row_group_size=3, compression="brotli")
    _read_every_way(brotli, "data", data["x"])


def test_a_damaged_image_in_a_map_style_batch_is_named(store, tmp_path):
    """Failed before the batch's runs were decoded apart on an error: the batch's
    records are not consecutive, and the damaged one was named by its place in it."""
    data, path = store
    damaged = str(tmp_path / "damaged.parquet")

    def cut_record_13(table, shard):
        images = table.column("x").to_pylist()
        images[13] = {"bytes": images[13]["bytes"][:200], "path": None}
        x = pa.array(images, table.schema.field("x").type)
        pq.write_table(table.set_column(0, table.schema.field("x"), x), shard)

    _rewrite(path, damaged, cut_record_13)
    mapped = dstore.to_torch(damaged, "train", map_style=True)
    recs = mapped.__getitems__([30, 2, 14])
    np.testing.assert_array_equal(recs[1]["x"].numpy(), data["x"][2])
    with pytest.raises(CodecIOError, match=r"field 'x', record 13: PNG does not decode"):
        mapped.__getitems__([30, 13, 2, 14])

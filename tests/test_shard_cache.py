"""to_torch(url, cache_dir=, cache_limit=): remote shards downloaded once into a bounded
local cache (issue #25 §4), on fsspec's in-memory filesystem (a real fsspec backend; the
S3 server run is in test_s3.py)."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

import dstore
from dstore.readers.split import parse_bytes
from dstore.registry import get_codec_class
from dstore.testing import usable_formats

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("torch")

N = 40


@pytest.fixture(scope="module")
def data(tiles):
    x, _ = tiles
    return {"x": x[:N], "k": np.arange(N, dtype=np.int64)}


def _remote(fmt: str, data, tmp_path, shard_mb: float = 0.1) -> str:
    """The dataset written locally, then uploaded (as a user copies a folder to a bucket)."""
    local = tmp_path / f"local{usable_formats()[fmt]}"
    dstore.save({"train": data}, str(local), shard_mb=shard_mb)
    root = f"/cache-test-{uuid.uuid4().hex}/d{usable_formats()[fmt]}"
    fs = fsspec.filesystem("memory")
    for name in os.listdir(local):
        fs.pipe_file(f"{root}/{name}", (local / name).read_bytes())
    return f"memory://{root}"


def _shards(url: str) -> list[str]:
    fs, root = fsspec.core.url_to_fs(url)
    return [p for p in fs.ls(root, detail=False) if not p.endswith((".json", ".idx", ".md"))]


SHARDED = [f for f in usable_formats() if get_codec_class(f).sharded]


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_second_epoch_reads_the_cached_copies(tmp_path, data, fmt):
    url = _remote(fmt, data, tmp_path)
    cache = tmp_path / "cache"
    ds = dstore.to_torch(url, "train", cache_dir=cache)
    first = list(ds)
    assert [int(r["k"]) for r in first] == list(range(N))
    np.testing.assert_array_equal(np.stack([r["x"].numpy() for r in first]), data["x"])
    assert len(os.listdir(cache)) == len(_shards(url))
    # damage every remote shard: a read from the store now fails, a read from the cache not
    fs, _ = fsspec.core.url_to_fs(url)
    for shard in _shards(url):
        fs.pipe_file(shard, b"\0" * 64)
    again = list(ds)
    assert [int(r["k"]) for r in again] == list(range(N))
    np.testing.assert_array_equal(np.stack([r["x"].numpy() for r in again]), data["x"])
    with pytest.raises(Exception):  # noqa: B017 - whichever error the format's check gives
        list(dstore.to_torch(url, "train"))


def test_the_limit_keeps_the_most_recently_used_shards(tmp_path, data):
    url = _remote("tfrecord", data, tmp_path, shard_mb=0.05)
    fs, _ = fsspec.core.url_to_fs(url)
    shards = _shards(url)
    assert len(shards) >= 4
    sizes = [fs.size(s) for s in shards]
    limit = sizes[-1] + sizes[-2] + max(sizes) // 2  # room for two and a half shards
    cache = tmp_path / "cache"
    ds = dstore.to_torch(url, "train", cache_dir=cache, cache_limit=limit)
    assert [int(r["k"]) for r in ds] == list(range(N))
    kept = sorted(os.listdir(cache))
    # read in order: the two shards read last are what the cache holds
    assert sorted(name.split("-", 1)[1] for name in kept) == [
        os.path.basename(s) for s in shards[-2:]
    ]
    assert sum(os.path.getsize(cache / n) for n in kept) <= limit
    assert [int(r["k"]) for r in ds] == list(range(N))  # evicted shards come back
    assert sum(os.path.getsize(cache / n) for n in os.listdir(cache)) <= limit


def test_cache_dir_refused_where_it_has_nothing_to_do(tmp_path, data):
    local = str(tmp_path / "d.tfrecords")
    dstore.save({"train": data}, local)
    with pytest.raises(ValueError, match="is on this machine already"):
        dstore.to_torch(local, "train", cache_dir=tmp_path / "c")
    url = f"memory://cache-test-{uuid.uuid4().hex}/d.zarr"
    dstore.save({"train": data}, url)
    with pytest.raises(ValueError, match=r"shard files of a sharded format.*zarr"):
        dstore.to_torch(url, "train", cache_dir=tmp_path / "c")


@pytest.mark.parametrize(
    ("text", "size"), [(1000, 1000), ("500MB", 500 * 10**6), ("2.5 GB", 25 * 10**8), ("64", 64)]
)
def test_cache_limit_sizes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["lots", "5XB", "-1GB", 0])
def test_bad_cache_limits_are_refused(text):
    with pytest.raises(ValueError, match="bytes"):
        parse_bytes(text)

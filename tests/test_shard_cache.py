"""to_torch(url, cache_dir=, cache_limit=): remote shards downloaded once into a bounded
local cache (issue #25 §4), on fsspec's in-memory filesystem and on file:// URLs (real
fsspec backends; the S3 server run is in test_s3.py). Issue #34: the cache deletes only
its own files, in its own folder, and serves only copies verified against the manifest."""

from __future__ import annotations

import os
import re
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dstore
from dstore.registry import get_codec_class
from dstore.sharding.cache import FOLDER, parse_cache_limit
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
    tmp_path.mkdir(parents=True, exist_ok=True)
    dstore.save({"train": data}, str(local), shard_mb=shard_mb)
    root = f"/cache-test-{uuid.uuid4().hex}/d{usable_formats()[fmt]}"
    fs = fsspec.filesystem("memory")
    for path in sorted(local.rglob("*")):  # the record indexes in .dstore-index/ too
        if path.is_file():
            fs.pipe_file(f"{root}/{path.relative_to(local).as_posix()}", path.read_bytes())
    return f"memory://{root}"


def _shards(url: str) -> list[str]:
    fs, root = fsspec.core.url_to_fs(url)
    return sorted(
        e["name"]
        for e in fs.ls(root, detail=True)
        if e["type"] == "file" and not e["name"].endswith((".json", ".idx"))
    )


def _copies(cache) -> dict[str, int]:
    """The shard copies in the cache's folder: name -> size."""
    folder = os.path.join(cache, FOLDER)
    return {
        n: os.path.getsize(os.path.join(folder, n))
        for n in os.listdir(folder)
        if re.match(r"[0-9a-f]{32}-", n)
    }


def _tree(root) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


SHARDED = [f for f in usable_formats() if get_codec_class(f).sharded]


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_second_epoch_reads_the_cached_copies(tmp_path, data, fmt):
    url = _remote(fmt, data, tmp_path)
    cache = tmp_path / "cache"
    ds = dstore.to_torch(url, "train", cache_dir=cache)
    first = list(ds)
    assert [int(r["k"]) for r in first] == list(range(N))
    np.testing.assert_array_equal(np.stack([r["x"].numpy() for r in first]), data["x"])
    assert len(_copies(cache)) == len(_shards(url))
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
    kept = _copies(cache)
    # read in order: the two shards read last are what the cache holds
    assert sorted(name.split("-", 1)[1] for name in kept) == [
        os.path.basename(s) for s in shards[-2:]
    ]
    assert sum(kept.values()) <= limit
    assert [int(r["k"]) for r in ds] == list(range(N))  # evicted shards come back
    assert sum(_copies(cache).values()) <= limit


def test_cache_dir_refused_where_it_has_nothing_to_do(tmp_path, data):
    local = str(tmp_path / "d.tfrecords")
    dstore.save({"train": data}, local)
    with pytest.raises(ValueError, match="is on this machine already"):
        dstore.to_torch(local, "train", cache_dir=tmp_path / "c")
    url = f"memory://cache-test-{uuid.uuid4().hex}/d.zarr"
    dstore.save({"train": data}, url)
    with pytest.raises(ValueError, match=r"shard files of a sharded format.*zarr"):
        dstore.to_torch(url, "train", cache_dir=tmp_path / "c")


def _local_url(fmt: str, data, root, shard_mb: float = 0.05) -> str:
    path = root / f"d{usable_formats()[fmt]}"
    root.mkdir(parents=True, exist_ok=True)
    dstore.save({"train": data}, str(path), shard_mb=shard_mb)
    return path.absolute().as_uri()


def _keys(ds) -> list[int]:
    return [int(r["k"]) for r in ds]


@pytest.mark.parametrize("fmt", SHARDED)
def test_eviction_deletes_only_the_caches_own_files(tmp_path, data, fmt):
    """A cache_dir holding a user's files (a document, a folder, a file named like a
    copy the old cache made, a note inside the cache's own folder) and a limit below
    one shard: two epochs evict every copy but the one read, and nothing else."""
    url = _local_url(fmt, data, tmp_path / "data")
    home = tmp_path / "home"
    (home / "sub").mkdir(parents=True)
    (home / "thesis.docx").write_bytes(b"chapter one " * 100)
    (home / "sub" / "notes.txt").write_text("keep me")
    (home / "0123456789abcdef-train-000000.tar").write_bytes(b"mine, not a cache copy")
    (home / FOLDER).mkdir()
    (home / FOLDER / "README").write_text("a user's note in the cache's folder")
    theirs = _tree(home)
    dataset = _tree(tmp_path / "data")
    ds = dstore.to_torch(url, "train", cache_dir=home, cache_limit=1)
    assert _keys(ds) == list(range(N))
    assert _keys(ds) == list(range(N))
    now = _tree(home)
    assert {k: now[k] for k in theirs} == theirs  # every file of the user's, unchanged
    assert set(now) - set(theirs) <= {f"{FOLDER}/{n}" for n in os.listdir(home / FOLDER)}
    assert len(_copies(home)) == 1  # the shard read last: a process keeps what it reads
    assert _tree(tmp_path / "data") == dataset


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_cache_dir_overlapping_the_dataset_is_refused(tmp_path, data, fmt):
    url = _local_url(fmt, data, tmp_path / "data")
    folder = tmp_path / "data" / f"d{usable_formats()[fmt]}"
    before = _tree(tmp_path)
    for cache_dir in (folder, tmp_path / "data", tmp_path, folder / "inner"):
        with pytest.raises(ValueError, match="overlaps the dataset's folder"):
            dstore.to_torch(url, "train", cache_dir=cache_dir, cache_limit=1)
    assert _tree(tmp_path) == before  # nothing made, nothing deleted
    assert not (folder / "inner").exists()


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_dataset_rewritten_at_the_same_url_is_downloaded_again(tmp_path, data, fmt):
    """The same URL, the same shard names, other records: the next reader reads the new
    records, not the copies of the old shards."""
    url = _remote(fmt, data, tmp_path)
    cache = tmp_path / "cache"
    assert _keys(dstore.to_torch(url, "train", cache_dir=cache)) == list(range(N))
    other = {"x": data["x"][::-1].copy(), "k": np.arange(N, dtype=np.int64) + 1000}
    new = _remote(fmt, other, tmp_path / "again")
    fs, root = fsspec.core.url_to_fs(url)
    new_root = fsspec.core.url_to_fs(new)[1]
    for path in fs.find(new_root):  # the record indexes in .dstore-index/ too
        fs.pipe_file(f"{root}/{path[len(new_root) :].lstrip('/')}", fs.cat_file(path))
    ds = dstore.to_torch(url, "train", cache_dir=cache)
    assert _keys(ds) == list(range(1000, 1000 + N))
    np.testing.assert_array_equal(np.stack([r["x"].numpy() for r in ds]), other["x"])


@pytest.mark.parametrize("how", ["replaced", "written in place, mtime set back"])
@pytest.mark.parametrize("fmt", SHARDED)
def test_a_copy_changed_between_epochs_is_not_served(tmp_path, data, fmt, how):
    """Each copy swapped for the same shard of another dataset of the same shape between
    two epochs (a new file, or the bytes written into the old one with its mtime put
    back): the next epoch still gives the dataset's own records (or, where the reader
    kept a copy open from the first epoch and its bytes changed under it, one error:
    never the other dataset's records), and a new reader gives them."""
    url = _remote(fmt, data, tmp_path)
    other = {"x": data["x"][::-1].copy(), "k": np.arange(N, dtype=np.int64) + 1000}
    impostor = _remote(fmt, other, tmp_path / "other")
    cache = tmp_path / "cache"
    ds = dstore.to_torch(url, "train", cache_dir=cache)
    assert _keys(ds) == list(range(N))
    fs, _ = fsspec.core.url_to_fs(url)
    theirs = {os.path.basename(p): fs.cat_file(p) for p in _shards(impostor)}
    for name in _copies(cache):
        path = cache / FOLDER / name
        swapped = theirs[name.split("-", 1)[1]]
        if how == "replaced":
            (cache / "tmp").write_bytes(swapped)
            os.replace(cache / "tmp", path)
        else:
            st = path.stat()
            with open(path, "r+b") as f:
                f.write(swapped)
                f.truncate()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        again = list(ds)
    except dstore.CodecIOError:
        assert how != "replaced"  # an open copy of the first epoch stays what it was
    else:
        assert [int(r["k"]) for r in again] == list(range(N))
        np.testing.assert_array_equal(np.stack([r["x"].numpy() for r in again]), data["x"])
    fresh = list(dstore.to_torch(url, "train", cache_dir=cache))
    assert [int(r["k"]) for r in fresh] == list(range(N))
    np.testing.assert_array_equal(np.stack([r["x"].numpy() for r in fresh]), data["x"])


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_download_unlike_the_manifest_is_refused(tmp_path, data, fmt):
    """A remote shard changed after the manifest was written (one byte in its middle):
    one error naming the shard and the manifest; no copy, no part left."""
    url = _remote(fmt, data, tmp_path)
    fs, _ = fsspec.core.url_to_fs(url)
    shard = _shards(url)[0]
    blob = bytearray(fs.cat_file(shard))
    blob[len(blob) // 2] ^= 0x01
    fs.pipe_file(shard, bytes(blob))
    cache = tmp_path / "cache"
    said = re.escape(os.path.basename(shard)) + r": downloaded .* the manifest lists"
    with pytest.raises(dstore.CodecIOError, match=said):
        list(dstore.to_torch(url, "train", cache_dir=cache))
    left = os.listdir(cache / FOLDER)
    assert not [n for n in left if n.endswith(".part")]
    assert not [n for n in _copies(cache) if n.endswith(os.path.basename(shard))]


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (1000, 1000),
        ("500MB", 500 * 10**6),
        ("2.5 GB", 25 * 10**8),
        ("64", 64),
        ("20GiB", 20 * 2**30),
        (20e9, 20 * 10**9),
        ("1_000kb", 10**6),
        (None, None),
    ],
)
def test_cache_limit_sizes(value, size):
    assert parse_cache_limit(value) == size


@pytest.mark.parametrize(
    "value",
    ["lots", "5XB", "-1GB", 0, True, False, 1.5, "1.5B", "inf", "1e400", float("inf"),
     float("nan"), "nan", "", [], b"1MB", 2**64],
)  # fmt: skip
def test_bad_cache_limits_are_one_clear_error(value, tmp_path, data):
    with pytest.raises(ValueError, match=r"cache_limit is a whole number of bytes > 0"):
        parse_cache_limit(value)
    url = _remote("tfrecord", data, tmp_path)
    with pytest.raises(ValueError, match=r"cache_limit is a whole number of bytes > 0"):
        dstore.to_torch(url, "train", cache_dir=tmp_path / "c", cache_limit=value)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=12),
        st.text(alphabet="0123456789.eE+-_ kKmMgGtTiIbB", max_size=12),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.booleans(),
    )
)
def test_any_cache_limit_is_a_whole_positive_size_or_one_value_error(value):
    try:
        size = parse_cache_limit(value)
    except ValueError as e:
        assert str(e).startswith("cache_limit is a whole number of bytes > 0")
        assert "\n" not in str(e)
    else:
        assert type(size) is int and 0 < size < 2**63


def test_cache_limit_without_cache_dir_is_refused(tmp_path, data):
    url = _remote("tfrecord", data, tmp_path)
    with pytest.raises(ValueError, match="give cache_dir= with it"):
        dstore.to_torch(url, "train", cache_limit="1GB")

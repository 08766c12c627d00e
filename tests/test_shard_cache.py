"""to_torch(url, cache_dir=, cache_limit=): where a cache has nothing to do, and what a
cache limit is. What the cache does with every sharded format (each record once, the
limit kept, only its own files deleted, only verified copies served; issues #25 and #34)
is the sharded suite's (``dstore.testing.ShardedCodecSuite``, tests/test_sharded_suite.py);
the S3 server run is in test_s3.py."""

from __future__ import annotations

import os
import re
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dstore
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
    ("value", "size"),
    [
        (1000, 1000),
        ("500MB", 500 * 10**6),
        ("2.5 GB", 25 * 10**8),
        ("64", 64),
        ("20GiB", 20 * 2**30),
        (20e9, 20 * 10**9),
        ("1_000kb", 10**6),
        (np.int64(60_000), 60_000),
        (np.float64(2e3), 2000),
        (None, None),
    ],
)
def test_cache_limit_sizes(value, size):
    assert parse_cache_limit(value) == size


@pytest.mark.parametrize(
    "value",
    ["lots", "5XB", "-1GB", 0, True, False, 1.5, "1.5B", "inf", "1e400", float("inf"),
     float("nan"), "nan", "", [], b"1MB", 2**64, "0IB", "5IB", "1 ib", np.bool_(True),
     np.int64(0), np.float64(1.5)],
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


def test_a_cache_dir_under_home_is_the_users_home(tmp_path, data, monkeypatch):
    """cache_dir="~/..." is the home folder's, not a folder named "~" made where the
    reader happens to run."""
    url = _remote("tfrecord", data, tmp_path / "remote")
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "cwd")
    ds = dstore.to_torch(url, "train", cache_dir="~/.cache/d", cache_limit="1GB")
    assert [int(r["k"]) for r in ds] == list(range(N))
    assert os.listdir(tmp_path / "cwd") == []
    folder = tmp_path / "home" / ".cache" / "d" / FOLDER
    assert any(re.match(r"[0-9a-f]{32}-", name) for name in os.listdir(folder))

"""Appends on object storage (issue #37), against moto's S3 server on loopback: versions
and time travel there, two appenders at once both landing through the conditional
create of the next version's manifest, and a claim that stops a second appender to a
store that is not a folder of shards."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import dstore
from dstore.errors import AppendConflictError, AppendError

# slow: starts a moto S3 server and talks to it over loopback
pytestmark = pytest.mark.slow

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

BUCKET = "dstore-append-test"


@pytest.fixture(scope="module")
def s3(moto_s3):
    return moto_s3["fs"]


def _sources(tmp_path, tiles) -> list[str]:
    x, _ = tiles
    out = []
    for i in range(3):
        path = str(tmp_path / f"s{i}.npz")
        keys = np.arange(15, dtype=np.int64) + 1000 * i
        dstore.save({"train": {"x": np.roll(x[:15], i, axis=0), "key": keys}}, path)
        out.append(path)
    return out


def _keys(url: str) -> list[int]:
    with dstore.open(url) as ds:
        return [int(k) for k in ds["train"]["key"][:]]


@contextlib.contextmanager
def _appender_held_after_its_first_batch(src: str, url: str) -> Iterator[None]:
    """Appender A appends ``src`` to ``url`` in a thread, held at its first batch while
    the block runs; then it goes on, and must finish without an error."""
    go, held = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold(n: int, total: int) -> None:
        held.set()
        go.wait(60)  # returns at once once the block is over

    def append_a() -> None:
        try:
            dstore.convert(src, url, append=True, progress=hold)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=append_a)
    thread.start()
    assert held.wait(60)
    try:
        yield
    finally:
        go.set()
        thread.join(120)
    assert not errors, errors


def test_versions_on_s3(s3, tmp_path, tiles):
    first, a, b = _sources(tmp_path, tiles)
    url = f"s3://{BUCKET}/plain/d.tfrecords"
    dstore.convert(first, url, options={"shard_mb": "0.05"})
    dstore.convert(a, url, append=True)
    dstore.convert(b, url, append=True)
    assert _keys(url) == [*range(15), *range(1000, 1015), *range(2000, 2015)]
    with dstore.open(url, version=2) as ds:
        assert [int(k) for k in ds["train"]["key"][:]] == [*range(15), *range(1000, 1015)]
    dstore.compact(url)
    assert _keys(url) == [*range(15), *range(1000, 1015), *range(2000, 2015)]
    with dstore.open(url, version=1) as ds:  # superseded shards still read
        assert len(ds["train"]["key"][:]) == 15
    assert dstore.api.check(url).ok
    s3.invalidate_cache()
    names = s3.ls(f"{BUCKET}/plain/d.tfrecords", detail=False)
    assert not any("pending-" in n for n in names)


def test_two_appenders_on_s3_both_land(s3, tmp_path, tiles):
    """Appender A is held after its first batch while B appends whole: A's commit then
    finds version 2 taken (If-None-Match), and A appends again after B."""
    first, a, b = _sources(tmp_path, tiles)
    url = f"s3://{BUCKET}/race/d.tfrecords"
    dstore.convert(first, url)
    with _appender_held_after_its_first_batch(a, url):
        dstore.convert(b, url, append=True)  # B commits version 2 while A waits
    assert _keys(url) == [*range(15), *range(2000, 2015), *range(1000, 1015)]
    log = dstore.log(url).to_json()
    assert [(v["version"], os.path.basename(v["source"] or "")) for v in log] == [
        (1, "s0.npz"),
        (2, "s2.npz"),
        (3, "s1.npz"),
    ]
    assert dstore.api.check(url).ok


@pytest.mark.parametrize("ext", [".zarr", ".npz"])
def test_a_claim_stops_a_second_appender(s3, tmp_path, tiles, ext):
    first, a, b = _sources(tmp_path, tiles)
    url = f"s3://{BUCKET}/claim/d{ext}"
    dstore.convert(first, url)
    with _appender_held_after_its_first_batch(a, url):
        with pytest.raises(
            AppendConflictError, match="another append holds the claim to version 2"
        ) as e:
            dstore.convert(b, url, append=True)
        assert "\n" not in str(e.value)
    dstore.convert(b, url, append=True)  # the claim is gone with A: B appends after it
    assert _keys(url) == [*range(15), *range(1000, 1015), *range(2000, 2015)]


def test_a_store_without_exclusive_create_refuses_appends(tmp_path, tiles):
    """fsspec's file:// has no create-if-absent: appending there is refused in one line,
    nothing written."""
    first, a, _ = _sources(tmp_path, tiles)
    dst = str(tmp_path / "d.tfrecords")
    dstore.convert(first, dst)
    before = sorted(os.listdir(dst))
    with pytest.raises(AppendError, match="no create-if-absent write") as e:
        dstore.convert(a, f"file://{dst}", append=True)
    assert "\n" not in str(e.value)
    assert sorted(os.listdir(dst)) == before

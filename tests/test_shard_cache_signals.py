"""The shard cache's downloads in progress (issue #34 item 12): a process stopped by
SIGTERM or Ctrl-C mid-download leaves no part; a part of a live download counts toward
the limit and is never deleted by another process; the part a killed process (SIGKILL)
left is deleted by the next process that uses the cache.

The downloading process is a real child reading a real dataset through ``file://``; it
stops after the first block of its first download until the test lets it go on (the
moment is picked from its progress, never from wall time)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import dstore
from dstore.sharding.cache import FOLDER

pytest.importorskip("torch")

N = 40

_CHILD = r"""
import signal, sys, types
import dstore
from dstore import fs
from dstore.sharding import cache

signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal
url, cache_dir = sys.argv[1], sys.argv[2]


class Paused:
    # the first download stops after its first block; later ones run free
    stops = 1

    def __init__(self, f):
        self.f, self.reads = f, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def read(self, n=-1):
        self.reads += 1
        if self.reads == 2 and Paused.stops > 0:
            Paused.stops -= 1
            sys.stdout.write("dstore-step\n")
            sys.stdout.flush()
            sys.stdin.readline()
        return self.f.read(n)


shim = types.SimpleNamespace(**vars(fs))
shim.open_binary = lambda path, mode="rb": Paused(fs.open_binary(path, mode))
cache.fs = shim  # the cache's downloads only
print(len(list(dstore.to_torch(url, "train", cache_dir=cache_dir))), flush=True)
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, tiles):
    x, _ = tiles
    root = tmp_path_factory.mktemp("signals")
    path = root / "d.tfrecords"
    dstore.save({"train": {"x": x[:N], "k": np.arange(N)}}, str(path), shard_mb=0.05)
    shards = sorted(p for p in os.listdir(path) if p.endswith(".tfrecord"))
    assert len(shards) >= 4
    return path.as_uri(), {s: os.path.getsize(path / s) for s in shards}


@contextlib.contextmanager
def _child(url: str, cache) -> subprocess.Popen:
    """The child, stopped in the middle of its first download."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, url, str(cache)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        while line := proc.stdout.readline():
            if line.startswith("dstore-step"):
                break
        else:
            pytest.fail(f"the child ended before its download: {proc.stderr.read()[-2000:]}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _parts(cache) -> dict[str, int]:
    folder = cache / FOLDER
    return {n: (folder / n).stat().st_size for n in os.listdir(folder) if n.endswith(".part")}


def _copies(cache) -> dict[str, int]:
    folder = cache / FOLDER
    return {
        n: (folder / n).stat().st_size
        for n in os.listdir(folder)
        if re.fullmatch(r"[0-9a-f]{32}-.*", n)
    }


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_process_stopped_mid_download_leaves_no_part(tmp_path, dataset, sig):
    url, sizes = dataset
    cache = tmp_path / "cache"
    with _child(url, cache) as proc:
        # the first shard, written, not renamed
        assert list(_parts(cache).values()) == list(sizes.values())[:1]
        proc.send_signal(sig)
        proc.wait(timeout=60)
        if sig == signal.SIGTERM:
            assert proc.returncode == -signal.SIGTERM  # it still dies of SIGTERM
        else:
            assert proc.returncode != 0
        assert _parts(cache) == {}


def test_live_parts_count_toward_the_limit_and_dead_ones_are_removed(tmp_path, dataset):
    url, sizes = dataset
    cache = tmp_path / "cache"
    limit = sum(sizes.values()) - 1  # room for every shard but one byte
    with _child(url, cache) as proc:
        live = _parts(cache)
        assert list(live.values()) == list(sizes.values())[:1]
        ds = dstore.to_torch(url, "train", cache_dir=cache, cache_limit=limit)
        assert [int(r["k"]) for r in ds] == list(range(N))
        # another process's download in progress: kept, and counted
        assert _parts(cache) == live
        assert sum(_copies(cache).values()) + sum(live.values()) <= limit
        proc.kill()  # SIGKILL: nothing of the child's runs; its part stays behind
        proc.wait(timeout=60)
        assert _parts(cache) == live
    ds = dstore.to_torch(url, "train", cache_dir=cache, cache_limit=limit)
    assert [int(r["k"]) for r in ds] == list(range(N))
    assert _parts(cache) == {}  # the dead process's part: deleted by the next reader
    assert sum(_copies(cache).values()) <= limit

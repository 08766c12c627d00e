"""Several readers sharing one bounded shard cache (DataLoader workers, or two
datasets in one process): a copy one reader is about to read, or is reading, is
never deleted by another reader's eviction; the limit is then exceeded by at most
the copies in use, and the cache still deletes only its own files."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import dstore
from dstore.registry import get_codec_class
from dstore.sharding.cache import FOLDER, ShardCache
from dstore.sharding.reader import ShardFile
from dstore.testing import data_loader, usable_formats

pytest.importorskip("torch")

N = 48
SHARDED = [f for f in usable_formats() if get_codec_class(f).sharded]


@pytest.fixture(scope="module")
def data(tiles):
    x, _ = tiles
    return {"x": x[:N], "k": np.arange(N, dtype=np.int64)}


def _dataset(fmt: str, data, root) -> tuple[str, list[str]]:
    """A sharded dataset on disk read through ``file://`` (as from object storage), and
    its shard files."""
    path = root / f"d{usable_formats()[fmt]}"
    dstore.save({"train": data}, str(path), shard_mb=0.03)
    shards = sorted(str(p) for p in path.iterdir() if "train" in p.name and p.suffix != ".json")
    assert len(shards) >= 4
    return f"file://{path}", shards


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_copy_handed_to_one_reader_survives_another_readers_eviction(tmp_path, data, fmt):
    """Reader A is given its local copy; before A opens it, reader B (another worker, its
    own ShardCache on the same folder) fetches another shard into a cache that holds one
    shard only. A's copy must still be there, whole, until A moves on."""
    _, shards = _dataset(fmt, data, tmp_path)
    limit = max(os.path.getsize(s) for s in shards)
    a = ShardCache(str(tmp_path / "cache"), limit)
    b = ShardCache(str(tmp_path / "cache"), limit)
    mine = ShardFile(shards[0], records=1)
    reading = a.local_slices([(mine, 0, 1)])
    got, _, _ = next(reading)  # A holds its copy, about to open it
    for other in shards[1:]:
        with b.pinned(other) as copy:  # B reads the others, evicting as it goes
            assert _sha(copy) == _sha(other)
    assert _sha(got.path) == _sha(shards[0])  # FileNotFoundError before the fix
    reading.close()  # A moves on: its copy may go now
    with b.pinned(shards[1]):
        pass
    folder = tmp_path / "cache" / FOLDER
    copies = [n for n in os.listdir(folder) if not n.endswith((".json", ".TAG"))]
    assert sum(os.path.getsize(folder / n) for n in copies) <= limit


@pytest.mark.parametrize("epochs", [2])
@pytest.mark.parametrize("fmt", SHARDED)
def test_two_workers_share_a_cache_of_one_shard(tmp_path, data, fmt, epochs):
    """Two DataLoader workers, a cache of one shard's size: every epoch gives every
    record once (a worker's eviction deleted the copy the other was about to open)."""
    url, shards = _dataset(fmt, data, tmp_path)
    limit = max(os.path.getsize(s) for s in shards)
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    ds = dstore.to_torch(url, "train", cache_dir=str(home), cache_limit=limit)
    for _ in range(epochs):
        loader = data_loader(ds, batch_size=4, num_workers=2)
        keys = sorted(int(k) for batch in loader for k in batch["k"])
        assert keys == list(range(N))
    assert (home / "notes.txt").read_text() == "mine"
    assert sorted(os.listdir(home)) == [FOLDER, "notes.txt"]

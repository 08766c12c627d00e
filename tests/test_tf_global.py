"""to_tf_dataset's global shuffle, epochs, ranks and mid-epoch resume with ``skip``
(issue #25 §2-3) over every registered random-access format, with real TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

import dstore
from dstore.readers.plan import consumer_indices
from dstore.readers.split import SplitSource
from dstore.testing import parts_options, usable_formats

tf = pytest.importorskip("tensorflow")

N = 70


@pytest.fixture(scope="module")
def data(tiles):
    x, _ = tiles
    x = np.concatenate([x, x])[:N]
    return {
        "x": x,
        "k": np.arange(N, dtype=np.int64),
        "name": np.array([f"tile {i}" for i in range(N)]),
    }


@pytest.fixture(scope="module")
def stores(tmp_path_factory, data):
    """Every usable format, cut into several shards or chunks, and a deflated npz."""
    root = tmp_path_factory.mktemp("tfglobal")
    out = {}
    for name, ext in usable_formats().items():
        path = str(root / f"d{ext}")
        options = parts_options(name, shard_mb=0.05, chunk_mb=0.03)
        if name == "npz":
            options["compress"] = "false"  # stored members: random access
        if name == "tfrecord":
            options["image_codec"] = "png"  # encoded images decoded by the tf pipeline
        dstore.save({"train": data}, path, **options)
        out[name] = path
    out["npz-deflated"] = str(root / "z.npz")
    dstore.save({"train": data}, out["npz-deflated"], compress="true")
    return out


FORMATS = list(usable_formats())


def _records(ds) -> list[dict]:
    return [{n: v.numpy() for n, v in rec.items()} for rec in ds]


def _keys(ds) -> list[int]:
    return [int(r["k"]) for r in ds]


def _order(path: str, seed: int, epoch: int, rank: int = 0, world: int = 1) -> list[int]:
    """The records rank ``rank`` of ``world`` reads in an epoch of the global shuffle, as
    to_torch deals them (a permutation, or over chunks where a read fetches a chunk)."""
    layout = SplitSource(path, "train").layout("global")
    return consumer_indices(N, rank, world, seed=seed, epoch=epoch, layout=layout).tolist()


@pytest.mark.parametrize("fmt", FORMATS)
def test_global_shuffle_is_the_seeded_permutation_and_each_pass_the_next_epoch(stores, data, fmt):
    ds = dstore.to_tf_dataset(stores[fmt], "train", shuffle="global", seed=7)
    first = _records(ds)
    keys = [int(r["k"]) for r in first]
    assert keys == _order(stores[fmt], 7, 0)
    for rec in first:  # every field of every record is the record the key names
        k = int(rec["k"])
        np.testing.assert_array_equal(rec["x"], data["x"][k])
        assert rec["name"].decode() == data["name"][k]
    second = _keys(ds)  # the next pass over the dataset is epoch 1
    assert second == _order(stores[fmt], 7, 1)
    assert second != keys
    assert np.corrcoef(np.arange(N), keys)[0, 1] < 0.5  # not a shuffle of neighbours


@pytest.mark.parametrize("fmt", FORMATS)
def test_skip_resumes_the_epoch_exactly(stores, fmt):
    """Saved after 23 records of epoch 3: the resumed pass is the rest of that epoch, and
    the pass after it epoch 4 whole."""
    path = stores[fmt]
    whole = _keys(
        dstore.to_tf_dataset(path, "train", fields=["k"], shuffle="global", seed=2, epoch=3)
    )
    resumed = dstore.to_tf_dataset(
        path, "train", fields=["k"], shuffle="global", seed=2, epoch=3, skip=23, batch_size=4
    )
    got = [int(k) for b in resumed for k in b["k"].numpy()]
    assert got == whole[23:]
    nxt = [int(k) for b in resumed for k in b["k"].numpy()]
    assert nxt == _order(path, 2, 4)


@pytest.mark.parametrize("fmt", FORMATS)
def test_skip_in_storage_order(stores, data, fmt):
    ds = dstore.to_tf_dataset(stores[fmt], "train", ordered=True, skip=31)
    recs = _records(ds)
    assert [int(r["k"]) for r in recs] == list(range(31, N))
    np.testing.assert_array_equal(np.stack([r["x"] for r in recs]), data["x"][31:])


@pytest.mark.parametrize("fmt", ["zarr", "tfrecord"])
def test_ranks_read_each_record_once(stores, fmt):
    if fmt not in stores:
        pytest.skip(f"{fmt} is not usable here")
    per_rank = [
        _keys(
            dstore.to_tf_dataset(
                stores[fmt], "train", fields=["k"], shuffle="global", seed=1, rank=r, world_size=3
            )
        )
        for r in range(3)
    ]
    assert sorted(k for keys in per_rank for k in keys) == list(range(N))
    # dealt as to_torch deals to processes
    assert per_rank[1] == _order(stores[fmt], 1, 0, rank=1, world=3)


def test_global_shuffle_of_a_deflated_npz_reads_a_stored_copy(stores):
    """Refused before; now read from a copy with the members stored, made once."""
    ds = dstore.to_tf_dataset(
        stores["npz-deflated"], "train", fields=["k"], shuffle="global", seed=4
    )
    keys = _keys(ds)
    assert sorted(keys) == list(range(N)) and keys != list(range(N))


def test_skip_of_a_deflated_npz_in_storage_order(stores):
    ds = dstore.to_tf_dataset(stores["npz-deflated"], "train", fields=["k"], ordered=True, skip=5)
    assert _keys(ds) == list(range(5, N))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shuffle": 10, "skip": 3}, "skip= resumes a fixed order"),
        ({"skip": 3}, "skip= resumes a fixed order"),  # interleaved shards: no fixed order
        ({"shuffle": "random"}, "shuffle is a buffer size"),
        ({"shuffle": "global", "rank": 1}, "rank= and world_size= together"),
        ({"shuffle": "global", "rank": 3, "world_size": 3}, "rank 3 is not in 0..2"),
        ({"rank": 0, "world_size": 2}, "deal a shuffle='global' or 'block' epoch"),
        ({"shuffle": "global", "skip": -1}, "counts"),
        # past the epoch's end: this rank's share is 35 of 70 records (issue #34)
        ({"shuffle": "global", "skip": 36, "rank": 1, "world_size": 2}, "more than the 35"),
        ({"shuffle": "global", "skip": 10**12}, "more than the 70 records rank 0 of 1"),
        ({"ordered": True, "skip": N + 1}, "more than the 70"),
    ],
)
def test_bad_read_orders_are_refused_up_front(stores, kwargs, message):
    # TFRecord: each record read alone, so the global order is a permutation dealt a
    # record at a time (zarr's chunks are dealt a window at a time: shares differ)
    with pytest.raises(ValueError, match=message):
        dstore.to_tf_dataset(stores["tfrecord"], "train", **kwargs)

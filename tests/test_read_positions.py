"""Reads at positions (issue #40): a map-style index or a global shuffle's window reads
the records asked, not a range around them; the order of a chunked split reads each
chunk in one window; every record comes once, equal to what was written."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import dstore
from dstore.codecs.tfrecord import io as rio
from dstore.errors import CodecIOError
from dstore.readers.plan import FIRST_WINDOW, GlobalLayout, consumer_indices
from dstore.readers.split import SplitSource
from dstore.testing import usable_formats

N = 60


@pytest.fixture(scope="module")
def data(tiles):
    x, _ = tiles
    x = np.concatenate([x, x, x])[:N]
    return {"x": x, "k": np.arange(N, dtype=np.int64)}


def _corrupt_data_byte(path: str, record: int) -> None:
    """Flip a byte inside ``record``'s data: its data CRC fails, its header stays whole."""
    (shard,) = sorted(glob.glob(os.path.join(path, "*.tfrecord*")))
    ends = rio.frame_ends(shard)
    with open(shard, "r+b") as f:
        f.seek(ends[record] + 12 + 5)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))


def test_map_style_reads_the_records_asked_not_their_range(tmp_path, data):
    """A damaged record beside the ones asked is not read: before, ds[i] decoded the
    whole range holding i and failed on its neighbour."""
    path = str(tmp_path / f"t{usable_formats()['tfrecord']}")
    dstore.save({"train": data}, path)
    _corrupt_data_byte(path, 7)
    ds = dstore.to_torch(path, "train", map_style=True)
    for i in (3, 6, 8, 59):
        rec = ds[i]
        assert int(rec["k"]) == i
        np.testing.assert_array_equal(rec["x"].numpy(), data["x"][i])
    got = ds.__getitems__([8, 3, 8, 50])  # a DataLoader batch: in the order asked
    assert [int(r["k"]) for r in got] == [8, 3, 8, 50]
    with pytest.raises(CodecIOError, match=r"record 7 .*bad data CRC"):
        ds[7]


# Parquet written by dstore reads a record by its page (no units); a file of a page per
# row group keeps its groups as units: tests/test_parquet_pages.py
@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_global_order_of_units_reads_each_unit_in_one_window(tmp_path, data, fmt):
    """Over chunks / row groups, each unit's records lie in one window of one process,
    and the epoch delivers every record once, equal to what was written."""
    path = str(tmp_path / f"d{usable_formats()[fmt]}")
    # units of about 3 records (a 64x64x3 tile is 12 kB)
    dstore.save({"train": data}, path, chunk_mb="0.036")
    source = SplitSource(path, "train")
    units = source.reader().record_units("train")
    assert units is not None and units[-1] == N and len(units) > 8
    layout = source.layout("global")
    assert layout.units is not None  # an order over units, not a permutation
    unit_of = np.searchsorted(units, np.arange(N), side="right") - 1
    for consumers in (1, 2):
        seen = []
        for c in range(consumers):
            mine = consumer_indices(N, c, consumers, seed=3, epoch=1, layout=layout)
            for window in layout.windows(mine, 0):
                seen.append(set(unit_of[window].tolist()))
        for u in range(len(units) - 1):  # each unit in exactly one window of one process
            assert sum(u in s for s in seen) == 1
    ds = dstore.to_torch(path, "train", shuffle="global", seed=3)
    ds.set_epoch(1)
    keys = []
    for rec in ds:
        k = int(rec["k"])
        np.testing.assert_array_equal(rec["x"].numpy(), data["x"][k])
        keys.append(k)
    assert keys == consumer_indices(N, 0, 1, seed=3, epoch=1, layout=layout).tolist()
    assert sorted(keys) == list(range(N)) and keys != list(range(N))


def test_a_split_too_small_for_windows_of_units_is_a_permutation():
    units = np.array([0, 30, 60])  # two units of 30: no 4 windows of 2 units
    layout = GlobalLayout.of(60, units, record_bytes=100, spans=10)
    assert layout.units is None
    shares = [len(consumer_indices(60, c, 2, seed=0, epoch=0, layout=layout)) for c in (0, 1)]
    assert shares == [30, 30]


@pytest.mark.parametrize("skip", [0, 5, 300])
def test_a_permutations_first_window_is_a_batch_then_windows_of_256(skip):
    """The first window of a permutation holds at most FIRST_WINDOW records (the first
    batch waits for no more), the next ones end at multiples of the window; together
    they are the process's records from ``skip`` on, in order, each once."""
    layout = GlobalLayout(1000)
    mine = consumer_indices(1000, 0, 1, seed=2, epoch=0, layout=layout)
    parts = list(layout.windows(mine, skip))
    assert np.array_equal(np.concatenate(parts), mine[skip:])
    assert len(parts[0]) == FIRST_WINDOW
    ends = np.cumsum([skip, *map(len, parts)])[1:]
    assert all(e % layout.window == 0 for e in ends[1:-1]) and ends[-1] == 1000


def test_a_permutations_windows_hold_at_most_12_mib_decoded():
    """Where each record is read alone a window only groups reads: 64 tiles of
    256x256x3 (12 MiB) a window, not 256 (50 MB decoded per reading process); small
    records keep 256, huge ones the first batch's 64."""
    from dstore.readers.plan import PERMUTATION_WINDOW_BYTES, WINDOW_UNITS

    tile = 256 * 256 * 3
    tiles = GlobalLayout.of(4000, None, tile, WINDOW_UNITS)
    assert tiles.units is None and tiles.window == 64
    assert GlobalLayout.of(4000, None, 100, WINDOW_UNITS).window == 256
    assert GlobalLayout.of(4000, None, 50 * 2**20, WINDOW_UNITS).window == FIRST_WINDOW
    mine = consumer_indices(4000, 1, 2, seed=1, epoch=0, layout=tiles)
    parts = list(tiles.windows(mine, 7))
    assert max(map(len, parts)) * tile <= PERMUTATION_WINDOW_BYTES
    assert np.array_equal(np.concatenate(parts), mine[7:])

"""Parquet row groups cut by bytes: large records (256x256 photo tiles, ~110 kB of PNG)
in groups of about ``row_group_mb`` (a shuffled read fetches a whole group for one
record), small ones in groups of ``row_group_rows``; what either writes reads back
equal, in order, globally shuffled and map-style, through dstore, pyarrow and datasets."""

from __future__ import annotations

import glob
import io
import os

import numpy as np
import pytest

import dstore
from dstore.codecs.parquet import ParquetOptions
from dstore.demo import photo_tiles
from dstore.readers.plan import WINDOW_UNITS, GlobalLayout

pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("imagecodecs")

N = 48


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """48 tiles of 256x256x3, written with the default options."""
    x, _ = photo_tiles(N, 256, seed=7)
    data = {"x": x, "k": np.arange(N, dtype=np.int64)}
    path = str(tmp_path_factory.mktemp("rg") / "big.parquet")
    dstore.save({"train": data}, path)
    return data, path


def _groups(path: str) -> list[tuple[int, list[int]]]:
    """Each row group's rows and the PNG sizes of its records, shard after shard."""
    out = []
    for shard in sorted(glob.glob(os.path.join(path, "*.parquet"))):
        pf = pq.ParquetFile(shard)
        for g in range(pf.metadata.num_row_groups):
            pngs = pf.read_row_group(g, columns=["x"]).column("x").combine_chunks()
            out.append(
                (
                    pf.metadata.row_group(g).num_rows,
                    [len(b) for b in pngs.field("bytes").to_pylist()],
                )
            )
    return out


def test_large_records_get_row_groups_of_about_row_group_mb(big):
    """Failed before (row_group_mb 64): one group of 48 records, 5 MB for each record
    a shuffled read asked for."""
    _, path = big
    limit = ParquetOptions().row_group_mb * 2**20
    groups = _groups(path)
    assert sum(n for n, _ in groups) == N and len(groups) >= 4
    for rows, pngs in groups[:-1]:  # each ends at the record that brings it to the limit
        assert rows < ParquetOptions().row_group_rows
        assert sum(pngs[:-1]) < limit <= sum(pngs) + 64 * rows  # + each record's k, path


def test_records_read_back_by_dstore_pyarrow_and_datasets(big, tmp_path, monkeypatch):
    data, path = big
    with dstore.open(path) as ds:
        for i in range(N):
            np.testing.assert_array_equal(ds["train"]["x"][i], data["x"][i])
            assert ds["train"]["k"][i] == i
    from PIL import Image

    table = pq.read_table(sorted(glob.glob(os.path.join(path, "*.parquet"))))
    for i, (img, k) in enumerate(
        zip(table.column("x").to_pylist(), table.column("k"), strict=True)
    ):
        np.testing.assert_array_equal(
            np.asarray(Image.open(io.BytesIO(img["bytes"]))), data["x"][i]
        )
        assert k.as_py() == i
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    hub = datasets.load_dataset(path, cache_dir=str(tmp_path / "hf"))["train"]  # README card
    assert len(hub) == N
    for i in range(N):
        rec = hub[i]
        np.testing.assert_array_equal(np.asarray(rec["x"]), data["x"][rec["k"]])


@pytest.mark.parametrize("row_group_mb", [None, "64"], ids=["default", "100-row groups"])
def test_global_and_map_style_reads_deliver_each_record(big, tmp_path, row_group_mb):
    """Files of the default groups and of groups as large as the files written before."""
    pytest.importorskip("torch")
    data, path = big
    if row_group_mb is not None:
        path = str(tmp_path / "old.parquet")
        dstore.save({"train": data}, path, row_group_mb=row_group_mb)
        assert [n for n, _ in _groups(path)] == [N]
    ds = dstore.to_torch(path, "train", shuffle="global", seed=2)
    keys = []
    for rec in ds:
        k = int(rec["k"])
        np.testing.assert_array_equal(rec["x"].numpy(), data["x"][k])
        keys.append(k)
    assert sorted(keys) == list(range(N)) and keys != list(range(N))
    mapped = dstore.to_torch(path, "train", map_style=True)
    order = np.random.default_rng(0).permutation(N).tolist()
    for at in range(0, N, 16):  # a DataLoader's batches of shuffled indexes
        batch = order[at : at + 16]
        recs = mapped.__getitems__(batch)
        assert [int(r["k"]) for r in recs] == batch
        for i, r in zip(batch, recs, strict=True):
            np.testing.assert_array_equal(r["x"].numpy(), data["x"][i])


def test_global_windows_span_ten_groups_of_ten_tiles():
    """4,000 tiles of 256x256x3 in groups of 10 (the default's cut) are shuffled in
    windows of at least WINDOW_UNITS groups (quality ~4.48 by MosaicML's metric)."""
    layout = GlobalLayout.of(4000, np.arange(0, 4001, 10), 256 * 256 * 3, WINDOW_UNITS)
    assert layout.units is not None and layout.window >= WINDOW_UNITS * 10

"""``overwrite=True`` deletes only what dstore wrote in a folder dataset: a file its
manifest lists at another size than the file's is a user's (a manifest copied or
forged over a user's folder), and an object-store prefix is listed like a folder
(zarr's too: an object that is neither zarr metadata nor a chunk key is a user's)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import dstore
from dstore.testing import usable_formats

FORMATS = usable_formats()
#: folder formats whose manifest lists their shards
SHARDED = [f for f in ("tfrecord", "webdataset", "parquet", "arrayrecord") if f in FORMATS]
NOTES = b"my thesis, chapter 3\n" * 40


@pytest.fixture(scope="module")
def sources(tmp_path_factory, tiles) -> dict[str, str]:
    root = tmp_path_factory.mktemp("listed")
    x, y = tiles
    out = {"src": str(root / "src.npz"), "old": str(root / "old.npz")}
    np.savez(out["src"], x_train=x[:8], y_train=y[:8])
    np.savez(out["old"], x_train=x[8:12], y_train=y[8:12])
    return out


def _forge(folder: str) -> None:
    """The folder's manifest made to list the user's ``notes.txt`` as its one shard
    (the real shard and index gone): every file there is then listed."""
    path = os.path.join(folder, "dstore.json")
    with open(path) as f:
        manifest = json.load(f)
    (shard,) = manifest["splits"]["train"]["shards"]
    os.remove(os.path.join(folder, shard["file"]))
    if "index" in shard:
        os.remove(os.path.join(folder, shard.pop("index")["file"]))
    shard["file"] = "notes.txt"
    with open(os.path.join(folder, "notes.txt"), "wb") as f:
        f.write(NOTES)
    with open(path, "w") as f:
        json.dump(manifest, f)


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_file_listed_at_another_size_is_not_deleted(tmp_path, sources, fmt):
    dst = str(tmp_path / f"mine{FORMATS[fmt]}")
    dstore.convert(sources["old"], dst, to=fmt)
    _forge(dst)
    with pytest.raises(dstore.OutputExistsError, match=r"did not write \('notes\.txt'\)"):
        dstore.convert(sources["src"], dst, to=fmt, overwrite=True)
    with open(os.path.join(dst, "notes.txt"), "rb") as f:
        assert f.read() == NOTES
    dstore.convert(sources["src"], dst, to=fmt, overwrite="foreign")  # said so: replaced
    assert dstore.verify(sources["src"], dst).ok
    assert not os.path.exists(os.path.join(dst, "notes.txt"))


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_real_output_is_still_replaced(tmp_path, sources, fmt):
    dst = str(tmp_path / f"out{FORMATS[fmt]}")
    dstore.convert(sources["old"], dst, to=fmt)
    dstore.convert(sources["src"], dst, to=fmt, overwrite=True)
    assert dstore.verify(sources["src"], dst).ok


#: folder formats written to object stores (array_record writes local files only)
ON_URLS = [f for f in (*SHARDED, "zarr") if f != "arrayrecord" and f in FORMATS]


@pytest.mark.parametrize("fmt", ON_URLS)
def test_a_users_object_under_an_object_store_dataset_is_not_deleted(sources, fmt):
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    url = f"memory://listed-{fmt}/data{FORMATS[fmt]}"
    try:
        dstore.convert(sources["old"], url, to=fmt)
        mem.pipe(f"/listed-{fmt}/data{FORMATS[fmt]}/notes/thesis.txt", NOTES)
        before = {k: mem.cat(k) for k in mem.find(f"/listed-{fmt}")}
        with pytest.raises(
            dstore.OutputExistsError, match=r"did not write \('notes/thesis\.txt'\)"
        ):
            dstore.convert(sources["src"], url, to=fmt, overwrite=True)
        assert mem.cat(f"/listed-{fmt}/data{FORMATS[fmt]}/notes/thesis.txt") == NOTES
        assert {k: mem.cat(k) for k in mem.find(f"/listed-{fmt}")} == before  # all untouched
        dstore.convert(sources["src"], url, to=fmt, overwrite="foreign")
        assert dstore.verify(sources["src"], url).ok
        assert not mem.exists(f"/listed-{fmt}/data{FORMATS[fmt]}/notes/thesis.txt")
    finally:
        if mem.exists(f"/listed-{fmt}"):
            mem.rm(f"/listed-{fmt}", recursive=True)

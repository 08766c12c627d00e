"""Issue #34's foreign files, tried as a new user would: WebDataset tars whose ``.json``
members hold per-sample metadata (written by the ``webdataset`` package), Parquet of
Hugging Face ``datasets`` whose Image column holds images of one size, and a compressed
npz read with a global shuffle."""

from __future__ import annotations

import glob
import json
import os
import tarfile

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles
from dstore.testing import read_all

wds = pytest.importorskip("webdataset")
pytestmark = [  # webdataset 1.0 leaves the tars it iterated to the garbage collector
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def _members(tar_path: str) -> dict[str, bytes]:
    with tarfile.open(tar_path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def _metadata(i: int) -> dict:
    """Per-sample metadata as public WebDatasets carry it (LAION, CC3M...)."""
    return {
        "caption": f"a photo, tile {i} é",
        "url": f"https://example.org/{i}.jpg",
        "width": 16,
        "height": 16,
        "similarity": 0.25 + i / 100,
        "tags": ["outdoor", None, {"nested": [i]}],
    }


@pytest.fixture
def metadata_shards(tmp_path) -> tuple[str, list[dict], np.ndarray]:
    """Shards written by webdataset's ShardWriter: a JPEG, a class and a JSON object each."""
    x, y = photo_tiles(7, 16, seed=11)
    folder = tmp_path / "laion"
    folder.mkdir()
    with wds.ShardWriter(str(folder / "train-%06d.tar"), maxcount=3) as sink:
        for i in range(len(x)):
            sink.write(
                {
                    "__key__": f"{i:09d}",
                    "jpg": x[i],
                    "cls": int(y[i].argmax()),
                    "json": _metadata(i),
                }
            )
    return str(folder), [_metadata(i) for i in range(len(x))], x


def test_json_members_holding_objects_are_read_as_their_text(metadata_shards, tmp_path):
    """Failed before: "field 'json' is JSON other than a list of strings", the dataset
    refused. Now a string field holding each member's JSON text, byte for byte; written
    back to WebDataset it is the same ``.json`` member again (bytes and name), which
    webdataset decodes to the same objects; through npz too."""
    folder, metadata, _ = metadata_shards
    sources = {}
    for shard in sorted(glob.glob(os.path.join(folder, "*.tar"))):
        sources.update(_members(shard))
    texts = [sources[f"{i:09d}.json"] for i in range(len(metadata))]
    with dstore.open(folder, format="webdataset") as ds:
        field = ds["train"]["json"]
        assert field.kind.describe() == "string"
        assert [field[i].encode() for i in range(len(texts))] == texts
        assert [json.loads(field[i]) for i in range(len(texts))] == metadata
    for via in (None, "npz"):
        src = folder
        if via:
            src = str(tmp_path / f"meta.{via}")
            dstore.convert(folder, src, from_format="webdataset")
        out = str(tmp_path / f"back-{via}.wds")
        dstore.convert(src, out, from_format="webdataset" if src == folder else None)
        shards = sorted(glob.glob(os.path.join(out, "train-*.tar")))
        got = {}
        for shard in shards:
            got.update(_members(shard))
        assert [got[f"{i:06d}.json"] for i in range(len(texts))] == texts, via
        decoded = list(wds.WebDataset(shards, shardshuffle=False).decode())
        assert [s["json"] for s in decoded] == metadata, via
        assert dstore.verify(folder, out, a_format="webdataset").ok


def test_json_lists_of_strings_stay_lists_and_mixed_json_is_text(tmp_path):
    """Members that are all lists of strings keep their list kind (as before); one
    object among them makes the field JSON text, every record as written."""
    lists, mixed = str(tmp_path / "lists.tar"), str(tmp_path / "mixed.tar")
    with wds.TarWriter(lists) as a, wds.TarWriter(mixed) as b:
        for i in range(4):
            a.write({"__key__": f"k{i}", "json": ["a", str(i)]})
            b.write({"__key__": f"k{i}", "json": ["a", str(i)] if i != 2 else {"a": i}})
    assert read_all(lists)["data"]["json"].to_lists(text=True) == [["a", str(i)] for i in range(4)]
    with dstore.open(mixed) as ds:
        want = [m for _, m in sorted(_members(mixed).items())]
        assert [ds["data"]["json"][i].encode() for i in range(4)] == want

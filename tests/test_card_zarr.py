"""A zarr store's card (issue #38) lives in the store: written with the conversion and
each append, and zarr-python lists the store without a warning (the root's consolidated
metadata lists its nodes), while dstore reads every array as its own metadata says."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.registry import get_codec_class

mlc = pytest.importorskip("mlcroissant")
zarr = pytest.importorskip("zarr")


@pytest.fixture(scope="module")
def source(card_source) -> str:
    return card_source


def _load(path: str | os.PathLike[str]) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _zarr_lists_quietly(store: str) -> dict[str, np.ndarray]:
    """Every array of the store as zarr-python users list and read it, with any warning
    an error (zarr warns of each file in a store that is no node, when it lists)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        group = zarr.open_group(store, mode="r")
        found = dict(group.members(max_depth=None))
        assert [name for name, _ in group.groups()] == sorted(n for n in found if "/" not in n)
        return {k: v[:] for k, v in found.items() if isinstance(v, zarr.Array)}


def test_a_zarr_store_holds_its_card_and_zarr_lists_it_quietly(tmp_path, source):
    """A zarr store is written with croissant.json in it, and zarr-python lists and reads
    the store without a warning (the root's consolidated metadata lists its nodes), also
    after an append grew its arrays; dstore reads the arrays as their own metadata says,
    whatever the listing says."""
    out = str(tmp_path / "out.zarr")
    dstore.convert(source, out, dtype="feat=float16")
    card = os.path.join(out, "croissant.json")
    doc = _load(card)
    assert not mlc.Dataset(jsonld=card).metadata.ctx.issues.errors
    assert {d["encodingFormat"] for d in doc["distribution"] if d["@type"] == "cr:FileSet"} == {
        get_codec_class("zarr").media_type
    }
    assert "datePublished" not in doc and doc["version"] == "1.0.0"
    dstore.convert(source, out, append=True, append_again=True)
    arrays = _zarr_lists_quietly(out)
    with dstore.open(out) as ds:
        assert arrays["train/label"].tolist() == ds["train"]["label"][:].tolist()
        assert len(arrays["train/label"]) == ds["train"].count == 24
        assert np.array_equal(arrays["test/feat"], ds["test"]["feat"][:])
    doc = _load(card)  # rewritten by the append, inside the store
    assert doc["version"] == "2.0.0" and "Split 'train': 24 records." in json.dumps(doc)
    assert not os.path.exists(out + ".croissant.json")
    # a listing that lies (one array's shape): zarr users get what it says, dstore what
    # the array's own metadata says
    with open(os.path.join(out, "zarr.json")) as f:
        root = json.load(f)
    root["consolidated_metadata"]["metadata"]["train/label"]["shape"] = [2]
    with open(os.path.join(out, "zarr.json"), "w") as f:
        json.dump(root, f)
    assert zarr.open_group(out, mode="r")["train/label"].shape == (2,)
    with dstore.open(out) as ds:
        assert ds["train"]["label"][:].tolist() == arrays["train/label"].tolist()
    dstore.convert(source, out, overwrite=True)  # its own card is no foreign file
    assert _load(card)["version"] == "1.0.0"


def test_a_zarr_store_written_before_gets_its_card_inside(tmp_path, source):
    """'dstore card' on a store dstore wrote before stores had their listing: the listing
    is added (no value changes) and the card goes inside, keeping what its earlier card
    beside the store was given; a zarr store dstore did not write is never changed: its
    card goes beside it."""
    out = tmp_path / "old.zarr"
    dstore.convert(source, str(out), card=False)
    root = json.loads((out / "zarr.json").read_text())
    del root["consolidated_metadata"]  # as stores were written before
    (out / "zarr.json").write_text(json.dumps(root))
    assert main(["card", str(out), "--out", f"{out}.croissant.json", "--license", "mit"]) == 0
    assert main(["card", str(out)]) == 0
    assert _load(out / "croissant.json")["license"] == "mit"
    _zarr_lists_quietly(str(out))
    assert main(["verify", source, str(out)]) == 0
    assert not [p for p in os.listdir(tmp_path) if "dstore-append" in p]

    theirs = tmp_path / "theirs.zarr"
    group = zarr.open_group(str(theirs), mode="w")
    group.create_array("x", shape=(3, 2), dtype="f4")[:] = np.arange(6).reshape(3, 2)
    before = (theirs / "zarr.json").read_bytes()
    assert dstore.card(str(theirs)).written == [f"{theirs}.croissant.json"]
    assert (theirs / "zarr.json").read_bytes() == before
    assert sorted(os.listdir(theirs)) == ["x", "zarr.json"]


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_foreign_store_with_its_own_listing_is_never_changed(tmp_path):
    """A zarr store zarr-python wrote and consolidated (its root lists its nodes, as
    dstore's do): 'dstore card' writes the card beside it and changes nothing in it
    (before, the listing alone made it a store to write the card into)."""
    theirs = tmp_path / "theirs.zarr"
    group = zarr.open_group(str(theirs), mode="w", zarr_format=3)
    group.create_array("x", shape=(3, 2), dtype="f4")[:] = np.arange(6).reshape(3, 2)
    with warnings.catch_warnings():  # zarr: consolidated metadata is not in the v3 spec
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(theirs))
    before = _files(theirs)
    assert main(["card", str(theirs)]) == 0
    assert _files(theirs) == before
    assert os.path.exists(f"{theirs}.croissant.json")

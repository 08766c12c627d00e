"""Lists of strings (or bytes) per record -- the Object Detection API's class text --
in every format, read natively by each format's own library."""

from __future__ import annotations

import itertools
import json
import os

import h5py
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import dstore
from dstore.errors import SchemaError
from dstore.model import StringList, VarColumn, infer_column, kind_from_json
from dstore.model.schema import FieldSpec

FORMATS = ["npz", "h5", "zarr", "tfrecords"]
NAMES = [["cat", "dog"], [], ["é", "", "日本"], ["x" * 70], []]


def test_kind_json_roundtrip_and_inference():
    for kind in (StringList(), StringList(text=False)):
        spec = FieldSpec("names", kind)
        assert FieldSpec.from_json("names", json.loads(json.dumps(spec.to_json()))) == spec
        assert kind_from_json(kind.to_json()) == kind
    kind, col = infer_column(NAMES, "f")
    assert kind == StringList() and isinstance(col.values, VarColumn)
    assert col.to_lists(True) == NAMES
    kind, col = infer_column([[b"\xff"], []], "f")
    assert kind == StringList(text=False) and col.to_lists(False) == [[b"\xff"], []]
    with pytest.raises(SchemaError, match="mix str and bytes"):
        infer_column([["a"], [b"b"]], "f")


def test_layouts_each_library_reads_natively(tmp_path):
    data = {"train": {"names": NAMES, "y": np.arange(5)}}
    for ext in ("npz", "h5", "zarr"):
        dstore.save(data, tmp_path / f"d.{ext}")
    with np.load(tmp_path / "d.npz", allow_pickle=False) as z:
        values, splits = z["names_train.values"], z["names_train.row_splits"]
        assert values.dtype.kind == "U"
        assert [values[a:b].tolist() for a, b in itertools.pairwise(splits)] == NAMES
    with h5py.File(tmp_path / "d.h5", "r") as f:
        values, splits = f["train/names"], f["train/names.row_splits"][:]
        got = [[s.decode() for s in values[a:b]] for a, b in itertools.pairwise(splits)]
        assert got == NAMES
    g = zarr.open_group(str(tmp_path / "d.zarr"), mode="r")
    values, splits = g["train/names/values"][:], g["train/names/row_splits"][:]
    assert [values[a:b].tolist() for a, b in itertools.pairwise(splits)] == NAMES


def test_foreign_files_in_the_same_layout_are_read(tmp_path):
    """Written by hand with numpy / h5py / zarr (no dstore schema): read as lists of strings."""
    flat = [s for r in NAMES for s in r]
    splits = np.cumsum([0] + [len(r) for r in NAMES])
    np.savez(
        tmp_path / "f.npz",
        **{"names_train.values": np.array(flat), "names_train.row_splits": splits},
    )
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f.create_dataset("train/names", data=flat, dtype=h5py.string_dtype())
        f["train/names.row_splits"] = splits
    g = zarr.open_group(str(tmp_path / "f.zarr"), mode="w")
    sub = g.create_group("train/names")
    sub.create_array("values", shape=(len(flat),), dtype=str)[:] = np.array(flat, dtype=object)
    sub.create_array("row_splits", data=splits)
    for ext in ("npz", "h5", "zarr"):
        with dstore.open(tmp_path / f"f.{ext}") as ds:
            field = ds["train"]["names"]
            assert field.kind == StringList(), ext
            assert [field[i] for i in range(len(NAMES))] == NAMES, ext


_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lists=st.lists(st.lists(_text, max_size=6), min_size=1, max_size=12),
    binary=st.booleans(),
)
# found by hypothesis: records whose only strings are empty (zarr counted bytes, not
# strings; h5py cannot write a run of empty vlen arrays in one slice)
@example(lists=[[""]], binary=True)
@example(lists=[["00"]], binary=True)
@example(lists=[["ab", "cd"], ["ef"]], binary=True)
@example(lists=[[], [""], ["", ""]], binary=False)
@pytest.mark.parametrize("ext", FORMATS)
def test_any_lists_round_trip_every_format(tmp_path, ext, lists, binary):
    records = [[s.encode() for s in r] for r in lists] if binary else lists
    path = tmp_path / f"d-{len(os.listdir(tmp_path))}.{ext}"
    kinds = {("train", "names"): StringList(text=not binary)}
    dstore.save({"train": {"names": records}}, path, kinds=kinds)
    with dstore.open(path) as ds:
        field = ds["train"]["names"]
        assert field.kind == StringList(text=not binary)
        assert [field[i] for i in range(len(records))] == records
        assert field[:] == records
    back = tmp_path / f"back-{len(os.listdir(tmp_path))}.npz"
    dstore.convert(path, back)
    assert dstore.verify(path, back).ok


@pytest.mark.parametrize("ext", FORMATS)
def test_training_readers_give_each_records_list(tmp_path, ext):
    """to_torch: a batch holds each record's ``list[str]``; to_tf_dataset: a tf.string vector."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("tensorflow")
    path = tmp_path / f"d.{ext}"
    boxes = [np.full((len(r), 4), i, np.float32) for i, r in enumerate(NAMES)]
    files = [f"f{i}.jpg" for i in range(len(NAMES))]
    data = {"names": NAMES, "y": np.arange(len(NAMES)), "boxes": boxes, "file": files}
    dstore.save({"train": data}, path)
    ds = dstore.to_torch(path, "train")
    loader = torch.utils.data.DataLoader(ds, batch_size=2, collate_fn=ds.collate_fn())
    assert [names for b in loader for names in b["names"]] == NAMES
    got = [
        [s.decode() for s in ex["names"].numpy()]
        for ex in dstore.to_tf_dataset(path, "train", ordered=True)
    ]
    assert got == NAMES
    for i, ex in enumerate(
        dstore.to_tf_dataset(path, "train", ordered=True)
    ):  # the other varying kinds
        np.testing.assert_array_equal(ex["boxes"].numpy(), boxes[i])
        assert ex["file"].numpy() == files[i].encode()
    assert tf.is_tensor(next(iter(dstore.to_tf_dataset(path, "train")))["names"])


def test_varying_fields_cut_across_many_tfrecord_shards(tmp_path):
    """Batches straddle shard boundaries: the engine cuts values + offsets columns too."""
    rng = np.random.default_rng(1)
    n = 300
    data = {
        "names": [[f"c{j}" for j in range(i % 4)] for i in range(n)],
        "boxes": [rng.random((i % 5, 4)).astype(np.float32) for i in range(n)],
        "file": [f"f{i}" * 20 for i in range(n)],
    }
    src = tmp_path / "d.npz"
    dstore.save({"train": data}, src)
    out = tmp_path / "d.tfrecords"
    dstore.convert(src, out, options={"shard_mb": 0.005})
    shards = [f for f in os.listdir(out) if f.endswith(".tfrecord")]
    assert len(shards) > 3
    assert dstore.verify(src, out).ok
    with dstore.open(out) as ds:
        assert ds["train"]["names"][:] == data["names"]

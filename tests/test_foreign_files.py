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


# ------------------------------------------- images of one size, whatever the format


@pytest.fixture(scope="module")
def tiles() -> tuple[np.ndarray, np.ndarray]:
    x, y = photo_tiles(6, 24, seed=21)
    return x, y.argmax(1).astype(np.int64)


def _hub_parquet(root, x, labels) -> str:
    """A dataset as ``datasets`` writes it for the Hub: ``data/train-00000-of-00001.parquet``,
    an ``Image`` column (PNG bytes and a path) and a ``ClassLabel``."""
    datasets = pytest.importorskip("datasets")
    from PIL import Image as PILImage

    ds = datasets.Dataset.from_dict(
        {"image": [PILImage.fromarray(t) for t in x], "label": labels.tolist()}
    ).cast_column("image", datasets.Image())
    folder = root / "hub"
    (folder / "data").mkdir(parents=True)
    ds.to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    return str(folder)


def _jpegs(x) -> list[bytes]:
    imagecodecs = pytest.importorskip("imagecodecs")
    return [bytes(imagecodecs.jpeg8_encode(t, level=90)) for t in x]


def _examples(blobs: list[bytes], labels) -> list[bytes]:
    from dstore.codecs.example.wire import BYTES, INT64, encode_example, encode_feature

    return [
        encode_example(
            {"image/encoded": encode_feature(BYTES, [b]), "label": encode_feature(INT64, [n])}
        )
        for b, n in zip(blobs, labels.tolist(), strict=True)
    ]


def _tfrecord(root, x, labels) -> str:
    from dstore.codecs.tfrecord import io as rio

    path = root / "jpegs.tfrecord"
    path.write_bytes(b"".join(rio.frame(r) for r in _examples(_jpegs(x), labels)))
    return str(path)


def _arrayrecord(root, x, labels) -> str:
    pytest.importorskip("array_record")
    from array_record.python.array_record_module import ArrayRecordWriter

    path = str(root / "jpegs-train.array_record-00000-of-00001")
    w = ArrayRecordWriter(path, "group_size:1")
    for record in _examples(_jpegs(x), labels):
        w.write(record)
    w.close()
    return path


def _webdataset(root, x, labels) -> str:
    path = str(root / "tiles.tar")
    with wds.TarWriter(path) as sink:
        for i, (blob, n) in enumerate(zip(_jpegs(x), labels.tolist(), strict=True)):
            sink.write({"__key__": f"{i:04d}", "jpg": blob, "cls": n})
    return path


_FOREIGN = {
    "parquet": (_hub_parquet, "image", "png"),
    "tfrecord": (_tfrecord, "image/encoded", "jpeg"),
    "arrayrecord": (_arrayrecord, "image/encoded", "jpeg"),
    "webdataset": (_webdataset, "jpg", "jpeg"),
}


@pytest.mark.parametrize("fmt", list(_FOREIGN))
def test_images_of_one_size_become_a_fixed_shape_field(tmp_path, tiles, fmt):
    """Failed before: Parquet of Hugging Face datasets (an Image column) and JPEGs of a
    TFRecord, ArrayRecord or WebDataset dstore did not write converted to npz as a ragged
    triple (values, row_splits, shapes) though every image had one size. Now ``(N, H, W,
    3)``, each image's pixels as its decoder gives them (PNG: the tiles exactly)."""
    import imagecodecs

    x, labels = tiles
    make, field, encoding = _FOREIGN[fmt]
    src = make(tmp_path, x, labels)
    with dstore.open(src, format=fmt) as ds:
        split = next(iter(ds))
        stored = [bytes(ds[split][field][i]) for i in range(len(x))]
    out = str(tmp_path / "out.npz")
    dstore.convert(src, out, from_format=fmt)
    with np.load(out) as npz:
        keys = sorted(npz.files)
    assert not any(k.endswith((".row_splits", ".shapes")) for k in keys), keys
    with dstore.open(out) as ds:
        assert ds[split][field].kind.describe() == "image uint8 (24, 24, 3) raw"
        pixels = ds[split][field][:]
    assert isinstance(pixels, np.ndarray) and pixels.shape == x.shape
    want = x if encoding == "png" else np.stack([imagecodecs.jpeg8_decode(b) for b in stored])
    np.testing.assert_array_equal(pixels, want)
    assert dstore.verify(src, out, a_format=fmt).ok


def test_images_of_several_sizes_stay_images_of_varying_size(tmp_path, tiles):
    """One image of another size: the field is images of varying size, as before."""
    x, labels = tiles
    small = np.ascontiguousarray(x[:, :16, :16])
    path = str(tmp_path / "mixed.tar")
    jpegs = _jpegs(x[:3]) + _jpegs(small[3:])
    with wds.TarWriter(path) as sink:
        for i, blob in enumerate(jpegs):
            sink.write({"__key__": f"{i:04d}", "jpg": blob, "cls": int(labels[i])})
    out = str(tmp_path / "mixed.npz")
    dstore.convert(path, out)
    with dstore.open(out) as ds:
        assert ds["data"]["jpg"].kind.describe() == "image uint8 (*, *, 3) raw"
        assert [ds["data"]["jpg"][i].shape for i in range(6)] == [(24, 24, 3)] * 3 + [
            (16, 16, 3)
        ] * 3


def test_a_refusal_of_random_access_names_only_remedies_that_work(tmp_path, tiles):
    """The refusal suggested 'dstore index' for every stream, and 'dstore index' refuses
    npz and GZIP TFRecords. Now: a plain TFRecord is told to index, which then reads it
    in a global shuffle; a GZIP one is told to convert only."""
    pytest.importorskip("torch")
    from dstore.cli import main

    x, labels = tiles
    plain, gzip = str(tmp_path / "plain.tfrecord"), str(tmp_path / "gz.tfrecords")
    from dstore.codecs.tfrecord import io as rio

    with open(plain, "wb") as f:
        f.write(b"".join(rio.frame(r) for r in _examples(_jpegs(x), labels)))
    dstore.save({"train": {"label": labels}}, gzip, compression="gzip")
    with pytest.raises(dstore.SchemaError) as raised:
        dstore.to_torch(gzip, "train", shuffle="global")
    assert "dstore index" not in str(raised.value) and "convert it" in str(raised.value)
    with pytest.raises(dstore.SchemaError, match="until 'dstore index' writes their record"):
        dstore.to_torch(plain, "data", shuffle="global")
    assert main(["index", plain]) == 0
    got = [int(r["label"]) for r in dstore.to_torch(plain, "data", shuffle="global", seed=1)]
    assert sorted(got) == sorted(labels.tolist())

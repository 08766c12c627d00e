"""ArrayRecord: the same Examples as TFRecord, written and read by the real libraries.

The shared suite (tests/test_roundtrip.py) round-trips every kind; here: the
records are TFRecord's bytes, two writes are byte-identical, ArrayRecordDataSource
and TensorFlow read what dstore wrote, dstore reads what the library and
TensorFlow wrote, records are read one by one (map-style torch), a killed run
resumes, Object Detection records survive TFRecord -> ArrayRecord -> TFRecord.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.codecs.tfrecord import io as rio
from dstore.errors import CodecIOError
from dstore.registry import infer_codec
from dstore.testing import assert_datasets_equal, file_digests, kind_cases, read_all

pytest.importorskip("array_record")
pytest.importorskip("imagecodecs")
from array_record.python.array_record_data_source import ArrayRecordDataSource
from array_record.python.array_record_module import ArrayRecordWriter


def write_by_its_library(path: str, tiles) -> None:
    """An ArrayRecord file written by array_record, not by dstore (test_overwrite)."""
    w = ArrayRecordWriter(path, "group_size:1")  # a single file of records
    w.write(b"one record")
    w.close()


def _shards(path: str, split: str) -> list[str]:
    return sorted(glob.glob(os.path.join(path, f"data-{split}.array_record-*-of-*")))


def _tfrecords(path: str, split: str) -> list[bytes]:
    out = []
    for f in sorted(glob.glob(os.path.join(path, f"{split}-*.tfrecord"))):
        with rio.RecordFile(f) as rf:
            while (rec := rf.next_record()) is not None:
                out.append(rec)
    return out


@pytest.fixture
def tiles_npz(tmp_path, tiles) -> str:
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=x[:45], y_train=y[:45], x_test=x[45:], y_test=y[45:])
    return src


def test_every_kind_is_stored_as_tfrecords_examples(tmp_path):
    """One split per kind: the ArrayRecord records are TFRecord's records, byte for byte,
    and both read back as the data written."""
    data, kinds = {}, {}
    for case, (kind, records) in kind_cases().items():
        split = case.replace("-", "_")
        data[split] = {"v": records, "n": np.arange(len(records), dtype=np.uint64) * 2**61}
        kinds[(split, "v")] = kind
    ar, tfr = str(tmp_path / "k.arrayrecord"), str(tmp_path / "k.tfrecords")
    dstore.save(data, ar, kinds=kinds)
    dstore.save(data, tfr, kinds=kinds)
    for split in data:
        with ArrayRecordDataSource(_shards(ar, split)) as source:
            assert [source[i] for i in range(len(source))] == _tfrecords(tfr, split), split
    assert_datasets_equal(read_all(tfr), read_all(ar))
    assert dstore.verify(tfr, ar).ok


def test_two_writes_are_byte_identical_and_the_manifest_names_the_library(tmp_path, tiles_npz):
    a, b = str(tmp_path / "a.arrayrecord"), str(tmp_path / "b.arrayrecord")
    dstore.convert(tiles_npz, a, options={"shard_mb": 0.05})
    dstore.convert(tiles_npz, b, options={"shard_mb": 0.05, "workers": 1})
    assert len(_shards(a, "train")) > 1
    assert file_digests(a) == file_digests(b)
    with open(os.path.join(a, "dstore.json")) as f:
        manifest = json.load(f)
    assert manifest["format"] == "dstore-arrayrecord"
    assert manifest["libraries"]["array_record"] == importlib.metadata.version("array-record")
    assert manifest["writer_options"].startswith("group_size:1,zstd:3,")
    # the library's own reading of the options it wrote
    with ArrayRecordDataSource(_shards(a, "train")) as source:
        assert len(source) == 45


def test_random_access_reads_single_records_and_torch_map_style(tmp_path, tiles_npz, tiles):
    torch = pytest.importorskip("torch")
    x, y = tiles
    out = str(tmp_path / "t.arrayrecord")
    dstore.convert(tiles_npz, out, options={"shard_mb": 0.05})
    with dstore.open(out) as ds:
        for i in (44, 0, 17, 30, 3):
            np.testing.assert_array_equal(ds["train"]["x"][i], x[i])
            np.testing.assert_array_equal(ds["train"]["y"][i], y[i])
    reader = dstore.get_codec("arrayrecord").open_reader(out)
    with reader:
        assert reader.sequential_reason is None
        # a shard is cut for training workers: more ranges than shards
        assert len(reader.record_ranges("train", 20_000)) > len(reader.shards["train"])
    ds_torch = dstore.to_torch(out, split="train", map_style=True)
    assert len(ds_torch) == 45
    item = ds_torch[31]
    assert torch.equal(item["x"], torch.from_numpy(x[31]))


def test_foreign_files_of_the_library_and_urls(tmp_path):
    """Files dstore did not write (TFDS names, the library's writer, Examples encoded
    by hand as TFRecord would) are read by inspection; URLs are refused in one line."""
    from dstore.codecs.example.wire import BYTES, INT64, encode_example, encode_feature

    folder = tmp_path / "mnistish"
    folder.mkdir()
    for split, n in (("train", 7), ("test", 3)):
        path = str(folder / f"mnistish-{split}.array_record-00000-of-00001")
        w = ArrayRecordWriter(path, "group_size:1")
        for i in range(n):
            feats = {
                "label": encode_feature(INT64, np.array([i], np.int64)),
                "name": encode_feature(BYTES, [f"r{i}".encode()]),
                "tokens": encode_feature(INT64, np.arange(i, dtype=np.int64)),
            }
            w.write(encode_example(feats))
        w.close()
    assert infer_codec(str(folder / "mnistish-train.array_record-00000-of-00001")) == "arrayrecord"
    with dstore.open(str(folder), format="arrayrecord") as ds:
        assert sorted(ds) == ["test", "train"]
        assert ds["train"]["label"][:].tolist() == list(range(7))
        assert ds["train"]["name"][5] == "r5"
        assert ds["train"]["tokens"][4].tolist() == [0, 1, 2, 3]
    os.remove(folder / "mnistish-test.array_record-00000-of-00001")
    (folder / "x-test.array_record-00000-of-00002").write_bytes(b"not a riegeli file")
    with pytest.raises(CodecIOError, match="incomplete"):
        dstore.open(str(folder), format="arrayrecord")
    with pytest.raises(CodecIOError, match="not an ArrayRecord file"):
        dstore.open(str(folder / "x-test.array_record-00000-of-00002"), format="arrayrecord")
    with pytest.raises(CodecIOError, match="writes local folders only"):
        dstore.save({"train": {"y": np.arange(3)}}, "memory://bucket/out.arrayrecord")


def test_plain_folders_are_recognised_by_their_manifest(tmp_path):
    data = {"train": {"y": np.arange(5)}}
    dstore.save(data, str(tmp_path / "a"), format="arrayrecord")
    dstore.save(data, str(tmp_path / "t"), format="tfrecord")
    assert infer_codec(str(tmp_path / "a")) == "arrayrecord"
    assert infer_codec(str(tmp_path / "t")) == "tfrecord"
    assert dstore.get_codec_class("arrayrecord").owns(str(tmp_path / "a"))
    assert not dstore.get_codec_class("arrayrecord").owns(str(tmp_path / "t"))
    (shard,) = _shards(str(tmp_path / "a"), "train")
    assert dstore.get_codec_class("arrayrecord").owns(shard)


def test_a_damaged_shard_names_the_file(tmp_path, tiles_npz, capsys):
    out = str(tmp_path / "d.arrayrecord")
    dstore.convert(tiles_npz, out)
    (shard,) = _shards(out, "train")
    with open(shard, "r+b") as f:  # inside the records: Riegeli's hashes catch it
        f.seek(os.path.getsize(shard) // 3)
        f.write(b"\x00\xff\x00\xff")
    with pytest.raises(CodecIOError, match=os.path.basename(shard)):
        read_all(out)
    assert main(["verify", tiles_npz, out]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and os.path.basename(shard) in err[0]
    with open(shard, "r+b") as f:
        f.truncate(1000)
    with pytest.raises(CodecIOError, match=os.path.basename(shard)):
        read_all(out)


def test_verify_and_info_across_formats(tmp_path, tiles_npz, capsys):
    out = str(tmp_path / "v.arrayrecord")
    assert main(["convert", tiles_npz, out]) == 0
    for other in ("zarr", "tfrecords", "h5"):
        target = str(tmp_path / f"v.{other}")
        if main(["convert", out, target]) == 0:  # a missing extra is skipped by its codec
            assert main(["verify", out, target]) == 0
    assert main(["verify", tiles_npz, out]) == 0
    capsys.readouterr()
    assert main(["info", out]) == 0
    text = capsys.readouterr().out
    assert "arrayrecord" in text and "ArrayRecordDataSource(" in text


@pytest.mark.tf
def test_tensorflow_parses_what_dstore_wrote_and_dstore_reads_what_tensorflow_wrote(
    tmp_path, tiles
):
    """dstore's records through ArrayRecordDataSource and the snippet ``dstore info``
    prints; Object Detection API Examples built by TensorFlow, in an ArrayRecord file,
    read by dstore and through TFRecord -> ArrayRecord -> TFRecord unchanged."""
    tf = pytest.importorskip("tensorflow")
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=x[:20], y_train=y[:20])
    out = str(tmp_path / "w.arrayrecord")
    dstore.convert(src, out)
    with dstore.get_codec("arrayrecord").open_reader(out) as reader:
        snippet = "\n".join(reader.tensorflow_snippet("train"))
    scope: dict = {"tf": tf}
    exec(snippet, scope)  # noqa: S102 - the snippet dstore prints, run as a user would
    source = scope["source"]
    assert len(source) == 20
    for i in range(20):
        assert tf.train.Example.FromString(source[i]).features.feature["y"].int64_list.value
        got = scope["decode"](source[i])
        np.testing.assert_array_equal(got["x"].numpy(), x[i])
        np.testing.assert_array_equal(got["y"].numpy(), y[i])

    # the Object Detection API's Examples, as TensorFlow builds them
    def feature(kind, v):
        cls = {"b": tf.train.BytesList, "f": tf.train.FloatList, "i": tf.train.Int64List}[kind]
        key = {"b": "bytes_list", "f": "float_list", "i": "int64_list"}[kind]
        return tf.train.Feature(**{key: cls(value=v)})

    boxes = [[[1, 2, 9, 10, 1]], [], [[0, 0, 32, 32, 2], [3, 4, 5, 6, 1]], [[7, 7, 8, 8, 1]]]
    od = str(tmp_path / "od.arrayrecord")  # a folder of files dstore did not write
    os.mkdir(od)
    w = ArrayRecordWriter(os.path.join(od, "od-train.array_record-00000-of-00001"), "group_size:1")
    for i, bx in enumerate(boxes):
        b = np.array(bx, np.float64).reshape(-1, 5)
        feats = {
            "image/encoded": feature("b", [tf.io.encode_png(x[i, :32, :32]).numpy()]),
            "image/format": feature("b", [b"png"]),
            "image/height": feature("i", [32]),
            "image/width": feature("i", [32]),
            "image/filename": feature("b", [f"f{i}.png".encode()]),
            "image/object/bbox/xmin": feature("f", (b[:, 0] / 32).tolist()),
            "image/object/bbox/ymax": feature("f", (b[:, 3] / 32).tolist()),
            "image/object/class/label": feature("i", b[:, 4].astype(int).tolist()),
            "image/object/class/text": feature("b", [b"road"] * len(bx)),
        }
        w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    w.close()
    with dstore.open(od) as ds:
        np.testing.assert_array_equal(ds["train"]["image/encoded"][2], x[2, :32, :32])
        assert ds["train"]["image/object/class/text"][2] == ["road", "road"]
        assert ds["train"]["image/object/bbox/xmin"][1].shape == (0,)
    tfr, back, again = (str(tmp_path / n) for n in ("a.tfrecords", "b.arrayrecord", "c.tfrecords"))
    assert main(["convert", od, tfr]) == 0
    assert main(["convert", tfr, back]) == 0
    assert main(["convert", back, again]) == 0
    for a, b in ((od, tfr), (tfr, back), (back, again), (tfr, again)):
        assert main(["verify", a, b]) == 0
    assert _tfrecords(tfr, "train") == _tfrecords(again, "train")


def test_grain_reads_the_shards(tmp_path, tiles):
    """Grain's ArrayRecordDataSource over dstore's shards: every record, in order, the
    tf.train.Example whose PNG and label are the source's."""
    import imagecodecs

    from dstore.codecs.example.wire import decode_example

    grain = pytest.importorskip("grain")
    x, y = tiles
    out = str(tmp_path / "g.arrayrecord")
    dstore.save({"train": {"x": x, "y": y}}, out, shard_mb=0.05)  # several shards
    shards = _shards(out, "train")
    assert len(shards) > 1
    source = grain.sources.ArrayRecordDataSource(shards)
    assert len(source) == len(x)
    for i in range(len(x)):
        example = decode_example(source[i])
        (png,) = example["x"][1]
        np.testing.assert_array_equal(imagecodecs.png_decode(bytes(png)), x[i])
        np.testing.assert_array_equal(example["y"][1], y[i])


def test_object_detection_layout_records_survive_tfrecord_arrayrecord_tfrecord(tmp_path):
    from test_layouts import write_od_npz  # tests/ is on sys.path (rootdir)

    src = str(tmp_path / "data.npz")
    write_od_npz(src, seed=3, size=64, most=5)
    od = str(tmp_path / "od.tfrecords")
    options = {"class_names": "building,road"}
    dstore.convert(src, od, layout="tf-object-detection", options=options)
    ar, back = str(tmp_path / "od.arrayrecord"), str(tmp_path / "back.tfrecords")
    assert main(["convert", od, ar]) == 0
    assert main(["convert", ar, back]) == 0
    for a, b in ((od, ar), (ar, back), (od, back)):
        assert main(["verify", a, b]) == 0
    for split in ("train", "test"):
        assert _tfrecords(od, split) == _tfrecords(back, split)  # every Example byte kept

"""Parquet in the Hub layout: what dstore writes is read by datasets, pyarrow and pandas;
what they write is read by dstore; round trips are exact; row groups are the unit of reading."""

from __future__ import annotations

import glob
import io
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import dstore
from dstore.errors import CodecIOError, SchemaError
from dstore.model import Image, Ragged, StringList, Tensor
from dstore.registry import infer_codec
from dstore.testing import cli_command, file_digests, read_all

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("imagecodecs")


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """``datasets``, offline, its cache in a temporary folder."""
    cache = tmp_path_factory.mktemp("hf")
    saved = {k: os.environ.get(k) for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "HF_HOME")}
    os.environ.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=str(cache))
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    yield datasets, str(cache / "datasets")
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _load(hf, files):
    datasets, cache = hf
    return datasets.load_dataset("parquet", data_files=files, cache_dir=cache)


def _rich(tiles):
    """Every kind a Hub dataset has: images, a class label, text, bytes, lists."""
    x, y = tiles
    n = 24
    rng = np.random.default_rng(1)
    data = {
        "train": {
            "image": x[:n],
            "label": y[:n].argmax(1).astype(np.int64),
            "onehot": y[:n],
            "caption": [f"tile {i} é" for i in range(n)],
            "blob": [bytes(range(i % 7)) for i in range(n)],
            "tags": [["a", "b"][: i % 3] for i in range(n)],
            "boxes": [rng.random((i % 4, 4)).astype(np.float32) for i in range(n)],
            "feat": rng.random((n, 2, 3)).astype(np.float16),
        }
    }
    kinds = {
        ("train", "tags"): StringList(),
        ("train", "boxes"): Ragged(np.dtype(np.float32), (4,)),
    }
    return data, kinds


def _assert_same(data, path):
    """Every record of every field equal in value, dtype and shape."""
    with dstore.open(path) as ds:
        for split, fields in data.items():
            for name, want in fields.items():
                field = ds[split][name]
                for i, w in enumerate(want):
                    got = field[i]
                    if isinstance(w, np.ndarray):
                        assert got.dtype == w.dtype and got.shape == w.shape, (name, i)
                        assert got.tobytes() == w.tobytes(), (name, i)
                    else:
                        assert type(got) is type(w) and got == w, (name, i, got, w)


def _shards(path):
    return sorted(glob.glob(os.path.join(path, "*.parquet")))


def test_datasets_reads_what_dstore_writes(tmp_path, tiles, hf):
    data, kinds = _rich(tiles)
    path = str(tmp_path / "rich.parquet")
    names = [f"c{i}" for i in range(7)]
    dstore.save(data, path, kinds=kinds, class_names=",".join(names), label_field="label")
    _assert_same(data, path)
    ds = _load(hf, {"train": _shards(path)})["train"]
    f = ds.features
    datasets = hf[0]
    assert isinstance(f["image"], datasets.Image)
    assert f["label"] == datasets.ClassLabel(names=names)
    assert f["caption"] == datasets.Value("string") and f["blob"] == datasets.Value("binary")
    assert f["tags"] == datasets.List(datasets.Value("string"))
    assert f["boxes"] == datasets.List(datasets.List(datasets.Value("float32"), length=4))
    assert f["feat"] == datasets.List(datasets.List(datasets.Value("float16"), length=3), length=2)
    train = data["train"]
    for i in range(len(ds)):
        rec = ds[i]
        np.testing.assert_array_equal(np.asarray(rec["image"]), train["image"][i])
        assert rec["label"] == train["label"][i] and rec["caption"] == train["caption"][i]
        assert rec["blob"] == train["blob"][i] and rec["tags"] == train["tags"][i]
        np.testing.assert_array_equal(
            np.asarray(rec["boxes"], np.float32).reshape(-1, 4), train["boxes"][i]
        )
        np.testing.assert_array_equal(np.asarray(rec["onehot"], np.uint8), train["onehot"][i])
    feat = ds.with_format("numpy")[:]["feat"]
    assert feat.shape == (24, 2, 3)  # datasets' numpy formatting widens float16 to float32
    np.testing.assert_array_equal(feat.astype(np.float16), train["feat"])


def test_pyarrow_and_pandas_read_what_dstore_writes(tmp_path, tiles):
    data, kinds = _rich(tiles)
    path = str(tmp_path / "rich.parquet")
    dstore.save(data, path, kinds=kinds)
    (shard,) = _shards(path)
    table = pq.read_table(shard)
    assert table.column("caption").to_pylist() == data["train"]["caption"]
    assert json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]["image"] == {
        "_type": "Image"
    }
    group = pq.ParquetFile(shard).metadata.row_group(0)
    chunks = {group.column(c).path_in_schema: group.column(c) for c in range(group.num_columns)}
    # an Image's PNG bytes stored plain (no dictionary) and uncompressed, the rest zstd
    assert chunks["image.bytes"].compression == "UNCOMPRESSED"
    assert "RLE_DICTIONARY" not in chunks["image.bytes"].encodings
    assert {c.compression for p, c in chunks.items() if p != "image.bytes"} == {"ZSTD"}
    df = pytest.importorskip("pandas").read_parquet(shard)
    assert list(df["label"]) == list(data["train"]["label"])
    assert [list(t) for t in df["tags"]] == data["train"]["tags"]
    png = df["image"][5]["bytes"]
    assert png[:4] == b"\x89PNG"


def test_two_writes_are_byte_identical(tmp_path, tiles):
    data, kinds = _rich(tiles)
    a, b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    dstore.save(data, a, kinds=kinds, row_group_rows=5)
    dstore.save(data, b, kinds=kinds, row_group_rows=5, workers=1)
    assert file_digests(a) == file_digests(b)


def test_reads_datasets_output_single_file_and_hub_folder(tmp_path, tiles, hf):
    datasets = hf[0]
    PIL = pytest.importorskip("PIL.Image")
    x, y = tiles
    n = 12

    def build(lo):
        return (
            datasets.Dataset.from_dict(
                {
                    "image": [PIL.fromarray(t) for t in x[lo : lo + n]],
                    "label": [int(v) for v in y[lo : lo + n].argmax(1)],
                    "text": [f"t{i}" for i in range(n)],
                    "vec": [[float(i), 2.0] for i in range(n)],
                    "tokens": [list(range(i % 5)) for i in range(n)],
                }
            )
            .cast_column("image", datasets.Image())
            .cast_column("label", datasets.ClassLabel(names=[f"k{i}" for i in range(7)]))
        )

    single = str(tmp_path / "one.parquet")
    build(0).to_parquet(single)
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    build(0).to_parquet(str(repo / "data" / "train-00000-of-00001.parquet"))
    build(n).to_parquet(str(repo / "data" / "test-00000-of-00001.parquet"))
    for path, split, lo in ((single, "data", 0), (str(repo), "train", 0), (str(repo), "test", n)):
        with dstore.open(path) as ds:
            fields = ds[split]
            assert fields["image"].kind == Image(np.uint8, None, None, None, "png")
            assert fields["label"].kind == Tensor(np.int64)
            assert fields["vec"].kind == Tensor(np.float64, (2,))
            assert fields["tokens"].kind == Ragged(np.int64)
            np.testing.assert_array_equal(fields["label"][:], y[lo : lo + n].argmax(1))
            assert fields["text"][3] == "t3"
            np.testing.assert_array_equal(fields["tokens"][4], np.arange(4))
            png = fields["image"][2]
            np.testing.assert_array_equal(np.asarray(PIL.open(io.BytesIO(png))), x[lo + 2])
    with dstore.open(str(repo)) as ds:
        assert sorted(ds.reader.schema.splits) == ["test", "train"]


def test_reads_pandas_and_pyarrow_output(tmp_path):
    pd = pytest.importorskip("pandas")
    path = str(tmp_path / "pandas.parquet")
    pd.DataFrame(
        {"a": np.arange(5, dtype=np.int32), "s": list("abcde"), "f": np.linspace(0, 1, 5)}
    ).to_parquet(path)
    got = read_all(path)["data"]
    np.testing.assert_array_equal(got["a"], np.arange(5, dtype=np.int32))
    np.testing.assert_array_equal(got["f"], np.linspace(0, 1, 5))
    with dstore.open(path) as ds:
        assert ds["data"]["s"][4] == "e"
    table = pa.table(
        {
            "m": pa.array(
                [[[1, 2], [3, 4]], [[5, 6], [7, 8]]], pa.list_(pa.list_(pa.int16(), 2), 2)
            ),
            "r": pa.array([[1.5], [2.5, 3.5]]),
            "sl": pa.array([["x"], []]),
            "nested": pa.array([{"a": {"b": 1}}, {"a": {"b": 2}}]),
        }
    )
    arrow = str(tmp_path / "arrow.parquet")
    pq.write_table(table, arrow, row_group_size=1)
    with pytest.raises(SchemaError, match="column 'nested' is a struct"):
        dstore.open(arrow)
    with dstore.open(arrow, drop_unmapped=True) as ds:
        assert list(ds["data"]) == ["m", "r", "sl"]
        np.testing.assert_array_equal(
            ds["data"]["m"][:], np.arange(1, 9, dtype=np.int16).reshape(2, 2, 2)
        )
        np.testing.assert_array_equal(ds["data"]["r"][1], [2.5, 3.5])
        assert ds["data"]["sl"][1] == []


def test_one_record_reads_one_row_group(tmp_path, features):
    """Damage row group 0: records of row group 3 still read; record 0 names the damage."""
    feats, labels = features
    path = str(tmp_path / "f.parquet")
    dstore.save({"train": {"f": feats, "y": labels}}, path, row_group_rows=10)
    (shard,) = _shards(path)
    meta = pq.ParquetFile(shard).metadata
    assert meta.num_row_groups == 12
    col = meta.row_group(0).column(0)
    with open(shard, "r+b") as f:
        f.seek(col.data_page_offset + 8)
        f.write(b"\xff" * (col.total_compressed_size - 16))
    with dstore.open(path) as ds:
        np.testing.assert_array_equal(ds["train"]["f"][35], feats[35])
        with pytest.raises(CodecIOError, match="row group 0"):
            ds["train"]["f"][0]
        assert ds.reader.record_ranges("train", 1)[:3] == [(0, 10), (10, 20), (20, 30)]


def test_lossy_and_encoded_images(tmp_path, tiles, hf):
    x, _ = tiles
    path = str(tmp_path / "jpeg.parquet")
    dstore.save({"train": {"x": x[:8]}}, path, image_codec="jpeg", quality=90)
    ds = _load(hf, {"train": _shards(path)})["train"]
    assert ds[0]["image" if False else "x"].format == "JPEG"
    with dstore.open(path) as got:
        err = np.abs(got["train"]["x"][:].astype(int) - x[:8]).mean()
    assert 0 < err < 8
    from dstore.images.png import png_encoder

    pngs = [png_encoder("6")(t) for t in x[:4]]
    enc = str(tmp_path / "enc.parquet")
    kinds = {("train", "img"): Image(np.uint8, 3, None, None, "png")}
    dstore.save({"train": {"img": pngs}}, enc, kinds=kinds)
    with dstore.open(enc) as got:
        assert [got["train"]["img"][i] for i in range(4)] == pngs


def test_class_names_out_of_range_is_refused(tmp_path):
    path = str(tmp_path / "bad.parquet")
    with pytest.raises(CodecIOError, match="label 5 is not a class"):
        dstore.save({"train": {"y": np.array([0, 1, 5])}}, path, class_names="a,b")
    assert not os.path.exists(path)


def test_folder_without_extension_is_recognised(tmp_path, features):
    feats, _ = features
    path = str(tmp_path / "out")
    dstore.save({"f": feats}, path, format="parquet")
    assert infer_codec(path) == "parquet"
    np.testing.assert_array_equal(read_all(path)["data"]["f"], feats)


def test_verify_npz_parquet_npz_and_to_torch(tmp_path, label_maker_npz):
    pq_path = str(tmp_path / "d.parquet")
    back = str(tmp_path / "back.npz")
    for src, dst in ((label_maker_npz, pq_path), (pq_path, back)):
        subprocess.run(cli_command("convert", src, dst), check=True, capture_output=True)
        res = subprocess.run(
            cli_command("verify", src, dst), check=False, capture_output=True, text=True
        )
        assert res.returncode == 0, res.stdout + res.stderr
    torch = pytest.importorskip("torch")
    x = np.load(label_maker_npz)["x_train"]
    loader = torch.utils.data.DataLoader(dstore.to_torch(pq_path, split="train"), batch_size=None)
    got = np.stack([np.asarray(r["x"]) for r in loader])
    np.testing.assert_array_equal(got, x)


def test_resume_after_sigkill_between_row_groups_is_byte_identical(tmp_path, tiles, stepped):
    """Shards of several row groups killed between them (resume of every sharded format
    at its default options: the sharded suite)."""
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=np.tile(x, (10, 1, 1, 1)), y_train=np.tile(y, (10, 1)))
    options = ["-o", "shard_mb=0.1", "-o", "row_group_rows=16"]
    ref = str(tmp_path / "ref.parquet")
    subprocess.run(cli_command("convert", src, ref, *options), check=True, capture_output=True)
    reference = file_digests(ref)
    assert len(reference) > 6
    dst = str(tmp_path / "out.parquet")
    run = stepped(["convert", src, dst, *options])
    lines = 0
    while lines < 4 and run.next_step():  # header + 3 finished shards
        for journal in glob.glob(str(tmp_path / ".out.parquet.dstore-tmp-*" / "dstore.journal")):
            with open(journal) as f:
                lines = len(f.read().splitlines())
        run.go()
    run.signal(signal.SIGKILL)
    run.finish()
    assert not os.path.exists(dst)
    res = subprocess.run(
        [sys.executable, "-m", "dstore.cli", "convert", src, dst, *options, "--resume"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert int(res.stdout.split("resumed: ")[1].split(" of ")[0]) >= 3
    assert file_digests(dst) == reference


def test_reading_numbers_does_not_import_pandas(tmp_path, tiles):
    """pyarrow's Array.to_numpy imports pandas: a second or more in every fresh DataLoader
    worker before its first batch (failed before: the label column imported it)."""
    x, y = tiles
    path = str(tmp_path / "n.parquet")
    ragged = [np.arange(i % 4, dtype=np.float32) for i in range(8)]
    dstore.save({"train": {"x": x[:8], "y": y[:8], "b": np.arange(8) % 3 == 0, "r": ragged}}, path)
    code = f"""
import sys, numpy as np, dstore
with dstore.open({path!r}) as ds:
    split = ds["train"]
    got = [split[name][2:7] for name in ("x", "y", "b")] + [split["r"][5]]
print("pandas" in sys.modules, got[2].tolist(), got[3].tolist())
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(dstore.__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split("\n")[0] == "False [False, True, False, False, True] [0.0]"
    with dstore.open(path) as ds:
        np.testing.assert_array_equal(ds["train"]["y"][2:7], y[2:7])
        np.testing.assert_array_equal(ds["train"]["b"][:], np.arange(8) % 3 == 0)


def test_default_row_groups_hold_100_records_as_datasets_writes_images(tmp_path, tiles):
    """Row groups of 100 records by default (was 256): what ``datasets`` writes for image
    datasets, and three groups of 700 records became 7, so two DataLoader workers split
    them 400/300 instead of 444/256 (failed before: one group of 250)."""
    x, y = tiles
    path = str(tmp_path / "rg.parquet")
    xs, ys = np.concatenate([x] * 5)[:250], np.concatenate([y] * 5)[:250]
    dstore.save({"train": {"x": xs, "y": ys}}, path)
    (shard,) = _shards(path)
    meta = pq.ParquetFile(shard).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [100, 100, 50]
    with dstore.open(path) as ds:
        assert ds.reader.record_ranges("train", 1) == [(0, 100), (100, 200), (200, 250)]
        np.testing.assert_array_equal(ds["train"]["x"][95:105], xs[95:105])

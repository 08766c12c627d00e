"""``Split.to_arrow``: any format's records as a pyarrow Table, compared record by record
with ``iter_batches`` (what every reader yields), and read by pandas and Polars."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import dstore
from dstore.model import Image, Ragged, StringList, record

pa = pytest.importorskip("pyarrow")
pytest.importorskip("imagecodecs")

SOURCES = ["npz", "zarr", "tfrecords"]


def _every_kind(tiles):
    """A field of every kind, from photo tiles: raw and encoded images, labels, text..."""
    from dstore.images.png import png_encoder

    x, y = tiles
    n = 12
    rng = np.random.default_rng(3)
    data = {
        "image": x[:n],
        "gray": x[:n, :, :, 0],
        "vary": [x[i][: 20 + i, : 30 + 2 * i] for i in range(n)],
        "png": [png_encoder("6")(t) for t in x[:n]],
        "label": y[:n].argmax(1).astype(np.int64),
        "onehot": y[:n],
        "feat": rng.random((n, 2, 3)).astype(np.float16),
        "cplx": (rng.random((n, 2)) + 1j * rng.random((n, 2))).astype(np.complex64),
        "flag": np.arange(n) % 3 == 0,
        "caption": [f"tile {i} é" for i in range(n)],
        "blob": [bytes(range(i % 7)) for i in range(n)],
        "tags": [["sky", "tree"][: i % 3] for i in range(n)],
        "boxes": [rng.random((i % 4, 4)).astype(np.float32) for i in range(n)],
    }
    kinds = {
        ("train", "vary"): Image(np.uint8, 3, None, None, "raw"),
        ("train", "png"): Image(np.uint8, 3, None, None, "png"),
        ("train", "tags"): StringList(),
        ("train", "boxes"): Ragged(np.dtype(np.float32), (4,)),
    }
    return {"train": data}, kinds


def _expected(rec):
    """A record as Arrow's ``as_py`` gives it: numbers as nested lists (a complex number a
    pair), an encoded image as the Image struct."""
    if isinstance(rec, np.ndarray):
        if rec.dtype.kind == "c":
            rec = np.stack([rec.real, rec.imag], -1)
        return rec.tolist()
    return rec


@pytest.fixture(params=SOURCES)
def source(request, tmp_path, tiles):
    data, kinds = _every_kind(tiles)
    path = str(tmp_path / f"every.{request.param}")
    dstore.save(data, path, kinds=kinds)
    return path


def test_to_arrow_equals_iter_batches_record_by_record(source):
    with dstore.open(source) as ds:
        split = ds["train"]
        table = split.to_arrow()
        assert table.num_rows == split.count == 12
        assert table.column_names == list(split)
        for name, spec in split.spec.fields.items():
            column = table.column(name).to_pylist()
            cols = [b[name] for b in split.iter_batches(fields=[name])]
            want = [record(spec.kind, c, i) for c in cols for i in range(len(c))]
            for i, (got, w) in enumerate(zip(column, want, strict=True)):
                if isinstance(spec.kind, Image) and spec.kind.encoding != "raw":
                    assert got == {"bytes": w, "path": None}, (name, i)
                else:
                    assert got == _expected(w), (name, i)
        t = table.schema
        assert t.field("caption").type == pa.string() and t.field("blob").type == pa.binary()
        assert t.field("tags").type == pa.list_(pa.string())
        assert t.field("png").type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        assert t.field("image").type == pa.list_(pa.list_(pa.list_(pa.uint8(), 3), 64), 64)
        assert t.field("vary").type == pa.list_(pa.list_(pa.list_(pa.uint8())))
        assert t.field("boxes").type == pa.list_(pa.list_(pa.float32(), 4))
        assert t.field("label").type == pa.int64() and t.field("flag").type == pa.bool_()


def test_fields_and_record_range(source):
    with dstore.open(source) as ds:
        split = ds["train"]
        table = split.to_arrow(["caption", "boxes"], start=3, stop=7)
        assert table.column_names == ["caption", "boxes"]
        assert table.column("caption").to_pylist() == [f"tile {i} é" for i in range(3, 7)]
        boxes = split["boxes"]
        for i, got in enumerate(table.column("boxes").to_pylist(), 3):
            assert got == boxes[i].tolist()
        assert split.to_arrow(["label"], start=5, stop=5).num_rows == 0
        with pytest.raises(KeyError, match="no field 'nope'"):
            split.to_arrow(["nope"])


def test_pandas_reads_it(source, tiles):
    x, y = tiles
    with dstore.open(source) as ds:
        table = ds["train"].to_arrow()
        png = ds["train"]["png"][4]
    df = pytest.importorskip("pandas").DataFrame(table.to_pandas())
    assert list(df["label"]) == list(y[:12].argmax(1))
    assert list(df["caption"]) == [f"tile {i} é" for i in range(12)]
    assert df["png"][4]["bytes"] == png
    assert np.array_equal(np.stack([np.stack(r) for r in df["gray"][2]]), x[2, :, :, 0])


def test_polars_reads_it(source, tiles):
    pl = pytest.importorskip("polars")
    x, _ = tiles
    with dstore.open(source) as ds:
        frame = pl.from_arrow(ds["train"].to_arrow())
    assert frame["caption"].to_list() == [f"tile {i} é" for i in range(12)]
    assert frame["label"].dtype == pl.Int64 and frame["flag"].dtype == pl.Boolean
    assert frame["tags"].to_list() == [["sky", "tree"][: i % 3] for i in range(12)]
    assert np.array_equal(np.array(frame["image"][7].to_list(), np.uint8), x[7])


def test_duckdb_queries_it(source, tiles):
    duckdb = pytest.importorskip("duckdb")
    _, y = tiles
    with dstore.open(source) as ds:
        # DuckDB reads the variable by name; it has no float16 (Arrow's halffloat): "feat" out
        fields = [n for n in ds["train"] if n != "feat"]
        frame = ds["train"].to_arrow(fields)  # noqa: F841
        png = ds["train"]["png"][2]
    (got,) = duckdb.sql("select sum(label), sum(len(tags)) from frame").fetchall()
    assert got == (int(y[:12].argmax(1).sum()), sum(i % 3 for i in range(12)))
    rows = duckdb.sql("select png.bytes from frame").fetchall()
    assert rows[2][0] == png


def test_to_arrow_loads_pyarrow_only_when_called(tmp_path, tiles):
    x, _ = tiles
    path = str(tmp_path / "x.npz")
    np.savez(path, x_train=x[:4])
    code = (
        "import sys, dstore\n"
        f"ds = dstore.open({path!r}); ds['train']['x'][1]\n"
        "print('pyarrow' in sys.modules)\n"
        "t = ds['train'].to_arrow()\n"
        "print('pyarrow' in sys.modules, 'pandas' in sys.modules, t.num_rows)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(dstore.__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split() == ["False", "True", "False", "4"]


def test_parquet_keeps_raw_images_of_varying_size_as_nested_lists(tmp_path, tiles):
    """Left out of ``-o images=``, raw images of varying size are stored as the nested lists
    ``to_arrow`` gives and read back whole (failed before: AttributeError on writing)."""
    x, _ = tiles
    rgb = [x[i][: 20 + i, : 30 + 2 * i] for i in range(6)]
    gray = [x[i][: 25 - i, : 10 + i, 0] for i in range(6)]
    kinds = {
        ("train", "rgb"): Image(np.uint8, 3, None, None, "raw"),
        ("train", "gray"): Image(np.uint8, 0, None, None, "raw"),
    }
    path = str(tmp_path / "v.parquet")
    dstore.save({"train": {"rgb": rgb, "gray": gray}}, path, kinds=kinds, images="none")
    with dstore.open(path) as ds:
        for name, want in (("rgb", rgb), ("gray", gray)):
            for i, w in enumerate(want):
                got = ds["train"][name][i]
                assert got.dtype == w.dtype and got.shape == w.shape and np.array_equal(got, w)
        table = ds["train"].to_arrow()
    shard = pytest.importorskip("pyarrow.parquet").read_table(
        os.path.join(path, "train-00000-of-00001.parquet")
    )
    assert shard.column("rgb").to_pylist() == table.column("rgb").to_pylist()
    assert shard.column("gray").to_pylist()[3] == gray[3].tolist()


def test_an_image_whose_rows_differ_is_refused_naming_the_record():
    from dstore.errors import CodecIOError
    from dstore.model.arrow import from_arrow
    from dstore.model.schema import FieldSpec

    spec = FieldSpec("img", Image(np.uint8, 3, None, None, "raw"))
    good = [[[1, 2, 3], [4, 5, 6]]]
    arr = pa.array([[good[0]], [good[0], [[7, 8, 9]]]], pa.list_(pa.list_(pa.list_(pa.uint8()))))
    with pytest.raises(CodecIOError, match=r"^f, record 6: not an image .*axis 1"):
        from_arrow(spec, "value", arr, "f", 5)
    two = pa.array([[[[1, 2]]]], arr.type)  # 2 channels, the field has 3
    with pytest.raises(CodecIOError, match=r"^f, record 5: .*axis 2"):
        from_arrow(spec, "value", two, "f", 5)
    col = from_arrow(spec, "value", arr.slice(0, 1), "f", 0)
    assert col.shapes.tolist() == [[1, 2, 3]] and col.flat_values.tolist() == list(range(1, 7))


def test_bfloat16_becomes_float32_exactly(tmp_path, features):
    """Arrow has no bfloat16 (failed before: ArrowNotImplementedError, numpy type 256)."""
    pytest.importorskip("ml_dtypes")
    x, _ = features
    path = str(tmp_path / "bf.zarr")
    dstore.save({"train": {"x": x[:10]}}, path, dtype="bfloat16")
    with dstore.open(path) as ds:
        want = ds["train"]["x"][:]
        table = ds["train"].to_arrow()
    assert want.dtype.name == "bfloat16"
    assert table.schema.field("x").type == pa.list_(pa.float32(), 48)
    assert table.column("x").to_pylist() == want.astype(np.float32).tolist()

"""zarr and HDF5: outputs opened by the libraries themselves, foreign and corrupt inputs."""

from __future__ import annotations

import os

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.testing import read_all

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")


def test_zarr_output_read_by_zarr(tmp_path, label_maker_npz):
    out = str(tmp_path / "d.zarr")
    dstore.convert(label_maker_npz, out)
    root = zarr.open_group(out, mode="r")
    assert root.metadata.zarr_format == 3
    with np.load(label_maker_npz) as src:
        np.testing.assert_array_equal(root["train"]["x"][:], src["x_train"])
        np.testing.assert_array_equal(root["val"]["y"][:], src["y_val"])
    codecs = root["train"]["x"].metadata.codecs
    assert any("blosc" in type(c).__name__.lower() for c in codecs)


def test_hdf5_output_read_by_h5py(tmp_path, label_maker_npz):
    out = str(tmp_path / "d.h5")
    dstore.convert(label_maker_npz, out, options={"compression": "gzip", "level": "4"})
    with h5py.File(out, "r") as f, np.load(label_maker_npz) as src:
        np.testing.assert_array_equal(f["train/x"][:], src["x_train"])
        np.testing.assert_array_equal(f["test/y"][:], src["y_test"])
        assert f["train/x"].compression == "gzip"
        assert f["train/x"].chunks[1:] == f["train/x"].shape[1:]


def test_reads_zarr_v2_group(tmp_path):
    path = str(tmp_path / "v2.zarr")
    g = zarr.open_group(path, mode="w", zarr_format=2)
    g.create_array("x_train", data=np.arange(20, dtype=">i4").reshape(10, 2), chunks=(3, 2))
    g.create_array("y_train", data=np.arange(10, dtype=np.uint8), chunks=(4,))
    got = read_all(path)
    np.testing.assert_array_equal(got["train"]["x"], np.arange(20).reshape(10, 2))
    np.testing.assert_array_equal(got["train"]["y"], np.arange(10))


def test_reads_nested_zarr_groups_and_zip_store(tmp_path):
    path = str(tmp_path / "n.zarr.zip")
    store = zarr.storage.ZipStore(path, mode="w")
    g = zarr.open_group(store, mode="w")
    g.create_group("train").create_array("a", data=np.arange(6.0))
    g.create_group("test").create_array("a", data=np.arange(3.0))
    store.close()
    got = read_all(path)
    assert set(got) == {"train", "test"}
    np.testing.assert_array_equal(got["test"]["a"], np.arange(3.0))


def test_big_endian_hdf5(tmp_path):
    path = str(tmp_path / "be.h5")
    data = np.arange(12, dtype=">f8").reshape(6, 2) / 7
    with h5py.File(path, "w") as f:
        f.create_dataset("train/x", data=data)
    got = read_all(path)["train"]["x"]
    np.testing.assert_array_equal(got, data)
    out = str(tmp_path / "be.npz")
    dstore.convert(path, out)
    assert dstore.verify(path, out).ok


def _h5py_test_file(name: str) -> str:
    path = os.path.join(os.path.dirname(h5py.__file__), "tests", "data_files", name)
    if not os.path.exists(path):
        pytest.skip("h5py test data not installed")
    return path


def test_h5py_complex_test_file_is_read_with_byte_orders():
    path = _h5py_test_file("compound-dtype-complex.h5")
    got = read_all(path)["data"]
    with h5py.File(path, "r") as f:
        for name in f:
            np.testing.assert_array_equal(got[name], f[name][:])
            assert got[name].dtype == f[name].dtype


def test_compound_is_refused_and_strings_are_read(tmp_path, capsys):
    strings = str(tmp_path / "strings.h5")
    compound = str(tmp_path / "compound.h5")
    with h5py.File(strings, "w") as f:
        f.create_dataset("names", data=["a", "bb", "ccc"], dtype=h5py.string_dtype())
    with h5py.File(compound, "w") as f:
        f.create_dataset("table", data=np.zeros(4, dtype=[("a", "i4"), ("b", "f8")]))
    assert main(["info", compound]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "compound" in err[0] and "dataset" in err[0], err
    with dstore.open(strings) as ds:  # strings are a field kind now
        assert ds["data"]["names"][:] == ["a", "bb", "ccc"]


def test_missing_hdf5_filter_is_a_clear_error(tmp_path, capsys):
    """A dataset compressed with a filter id this HDF5 does not have (registered id 32001, blosc)."""
    hdf5plugin = pytest.importorskip("hdf5plugin")
    path = str(tmp_path / "blosc.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(100), chunks=(10,), **hdf5plugin.Blosc())
    code = (
        "import sys; sys.modules['hdf5plugin'] = None\n"
        "import h5py\n"
        "from dstore.cli import main\n"
        f"sys.exit(main(['info', {path!r}]))\n"
    )
    import subprocess
    import sys

    env = dict(os.environ, HDF5_PLUGIN_PATH=str(tmp_path / "none"))
    res = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env
    )
    assert res.returncode == 2, res.stderr
    assert "filter 32001" in res.stderr and "not installed" in res.stderr


def test_truncated_hdf5(tmp_path, capsys, label_maker_npz):
    out = str(tmp_path / "d.h5")
    dstore.convert(label_maker_npz, out)
    with open(out, "rb") as f:
        data = f.read()
    bad = tmp_path / "cut.h5"
    bad.write_bytes(data[: len(data) // 3])
    assert main(["convert", str(bad), str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cut.h5" in err[0]
    assert not (tmp_path / "o.npz").exists()


def test_zarr_chunk_replaced_by_garbage(tmp_path, capsys, label_maker_npz):
    out = str(tmp_path / "d.zarr")
    dstore.convert(label_maker_npz, out)
    chunk_dir = os.path.join(out, "train", "x")
    chunks = sorted(n for n in os.listdir(chunk_dir) if n.startswith("c."))  # c.0.0.0.0
    assert chunks
    victim = os.path.join(chunk_dir, chunks[0])
    with open(victim, "wb") as f:
        f.write(b"garbage" * 100)
    assert main(["convert", out, str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'x'" in err[0]
    assert not (tmp_path / "o.npz").exists()


def test_zarr_fsspec_urls(tmp_path, label_maker_npz):
    pytest.importorskip("fsspec")
    url = "memory://dstore-test/data.zarr"
    dstore.convert(label_maker_npz, url)
    with pytest.raises(dstore.OutputExistsError):
        dstore.convert(label_maker_npz, url)
    assert dstore.verify(label_maker_npz, url).ok
    local = str(tmp_path / "l.zarr")
    dstore.convert(url, local)
    assert dstore.verify(label_maker_npz, "file://" + local).ok
    dstore.convert(label_maker_npz, "memory://x/out.npz")  # staged locally, then uploaded
    assert dstore.verify(label_maker_npz, "memory://x/out.npz").ok
    dstore.output.remove_path(url)


@pytest.mark.parametrize("compression", ["gzip", "lzf"])
@pytest.mark.parametrize("shuffle", ["false", "true"])
def test_hdf5_parallel_chunks_read_by_h5py(tmp_path, features, shuffle, compression):
    """Chunks compressed by dstore's threads and written directly decode in plain h5py."""
    feats, labels = features[0][:117], features[1][:117]  # 117 = 23 chunks of 5 + a partial one
    out = str(tmp_path / "f.h5")
    # incompressible bytes: LZF stores such chunks raw, flagged in the chunk's filter mask
    noise = np.frombuffer(np.random.default_rng(0).bytes(117 * 64), np.uint8).reshape(117, 64)
    dstore.save(
        {"f": feats, "y": labels, "noise": noise},
        out,
        chunk_mb="0.001",
        shuffle=shuffle,
        level="6",
        compression=compression,
    )
    with h5py.File(out, "r") as f:
        ds = f["data/f"]
        assert ds.compression == compression and ds.shuffle == (shuffle == "true")
        np.testing.assert_array_equal(f["data/noise"][:], noise)
        assert ds.chunks[0] == 5 and len(feats) % 5  # many chunks, the last one partial
        np.testing.assert_array_equal(ds[:], feats)
        np.testing.assert_array_equal(f["data/y"][:], labels)


@pytest.mark.parametrize("compression", ["blosc", "zstd"])
def test_hdf5_plugin_filters(tmp_path, capsys, features, compression):
    pytest.importorskip("hdf5plugin")
    feats, labels = features
    out = str(tmp_path / "p.h5")
    dstore.save({"f": feats, "y": labels}, out, compression=compression, level="5")
    got = read_all(out)["data"]
    np.testing.assert_array_equal(got["f"], feats)
    assert main(["info", out]) == 0
    assert "other tools need hdf5plugin" in capsys.readouterr().out


def test_zarr_sharding(tmp_path, features):
    feats, labels = features
    out = str(tmp_path / "s.zarr")
    dstore.save({"f": feats, "y": labels}, out, chunk_mb="0.001", shard_chunks="4")
    arr = zarr.open_group(out, mode="r")["data"]["f"]
    assert arr.shards is not None and arr.shards[0] == 4 * arr.chunks[0]
    np.testing.assert_array_equal(arr[:], feats)
    np.testing.assert_array_equal(read_all(out)["data"]["y"], labels)


@pytest.mark.parametrize(
    ("cname", "shuffle"), [("zstd", "shuffle"), ("lz4", "bitshuffle"), ("zstd", "noshuffle")]
)
def test_zarr_chunk_files_are_byte_identical_to_zarrs_own(tmp_path, tiles, cname, shuffle):
    """dstore encodes and writes chunk files itself; zarr writing the same array must produce the same files."""
    from zarr.codecs import BloscCodec, Crc32cCodec

    x, _ = tiles
    x = x[:23]  # 23 = 4 chunks of 5 + a partial edge chunk
    ours = str(tmp_path / "ours.zarr")
    tile_mb = x[0].nbytes * 5 / 2**20
    dstore.save(
        {"train": {"x": x}}, ours, chunk_mb=str(tile_mb), cname=cname, shuffle=shuffle, clevel="5"
    )
    ref = zarr.open_group(str(tmp_path / "ref.zarr"), mode="w", zarr_format=3).create_group("train")
    arr = ref.create_array(
        "x",
        shape=x.shape,
        dtype=x.dtype,
        chunks=(5, *x.shape[1:]),
        fill_value=0,
        compressors=(BloscCodec(cname=cname, clevel=5, shuffle=shuffle), Crc32cCodec()),
        chunk_key_encoding={"name": "default", "separator": "."},  # as dstore writes them
    )
    arr[:] = x
    folder = os.path.join(tmp_path, "ref.zarr", "train", "x")
    files = [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("c.")]
    assert len(files) == 5
    for path in files:
        mine = path.replace("ref.zarr", "ours.zarr")
        with open(path, "rb") as a, open(mine, "rb") as b:
            assert a.read() == b.read(), path
    np.testing.assert_array_equal(zarr.open_group(ours, mode="r")["train"]["x"][:], x)


@pytest.mark.parametrize("shape", ["dag", "cycle"])
def test_a_group_reached_by_two_links_is_refused_not_walked_per_path(tmp_path, capsys, shape):
    """40 groups each holding two hard links to the one before: 2**40 paths to one
    dataset in a 47 kB file, and `dstore info` walked them all (found by a
    hostile-input pass). A soft link back to the root is the same case."""
    import h5py

    src = str(tmp_path / f"{shape}.h5")
    with h5py.File(src, "w") as f:
        group = f.create_group("g0")
        group.create_dataset("x", data=np.arange(3))
        if shape == "dag":
            for level in range(1, 41):
                group, previous = f.create_group(f"g{level}"), group
                group["a"], group["b"] = previous, previous
        else:
            group["up"] = h5py.SoftLink("/")
    assert main(["info", src]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "again (a second link to it)" in err[0], err
    # one link to each group is a plain file
    with h5py.File(src, "a") as f:
        for name in list(f):
            if name != "g0":
                del f[name]
        if "up" in f["g0"]:
            del f["g0/up"]
    np.testing.assert_array_equal(read_all(src)["g0"]["x"], [0, 1, 2])


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_a_record_axis_of_empty_records_without_end_is_refused(tmp_path, capsys, fmt):
    """A (2**62, 0) dataset is a few hundred bytes, and `dstore convert` walked its
    record axis for ever (found by a hostile-input pass): one line, exit 2, nothing
    written. (npz headers: tests/test_npz.py.)"""
    src = str(tmp_path / f"e.{fmt}")
    if fmt == "h5":
        import h5py

        with h5py.File(src, "w") as f:
            f.create_dataset("x", shape=(2**62, 0), dtype="f8")
    else:
        import zarr

        zarr.open_group(src, mode="w").create_array("x", shape=(2**62, 0), dtype="f8")
    for args in (["info", src], ["convert", src, str(tmp_path / "o.npz")]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "empty records is not data" in err[0], err
    with pytest.raises(dstore.errors.SchemaError, match="empty records"):
        dstore.open(src)
    assert sorted(os.listdir(tmp_path)) == [f"e.{fmt}"]


def test_many_files_of_empty_records_without_end_are_refused_as_one_dataset(tmp_path, capsys):
    """The same bound for a glob of files read as one dataset (its record counts add up)."""
    import h5py

    for i in range(2):
        with h5py.File(tmp_path / f"e{i}.h5", "w") as f:
            f.create_dataset("x", shape=(2**62, 0), dtype="f8")
    assert main(["info", str(tmp_path / "*.h5")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "empty records is not data" in err[0], err


@pytest.mark.parametrize("compression", ["gzip", "lzf", "none"])
def test_hdf5_writer_and_reader_leave_no_h5py_object_in_a_reference_cycle(
    tmp_path, label_maker_npz, compression
):
    """A cycle is freed by whichever thread next collects, and freeing an h5py object
    there takes h5py's global lock: on fsspec's event-loop thread, while another thread
    reads a remote HDF5 file under that lock, the process hangs (see test_s3)."""
    import gc

    out = str(tmp_path / "d.h5")
    gc.collect()
    enabled, debug = gc.isenabled(), gc.get_debug()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # everything a collection frees lands in gc.garbage
    try:
        dstore.convert(label_maker_npz, out, options={"compression": compression})
        dstore.save(
            {"t": {"r": [np.arange(i) for i in range(5)], "s": ["a", "bc", "d", "ef", "g"]}},
            str(tmp_path / "v.h5"),
        )
        read_all(out)
        read_all(str(tmp_path / "v.h5"))
        assert dstore.verify(label_maker_npz, out).ok
        dstore.convert(out, str(tmp_path / "back.npz"))
        gc.collect()
        cyclic = sorted({type(o).__module__ + "." + type(o).__name__ for o in gc.garbage})
    finally:
        gc.garbage.clear()
        gc.set_debug(debug)
        if enabled:
            gc.enable()
    assert not [name for name in cyclic if name.startswith("h5py.")], cyclic


@pytest.mark.parametrize("shuffle", [False, True])
def test_hdf5_deflated_chunks_are_libdeflates_and_read_by_h5py(tmp_path, tiles, shuffle):
    """Each gzip chunk is libdeflate's zlib stream of the chunk (twice zlib's speed, the same
    size), after HDF5's byte shuffle when asked (big-endian floats here); plain h5py reads
    every value back."""
    imagecodecs = pytest.importorskip("imagecodecs")
    x, _ = tiles
    feats = (x[:, :16, :16, :].reshape(len(x), -1) / 7.0).astype(">f8")
    src = str(tmp_path / "d.npz")
    np.savez(src, x_train=x, f_train=feats)
    out = str(tmp_path / "o.h5")
    dstore.convert(src, out, options={"chunk_mb": 0.05, "level": 4, "shuffle": shuffle})
    with h5py.File(out, "r") as f:
        np.testing.assert_array_equal(f["train/x"][:], x)
        np.testing.assert_array_equal(f["train/f"][:], feats)
        for name, arr in (("x", x), ("f", feats)):
            ds = f[f"train/{name}"]
            rows = ds.chunks[0]
            assert len(arr) > rows  # several chunks
            _, blob = ds.id.read_direct_chunk((0,) * ds.ndim)
            raw = np.ascontiguousarray(arr[:rows], dtype=ds.dtype).reshape(-1).view(np.uint8)
            if shuffle and ds.dtype.itemsize > 1:
                raw = raw.reshape(-1, ds.dtype.itemsize).T.reshape(-1)
            assert bytes(blob) == bytes(imagecodecs.deflate_encode(raw.tobytes(), level=4))


def test_zarr_chunk_paths_are_resolved_once_per_array(tmp_path, monkeypatch, label_maker_npz):
    """The chunk files of a store with a chunk per tile are written below their array's
    folder, resolved once per array, not once per chunk (each resolution is a dozen
    lstat calls under the GIL); zarr reads every tile back."""
    from dstore.model import names

    resolved = []
    real = os.path.realpath
    monkeypatch.setattr(
        names.os.path, "realpath", lambda p, **k: resolved.append(p) or real(p, **k)
    )
    out = str(tmp_path / "o.zarr")
    dstore.convert(label_maker_npz, out, options={"chunk_mb": 64 * 64 * 3 / 2**20})
    chunks = [f for r, _, fs in os.walk(out) for f in fs if f != "zarr.json"]
    assert len(chunks) >= 60 and len(resolved) < 30
    g = zarr.open_group(out, mode="r")
    with np.load(label_maker_npz) as src:
        for split in ("train", "test", "val"):
            np.testing.assert_array_equal(g[f"{split}/x"][:], src[f"x_{split}"])

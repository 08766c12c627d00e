"""--overwrite replaces datasets of the target format, never anything else.

Every destination that is not recognisably an output of the target format
(folders of other files, other formats under the target's extension, a TFRecord
folder without dstore's manifest, symlinks, FIFOs, the working folder) is
refused with one line and exit 2, and every byte under it is unchanged. Real
outputs of each format, written by dstore or by numpy/h5py/zarr/TensorFlow,
are replaced. An old output that cannot be removed entirely is reported, and
the next run removes it.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.testing import file_digests, usable_formats

pytest.importorskip("zarr")
pytest.importorskip("h5py")
pytest.importorskip("imagecodecs")

FORMATS = usable_formats()  # name -> extension, from the registry


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, tiles) -> dict[str, str]:
    """``src``, and one real output per format written by dstore from other data."""
    root = tmp_path_factory.mktemp("outputs")
    x, y = tiles
    src, old = str(root / "src.npz"), str(root / "old.npz")
    np.savez(src, x_train=x[:8], y_train=y[:8])
    np.savez(old, x_train=x[8:12], y_train=y[8:12])
    out = {"src": src}
    for name, ext in FORMATS.items():
        out[name] = str(root / f"made{ext}")
        dstore.convert(old, out[name])
    return out


def _copy(path: str, to: str) -> None:
    if os.path.isdir(path):
        shutil.copytree(path, to, symlinks=True)
    else:
        shutil.copyfile(path, to)


def _random_folder(path: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(path, "sub"))
    for i in range(1 + seed % 3):
        with open(os.path.join(path, f"file{i}.bin"), "wb") as f:
            f.write(rng.bytes(int(rng.integers(0, 5000))))
    with open(os.path.join(path, "sub", "notes.txt"), "w") as f:
        f.write("my thesis\n")


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _not_ours(target: str, outputs: dict[str, str]) -> dict[str, object]:
    """Destinations that --to ``target`` must refuse, by a short description:
    each value makes the destination at the path it is given."""
    cases: dict[str, object] = {}
    for seed in range(3):
        cases[f"folder of files #{seed}"] = lambda p, s=seed: _random_folder(p, s)
    cases["empty folder"] = os.makedirs
    cases["random bytes"] = lambda p: _write(p, np.random.default_rng(7).bytes(3000))
    cases["empty file"] = lambda p: _write(p, b"")
    cases["text file"] = lambda p: _write(p, b"HDF PK zarr_format tfrecord\n")
    for other in FORMATS:
        if other != target:
            cases[f"a real {other} output"] = lambda p, o=other: _copy(outputs[o], p)

    def zip_with_other_members(p: str) -> None:
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("x.npy", b"")
            z.writestr("readme.txt", "not an array")

    cases["zip with a non-.npy member"] = zip_with_other_members

    def shards_without_manifest(p: str) -> None:
        _copy(outputs["tfrecord"], p)
        os.remove(os.path.join(p, "dstore.json"))

    def foreign_manifest(p: str) -> None:
        os.makedirs(p)
        with open(os.path.join(p, "dstore.json"), "w") as f:
            f.write('{"format": "something-else"}')
        _random_folder(os.path.join(p, "data"), 1)

    def fake_zarr_metadata(p: str) -> None:
        os.makedirs(p)
        with open(os.path.join(p, "zarr.json"), "w") as f:
            f.write("not json")
        with open(os.path.join(p, ".zgroup"), "w") as f:
            f.write('{"zarr_format": 9}')

    cases["tfrecord shards without dstore.json"] = shards_without_manifest
    cases["dstore.json of something else"] = foreign_manifest
    cases["zarr.json/.zgroup that are not zarr metadata"] = fake_zarr_metadata
    return cases


@pytest.mark.parametrize("target", list(FORMATS))
def test_precious_folder_is_refused(tmp_path, capsys, outputs, target):
    """The issue's reproduction: `dstore convert a.npz precious --to zarr --overwrite`."""
    precious = tmp_path / "precious"
    _random_folder(str(precious), 5)
    before = file_digests(precious)
    assert main(["convert", outputs["src"], str(precious), "--to", target, "--overwrite"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and f"not a dataset in {target} format" in err[0], err
    assert "refusing to replace it" in err[0]
    assert file_digests(precious) == before
    assert sorted(os.listdir(tmp_path)) == ["precious"]  # no lock, temporary or old output left


@pytest.mark.parametrize("target", list(FORMATS))
def test_everything_else_is_refused_and_untouched(tmp_path, capsys, outputs, target):
    ext = FORMATS[target]
    cases = _not_ours(target, outputs)
    assert len(cases) >= 12
    for i, (what, make) in enumerate(cases.items()):
        folder = tmp_path / f"case{i}"
        folder.mkdir()
        dst = str(folder / f"out{ext}")
        make(dst)
        before = file_digests(dst)
        kind = os.path.isdir(dst)
        rc = main(["convert", outputs["src"], dst, "--overwrite"])
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert rc == 2, f"{what}: {err}"
        assert len(err) == 1 and "refusing to replace it" in err[0], f"{what}: {err}"
        assert os.path.isdir(dst) == kind and file_digests(dst) == before, what
        assert os.listdir(folder) == [f"out{ext}"], f"{what}: {os.listdir(folder)}"


def _written_by_the_library(target: str, path: str, tiles) -> None:
    """An output of ``target`` written by its own library, not by dstore."""
    x, y = tiles
    if target == "npz":
        np.savez_compressed(path, images=x[:3], labels=y[:3])
    elif target == "hdf5":
        import h5py

        with h5py.File(path, "w", userblock_size=512) as f:  # the signature sits at 512
            f["a"] = np.arange(5)
    elif target == "zarr":
        import zarr

        g = zarr.open_group(path, mode="w", zarr_format=2)  # v2: .zgroup at the root
        g.create_array("a", shape=(4,), dtype="i4")[:] = np.arange(4)
    elif target == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"a": np.arange(4)}), path)  # one file, as pandas writes too
    elif target == "webdataset":
        import webdataset

        with webdataset.TarWriter(path) as w:  # a single tar of samples
            w.write({"__key__": "000000", "cls": 3})
    elif target == "tfrecord":
        tf = pytest.importorskip("tensorflow")
        with tf.io.TFRecordWriter(path) as w:  # a single file of records
            w.write(b"one record")
    else:  # a format's own test module may say: tests/test_<name>.py
        own = importlib.import_module(f"test_{target}")
        if not hasattr(own, "write_by_its_library"):
            pytest.fail(f"{target}: add write_by_its_library(path, tiles) to test_{target}.py")
        own.write_by_its_library(path, tiles)


@pytest.mark.parametrize("target", list(FORMATS))
def test_real_old_outputs_are_replaced(tmp_path, capsys, outputs, tiles, target):
    ext = FORMATS[target]
    olds = {
        "dstore": lambda p: _copy(outputs[target], p),
        "its library": lambda p: _written_by_the_library(target, p, tiles),
    }
    for who, make in olds.items():
        folder = tmp_path / who.replace(" ", "_")
        folder.mkdir()
        dst = str(folder / f"out{ext}")
        make(dst)
        before = file_digests(dst)
        assert main(["convert", outputs["src"], dst, "--overwrite"]) == 0, capsys.readouterr().err
        assert file_digests(dst) != before
        assert dstore.verify(outputs["src"], dst).ok, who
        assert os.listdir(folder) == [f"out{ext}"]


def test_symlinks_are_never_followed(tmp_path, capsys, outputs):
    """A symlinked destination is refused; links inside an old output are removed, not followed."""
    target = tmp_path / "real.zarr"
    _copy(outputs["zarr"], str(target))
    before = file_digests(target)
    link = tmp_path / "link.zarr"
    link.symlink_to(target)
    assert main(["convert", outputs["src"], str(link), "--overwrite"]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert link.is_symlink() and file_digests(target) == before

    outside = tmp_path / "outside"
    _random_folder(str(outside), 2)
    kept = file_digests(outside)
    old = tmp_path / "old.zarr"
    _copy(outputs["zarr"], str(old))
    (old / "escape").symlink_to(outside, target_is_directory=True)
    (old / "escape-file").symlink_to(outside / "file0.bin")
    # links zarr did not write: --overwrite refuses naming them, --overwrite-foreign removes them
    assert main(["convert", outputs["src"], str(old), "--overwrite"]) == 2
    assert "'escape'" in capsys.readouterr().err and file_digests(outside) == kept
    assert main(["convert", outputs["src"], str(old), "--overwrite-foreign"]) == 0, (
        capsys.readouterr().err
    )
    assert not (old / "escape").exists() and file_digests(outside) == kept
    assert dstore.verify(outputs["src"], str(old)).ok


def test_fifo_is_refused_without_blocking(tmp_path, capsys, outputs):
    fifo = tmp_path / "out.npz"
    os.mkfifo(fifo)
    assert main(["convert", outputs["src"], str(fifo), "--overwrite"]) == 2
    assert "not a regular file or folder" in capsys.readouterr().err
    assert fifo.is_fifo()


def test_working_folder_is_never_replaced(tmp_path, capsys, outputs, monkeypatch):
    store = tmp_path / "out.zarr"
    _copy(outputs["zarr"], str(store))
    before = file_digests(store)
    monkeypatch.chdir(store)  # a zarr store, but the user is standing in it
    assert main(["convert", outputs["src"], ".", "--to", "zarr", "--overwrite"]) == 2
    assert "working folder" in capsys.readouterr().err
    assert file_digests(store) == before


def test_destination_appearing_during_the_run_is_not_replaced(tmp_path, outputs):
    """Checked again at the rename: a folder created meanwhile is not deleted."""
    dst = tmp_path / "out.zarr"

    def make_precious(n: int, total: int) -> None:
        if not dst.exists():
            _random_folder(str(dst), 3)

    with pytest.raises(dstore.OutputExistsError):
        dstore.convert(outputs["src"], dst, progress=make_precious)
    assert sorted(os.listdir(dst)) == ["file0.bin", "sub"]
    assert sorted(os.listdir(tmp_path)) == ["out.zarr"]

    # with overwrite: an old output swapped for a folder of files meanwhile is refused too
    shutil.rmtree(dst)
    _copy(outputs["zarr"], str(dst))

    def swap(n: int, total: int) -> None:
        if (dst / "zarr.json").exists():
            shutil.rmtree(dst)
            _random_folder(str(dst), 4)

    with pytest.raises(dstore.OutputExistsError, match="not a dataset in zarr format"):
        dstore.convert(outputs["src"], dst, overwrite=True, progress=swap)
    assert (dst / "sub" / "notes.txt").read_text() == "my thesis\n"
    assert sorted(os.listdir(tmp_path)) == ["out.zarr"]


def test_library_message_names_the_argument(tmp_path, capsys, outputs):
    dst = tmp_path / "out.npz"
    _copy(outputs["npz"], str(dst))
    with pytest.raises(dstore.OutputExistsError) as err:
        dstore.convert(outputs["src"], dst)
    assert "overwrite=True" in str(err.value) and "--overwrite" not in str(err.value)
    assert main(["convert", outputs["src"], str(dst)]) == 2
    line = capsys.readouterr().err.strip()
    assert "--overwrite" in line and "overwrite=True" not in line


def test_url_destinations_are_recognised_too(outputs):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe("/ow-test/notes.zarr/readme.txt", b"not a store")
    with pytest.raises(dstore.OutputExistsError, match="not a dataset in zarr format"):
        dstore.convert(outputs["src"], "memory://ow-test/notes.zarr", overwrite=True)
    assert fs.cat("/ow-test/notes.zarr/readme.txt") == b"not a store"
    dstore.convert(outputs["src"], "memory://ow-test/data.zarr")
    dstore.convert(
        outputs["src"], "memory://ow-test/data.zarr", overwrite=True, options={"clevel": "9"}
    )
    assert dstore.verify(outputs["src"], "memory://ow-test/data.zarr").ok
    fs.rm("/ow-test", recursive=True)


def _chattr(flag: str, path: str) -> bool:
    try:
        return (
            subprocess.run(["chattr", flag, path], check=False, capture_output=True).returncode == 0
        )
    except OSError:
        return False


@pytest.mark.parametrize("target", ["zarr", "tfrecord"])
def test_old_output_that_cannot_be_removed_is_reported_then_cleaned(tmp_path, outputs, target):
    """An immutable file (chattr +i: even root cannot delete it) inside the old output."""
    ext = FORMATS[target]
    dst = tmp_path / f"out{ext}"
    _copy(outputs[target], str(dst))
    stuck = next(p for p in sorted(dst.rglob("*")) if p.is_file())
    if not _chattr("+i", str(stuck)):
        pytest.skip("chattr +i is not available here (needs root and ext4/xfs/btrfs)")
    try:
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "dstore.cli",
                "convert",
                outputs["src"],
                str(dst),
                "--overwrite",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
        )
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        left = [f for f in os.listdir(tmp_path) if f.startswith(f".out{ext}.dstore-old-")]
        assert len(left) == 1 and left[0] in lines[0] and "written, but the old output" in lines[0]
        assert dstore.verify(outputs["src"], str(dst)).ok  # the new output is in place
        # still stuck: the next run says so again, after writing its output
        with pytest.raises(dstore.OldOutputLeftError, match="cannot be removed"):
            dstore.convert(outputs["src"], dst, overwrite=True)
        assert dstore.verify(outputs["src"], str(dst)).ok
    finally:
        for p in tmp_path.rglob(stuck.name):
            _chattr("-i", str(p))
    # once it can be removed, the next run removes it: nothing but the output is left
    dstore.convert(outputs["src"], dst, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == [f"out{ext}"]
    assert dstore.verify(outputs["src"], str(dst)).ok


def test_every_file_and_folder_of_a_store_is_fsynced_from_several_threads(
    tmp_path, monkeypatch, label_maker_npz
):
    """Before the rename, every chunk file and folder of a zarr store (a file per tile
    here) is fsynced once, each folder after its files, from several threads at once (the
    file system then commits them together; one after another each waited for its own)."""
    import threading

    synced: list[tuple[str, int]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), threading.get_ident()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    out = str(tmp_path / "out.zarr")
    dstore.convert(label_maker_npz, out, options={"chunk_mb": 64 * 64 * 3 / 2**20})
    tmp = next(p for p, _ in synced if os.path.basename(p).startswith(".out.zarr.dstore-tmp-"))
    mine = [(p, t) for p, t in synced if p == tmp or p.startswith(tmp + "/")]
    rel = [os.path.normpath(os.path.relpath(p, tmp)) for p, _ in mine]
    # the card (croissant.json) is written atomically, its temporary file fsynced first
    rel = [r for r in rel if ".dstore-tmp-" not in os.path.basename(r)]
    files = [os.path.relpath(os.path.join(r, f), out) for r, _, fs in os.walk(out) for f in fs]
    folders = [os.path.normpath(os.path.relpath(r, out)) for r, _, _ in os.walk(out)]
    assert len(files) > 60  # a chunk file per tile
    assert sorted(rel) == sorted(files + folders)  # each once
    for folder in folders:
        inside = [rel.index(f) for f in files if folder == "." or f.startswith(folder + "/")]
        assert max(inside) < rel.index(folder)
    assert len({t for _, t in mine}) > 1
    with dstore.open(out) as ds, np.load(label_maker_npz) as src:  # and the store reads back
        np.testing.assert_array_equal(ds["train"]["x"][:], src["x_train"])

"""Issue #26, "Security: reads outside the input": HDF5 external links and virtual
datasets, zarr symlinks out of the store and folder links in many-file sources are
refused with one line naming the link and its target, exit status 2 and nothing at
the destination, unless ``follow_links=True`` / ``--follow-links`` allows them."""

from __future__ import annotations

import json
import os
import time

import h5py
import numpy as np
import pytest
import zarr

import dstore
import dstore.api
from dstore.cli import main
from dstore.errors import CodecIOError, UnsafeInputError
from dstore.testing import read_all

SECRET = b"TOPSECRET-BYTES!"
ROWS = 4


def _secret_array() -> np.ndarray:
    return np.frombuffer(SECRET * ROWS, np.uint8).reshape(ROWS, len(SECRET))


def _secret_h5(path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with h5py.File(path, "w") as f:
        f["secret"] = _secret_array()
    return path


def _input_h5(tmp_path, fill) -> str:
    """``in/data.h5``: a field ``x`` and whatever ``fill(file)`` adds."""
    os.makedirs(tmp_path / "in", exist_ok=True)
    path = str(tmp_path / "in" / "data.h5")
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(ROWS * 3, dtype=np.float32).reshape(ROWS, 3)
        fill(f)
    return path


def _refused(capsys, tmp_path, argv: list[str], *parts: str) -> str:
    """The command exits 2 with one line holding ``parts``; no secret byte is printed
    and the output folder stays empty."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith("UnsafeInputError: "), line
    for part in parts:
        assert part in line, (part, line)
    assert "secret" not in captured.out and SECRET.decode() not in captured.out
    assert os.listdir(out) == [], line  # nothing left at the destination
    return line


def _every_command(capsys, tmp_path, src: str, *parts: str) -> str:
    """convert, info and verify (alone and against another dataset) all refuse ``src``."""
    dst = str(tmp_path / "out" / "o.npz")
    line = _refused(capsys, tmp_path, ["convert", src, dst], *parts)
    assert "--follow-links" in line and "follow_links=True" not in line
    _refused(capsys, tmp_path, ["info", src], *parts)
    _refused(capsys, tmp_path, ["verify", src], *parts)
    other = str(tmp_path / "other.npz")
    if not os.path.exists(other):
        dstore.save({"data": {"x": np.zeros((ROWS, 3), np.float32)}}, other)
    _refused(capsys, tmp_path, ["verify", other, src], *parts)
    return line


def _followed(tmp_path, src: str, want: dict) -> None:
    """With the option the link is read: library and CLI give the linked values."""
    dst = str(tmp_path / "followed.npz")
    dstore.convert(src, dst, follow_links=True)
    got = read_all(dst)
    for name, values in want.items():
        np.testing.assert_array_equal(got["data"][name], values)
    assert dstore.verify(src, dst, follow_links=True).ok
    assert dstore.api.check(src, follow_links=True).ok
    with dstore.open(src, follow_links=True) as ds:
        for name, values in want.items():
            np.testing.assert_array_equal(ds["data"][name][:], values)
    assert main(["convert", src, str(tmp_path / "cli.npz"), "--follow-links"]) == 0
    np.testing.assert_array_equal(
        read_all(str(tmp_path / "cli.npz"))["data"]["x"], got["data"]["x"]
    )
    assert main(["info", src, "--follow-links"]) == 0
    assert main(["verify", src, dst, "--follow-links"]) == 0


# --------------------------------------------------------------------- HDF5 links


@pytest.mark.parametrize("where", ["absolute", "relative ../", "same folder"])
def test_hdf5_external_link_is_refused_naming_link_and_target(tmp_path, capsys, where):
    if where == "same folder":
        target = _secret_h5(str(tmp_path / "in" / "secret.h5"))
        name = "secret.h5"
    else:
        target = _secret_h5(str(tmp_path / "outside" / "secret.h5"))
        name = target if where == "absolute" else "../outside/secret.h5"
    src = _input_h5(tmp_path, lambda f: f.__setitem__("secret", h5py.ExternalLink(name, "/secret")))
    line = _every_command(capsys, tmp_path, src, src, "'/secret'", "external link", repr(name))
    assert ("in its folder, but not the file named" in line) == (where == "same folder")
    with pytest.raises(UnsafeInputError, match="follow_links=True"):
        dstore.open(src)
    with pytest.raises(UnsafeInputError):
        dstore.info(src)
    _followed(tmp_path, src, {"secret": _secret_array()})


def test_hdf5_soft_link_through_an_external_link_is_refused(tmp_path, capsys):
    """A soft link whose path passes through an external link reads the other file too:
    it is refused even when it is walked before the external link itself."""
    _secret_h5(str(tmp_path / "outside" / "secret.h5"))

    def fill(f):
        f["z/ext"] = h5py.ExternalLink(str(tmp_path / "outside" / "secret.h5"), "/")
        f["a_soft"] = h5py.SoftLink("/z/ext/secret")

    src = _input_h5(tmp_path, fill)
    _refused(
        capsys,
        tmp_path,
        ["info", src],
        "'/a_soft' is a soft link to '/z/ext/secret'",
        "secret.h5",
        "another file",
    )


def test_hdf5_soft_link_inside_the_file_is_read(tmp_path):
    src = _input_h5(tmp_path, lambda f: f.__setitem__("y", h5py.SoftLink("/x")))
    got = read_all(src)
    np.testing.assert_array_equal(got["data"]["y"], got["data"]["x"])


def _vds(f, source: str, name: str = "secret") -> None:
    layout = h5py.VirtualLayout(shape=(ROWS, len(SECRET)), dtype=np.uint8)
    layout[:] = h5py.VirtualSource(source, name, shape=(ROWS, len(SECRET)))
    f.create_virtual_dataset("v", layout)


@pytest.mark.parametrize("relative", [False, True])
def test_hdf5_virtual_dataset_reading_another_file_is_refused(tmp_path, capsys, relative):
    target = _secret_h5(str(tmp_path / "outside" / "secret.h5"))
    name = "../outside/secret.h5" if relative else target
    src = _input_h5(tmp_path, lambda f: _vds(f, name))
    _every_command(capsys, tmp_path, src, src, "'/v'", "virtual dataset", repr(name))
    _followed(tmp_path, src, {"v": _secret_array()})


@pytest.mark.parametrize("missing", ["file", "dataset"])
def test_hdf5_virtual_dataset_with_a_missing_source_is_refused_even_when_following(
    tmp_path, capsys, missing
):
    """HDF5 reads a missing source as fill values, and verify passed them."""
    target = str(tmp_path / "outside" / "secret.h5")
    if missing == "dataset":
        _secret_h5(target)
    src = _input_h5(tmp_path, lambda f: _vds(f, target, "secret" if missing == "file" else "nope"))
    for argv in (["verify", src], ["convert", src, str(tmp_path / "out" / "o.npz")]):
        line = _refused(capsys, tmp_path, [*argv, "--follow-links"], "'/v'", "fill values")
        assert "--follow-links" not in line  # no option reads it
    with pytest.raises(UnsafeInputError, match="fill values"):
        dstore.open(src, follow_links=True)


def test_hdf5_virtual_dataset_within_the_file(tmp_path, capsys):
    """A virtual dataset whose source is the file itself is read; a source dataset that
    is not there is refused (fill values)."""

    def fill(f):
        f["secret"] = _secret_array()
        _vds(f, ".")

    src = _input_h5(tmp_path, fill)
    np.testing.assert_array_equal(read_all(src)["data"]["v"], _secret_array())
    bad = _input_h5(tmp_path, lambda f: _vds(f, ".", "absent"))
    _refused(capsys, tmp_path, ["info", bad], "'/v'", "'absent'", "fill values")


def test_hdf5_external_raw_storage_is_refused(tmp_path, capsys):
    """Values of a contiguous dataset kept in a raw external file (H5Pset_external)."""
    raw = tmp_path / "outside" / "raw.bin"
    raw.parent.mkdir()
    raw.write_bytes(SECRET * ROWS)

    def fill(f):
        f.create_dataset("secret", (ROWS, len(SECRET)), np.uint8, external=[(str(raw), 0, 64)])

    src = _input_h5(tmp_path, fill)
    _every_command(capsys, tmp_path, src, "'/secret'", "external file", str(raw))
    _followed(tmp_path, src, {"secret": _secret_array()})


def test_to_torch_refuses_and_follows(tmp_path):
    pytest.importorskip("torch")
    target = _secret_h5(str(tmp_path / "outside" / "secret.h5"))
    src = _input_h5(tmp_path, lambda f: f.__setitem__("secret", h5py.ExternalLink(target, "/")))
    with pytest.raises(UnsafeInputError, match="external link"):
        dstore.to_torch(src, "data")
    ds = dstore.to_torch(src, "data", fields=["x"], follow_links=True)
    assert len(list(ds)) == ROWS


# --------------------------------------------------------------------- zarr symlinks


def _store(tmp_path) -> str:
    path = str(tmp_path / "in" / "data.zarr")
    g = zarr.open_group(path, mode="w", zarr_format=3)
    g.create_array("x", data=np.arange(ROWS * 3, dtype=np.float32).reshape(ROWS, 3))
    g.create_array("secret", shape=(ROWS, len(SECRET)), dtype=np.uint8, chunks=(ROWS, 16))
    return path


def _outside_store(tmp_path) -> str:
    path = str(tmp_path / "outside" / "s.zarr")
    g = zarr.open_group(path, mode="w", zarr_format=3)
    g.create_array("secret", data=_secret_array(), chunks=(ROWS, 16))
    return path


@pytest.mark.parametrize("what", ["chunk file", "array folder"])
def test_zarr_symlink_out_of_the_store_is_refused(tmp_path, capsys, what):
    src = _store(tmp_path)
    outside = _outside_store(tmp_path)
    if what == "chunk file":
        link = os.path.join(src, "secret", "c", "0", "0")
        os.makedirs(os.path.dirname(link))
        target = os.path.join(outside, "secret", "c", "0", "0")
        os.symlink(target, link)
        name = "secret/c/0/0"
    else:
        import shutil

        shutil.rmtree(os.path.join(src, "secret"))
        target = os.path.join(outside, "secret")
        os.symlink(target, os.path.join(src, "secret"))
        name = "secret"
    _every_command(capsys, tmp_path, src, src, repr(name), f"symlink to {target}", "outside")
    _followed(tmp_path, src, {"secret": _secret_array()})


def test_zarr_links_within_the_store(tmp_path, capsys):
    """A chunk file linked to another file of the store is read; a folder linking back
    into the store would be read twice (or for ever): refused even when following."""
    src = _store(tmp_path)
    zarr.open_array(os.path.join(src, "secret"), mode="r+")[:] = _secret_array()
    chunk = os.path.join(src, "secret", "c", "0", "0")
    os.makedirs(os.path.join(src, "copy", "c", "0"))
    for meta in ("zarr.json",):
        with (
            open(os.path.join(src, "secret", meta)) as f,
            open(os.path.join(src, "copy", meta), "w") as g,
        ):
            g.write(f.read())
    os.symlink(chunk, os.path.join(src, "copy", "c", "0", "0"))
    got = read_all(src)
    np.testing.assert_array_equal(got["data"]["copy"], _secret_array())
    os.symlink("..", os.path.join(src, "copy", "loop"))
    for extra in ([], ["--follow-links"]):
        _refused(capsys, tmp_path, ["info", src, *extra], "'copy/loop'", "already read")


# ------------------------------------------------------------------ many-file sources


def _feats(tmp_path) -> str:
    """Two JSON files of two records each, a folder linking to itself and one to its
    parent (the glob in the issue read them once per loop level: 82 records)."""
    root = tmp_path / "feats"
    (root / "sub").mkdir(parents=True)
    for name, folder in (("a.json", root), ("b.json", root / "sub")):
        (folder / name).write_text(json.dumps([{"x": 1.0}, {"x": 2.0}]))
    os.symlink(".", root / "loop")
    os.symlink("..", root / "sub" / "up")
    return str(root)


@pytest.mark.parametrize("spec", ["feats/**/*.json", "feats", "feats/*/*.json"])
@pytest.mark.parametrize("follow", [False, True])
def test_folder_links_in_many_file_sources_are_read_once(
    tmp_path, capsys, monkeypatch, spec, follow
):
    monkeypatch.chdir(tmp_path)
    _feats(tmp_path)
    dst = "o.npz"
    assert main(["convert", spec, dst, *(["--follow-links"] if follow else [])]) == 0
    out = capsys.readouterr().out
    files = ["a.json", "sub/b.json"]
    if spec == "feats/*/*.json":  # one level down: through the link only when following
        files = ["loop/a.json", "sub/b.json"] if follow else ["sub/b.json"]
    with np.load(dst) as z:
        assert z["source"].tolist() == [f for f in files for _ in range(2)]
    assert ("folder link(s) not followed" in out) == (not follow), out


def test_glob_over_folders_linking_to_themselves_ends_quickly(tmp_path, monkeypatch):
    """Two self-links under each folder made the standard glob walk 2**40 paths."""
    monkeypatch.chdir(tmp_path)
    root = _feats(tmp_path)
    os.symlink(".", os.path.join(root, "loop2"))
    os.symlink(".", os.path.join(root, "sub", "self"))
    for follow in (False, True):
        t0 = time.perf_counter()
        report = dstore.convert("feats/**/*.json", f"o{follow}.npz", follow_links=follow)
        assert report.records == 4
        assert time.perf_counter() - t0 < 30


def test_the_same_file_twice_is_refused_by_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _feats(tmp_path)
    os.symlink("a.json", "feats/again.json")
    (tmp_path / "out").mkdir()
    line = _refused(capsys, tmp_path, ["convert", "feats/*.json", "out/o.npz"], "feats/again.json")
    assert "same file as feats/a.json" in line
    (tmp_path / "list.txt").write_text("feats/a.json\nfeats/sub/b.json\nfeats/a.json\n")
    with pytest.raises(UnsafeInputError, match="is the same file as"):
        dstore.convert("@list.txt", "out/o.npz")
    assert os.listdir("out") == []


def test_a_glob_matches_as_the_standard_glob_without_links(tmp_path, monkeypatch):
    from dstore import links

    monkeypatch.chdir(tmp_path)
    for rel in ("a/x.json", "a/.h/y.json", "a/b/c/z.json", ".top/w.json", "v.json", "a/b/u.txt"):
        os.makedirs(os.path.dirname(rel) or ".", exist_ok=True)
        open(rel, "w").close()
    import glob

    for pattern in ("**/*.json", "a/**", "*/*.json", "a/**/c/*", ".*/*.json", "a/[bc]/**/*"):
        want = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        assert links.glob_files(pattern, False, []) == want, pattern
    with pytest.raises(CodecIOError, match="matches no file"):
        dstore.convert("nothing/**/*.json", "o.npz")


def test_tfrecord_shard_linked_out_of_its_folder_is_refused(tmp_path, capsys):
    """The same rule for a TFRecord folder: a shard that is a link to another
    dataset's file would be read as this one's. Followed, the linked file is read and
    checked against the manifest like any shard: this dataset's own shard kept
    elsewhere reads; another dataset's is refused by its sha256."""
    data = {"data": {"x": np.arange(ROWS * 3, dtype=np.float32).reshape(ROWS, 3)}}
    src = str(tmp_path / "in" / "d.tfrecords")
    other = str(tmp_path / "outside" / "d.tfrecords")
    (tmp_path / "in").mkdir()
    (tmp_path / "outside").mkdir()
    dstore.save(data, src)
    dstore.save({"data": {"x": data["data"]["x"] + 100}}, other)
    (shard,) = [n for n in os.listdir(src) if n.endswith(".tfrecord")]
    kept = str(tmp_path / "outside" / "kept.tfrecord")
    os.rename(os.path.join(src, shard), kept)
    os.symlink(os.path.join(other, shard), os.path.join(src, shard))
    _refused(capsys, tmp_path, ["info", src], repr(shard), "outside the folder")
    with pytest.raises(CodecIOError, match=f"{shard}: .*the manifest lists"):
        dstore.convert(src, tmp_path / "o.npz", follow_links=True)
    os.remove(os.path.join(src, shard))
    os.symlink(kept, os.path.join(src, shard))
    got = read_all(dstore.convert(src, tmp_path / "o.npz", follow_links=True).dst)
    np.testing.assert_array_equal(got["data"]["x"], data["data"]["x"])


def test_an_unsafe_input_error_from_a_worker_process_reads_as_raised() -> None:
    """Shard worker processes send their errors pickled: the message came back with the
    follow_links hint twice (the hint was added again to args that held it)."""
    import pickle

    from dstore.sharding import processes

    for hint in (True, False):
        err = UnsafeInputError("a.zarr: x/c/0 links out of the store", hint=hint)
        back = pickle.loads(pickle.dumps(err))  # noqa: S301 - our own bytes
        assert type(back) is UnsafeInputError
        assert str(back) == str(err)
    pool = processes.encoder_processes(2)
    assert pool is not None
    with pytest.raises(UnsafeInputError) as got:
        pool.submit(_raise_unsafe).result(timeout=120)
    assert str(got.value).count("refused") == 1


def _raise_unsafe() -> None:
    raise UnsafeInputError("a.zarr: x/c/0 links out of the store")

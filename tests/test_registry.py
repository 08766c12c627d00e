"""Registry: names, extensions, entry points, missing dependencies, every codec class registered."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import textwrap

import numpy as np
import pytest

import dstore
import dstore.codecs
from dstore import registry
from dstore.abc import Codec


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("a.npz", "npz"),
        ("dir/a.NPZ", "npz"),
        ("x.zarr", "zarr"),
        ("x.zarr/", "zarr"),
        ("x.h5", "hdf5"),
        ("x.hdf5", "hdf5"),
        ("x.tfrecords", "tfrecord"),
        ("x.tfrecord", "tfrecord"),
        ("mnist-train.tfrecord-00000-of-00004", "tfrecord"),
        ("x.parquet", "parquet"),
        ("data/train-00000-of-00001.parquet", "parquet"),
    ],
)
def test_infer_codec(path, name):
    assert registry.infer_codec(path) == name


def test_unknown_name_and_extension():
    with pytest.raises(dstore.UnknownCodecError, match="available: npz"):
        registry.get_codec_class("lance")
    with pytest.raises(dstore.UnknownCodecError, match="no format claims"):
        registry.infer_codec("data.lance")


def test_missing_dependency_names_the_extra(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(registry, "_classes", {})
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "h5py" else real(name, *a)
    )
    # the distribution is dstore-ml: "dstore" on the package index is another project
    with pytest.raises(dstore.MissingDependencyError, match=r"pip install 'dstore-ml\[hdf5\]'"):
        registry.get_codec_class("hdf5")
    assert registry.available_codecs()["hdf5"] == "pip install 'dstore-ml[hdf5]'"
    from dstore import cli

    assert cli.main(["formats"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in lines if line.startswith("hdf5")] == ["'dstore-ml[hdf5]'"]


def test_register_codec_and_clobber(tmp_path):
    from dstore.codecs.npz import NpzCodec

    class OtherNpz(NpzCodec):
        name = "npz2"
        extensions = (".npz2",)

    dstore.register_codec(OtherNpz)
    try:
        with pytest.raises(ValueError, match="already registered"):
            dstore.register_codec(OtherNpz)
        dstore.register_codec(OtherNpz, clobber=True)
        path = str(tmp_path / "a.npz2")
        dstore.save({"x": np.arange(4)}, path)
        assert registry.infer_codec(path) == "npz2"
        np.testing.assert_array_equal(dstore.open(path)["data"]["x"][:], np.arange(4))
    finally:
        registry._entries.pop("npz2", None)
        registry._classes.pop("npz2", None)


def test_entry_point_plugin_is_loaded_lazily(tmp_path, monkeypatch):
    """A fake installed distribution declaring a ``dstore.codecs`` entry point."""
    pkg = tmp_path / "dstore_fake_plugin.py"
    pkg.write_text(
        textwrap.dedent(
            """
            from dstore.codecs.npz import NpzCodec

            class FakeCodec(NpzCodec):
                name = "fake"
                extensions = (".fake",)
            """
        )
    )
    dist = tmp_path / "dstore_fake_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: dstore-fake-plugin\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text("[dstore.codecs]\nfake = dstore_fake_plugin:FakeCodec\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    monkeypatch.setattr(registry, "_classes", dict(registry._classes))
    assert "fake" in registry.codec_names()
    assert "dstore_fake_plugin" not in sys.modules  # listed, not imported
    assert registry.infer_codec("x.fake") == "fake"
    assert registry.get_codec_class("fake").__name__ == "FakeCodec"


def test_every_codec_class_is_registered():
    classes = set()
    for mod in pkgutil.iter_modules(dstore.codecs.__path__):
        if mod.name.startswith("_") or mod.name == "base":
            continue
        module = importlib.import_module(f"dstore.codecs.{mod.name}")
        classes |= {
            obj
            for obj in vars(module).values()
            if isinstance(obj, type)
            and issubclass(obj, Codec)
            and obj is not Codec
            and obj.__module__ == module.__name__
        }
    registered = {registry.get_codec_class(n) for n in registry._BUILTIN}
    assert classes == registered


def test_messages_that_name_formats_list_the_registry(tmp_path):
    """The formats a message suggests (a sharded format for cache_dir=, a random-access
    form for map_style=) come from the codecs' capability flags, so a newly registered
    format is named without editing the message (failed before: fixed lists)."""
    pytest.importorskip("torch")
    from dstore.codecs.tfrecord import TFRecordCodec

    class OtherTFRecord(TFRecordCodec):
        name = "tfr2"
        extensions = (".tfr2",)
        random_access_when = "on Tuesdays"

    dstore.register_codec(OtherTFRecord)
    try:
        assert "tfr2" in registry.codecs_with(lambda c: c.sharded)
        assert "zarr" not in registry.codecs_with(lambda c: c.sharded)
        # a GZIP TFRecord only streams (a deflated npz makes a stored copy instead)
        gzipped = str(tmp_path / "d.tfrecords")
        dstore.save({"train": {"x": np.arange(8)}}, gzipped, compression="gzip")
        with pytest.raises(
            dstore.SchemaError, match=r"random-access form \(.*tfr2 \(on Tuesdays\)"
        ):
            dstore.to_torch(gzipped, "train", map_style=True)
        url = f"memory://registry-{tmp_path.name}/d.zarr"
        dstore.save({"train": {"x": np.arange(8)}}, url)
        with pytest.raises(ValueError, match=r"shard files of a sharded format \(.*tfr2"):
            dstore.to_torch(url, "train", cache_dir=tmp_path / "c")
    finally:
        registry._entries.pop("tfr2", None)
        registry._classes.pop("tfr2", None)

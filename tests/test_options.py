"""Typed codec options (dstore.options): every key of every codec parses from its text,
writes back to the same text, and every bad value is one OptionError line (CLI exit 2)."""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.errors import DstoreError, OptionError
from dstore.options import option, option_help, option_text, options_json, parse_options
from dstore.registry import get_codec_class
from dstore.testing import usable_formats

BUILTINS = list(usable_formats(text=True))  # every registered codec that can be used here


def _codec_class(name: str) -> type:
    try:
        return get_codec_class(name)
    except dstore.MissingDependencyError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("name", BUILTINS)
def test_every_default_reads_back_from_its_text(name):
    """What --help and manifests show for a default is text that parses to that default."""
    cls = _codec_class(name)
    defaults = cls.Options()
    shown = options_json(defaults)
    assert set(shown) == {f.name for f in dataclasses.fields(cls.Options)}
    text = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in shown.items()}
    assert cls.parse_options(text) == defaults
    codec = cls()
    assert cls.from_config(codec.get_config()) == codec  # JSON config round trip


@pytest.mark.parametrize("name", BUILTINS)
def test_unknown_and_unreadable_options_are_option_errors(name):
    cls = _codec_class(name)
    with pytest.raises(OptionError, match=rf"{name}: unknown option\(s\) nope; valid: "):
        cls(nope="1")
    hints = {f.name: type(f.default) for f in dataclasses.fields(cls.Options)}
    for key, tp in hints.items():
        if tp in (bool, int, float):
            with pytest.raises(OptionError, match=rf"{name}: option {key}='x y'"):
                cls(**{key: "x y"})
    # OptionError is a DstoreError (one CLI line) and still a ValueError for old callers
    assert issubclass(OptionError, DstoreError) and issubclass(OptionError, ValueError)


@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400"])
def test_a_number_option_is_finite(name, text):
    """Sizes and thresholds are finite: NaN passed every '>= 0' check (HDF5's
    record_chunk_kb=nan was taken, Parquet's row_group_mb=nan too) or failed later as
    'cannot convert float NaN to integer' naming no option; inf made one shard."""
    cls = _codec_class(name)
    for f in dataclasses.fields(cls.Options):
        if type(f.default) is float:
            with pytest.raises(OptionError, match=rf"{name}: option {f.name}='{text}'.*finite"):
                cls(**{f.name: text})
            with pytest.raises(OptionError, match=rf"{name}: option {f.name}=.*finite"):
                cls(**{f.name: float(text)})


def test_validate_range_errors_become_option_errors():
    for name, key, value in [
        ("npz", "level", "12"),
        ("tfrecord", "shard_mb", "0"),
        ("tfrecord", "compression", "zip"),
        ("tfrecord", "png_level", "11"),
        ("hdf5", "chunk_mb", "0"),
        ("hdf5", "chunk_mb", "-1"),
        ("hdf5", "record_chunk_kb", "-1"),
    ]:
        with pytest.raises(OptionError, match=key):
            _codec_class(name)(**{key: value})


@pytest.mark.parametrize(
    ("text", "images", "image_set"),
    [
        ("auto", None, None),
        ("none", (), set()),
        ("", (), set()),
        ("x", ("x",), {"x"}),
        ("x, y ,", ("x", "y"), {"x", "y"}),
    ],
)
def test_tfrecord_images_is_a_typed_field_list(text, images, image_set):
    opts = _codec_class("tfrecord").parse_options({"images": text})
    assert opts.images == images and opts.image_set() == image_set
    assert _codec_class("tfrecord").parse_options({"images": option_text(images, "auto")}) == opts


@pytest.mark.parametrize(
    ("text", "pairs"),
    [("", {}), ("x=image", {"x": "image"}), ("x=image, y = label,", {"x": "image", "y": "label"})],
)
def test_tfrecord_rename_is_a_typed_mapping(text, pairs):
    opts = _codec_class("tfrecord").parse_options({"rename": text})
    assert opts.rename == pairs and opts.renames() == pairs
    assert _codec_class("tfrecord").parse_options({"rename": option_text(pairs)}) == opts


@pytest.mark.parametrize("bad", ["x", "x=image,y", "=label"])
def test_tfrecord_rename_refuses_what_it_cannot_read(bad):
    with pytest.raises(OptionError, match="rename="):
        _codec_class("tfrecord").parse_options({"rename": bad})


def test_a_new_option_is_one_line_of_each_type():
    """What an engineer adding a key writes, and what users then get from it."""

    @dataclasses.dataclass(frozen=True)
    class Opts:
        quality: int = option(90, "JPEG quality 1..100")
        ratio: float = option(0.5, "a fraction")
        strict: bool = option(False, "refuse more")
        image_format: Literal["png", "jpeg"] = option("png", "how raw images are stored")
        fields: tuple[str, ...] | None = option(None, "fields to touch", none="all")
        # option() gives each instance its own copy of a mutable default
        names: dict[str, str] = option({}, "class names, e.g. 0=cat,1=dog")  # noqa: RUF009

    got = parse_options(
        Opts,
        {
            "quality": "75",
            "ratio": "0.25",
            "strict": "yes",
            "image_format": "jpeg",
            "fields": "a,b",
            "names": "0=cat,1=dog",
        },
        "demo",
    )
    assert got == Opts(75, 0.25, True, "jpeg", ("a", "b"), {"0": "cat", "1": "dog"})
    assert parse_options(Opts, {"fields": "all"}, "demo").fields is None
    assert Opts().names == {} and Opts().names is not Opts().names  # no shared mutable default
    with pytest.raises(
        OptionError, match=r"demo: option image_format='gif': expected one of png, jpeg"
    ):
        parse_options(Opts, {"image_format": "gif"}, "demo")
    rows = {k: (d, h) for k, d, h in option_help(Opts)}
    assert rows["image_format"] == ("png", "png | jpeg: how raw images are stored")
    assert rows["fields"][0] == "all" and rows["names"][0] == "" and rows["strict"][0] == "false"


@pytest.mark.parametrize(
    ("option_arg", "contains"),
    [
        ("nope=1", "OptionError: tfrecord: unknown option(s) nope"),
        ("shard_mb=lots", "OptionError: tfrecord: option shard_mb='lots'"),
        ("rename=x", "OptionError: tfrecord: option rename='x'"),
        ("compression=zip", "OptionError: tfrecord: compression must be none or gzip"),
    ],
)
def test_cli_option_errors_are_one_line_exit_2_nothing_written(
    tmp_path, capsys, option_arg, contains
):
    src = str(tmp_path / "in.npz")
    np.savez(src, x_train=np.arange(12).reshape(6, 2))
    out = str(tmp_path / "out.tfrecords")
    assert main(["convert", src, out, "-o", option_arg]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(contains), lines
    assert sorted(os.listdir(tmp_path)) == ["in.npz"]


def test_image_codec_is_the_one_name_and_image_format_an_old_one(tmp_path, tiles):
    """Every format chooses its image encoding with -o image_codec=; TFRecord's old
    image_format= still works, with a FutureWarning naming the new one, and the same bytes;
    both at once is one error."""
    import dstore
    from dstore.errors import OptionError
    from dstore.registry import available_codecs, get_codec_class

    for name, hint in available_codecs().items():
        if hint is None and any(
            f.name == "quality" for f in dataclasses.fields(get_codec_class(name).Options)
        ):
            fields = {f.name for f in dataclasses.fields(get_codec_class(name).Options)}
            assert "image_codec" in fields and "image_format" not in fields, name
    x, _ = tiles
    new, old = tmp_path / "new.tfrecords", tmp_path / "old.tfrecords"
    dstore.save({"train": {"x": x[:8]}}, str(new), image_codec="jpeg", quality=80)
    with pytest.warns(FutureWarning, match=r"image_format= is now called image_codec="):
        dstore.save({"train": {"x": x[:8]}}, str(old), image_format="jpeg", quality=80)
    assert (new / "train-00000-of-00001.tfrecord").read_bytes() == (
        old / "train-00000-of-00001.tfrecord"
    ).read_bytes()
    with pytest.raises(OptionError, match=r"give image_codec= only \(image_format= is its old"):
        dstore.save(
            {"train": {"x": x[:8]}},
            str(tmp_path / "both.tfrecords"),
            image_format="png",
            image_codec="jpeg",
        )


def test_the_cli_shows_an_old_option_name_as_one_warning_line(tmp_path, tiles, capsys):
    from dstore.cli import main

    x, _ = tiles
    src = tmp_path / "d.npz"
    np.savez(src, x_train=x[:4])
    rc = main(["convert", str(src), str(tmp_path / "o.tfrecords"), "-o", "image_format=jpeg"])
    err = capsys.readouterr().err
    assert rc == 0
    (line,) = [ln for ln in err.splitlines() if "image_format" in ln]
    assert line == (
        "dstore: warning: tfrecord: option image_format= is now called image_codec= "
        "(the old name will go)"
    )

"""The command line: happy paths and every bad input the foundation issue lists.

Each bad input must give one error line on stderr, a non-zero exit code,
nothing left behind in the output folder, and an untouched input.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.registry import codecs_with, default_extension
from dstore.testing import usable_formats


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _fails(capsys, argv: list[str], *, contains: str, code: int = 2) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == code, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert contains in lines[0], lines[0]
    return lines[0]


def _npz(path) -> dict[str, np.ndarray]:
    with np.load(str(path)) as z:
        return {k: z[k] for k in z.files}


def _only(tmp_path, *names: str) -> None:
    assert sorted(os.listdir(tmp_path)) == sorted(names)


def test_convert_info_verify(tmp_path, capsys, label_maker_npz):
    out = str(tmp_path / "out.npz")
    assert main(["convert", label_maker_npz, out]) == 0
    summary = capsys.readouterr().out.strip().splitlines()
    assert len(summary) == 1 and "60 records in 3 split(s)" in summary[0] and "MB/s" in summary[0]
    assert main(["verify", label_maker_npz, out]) == 0
    assert "all equal" in capsys.readouterr().out
    assert main(["info", out]) == 0
    text = capsys.readouterr().out
    assert "split train: 40 records" in text and "(key x_train)" in text
    assert sorted(np.load(out).files) == sorted(np.load(label_maker_npz).files)


def test_formats_lists_every_builtin(capsys):
    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    for name in dstore.available_codecs():
        assert name in out


def test_verify_exits_1_on_mismatch(tmp_path, capsys):
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    np.savez(a, x=np.arange(10))
    np.savez(b, x=np.r_[np.arange(9), 99])
    assert main(["verify", a, b]) == 1
    assert "1 of 10 records differ, first at record 9" in capsys.readouterr().out


def test_float16_convert_and_verify(tmp_path, capsys, features):
    feats, labels = features
    src, dst = str(tmp_path / "f.npz"), str(tmp_path / "f16.npz")
    np.savez(src, features=feats.astype(np.float64), labels=labels)
    assert main(["convert", src, dst, "--dtype", "features=float16"]) == 0
    assert "max abs" in capsys.readouterr().out
    assert _npz(dst)["features"].dtype == np.float16
    assert _npz(dst)["labels"].dtype == labels.dtype
    assert main(["verify", src, dst]) == 0


def test_missing_file(tmp_path, capsys):
    _fails(
        capsys,
        ["convert", str(tmp_path / "nope.npz"), str(tmp_path / "o.npz")],
        contains="nope.npz",
    )
    _only(tmp_path)


def test_not_a_zip(tmp_path, capsys):
    src = tmp_path / "bad.npz"
    src.write_bytes(b"this is not a zip file at all" * 10)
    before = _digest(str(src))
    _fails(capsys, ["convert", str(src), str(tmp_path / "o.npz")], contains="not a valid npz")
    _only(tmp_path, "bad.npz")
    assert _digest(str(src)) == before


def test_truncated_zip(tmp_path, capsys, label_maker_npz):
    with open(label_maker_npz, "rb") as f:
        data = f.read()
    src = tmp_path / "trunc.npz"
    src.write_bytes(data[: len(data) // 2])
    os.remove(label_maker_npz)
    _fails(capsys, ["convert", str(src), str(tmp_path / "o.npz")], contains="trunc.npz")
    _only(tmp_path, "trunc.npz")


def test_member_shorter_than_header(tmp_path, capsys):
    """A .npy header announcing 100 rows over data for 60: error names key and record."""
    arr = np.arange(60 * 4, dtype=np.int32).reshape(60, 4)
    src = str(tmp_path / "short.npz")
    with zipfile.ZipFile(src, "w") as z:
        import io

        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            buf, {"descr": "<i4", "fortran_order": False, "shape": (100, 4)}
        )
        z.writestr("x.npy", buf.getvalue() + arr.tobytes())
    line = _fails(capsys, ["convert", src, str(tmp_path / "o.npz")], contains="truncated")
    assert "'x'" in line and "record 60 of 100" in line
    _only(tmp_path, "short.npz")


def test_pickled_object_arrays_only_through_the_restricted_unpickler(tmp_path, capsys):
    """numpy's own test data holds pickled object arrays of arbitrary Python objects: the
    restricted unpickler rebuilds only plain arrays and strings, so these are refused by name."""
    objarr = os.path.join(os.path.dirname(np.__file__), "lib", "tests", "data", "py3-objarr.npz")
    if not os.path.exists(objarr):
        pytest.skip("numpy test data not installed")
    _fails(capsys, ["info", objarr], contains="py3-objarr.npz: key")
    _fails(capsys, ["convert", objarr, str(tmp_path / "o.npz")], contains="py3-objarr.npz: key")
    _only(tmp_path)


def test_ragged_record_counts(tmp_path, capsys):
    src = str(tmp_path / "ragged.npz")
    np.savez(src, x_train=np.zeros((10, 3)), y_train=np.zeros(9))
    _fails(capsys, ["convert", src, str(tmp_path / "o.npz")], contains="different record counts")
    _only(tmp_path, "ragged.npz")


def test_unknown_extension(tmp_path, capsys, label_maker_npz):
    line = _fails(
        capsys, ["convert", label_maker_npz, str(tmp_path / "out.xyz")], contains="no format claims"
    )
    assert "did you mean" not in line  # nothing near .xyz
    _only(tmp_path, "data.npz")


@pytest.mark.parametrize(
    ("name", "nearest"),
    [("out.tfrecrods", ".tfrecords"), ("out.jsn", ".json"), ("o.v2.parqet", ".parquet")],
)
def test_a_misspelt_extension_suggests_the_nearest(
    tmp_path, capsys, label_maker_npz, name, nearest
):
    line = _fails(
        capsys, ["convert", label_maker_npz, str(tmp_path / name)], contains="no format claims"
    )
    assert f"did you mean {nearest}?" in line
    _only(tmp_path, "data.npz")


def test_another_format_s_extension_is_not_taken_for_a_typo(tmp_path, capsys, label_maker_npz):
    """.npy is numpy's other format, not a misspelt .npz: no suggestion that would not work."""
    line = _fails(
        capsys, ["convert", label_maker_npz, str(tmp_path / "o.npy")], contains="no format claims"
    )
    assert "did you mean" not in line


def test_a_misspelt_format_name_suggests_the_nearest(tmp_path, capsys, label_maker_npz):
    out = str(tmp_path / "out")
    _fails(
        capsys,
        ["convert", label_maker_npz, out, "--to", "tfrecod"],
        contains="unknown format 'tfrecod' (did you mean 'tfrecord'?)",
    )
    _only(tmp_path, "data.npz")


def test_output_exists_needs_overwrite(tmp_path, capsys, label_maker_npz):
    out = tmp_path / "out.npz"
    out.write_bytes(b"precious")
    line = _fails(capsys, ["convert", label_maker_npz, str(out)], contains="already exists")
    assert "--overwrite" in line and "overwrite=True" not in line
    assert out.read_bytes() == b"precious"
    # not an npz: --overwrite refuses it too (tests/test_overwrite.py has the rest)
    _fails(
        capsys,
        ["convert", label_maker_npz, str(out), "--overwrite"],
        contains="not a dataset in npz format",
    )
    assert out.read_bytes() == b"precious"
    np.savez(out, old=np.arange(3))
    assert main(["convert", label_maker_npz, str(out), "--overwrite"]) == 0
    assert sorted(_npz(str(out)).keys()) == [
        "x_test",
        "x_train",
        "x_val",
        "y_test",
        "y_train",
        "y_val",
    ]
    _only(tmp_path, "data.npz", "out.npz")


def test_output_is_input(tmp_path, capsys, label_maker_npz):
    before = _digest(label_maker_npz)
    _fails(
        capsys,
        ["convert", label_maker_npz, label_maker_npz, "--overwrite"],
        contains="overwrite the input",
    )
    assert _digest(label_maker_npz) == before


def test_float16_overflow(tmp_path, capsys):
    src = str(tmp_path / "big.npz")
    x = np.ones((20, 4))
    x[7, 2] = 1e6
    x[9, 0] = -7e4
    np.savez(src, x=x)
    line = _fails(
        capsys, ["convert", src, str(tmp_path / "o.npz"), "--dtype", "float16"], contains="overflow"
    )
    assert "'x'" in line and "2 value(s)" in line and "first at record 7" in line
    _only(tmp_path, "big.npz")
    assert (
        main(
            ["convert", src, str(tmp_path / "o.npz"), "--dtype", "float16", "--on-overflow", "clip"]
        )
        == 0
    )
    assert "2 value(s) clipped" in capsys.readouterr().out
    assert np.load(str(tmp_path / "o.npz"))["x"][7, 2] == np.finfo(np.float16).max


def test_debug_shows_traceback(tmp_path, label_maker_npz):
    from dstore.errors import OutputExistsError

    with pytest.raises(OutputExistsError):
        main(["--debug", "convert", label_maker_npz, label_maker_npz])


def test_verify_one_npz_alone(tmp_path, capsys, label_maker_npz):
    assert main(["verify", label_maker_npz]) == 0
    assert "40 of 40 records decoded" in capsys.readouterr().out
    out = str(tmp_path / "c.npz")
    assert main(["convert", label_maker_npz, out]) == 0
    capsys.readouterr()
    with open(out, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 3] ^= 0xFF  # inside the deflated x_train member
        f.seek(0)
        f.write(data)
    assert main(["verify", out]) == 1
    assert "MISMATCH" in capsys.readouterr().out


@pytest.mark.slow  # builds photo tiles, converts to every format and benches them (~100 s)
def test_demo_runs(tmp_path, capsys, monkeypatch):
    """The README's first command: sample data from real photos, every format, verified, benched."""
    pytest.importorskip("sklearn")
    assert main(["demo", str(tmp_path / "demo"), "--records", "30"]) == 0
    out = capsys.readouterr().out
    assert out.count("verify: all fields bit-exact") == len(usable_formats())
    assert "recommendation:" in out and "outputs are in" in out
    assert {"data.npz", "data.tfrecords", "data.zarr", "data.h5", "od.npz", "bench.md"} <= set(
        os.listdir(tmp_path / "demo")
    )
    # it names what the bench wrote, and a next command that runs as printed
    demo = str(tmp_path / "demo")
    (wrote,) = [line for line in out.splitlines() if line.startswith("bench: wrote ")]
    for name in ("bench.md", "bench.png"):
        assert os.path.join(demo, name) in wrote and os.path.getsize(os.path.join(demo, name))
    (step,) = [line for line in out.splitlines() if line.startswith("next: ")]
    cd, _, command = step.removeprefix("next: ").partition(" && ")
    assert shlex.split(cd) == ["cd", demo]
    program, *argv = shlex.split(command)
    assert program == "dstore" and argv[0] == "info"
    monkeypatch.chdir(demo)
    assert main(argv) == 0
    assert "tf.data.TFRecordDataset" in capsys.readouterr().out
    # the object-detection sample the docs' --layout example runs on, as the demo says
    od, back = str(tmp_path / "demo" / "od.npz"), str(tmp_path / "od.tfrecords")
    layout = ["--layout", "tf-object-detection"]
    assert main(["convert", od, back, *layout, "-o", "class_names=dark,bright"]) == 0
    assert main(["convert", back, str(tmp_path / "back.npz"), *layout]) == 0
    assert main(["verify", od, str(tmp_path / "back.npz")]) == 0


# ----------------------------------------------------------------- help and printing


def _subparsers():
    import argparse

    from dstore.cli import build_parser

    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return parser, action.choices


def test_every_option_says_what_it_does_and_its_default():
    parser, subs = _subparsers()
    for name, sub in [("dstore", parser), *subs.items()]:
        text = sub.format_help()  # renders every %(default)s
        for action in sub._actions:
            if not action.option_strings or action.dest in ("help", "version"):
                continue
            where = f"{name} {action.option_strings[-1]}"
            assert action.help and len(action.help) > 15, where
            assert "default" in action.help, where
            if action.default not in (None, False):  # a real default value is printed as such
                assert f"(default: {action.default})" in " ".join(text.split()), where


def test_formats_and_convert_help_list_each_format_option():
    from dstore.options import option_help
    from dstore.registry import get_codec_class

    _, subs = _subparsers()
    convert_help = subs["convert"].format_help()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["formats"]) == 0
    formats = buf.getvalue()
    for name in usable_formats(text=True):
        for key, default, help_text in option_help(get_codec_class(name).Options):
            assert help_text, f"{name}: -o {key} has no help"
            for text in (formats, convert_help):
                assert re.search(
                    rf"-o {key}={re.escape(default)}\s+{re.escape(help_text)}", text
                ), (name, key)


DTYPES = [
    "|u1",
    "|i1",
    "<u2",
    ">u2",
    "<i4",
    ">i4",
    "<i8",
    ">i8",
    "<f2",
    ">f2",
    "<f4",
    ">f4",
    "<f8",
    ">f8",
    "<c8",
    ">c16",
    "|b1",
]


@pytest.mark.parametrize("fmt", ["npz", "zarr", "hdf5"])
def test_info_prints_numpy_dtype_names(tmp_path, capsys, fmt):
    rng = np.random.default_rng(0)
    arrays = {f"f{i}": (rng.normal(size=(3, 2)) * 10).astype(d) for i, d in enumerate(DTYPES)}
    src = str(tmp_path / "in.npz")
    np.savez(src, **arrays)
    path = src if fmt == "npz" else str(tmp_path / f"out.{'zarr' if fmt == 'zarr' else 'h5'}")
    if fmt != "npz":
        assert main(["convert", src, path]) == 0
        capsys.readouterr()
    assert main(["info", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    for i, d in enumerate(DTYPES):
        dt = np.dtype(d)
        (line,) = [ln for ln in lines if ln.split()[:1] == [f"f{i}"]]
        shown = line.split()[1]
        assert shown == dt.newbyteorder("=").name, (d, line)
        assert d not in line and dt.str not in line
        # byte order is shown exactly where the stored field is not native
        stored = dstore.info(path).schema.splits["data"].fields[f"f{i}"].dtype
        assert ("big-endian" in line) == (not stored.isnative and stored.itemsize > 1), line


def test_info_prints_zarr_codecs_as_json(tmp_path, capsys):
    src = str(tmp_path / "in.npz")
    np.savez(src, x_train=np.arange(40, dtype="<f4").reshape(10, 4), y_train=np.arange(10))
    for opts in ([], ["-o", "cname=lz4", "-o", "clevel=5"], ["-o", "shard_chunks=2"]):
        out = str(tmp_path / f"o{len(opts)}.zarr")
        assert main(["convert", src, out, *opts]) == 0
        capsys.readouterr()
        assert main(["info", out]) == 0
        details = [ln for ln in capsys.readouterr().out.splitlines() if ": zarr v3" in ln]
        assert len(details) == 2
        for line in details:
            chain = json.loads(line.split("codecs ", 1)[1])
            names = [c["name"] for c in chain]
            # every chunk ends in its CRC32C (issue #26): blosc, then crc32c; or a shard of them
            if names[-1] == "sharding_indexed":
                inner = chain[-1]["configuration"]["codecs"]
                assert [c["name"] for c in inner][-2:] == ["blosc", "crc32c"], line
                blosc = inner[-2]
            else:
                assert names[-2:] == ["blosc", "crc32c"], line
                blosc = chain[-2]
            assert blosc["configuration"]["cname"] == ("lz4" if "cname=lz4" in opts else "zstd")
            assert "Codec(" not in line and "<" not in line


def _closed_pipe_run(argv: list[str]) -> subprocess.CompletedProcess:
    """Run ``dstore argv`` with stdout a pipe whose reader has already gone away."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "dstore.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "argv",
    [
        ["formats"],
        ["info", "{npz}"],
        ["info", "{zarr}"],
        ["convert", "--help"],
        ["verify", "{npz}", "{npz}"],
    ],
)
def test_reader_going_away_ends_quietly(tmp_path, label_maker_npz, argv):
    zarr_path = str(tmp_path / "d.zarr")
    assert main(["convert", label_maker_npz, zarr_path]) == 0
    argv = [a.format(npz=label_maker_npz, zarr=zarr_path) for a in argv]
    proc = _closed_pipe_run(argv)
    # argparse itself swallows the error of a --help that fits no buffer: 0 is quiet too
    assert proc.returncode in ((0, 141) if "--help" in argv else (141,)), proc.stderr
    assert proc.stderr == ""


def test_pipe_into_head(label_maker_npz):
    # the `dstore` command installed beside this interpreter (a venv's bin/), whatever
    # PATH the test runner was started with
    bindir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": os.pathsep.join([bindir, os.environ.get("PATH", "")])}
    for command in (
        f"dstore info {shlex.quote(label_maker_npz)} | head -1",
        "dstore formats | head -1",
        "dstore convert --help | head -1",
    ):
        proc = subprocess.run(
            ["bash", "-c", command + "; echo rc=${PIPESTATUS[0]}"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        first, rc = proc.stdout.splitlines()
        assert proc.stderr == "", proc.stderr
        assert rc in ("rc=0", "rc=141")
        assert first.startswith((label_maker_npz, "npz", "usage: dstore convert"))


# ------------------------------------------- issue #27: what the command tells you


def _help_of(option: str, text: str) -> str:
    """The help paragraph of ``option`` in ``text`` without its whitespace: argparse wraps
    lines at hyphens too (``tf-`` / ``object-detection``)."""
    found = re.search(rf"\n  {re.escape(option)}\b(.*?)(?=\n  -|\Z)", text, re.S)
    assert found, option
    return "".join(found.group(1).split())


def test_format_options_list_every_registered_format():
    from dstore.registry import codec_names

    _, subs = _subparsers()
    for command, option in [
        ("convert", "--to"),
        ("convert", "--from"),
        ("info", "--from"),
        ("verify", "--from"),
    ]:
        text = _help_of(option, subs[command].format_help())
        for name in codec_names():
            assert re.search(rf"\b{name}\b", text), (command, option, name, text)


def test_index_from_offers_only_the_formats_it_can_index(tmp_path, capsys, label_maker_npz):
    """`dstore index --from` lists the formats whose codec says its records are frames
    (the capability flag), and a file of another format is refused naming them."""
    from dstore.registry import codec_names

    _, subs = _subparsers()
    text = _help_of("--from", subs["index"].format_help())
    indexable = codecs_with(lambda c: c.frame_indexes)
    assert indexable == ["tfrecord"]
    for name in codec_names():
        assert bool(re.search(rf"\b{name}\b", text)) == (name in indexable), (name, text)
    for argv in (["index", label_maker_npz], ["index", "--from", "npz", label_maker_npz]):
        _fails(capsys, argv, contains="npz files have no record index to write")
    _fails(capsys, ["index", label_maker_npz], contains="(indexes are written for tfrecord files)")
    _only(tmp_path, "data.npz")


def test_every_command_describes_itself_in_its_help():
    """`dstore X --help` has a paragraph saying what X does, beside the one-line summary
    `dstore --help` lists."""
    _, subs = _subparsers()
    for name, sub in subs.items():
        assert sub.description and len(sub.description) > 60, name
        text = " ".join(sub.format_help().split())
        assert " ".join(sub.description.split()) in text, name


def test_layout_and_sharded_help_come_from_the_registries():
    from dstore.layouts import layout_names
    from dstore.registry import get_codec_class

    _, subs = _subparsers()
    text = subs["convert"].format_help()
    for name in layout_names():
        assert name in _help_of("--layout", text)
    for name in usable_formats():
        cls = get_codec_class(name)
        assert (name in _help_of("--resume", text)) == cls.sharded, name
        assert (name in _help_of("--keep-encoded", text)) == cls.keeps_encoded_images, name


def test_debug_after_the_command(tmp_path, capsys, label_maker_npz):
    from dstore.errors import OutputExistsError

    with pytest.raises(OutputExistsError):
        main(["convert", label_maker_npz, label_maker_npz, "--debug"])
    # without it, still one line
    _fails(capsys, ["convert", label_maker_npz, label_maker_npz], contains="OutputExistsError")


def test_unquoted_glob_gets_one_line_saying_to_quote_it(tmp_path, capsys):
    feats = tmp_path / "feats"
    feats.mkdir()
    paths = []
    for i in range(12):
        path = feats / f"f{i:02d}.json"
        path.write_text(json.dumps({"v": [i, i + 1]}))
        paths.append(str(path))
    (tmp_path / "old.npz").write_bytes(b"")  # an output left by an earlier run
    for argv, count in [
        (["convert", *paths, str(tmp_path / "out.npz")], 12),
        (["convert", *paths, str(tmp_path / "old.npz")], 12),
        (["info", *paths], 12),
        (["verify", *paths[:3]], 3),
    ]:
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert f"{paths[0]}, {paths[1]}, ... {count} existing files" in lines[0]
        assert "quote it" in lines[0] and f'"{feats}/*.json"' in lines[0]
    assert not (tmp_path / "out.npz").exists() and not (tmp_path / "old.npz").stat().st_size
    # an unknown word that is no file keeps argparse's own message
    with pytest.raises(SystemExit):
        main(["convert", paths[0], str(tmp_path / "o.npz"), "not-a-file"])
    assert "unrecognized arguments: not-a-file" in capsys.readouterr().err
    # one existing path and one stray word (a list value given space-separated) is no glob
    with pytest.raises(SystemExit) as e:
        main(["bench", paths[0], "--dtypes", "keep", "float16"])
    assert e.value.code == 2
    assert "unrecognized arguments: float16" in capsys.readouterr().err


def test_layout_option_typo_lists_the_layouts_options(tmp_path, capsys, label_maker_npz):
    line = _fails(
        capsys,
        [
            "convert",
            label_maker_npz,
            str(tmp_path / "out.tfrecords"),
            "--layout",
            "tf-object-detection",
            "-o",
            "class_name=a,b",
        ],
        contains="unknown option(s) class_name",
    )
    assert "class_names" in line and "filenames" in line, line
    assert "did you mean class_names?" in line
    _only(tmp_path, "data.npz")


_SNIPPET_CHILD = r"""
import json, sys
exec(compile(sys.stdin.read(), "<dstore info snippet>", "exec"))
first = next(iter(dataset)) if "dataset" in dir() else example
print(json.dumps({k: v.numpy().tolist() for k, v in first.items()}))
"""


@pytest.mark.slow  # a child Python importing TensorFlow per format
@pytest.mark.tf
@pytest.mark.parametrize("fmt", codecs_with(lambda c: c.sharded))
def test_info_tensorflow_snippet_runs_as_printed(tmp_path, capsys, label_maker_npz, fmt):
    """The lines `dstore info` prints after "TensorFlow (...)" (every format that prints
    them), pasted into a fresh Python with TensorFlow, decode the first record: the
    import is part of what is printed."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("needs TensorFlow (the tf extra)")
    out = str(tmp_path / f"out{default_extension(fmt)}")
    assert main(["convert", label_maker_npz, out]) == 0
    assert main(["info", out]) == 0
    printed = capsys.readouterr().out.splitlines()
    heads = [i for i, ln in enumerate(printed) if ln.startswith("TensorFlow (train split)")]
    if not heads:
        pytest.skip(f"dstore info prints no TensorFlow snippet for {fmt}")
    start = heads[0]
    snippet = "\n".join(printed[start + 1 :])
    assert snippet.startswith("import tensorflow as tf")
    proc = subprocess.run(
        [sys.executable, "-c", _SNIPPET_CHILD],
        input=snippet,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = _npz(label_maker_npz)
    np.testing.assert_array_equal(first["x"], expected["x_train"][0])
    np.testing.assert_array_equal(first["y"], expected["y_train"][0])

"""The command line: happy paths and every bad input the foundation issue lists.

Each bad input must give one error line on stderr, a non-zero exit code,
nothing left behind in the output folder, and an untouched input.
"""

from __future__ import annotations

import hashlib
import os
import zipfile

import numpy as np
import pytest

from dstore.cli import main


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
    for name in ("npz", "zarr", "hdf5", "tfrecord"):
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
    _fails(capsys, ["convert", str(tmp_path / "nope.npz"), str(tmp_path / "o.npz")], contains="nope.npz")
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


def test_pickled_object_arrays_refused(tmp_path, capsys):
    """numpy's own test data holds pickled object arrays; they must never be unpickled."""
    objarr = os.path.join(os.path.dirname(np.__file__), "lib", "tests", "data", "py3-objarr.npz")
    if not os.path.exists(objarr):
        pytest.skip("numpy test data not installed")
    _fails(capsys, ["info", objarr], contains="object arrays are refused")
    _fails(capsys, ["convert", objarr, str(tmp_path / "o.npz")], contains="object arrays are refused")
    _only(tmp_path)


def test_ragged_record_counts(tmp_path, capsys):
    src = str(tmp_path / "ragged.npz")
    np.savez(src, x_train=np.zeros((10, 3)), y_train=np.zeros(9))
    _fails(capsys, ["convert", src, str(tmp_path / "o.npz")], contains="different record counts")
    _only(tmp_path, "ragged.npz")


def test_unknown_extension(tmp_path, capsys, label_maker_npz):
    _fails(capsys, ["convert", label_maker_npz, str(tmp_path / "out.xyz")], contains="no format claims")
    _only(tmp_path, "data.npz")


def test_output_exists_needs_overwrite(tmp_path, capsys, label_maker_npz):
    out = tmp_path / "out.npz"
    out.write_bytes(b"precious")
    _fails(capsys, ["convert", label_maker_npz, str(out)], contains="already exists")
    assert out.read_bytes() == b"precious"
    assert main(["convert", label_maker_npz, str(out), "--overwrite"]) == 0
    assert sorted(_npz(str(out)).keys()) == ["x_test", "x_train", "x_val", "y_test", "y_train", "y_val"]
    _only(tmp_path, "data.npz", "out.npz")


def test_output_is_input(tmp_path, capsys, label_maker_npz):
    before = _digest(label_maker_npz)
    _fails(capsys, ["convert", label_maker_npz, label_maker_npz, "--overwrite"], contains="overwrite the input")
    assert _digest(label_maker_npz) == before


def test_float16_overflow(tmp_path, capsys):
    src = str(tmp_path / "big.npz")
    x = np.ones((20, 4))
    x[7, 2] = 1e6
    x[9, 0] = -7e4
    np.savez(src, x=x)
    line = _fails(capsys, ["convert", src, str(tmp_path / "o.npz"), "--dtype", "float16"], contains="overflow")
    assert "'x'" in line and "2 value(s)" in line and "first at record 7" in line
    _only(tmp_path, "big.npz")
    assert main(["convert", src, str(tmp_path / "o.npz"), "--dtype", "float16", "--on-overflow", "clip"]) == 0
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


def test_demo_runs(tmp_path, capsys):
    """The README's first command: sample data from real photos, every format, verified, benched."""
    pytest.importorskip("sklearn")
    assert main(["demo", str(tmp_path / "demo"), "--records", "30"]) == 0
    out = capsys.readouterr().out
    assert out.count("verify: all fields bit-exact") == 4
    assert "recommendation:" in out and "outputs are in" in out
    assert {"data.npz", "data.tfrecords", "data.zarr", "data.h5", "bench.md"} <= set(os.listdir(tmp_path / "demo"))

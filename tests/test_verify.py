"""`verify` compares bits and names the right record; odd inputs are refused in one line.

Covers: complex and NaN-payload comparisons, the first differing / undecodable
record (at record 1 and at batch boundaries), stores with no checksums, long
double, ragged ``save`` input, ``--dtype`` naming a missing field, non-regular
files as inputs, and ``--from`` in every subcommand.
"""

from __future__ import annotations

import glob
import os
import socket
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dstore
from dstore.api import check
from dstore.cli import main
from dstore.errors import CodecIOError, DtypePolicyError, SchemaError, UnsupportedDtypeError
from dstore.testing import usable_formats


def _one_error_line(capsys, argv: list[str], contains: str) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err
    assert contains in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------ bit comparison

_DTYPES = [
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    ">f8",
    ">c16",
    "int32",
    "bool",
]


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(_DTYPES),
    n=st.integers(1, 12),
    shape=st.sampled_from([(), (3,), (2, 2)]),
    seed=st.integers(0, 2**32 - 1),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=3),
)
def test_verify_compares_bits(tmp_path_factory, dtype, n, shape, seed, flips):
    """Any bit flipped anywhere (a NaN payload, a sign of zero, half of a complex) is a
    difference, reported at the first record it touches; no flip is 'bit-exact'."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    a = np.frombuffer(rng.bytes(n * int(np.prod(shape, dtype=int)) * dt.itemsize), np.uint8)
    if dt.kind == "b":
        a = (a & 1).astype(bool)
    a = a.view(dt).reshape(n, *shape) if dt.kind != "b" else a.reshape(n, *shape)
    if dt.kind in "fc":  # plenty of NaNs with different payloads
        a = a.copy()
        a.reshape(-1)[::3] = np.nan
    b = a.copy()
    raw = b.view(np.uint8).reshape(-1)
    for pos, bit in flips:
        if dt.kind == "b":
            raw[pos % raw.size] ^= 1
        else:
            raw[pos % raw.size] ^= 1 << bit
    d = tmp_path_factory.mktemp("bits")
    np.savez(d / "a.npz", x=a)
    np.savez(d / "b.npz", x=b)
    report = dstore.verify(d / "a.npz", d / "b.npz")
    rec_bytes = a.nbytes // n
    differ = sorted({i // rec_bytes for i in np.flatnonzero(a.view(np.uint8).reshape(-1) != raw)})
    assert report.ok == (not differ)
    (result,) = report.results
    if differ:
        assert f"{len(differ)} of {n} records differ, first at record {differ[0]}" in result.detail
    else:
        assert result.detail == f"{n} records bit-exact"


def test_nan_payloads_are_not_bit_exact(tmp_path, capsys):
    a = np.full(4, np.nan)
    b = a.copy()
    b.view(np.uint64)[1] = 0x7FF8000000000001  # still a NaN, another payload
    c = a.copy()
    c[3] = -c[3]  # a negative NaN
    for name, arr in (("a", a), ("b", b), ("c", c)):
        np.savez(tmp_path / f"{name}.npz", x=arr)
    assert main(["verify", str(tmp_path / "a.npz"), str(tmp_path / "b.npz")]) == 1
    out = capsys.readouterr().out
    assert "1 of 4 records differ, first at record 1 (compared bit for bit" in out
    assert main(["verify", str(tmp_path / "a.npz"), str(tmp_path / "c.npz")]) == 1
    assert "first at record 3" in capsys.readouterr().out
    np.savez(tmp_path / "a2.npz", x=a)
    assert main(["verify", str(tmp_path / "a.npz"), str(tmp_path / "a2.npz")]) == 0
    assert "4 records bit-exact" in capsys.readouterr().out


def test_complex_fields_verify_through_every_format(tmp_path):
    rng = np.random.default_rng(1)
    c = (rng.standard_normal((9, 4)) + 1j * rng.standard_normal((9, 4))).astype(np.complex64)
    c[2, 1] = complex(np.nan, 1.0)
    src = tmp_path / "c.npz"
    np.savez(src, x_train=c, y_train=np.arange(9))
    for ext in (".zarr", ".h5"):
        out = tmp_path / f"c{ext}"
        dstore.convert(src, out)
        report = dstore.verify(src, out)
        assert report.ok, report.lines()
        # the imaginary half alone differs: one record, found by bits
        d = c.copy()
        d[5, 3] += 1j
        other = tmp_path / f"d{ext}"
        dstore.save({"train": {"x": d, "y": np.arange(9)}}, other)
        bad = {r.field: r for r in dstore.verify(out, other).results}
        assert not bad["x"].ok and "first at record 5" in bad["x"].detail
        assert bad["y"].ok


@pytest.mark.parametrize("batch_bytes", [16, 48, 10**6])
def test_first_difference_at_every_record_and_batch_boundary(tmp_path, batch_bytes):
    """batch_bytes=16 is one record per batch, 48 three; every position is tried."""
    x = np.arange(20, dtype=np.float64).reshape(10, 2)
    a = tmp_path / "a.npz"
    np.savez(a, x=x)
    for k in range(10):
        y = x.copy()
        y[k:, 1] += 0.5  # records k.. differ
        b = tmp_path / f"b{k}.npz"
        np.savez(b, x=y)
        (r,) = dstore.verify(a, b, batch_bytes=batch_bytes).results
        assert r.detail.startswith(f"{10 - k} of 10 records differ, first at record {k}"), r.detail


def _corrupt_tfrecord_record(folder: str, k: int) -> None:
    """Flip one byte inside record k's payload: its data CRC fails, nothing else does."""
    (shard,) = glob.glob(os.path.join(folder, "*.tfrecord"))
    with open(shard, "rb") as f:
        data = bytearray(f.read())
    starts, off = [], 0
    while off < len(data):
        (length,) = struct.unpack_from("<Q", data, off)
        starts.append(off + 12)
        off += 16 + length
    data[starts[k] + 3] ^= 0xFF
    with open(shard, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("batch_bytes", [24, 72, 10**6])  # 1 record, 3 records, all per batch
def test_check_names_the_record_that_fails(tmp_path, batch_bytes):
    x = np.arange(60, dtype=np.float32).reshape(10, 6)
    for k in (0, 1, 2, 3, 5, 9):  # 3 and 9 start/end batches of three
        out = str(tmp_path / f"o{k}.tfrecords")
        dstore.save({"train": {"x": x}}, out)
        _corrupt_tfrecord_record(out, k)
        report = check(out, batch_bytes=batch_bytes)
        assert not report.ok
        (split,) = [r for r in report.results if r.split == "train"]
        assert split.detail.startswith(f"record {k} fails ({k} of 10 records decoded before it)"), (
            split.detail
        )
        assert f"record {k} " in split.detail.split(": ", 1)[1]  # the codec's own message agrees


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("batch_bytes", [65536, 3 * 65536, 10**7])
def test_check_does_not_blame_a_record_for_a_member_crc(tmp_path, compressed, batch_bytes):
    """A zip member's CRC-32 covers all its records and fails at the member's end:
    no record may be named, whichever record holds the damage."""
    x = np.arange(10 * 8192, dtype=np.float64).reshape(10, 8192)  # 64 kB records
    for k in (1, 5, 9):
        path = str(tmp_path / f"z{k}.npz")
        (np.savez_compressed if compressed else np.savez)(path, x=x)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        # somewhere in the deflate stream, or inside record k
        at = len(data) // 2 + k if compressed else data.find(x[k].tobytes()) + 3
        data[at] ^= 0x01
        with open(path, "wb") as f:
            f.write(data)
        try:
            report = check(path, batch_bytes=batch_bytes)
        except CodecIOError:
            continue  # a corrupt deflate stream can also fail as soon as it is opened
        (r,) = report.results
        assert not r.ok
        if r.detail.startswith("record "):  # a record named: only the one really damaged
            assert not compressed and r.detail.startswith(f"record {k} fails"), r.detail
        else:
            assert (
                "no single record can be named" in r.detail and "CRC-32 covers them all" in r.detail
            )
        assert "every record decoded" not in "\n".join(report.lines())


def test_verify_plain_npz_says_no_checksums(tmp_path, capsys):
    path = str(tmp_path / "plain.npz")
    np.savez(path, x=np.arange(5.0), y=np.arange(5))
    assert main(["verify", path]) == 0
    out = capsys.readouterr().out
    assert "no stored checksums to check" in out and "all passed" in out
    written = str(tmp_path / "ours.npz")
    dstore.convert(path, written)
    assert main(["verify", written]) == 0
    out = capsys.readouterr().out
    assert "no stored checksums" not in out and "sha256 of the values matches" in out


# ------------------------------------------------------------------- odd inputs


@pytest.mark.parametrize("dtype", [np.longdouble, np.clongdouble])
def test_long_double_is_refused_everywhere(tmp_path, capsys, dtype):
    if np.dtype(dtype).itemsize <= (8 if np.dtype(dtype).kind == "f" else 16):
        pytest.skip("long double is plain double on this platform")
    path = str(tmp_path / "ld.npz")
    np.savez(path, x=np.ones(3, dtype))
    for argv in (
        ["info", path],
        ["verify", path],
        ["verify", path, path],
        ["convert", path, str(tmp_path / "o.zarr")],
    ):
        _one_error_line(capsys, argv, "long double")
    with pytest.raises(UnsupportedDtypeError, match=r"split 'train', field 'x': .*\(long double\)"):
        dstore.save({"train": {"x": np.ones(2, dtype)}}, tmp_path / "s.h5")
    assert sorted(os.listdir(tmp_path)) == ["ld.npz"]


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"val": {"y": [np.zeros((2, 2)), np.zeros((2, 3))]}}, "split 'val', field 'y'"),
        ({"train": {"x": [b"a", 1]}}, "split 'train', field 'x'"),
        ({"train": {"x": [[[1], [2, 3]]]}}, "split 'train', field 'x'"),
        ({"test": {"y": [None, 1]}}, "split 'test', field 'y'"),
    ],
)
@pytest.mark.parametrize("ext", [e.lstrip(".") for e in usable_formats(text=True).values()])
def test_save_of_unstorable_input_is_a_schema_error(tmp_path, data, where, ext):
    """Never numpy's ValueError: a SchemaError naming the split and field, nothing written."""
    with pytest.raises(SchemaError, match=where):
        dstore.save(data, tmp_path / f"o.{ext}")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("data", "split", "field"),
    [
        ({"train": {"x": [[1, 2], [3]]}}, "train", "x"),
        ({"x_test": [[1.0], [2.0, 3.0], []]}, "test", "x"),
        ({"x": [np.zeros(2), np.zeros(3)]}, "data", "x"),
        ({"train": {"x": np.array([[1, 2], [3]], dtype=object)}}, "train", "x"),
    ],
)
@pytest.mark.parametrize("ext", [e.lstrip(".") for e in usable_formats(text=True).values()])
def test_save_of_ragged_lists_stores_them_or_names_the_field(tmp_path, data, split, field, ext):
    """Ragged lists are a Ragged field: stored and read back record by record where the
    format holds them, else one SchemaError naming the split and field, nothing written."""
    out = tmp_path / f"o.{ext}"
    try:
        dstore.save(data, out)
    except SchemaError as e:
        assert f"split {split!r}, field {field!r}" in str(e)
        assert os.listdir(tmp_path) == []
        return
    value = next(iter(data.values()))
    records = list(value[field] if isinstance(value, dict) else value)
    with dstore.open(out) as ds:
        view = ds[split][field]
        assert len(view) == len(records)
        for i, rec in enumerate(records):
            np.testing.assert_array_equal(np.asarray(view[i]), np.asarray(rec, dtype=float))


def test_dtype_for_a_missing_field_lists_the_fields(tmp_path, capsys, features):
    f, labels = features
    src = str(tmp_path / "f.npz")
    np.savez(src, features_train=f, labels_train=labels)
    with pytest.raises(DtypePolicyError, match=r"'feature'.*fields: features \(floating\), labels"):
        dstore.convert(src, tmp_path / "o.npz", dtype="feature=float16")
    line = _one_error_line(
        capsys, ["convert", src, str(tmp_path / "o.npz"), "--dtype", "feature=float16"], "'feature'"
    )
    assert "features (floating)" in line
    assert sorted(os.listdir(tmp_path)) == ["f.npz"]
    assert main(["convert", src, str(tmp_path / "o.npz"), "--dtype", "features=float16"]) == 0


def _run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    # a timeout so that a regression (a blocking open) fails instead of hanging the suite
    return subprocess.run(
        [sys.executable, "-m", "dstore.cli", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("name", ["x.npz", "x.h5", "x.tfrecord", "x.zarr.zip"])
def test_fifo_input_is_refused_without_blocking(tmp_path, name):
    fifo = str(tmp_path / name)
    os.mkfifo(fifo)
    for argv in (["info", fifo], ["verify", fifo], ["convert", fifo, str(tmp_path / "o.npz")]):
        res = _run_cli(*argv)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert "FIFO" in lines[0] and name in lines[0]
    assert os.listdir(tmp_path) == [name]


def test_socket_and_device_inputs_are_refused(tmp_path):
    sock_path = str(tmp_path / "s.npz")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(sock_path)
        with pytest.raises(CodecIOError, match="socket"):
            dstore.open(sock_path)
    with pytest.raises(CodecIOError, match="device"):
        dstore.open("/dev/null", format="npz")


# ---------------------------------------------------------------------- --from


def test_from_names_the_input_format_in_every_subcommand(tmp_path, capsys, label_maker_npz):
    odd = str(tmp_path / "data.bin")  # no extension a format claims
    with open(label_maker_npz, "rb") as f, open(odd, "wb") as g:
        g.write(f.read())
    h5 = str(tmp_path / "out.h5")
    dstore.convert(label_maker_npz, h5)
    h5_odd = str(tmp_path / "out.bin2")
    os.rename(h5, h5_odd)
    for flag in ("--from", "--format"):
        assert main(["info", odd, flag, "npz"]) == 0
        assert "split train: 40 records" in capsys.readouterr().out
        assert main(["verify", odd, flag, "npz"]) == 0
        capsys.readouterr()
    assert main(["verify", odd, odd, "--from", "npz"]) == 0
    capsys.readouterr()
    assert main(["verify", odd, h5_odd, "--from", "npz", "--from-b", "hdf5"]) == 0
    assert "all equal" in capsys.readouterr().out
    assert main(["verify", label_maker_npz, h5_odd, "--from-b", "hdf5"]) == 0
    capsys.readouterr()
    _one_error_line(capsys, ["verify", odd, h5_odd, "--from", "npz"], h5_odd)


def test_verify_and_check_report_progress_per_batch(tmp_path, tiles):
    """``progress(n, total)`` after each batch: what the CLI's bar shows on a terminal."""
    x, y = tiles
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.zarr")
    np.savez(a, x_train=x, y_train=y)
    dstore.convert(a, b)
    for run in (
        lambda p: dstore.verify(a, b, batch_bytes=x[0].nbytes * 7, progress=p),
        lambda p: check(b, batch_bytes=x[0].nbytes * 7, progress=p),
    ):
        calls: list[tuple[int, int]] = []
        assert run(lambda n, total, calls=calls: calls.append((n, total))).ok
        assert len(calls) > 1 and {t for _, t in calls} == {len(x)}
        assert sum(n for n, _ in calls) == len(x)

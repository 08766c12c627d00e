"""``.npy`` members read by dstore (WebDataset) hold what ``np.load`` reads from them,
element by element, whatever their dtype, byte order, layout or header version; a
header parsed once is reused for the members that share it, never for another."""

from __future__ import annotations

import io

import numpy as np
import pytest
from sklearn.datasets import load_digits

from dstore.codecs.webdataset.npy import npy_bytes, read_npy
from dstore.errors import CodecIOError


def _digits() -> np.ndarray:
    return load_digits().images[:6]  # (6, 8, 8) float64


def _cases() -> dict[str, np.ndarray]:
    d = _digits()
    return {
        "float64": d,
        "big-endian int16": d.astype(">i2"),
        "uint8 row": d[0, 0].astype(np.uint8),
        "bool": d > 8,
        "complex64": (d + 1j * d[::-1]).astype(np.complex64),
        "fortran order": np.asfortranarray(d[0]),
        "0-d": np.asarray(d[0, 3, 3]),
        "empty": np.zeros((0, 8), np.float32),
        "structured": np.array([(1, 2.5), (3, 4.5)], dtype=[("a", "<i4"), ("b", ">f8")]),
        "unicode": np.array(["digit", "eight"]),
        "strided view": d[:, ::2, ::3],
    }


@pytest.mark.parametrize("name", list(_cases()))
@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_members_read_as_np_load_reads_them(name, version):
    arr = _cases()[name]
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version, allow_pickle=False)
    data = buf.getvalue()
    for _ in range(2):  # the second read takes the header parsed by the first
        got = read_npy(data, "member")
        want = np.load(io.BytesIO(data), allow_pickle=False)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.flags.f_contiguous == want.flags.f_contiguous
        np.testing.assert_array_equal(got, want)
        got[...] = want  # writable, as numpy's reader returns it


def test_a_header_shared_by_members_is_not_taken_for_another():
    d = _digits()
    a, b = npy_bytes(d[0]), npy_bytes(d[0].astype(np.float32))
    np.testing.assert_array_equal(read_npy(a, "a"), d[0])
    assert read_npy(b, "b").dtype == np.float32
    short = a[: len(a) - 8]  # the same header, data cut short: refused every time
    for _ in range(2):
        with pytest.raises(CodecIOError, match="declares float64 \\(8, 8\\)"):
            read_npy(short, "member 3")

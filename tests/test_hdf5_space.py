"""HDF5 on a full disk: refused up front with the numbers, or one clear error; never a crash.

libhdf5 cannot recover from a write that fails while it closes a file (the
process later dies with SIGSEGV/SIGBUS), so dstore checks free space and the
file size limit against an upper bound of the file first, and writes every
chunk in ``write()`` (no chunk cache) so that a disk filled by someone else
fails there, as one ``CodecIOError``.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys

import numpy as np
import pytest

import dstore
from dstore.codecs.hdf5.options import HDF5Options
from dstore.codecs.hdf5.writer import size_bound

_COMPRESSIONS = ["none", "gzip", "lzf", "blosc", "zstd"]


def _usable(compression: str) -> bool:
    if compression in ("blosc", "zstd"):
        try:
            import hdf5plugin  # noqa: F401
        except ImportError:
            return False
    return True


@pytest.mark.parametrize("compression", _COMPRESSIONS)
def test_size_bound_is_an_upper_bound(tmp_path, compression):
    """Incompressible and compressible data, odd record counts (edge chunks), empty splits."""
    if not _usable(compression):
        pytest.skip("hdf5plugin is not installed")
    rng = np.random.default_rng(7)
    cases = [
        {
            "train": {
                "x": rng.integers(0, 256, (37, 50, 50, 3), dtype=np.uint8),
                "y": rng.standard_normal((37, 5)),
            }
        },
        {"a": {"x": np.zeros((1000, 3), np.float32)}, "b": {"x": rng.random((3, 700, 11))}},
        {"train": {"x": rng.random((5, 0))}, "test": {"z": np.empty((0, 4), np.int8)}},
        {
            "data": {
                "c": (rng.random((301, 64)) + 1j).astype(np.complex64),
                "b": rng.random(301) > 0.5,
            }
        },
    ]
    for i, data in enumerate(cases):
        for chunk_mb in (0.01, 1.0):
            out = tmp_path / f"o{i}-{chunk_mb}.h5"
            options = {"compression": compression, "chunk_mb": chunk_mb, "shuffle": i % 2 == 0}
            dstore.save(data, out, **options)
            schema = dstore.open(out).schema
            bound = size_bound(schema, HDF5Options(**options))
            assert os.path.getsize(out) <= bound, (i, chunk_mb)
            assert bound <= 2 * os.path.getsize(out) + 200_000 + 1.01 * schema.nbytes


def _convert_limited(
    src: str, dst: str, limit: int, *options: str
) -> subprocess.CompletedProcess[str]:
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, as a full disk gives ENOSPC
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    argv = [sys.executable, "-m", "dstore.cli", "convert", src, dst]
    for opt in options:
        argv += ["-o", opt]
    return subprocess.run(
        argv, capture_output=True, text=True, preexec_fn=preexec, timeout=120, check=False
    )


def test_refused_up_front_with_the_numbers(tmp_path, tiles):
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=x, y_train=y)
    res = _convert_limited(src, str(tmp_path / "out.h5"), 300_000)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert (
        "out.h5: file too large for this process's file size limit (ulimit -f) of 300,000 bytes"
        in lines[0]
    )
    assert f"{x.nbytes + y.nbytes:,} bytes of data" in lines[0] and "check_space=false" in lines[0]
    assert sorted(os.listdir(tmp_path)) == ["data.npz"]


@pytest.mark.slow  # a failing write at every moment (~8 s each)
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_failing_writes_are_one_error_at_any_moment(tmp_path, tiles, compression):
    """With the up-front check off, the file size limit is hit at every stage of the write,
    including the last chunk and the metadata written when the file is closed: each run
    ends with exit 2 and one line and no file, or (limit above the size) a complete file."""
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=np.tile(x, (2, 1, 1, 1)), y_train=np.tile(y, (2, 1)))
    full = str(tmp_path / "full.h5")
    dstore.convert(src, full, options={"compression": compression})
    size = os.path.getsize(full)
    limits = [
        4096,
        size // 3,
        size // 2,
        size - 70_000,
        size - 5000,
        size - 1000,
        size - 300,
        size - 100,
        size - 20,
        size - 1,
        size,
    ]
    failed = 0
    for limit in limits:
        out = str(tmp_path / "out.h5")
        res = _convert_limited(src, out, limit, f"compression={compression}", "check_space=false")
        if res.returncode == 0:
            assert limit >= size - 4096, limit  # HDF5 may end the file below its allocation
            assert dstore.verify(src, out).ok
            os.remove(out)
            continue
        failed += 1
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, (limit, res.returncode, res.stderr)
        assert "out.h5: writing the HDF5 file failed: File too large (errno 27)" in lines[0]
        assert sorted(os.listdir(tmp_path)) == ["data.npz", "full.h5"], limit
    assert failed >= len(limits) - 3


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB filesystem (tmpfs), where root may mount one; skipped elsewhere."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_full_disk_refused_up_front_and_failing_write_is_one_error(small_disk, tmp_path, tiles):
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(
        src, x_train=np.tile(x, (3, 1, 1, 1)), y_train=np.tile(y, (3, 1))
    )  # 2.2 MB, 1.5 MB gzipped
    dst = str(small_disk / "out.h5")
    for extra in (
        [],
        ["-o", "compression=none", "-o", "check_space=false"],
        ["-o", "check_space=false"],
    ):
        res = subprocess.run(
            [sys.executable, "-m", "dstore.cli", "convert", src, dst, *extra],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        if extra:
            assert (
                "out.h5: writing the HDF5 file failed: No space left on device (errno 28)"
                in lines[0]
            )
        else:
            assert (
                f"out.h5: not enough free space in {small_disk}" in lines[0]
                and "bytes free" in lines[0]
            )
        assert os.listdir(small_disk) == []

"""Large byte records stream (memory follows the largest record, not a multiple of the
file), and ``--overwrite`` replaces only what the target format wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dstore.codecs._example import BYTES, INT64, encode_example, encode_feature
from dstore.codecs._tfrecord_io import frame

RECORD_MIB = 20

# VmHWM, not getrusage: Linux carries ru_maxrss over exec from the parent process
_CHILD = """
import sys
def hwm():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
import dstore.cli
n = sys.argv.index("--then")
assert dstore.cli.main(sys.argv[1:n]) == 0  # a small file first: every import is done
base = hwm()
code = dstore.cli.main(sys.argv[n + 1 :])
print("PEAK", base, hwm(), code)
"""


def _photo_bytes(size: int, seed: int) -> bytes:
    from skimage import data

    pixels = np.roll(data.astronaut().ravel(), seed * 7919)
    return np.tile(pixels, -(-size // pixels.size))[:size].tobytes()


def _tfrecord(path: str, size: int, records: int = 2) -> int:
    """Examples of one ``bytes_list`` of ``size`` bytes and an int64 label; the largest size."""
    largest = 0
    with open(path, "wb") as f:
        for i in range(records):
            rec = encode_example(
                {
                    "blob": encode_feature(BYTES, _photo_bytes(size, i)),
                    "label": encode_feature(INT64, np.array([i])),
                }
            )
            largest = max(largest, len(rec))
            f.write(frame(rec))
    return largest


def _peak_growth(tmp_path, command: str, *paths: str) -> int:
    """Bytes of peak RSS a ``dstore <command>`` on the large paths adds (child process)."""
    small = [str(tmp_path / f"small{os.path.splitext(p)[1]}") for p in paths]
    warm = [command, small[0], *small[1:]]
    if command == "convert":
        warm = [command, small[0], str(tmp_path / "warm.npz")]
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD), *warm, "--then", command, *paths],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("PEAK ")), None)
    assert line is not None, proc.stderr[-2000:]
    _, base, peak, code = line.split()
    assert code == "0", proc.stderr[-2000:]
    return (int(peak) - int(base)) * 1024


@pytest.mark.slow
def test_large_byte_records_convert_and_verify_in_bounded_memory(tmp_path):
    """Two 20 MiB bytes_list records: converting to npz took 45x the largest record
    (npz's fixed-width strings built from index arrays of 8 bytes per byte, the
    record copied at framing, parsing and batching); verify 18x."""
    src, dst = str(tmp_path / "big.tfrecord"), str(tmp_path / "big.npz")
    _tfrecord(str(tmp_path / "small.tfrecord"), 1000)
    largest = _tfrecord(src, RECORD_MIB * 1024 * 1024)
    batch = os.path.getsize(src)  # both records fit one batch
    growth = _peak_growth(tmp_path, "convert", src, dst)
    assert growth < 3 * largest + batch, f"convert: {growth / largest:.1f}x the largest record"
    with np.load(dst) as z:
        got = z["blob"]
        assert got.dtype == np.dtype(f"S{RECORD_MIB * 1024 * 1024}")
        assert [bytes(v) for v in got] == [
            _photo_bytes(RECORD_MIB * 1024 * 1024, i) for i in (0, 1)
        ]
        assert z["label"].tolist() == [0, 1]

"""Peak memory of large byte records: TFRecord -> npz, and verify, against the largest record.

    python benchmarks/bench_large_records.py [--mib 80] [--records 2]

Writes a TFRecord file of ``--records`` Examples, each one ``bytes_list`` of
``--mib`` MiB (a photo's pixels repeated: real image bytes, not noise) plus an
int64 label, framed by dstore's own TFRecord writer (the bytes TensorFlow writes).
Then, each in a fresh child process, ``dstore convert`` to npz and ``dstore
verify``; prints each one's peak RSS above the interpreter-with-dstore baseline,
and that growth divided by the largest record. The target is below 3.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def example(blob: bytes, label: int) -> bytes:
    """A serialized ``tf.train.Example`` with ``blob`` (bytes_list) and ``label`` (int64_list)."""
    blob_feature = _field(1, _field(1, blob))  # Feature.bytes_list.value
    label_feature = _field(3, _field(1, _varint(label)))  # Feature.int64_list.value (packed)
    entries = _field(1, _field(1, b"blob") + _field(2, blob_feature))
    entries += _field(1, _field(1, b"label") + _field(2, label_feature))
    return _field(1, entries)  # Example.features


def photo_bytes(size: int, seed: int) -> bytes:
    """``size`` bytes of a photo's pixels (scikit-image's astronaut), rolled by ``seed``."""
    import numpy as np
    from skimage import data

    pixels = np.roll(data.astronaut().ravel(), seed * 7919)
    reps = -(-size // pixels.size)
    return np.tile(pixels, reps)[:size].tobytes()


def write_tfrecord(path: str, mib: float, records: int) -> int:
    """The file at ``path``; returns the largest record's serialized size."""
    from dstore.codecs.tfrecord.io import frame

    largest = 0
    with open(path, "wb") as f:
        for i in range(records):
            rec = example(photo_bytes(int(mib * 1024 * 1024), i), i)
            largest = max(largest, len(rec))
            f.write(frame(rec))
            del rec
    return largest


# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over exec from the parent
CHILD = """
import sys
def hwm():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
import dstore.cli
n = sys.argv.index("--then")
dstore.cli.main(sys.argv[1:n])  # the same command on one small record: imports done
base = hwm()
code = dstore.cli.main(sys.argv[n + 1 :])
print("PEAK", base, hwm(), code, file=sys.stderr)
sys.exit(code)
"""


def measure(warm: list[str], argv: list[str]) -> tuple[int, int, int]:
    """(baseline KiB, peak KiB, exit code) of ``dstore <argv>`` in a fresh process,
    the baseline taken after ``dstore <warm>`` (the same on a small file) imported
    what the command needs."""
    env = {**os.environ, "PYTHONPATH": os.path.dirname(HERE)}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), *warm, "--then", *argv],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    line = next(x for x in proc.stderr.splitlines() if x.startswith("PEAK "))
    _, base, peak, code = line.split()
    if int(code):
        sys.stderr.write(proc.stderr)
    return int(base), int(peak), int(code)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=80, help="size of each bytes record, MiB")
    ap.add_argument("--records", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dstore-bench-large-") as tmp:
        src, dst = os.path.join(tmp, "big.tfrecord"), os.path.join(tmp, "big.npz")
        small, small_dst = os.path.join(tmp, "small.tfrecord"), os.path.join(tmp, "small.npz")
        write_tfrecord(small, 0.01, args.records)
        largest = write_tfrecord(src, args.mib, args.records)
        print(
            f"{args.records} records of {args.mib:g} MiB bytes_list: "
            f"{os.path.getsize(src) / 1e6:.0f} MB TFRecord, largest record {largest / 1e6:.1f} MB"
        )
        for name, warm, argv in (
            ("convert tfrecord -> npz", ["convert", small, small_dst], ["convert", src, dst]),
            ("verify", ["verify", small, small_dst], ["verify", src, dst]),
        ):
            base, peak, code = measure(warm, argv)
            growth = (peak - base) * 1024
            print(
                f"{name:24s} exit {code}  peak RSS {peak / 1024:7.0f} MB "
                f"(baseline {base / 1024:.0f} MB, growth {growth / 1e6:.0f} MB = "
                f"{growth / largest:.1f}x the largest record)"
            )


if __name__ == "__main__":
    main()

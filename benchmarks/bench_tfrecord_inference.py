"""Cost of inferring a foreign TFRecord's schema from every record (the wire-format pre-pass).

    python benchmarks/bench_tfrecord_inference.py [records]

Foreign files (no dstore manifest) are checked record by record before any
data is read: feature keys, kinds, list lengths and PNG sizes (from the PNG
header; nothing is decoded). This prints, per layout, the time to open the
reader (the pre-pass) against the old open (count the frames, look at record 0)
and against a full read that decodes every PNG, median of 3 runs each.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import numpy as np

from dstore.codecs.example.wire import (
    BYTES,
    FLOAT,
    INT64,
    decode_example,
    encode_example,
    encode_feature,
)
from dstore.codecs.tfrecord import TFRecordReader
from dstore.codecs.tfrecord import io as rio
from dstore.demo import photo_tiles
from dstore.images.png import png_encoder


def write(path: str, n: int, size: int) -> int:
    """n Object-Detection-style Examples: a PNG photo tile, a one-hot label, 4 boxes."""
    x, y = photo_tiles(min(n, 200), size)
    png = png_encoder("fast")
    images = [png(t) for t in x]
    with open(path, "wb") as f:
        for i in range(n):
            j = i % len(images)
            feats = {
                "image/encoded": encode_feature(BYTES, images[j]),
                "image/class/label": encode_feature(INT64, y[j].astype(np.int64)),
                "image/object/bbox/xmin": encode_feature(
                    FLOAT, np.linspace(0, 1, 4, dtype=np.float32)
                ),
            }
            f.write(rio.frame(encode_example(feats)))
    return os.path.getsize(path)


def old_open(path: str) -> None:
    """What opening cost before: count frames (data seeked over), decode record 0."""
    with rio.RecordFile(path) as rf:
        decode_example(rf.next_record())
        rf.count()


def full_read(path: str) -> None:
    reader = TFRecordReader(path)
    for _ in reader.iter_batches("train"):
        pass


def median_seconds(fn, path: str) -> float:
    times = []
    for _ in range(3):
        t = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(n: int = 4000) -> None:
    print(
        "| layout | records | file | pre-pass (open) | per record | old open | full read | pre-pass / read |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for size, count in ((64, n), (256, max(1, n // 8))):
            path = os.path.join(tmp, "train.tfrecord")
            nbytes = write(path, count, size)
            full_read(path)  # warm the page cache and the imports
            scan = median_seconds(TFRecordReader, path)
            old = median_seconds(old_open, path)
            read = median_seconds(full_read, path)
            print(
                f"| {size}x{size}x3 PNG + label + 4 boxes | {count} | {nbytes / 2**20:.1f} MiB | "
                f"{scan * 1000:.0f} ms | {scan / count * 1e6:.0f} us | {old * 1000:.0f} ms | "
                f"{read * 1000:.0f} ms | {scan / read:.0%} |"
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4000)

"""Training-loader throughput of a written cell: ``dstore bench --read torch|tf``.

What a format costs a training job is the rate its loader delivers records,
not only how long one process takes to read the file: a PyTorch DataLoader
with ``workers`` processes over :func:`dstore.to_torch`, or a ``tf.data``
pipeline from :func:`dstore.to_tf_dataset`, each record decoded (images to
pixels) as training gets it. Warm: the files in the page cache, median of
``repeats`` passes after an untimed one. Cold: one pass after the files were
dropped from the page cache (``posix_fadvise(DONTNEED)``, which needs no
privileges; on a system without it the cold figure is left out).
"""

from __future__ import annotations

import importlib
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["LOADERS", "LoaderRead", "LoaderSpeed", "measure_loader"]

#: the training loaders ``--read`` measures
LOADERS = ("torch", "tf")


@dataclass(frozen=True)
class LoaderRead:
    """How ``--read`` runs a loader over each cell."""

    loader: str  # one of LOADERS
    workers: int = 2
    batch_size: int = 64


@dataclass(frozen=True)
class LoaderSpeed:
    records_per_s: float  # warm page cache, median pass
    mb_per_s: float  # the cell's bytes on disk per second, warm
    cold_records_per_s: float  # NaN where the page cache cannot be dropped


def _files(path: str) -> Iterator[str]:
    if os.path.isfile(path):
        yield path
        return
    for root, _dirs, names in os.walk(path):
        for name in names:
            yield os.path.join(root, name)


def drop_from_page_cache(path: str) -> bool:
    """Ask the kernel to forget the cached pages of every file under ``path``."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for name in _files(path):
        fd = os.open(name, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def _torch_pass(path: str, fmt: str, splits: list[str], how: LoaderRead) -> int:
    import dstore
    from dstore.readers.torch import data_loader

    records = 0
    for split in splits:
        ds = dstore.to_torch(path, split, format=fmt)
        # a format whose library cannot run in forked workers starts them with spawn
        loader = data_loader(
            ds, batch_size=how.batch_size, num_workers=how.workers, collate_fn=ds.collate_fn()
        )
        for batch in loader:
            records += len(next(iter(batch.values())))
    return records


def _tf_pass(path: str, fmt: str, splits: list[str], how: LoaderRead) -> int:
    import dstore

    records = 0
    for split in splits:
        ds = dstore.to_tf_dataset(path, split, batch_size=how.batch_size, format=fmt)
        for batch in ds:
            value: Any = next(iter(batch.values()))
            records += int(value.shape[0])
    return records


def measure_loader(
    path: str, fmt: str, splits: list[str], nbytes: int, how: LoaderRead, repeats: int
) -> LoaderSpeed:
    """Records/s and MB/s of ``how.loader`` over every split of the cell at ``path``."""
    one_pass = _torch_pass if how.loader == "torch" else _tf_pass
    # the library's import (TensorFlow: seconds) is not part of any pass
    importlib.import_module("torch" if how.loader == "torch" else "tensorflow")
    cold = float("nan")
    if drop_from_page_cache(path):
        t = time.perf_counter()
        records = one_pass(path, fmt, splits, how)
        cold = records / (time.perf_counter() - t)
    else:
        records = one_pass(path, fmt, splits, how)  # untimed: warms the cache and imports
    times = []
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        one_pass(path, fmt, splits, how)
        times.append(time.perf_counter() - t)
    seconds = statistics.median(times)
    return LoaderSpeed(records / seconds, nbytes / seconds / 1e6, cold)

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
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "LOADERS",
    "LoaderPass",
    "LoaderRead",
    "drop_from_page_cache",
    "import_loader",
    "loader_pass",
]

#: the training loaders ``--read`` measures
LOADERS = ("torch", "tf")


@dataclass(frozen=True)
class LoaderRead:
    """How ``--read`` runs a loader over each cell."""

    loader: str  # one of LOADERS
    workers: int = 2
    batch_size: int = 64


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


@dataclass(frozen=True)
class LoaderPass:
    """One pass of a loader over every split: records, seconds, and the fingerprints
    of the records of ``keys_split`` in the order they came (:mod:`.shuffle`)."""

    records: int
    seconds: float
    keys: list[bytes]


def _torch_batches(path: str, fmt: str, split: str, how: LoaderRead, shuffle: bool) -> Any:
    import dstore
    from dstore.readers.torch import data_loader

    ds = dstore.to_torch(path, split, format=fmt, shuffle="global" if shuffle else 0, seed=0)
    # a format whose library cannot run in forked workers starts them with spawn
    return data_loader(
        ds, batch_size=how.batch_size, num_workers=how.workers, collate_fn=ds.collate_fn()
    )


def _tf_batches(path: str, fmt: str, split: str, how: LoaderRead, shuffle: bool) -> Any:
    import dstore

    return dstore.to_tf_dataset(
        path,
        split,
        batch_size=how.batch_size,
        format=fmt,
        shuffle="global" if shuffle else 0,
        ordered=not shuffle,
    )


def loader_pass(
    path: str,
    fmt: str,
    splits: list[str],
    how: LoaderRead,
    *,
    shuffle: bool = False,
    keys_split: str | None = None,
) -> LoaderPass:
    """Time one pass of ``how.loader`` over the splits (``shuffle``: ``shuffle="global"``)."""
    from .scan import fingerprints

    batches_of = _torch_batches if how.loader == "torch" else _tf_batches
    records = 0
    keys: list[bytes] = []
    t = time.perf_counter()
    for split in splits:
        for batch in batches_of(path, fmt, split, how, shuffle):
            values = {k: np.asarray(v) for k, v in batch.items() if hasattr(v, "shape")}
            records += len(next(iter(values.values())))
            if split == keys_split:
                keys.extend(fingerprints(values))
    return LoaderPass(records, time.perf_counter() - t, keys)


def import_loader(how: LoaderRead) -> None:
    """The library's import (TensorFlow: seconds) is paid before any timed pass."""
    importlib.import_module("torch" if how.loader == "torch" else "tensorflow")

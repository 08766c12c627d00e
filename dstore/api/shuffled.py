"""A shuffle at conversion time (``convert(..., shuffle_seed=S)``): the source opened
as the permuted reader the conversion writes from, and the reference by which worker
processes (or Dask workers) reopen it the same way.

The permutation itself is :func:`dstore.sources.permuted.permutation`. A source that
reads single records (every format dstore writes, and an npz with stored members) is
read in that order directly, a batch of scattered records at a time, and memory stays
that of a plain conversion. A source that only streams (a deflated npz) is first
inflated once into a random-access copy on disk (its full decoded size, under the
system's temporary folder, removed at the end: :class:`dstore.readers.random_access.
RandomAccessCopy`, which says so on stderr); one that has no such copy (TFRecord files
without record indexes, GZIP TFRecords) is refused in one line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import DstoreError, UsageError
from ..registry import infer_codec
from ..sources.opening import open_reader
from ..sources.permuted import PermutedReader, open_permuted

if TYPE_CHECKING:
    from ..abc import Reader
    from ..engine.job import ConvertJob, SourceRef

__all__ = ["shuffled_source"]


@contextlib.contextmanager
def shuffled_source(
    opened: Reader, src: str, job: ConvertJob
) -> Iterator[tuple[Reader, SourceRef | None]]:
    """``opened`` (the source ``src`` as opened for ``job``) permuted by
    ``job.shuffle_seed``, with how a worker reopens it (None: only this process can,
    and sends the records). Without a seed: ``opened`` as it is, and the plain
    reference."""
    from ..engine.job import SourceRef

    plain = SourceRef(src, job.from_format, dict(job.src_options), opener=open_reader)
    if job.shuffle_seed is None:
        yield opened, plain
        return
    seed = job.shuffle_seed
    options = {**job.src_options, "shuffle_seed": seed}
    if opened.random_access and not opened.sequential_reason:
        yield PermutedReader(opened, seed), SourceRef(src, job.from_format, options, open_permuted)
        return
    copy = _random_access_copy(opened, src, job)
    try:
        with open_reader(copy.path, format=copy.format, **dict(job.src_options)) as reader:
            # a Dask worker elsewhere cannot reach this machine's temporary copy
            ref = SourceRef(copy.path, copy.format, options, open_permuted)
            yield PermutedReader(reader, seed), None if job.client is not None else ref
    finally:
        copy.close()


def _random_access_copy(opened: Reader, src: str, job: ConvertJob) -> _Copy:
    from ..readers.random_access import RandomAccessCopy

    why = opened.sequential_reason or "it only streams"
    refused = UsageError(
        f"{src}: shuffle_seed= reads the records in a random order and {why}; convert it "
        "to a random-access format first (or index its TFRecords with 'dstore index')"
    )
    try:
        fmt = job.from_format or infer_codec(src)
    except DstoreError:
        raise refused from None
    copy = RandomAccessCopy(src, fmt, "a shuffle at conversion (shuffle_seed=)")
    if copy.path is None:
        raise refused
    return _Copy(copy, fmt)


class _Copy:
    """A random-access copy and the format it is in, removed by :meth:`close`."""

    def __init__(self, copy: Any, format: str) -> None:
        self._copy, self.format = copy, format
        self.path: str = copy.path

    def close(self) -> None:
        self._copy.close()

"""The source as a conversion (or an append) reads it -- permuted by
``convert(..., shuffle_seed=S)``, laid out, its images decoded for the destination --
and the reference by which worker processes (or Dask workers) reopen it the same way.

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
    from ..abc import Codec, Reader
    from ..engine.job import ConvertJob, SourceRef

__all__ = ["conversion_source", "shuffled_source"]


@contextlib.contextmanager
def conversion_source(
    src: str, job: ConvertJob, codec: Codec, mapping: Any | None
) -> Iterator[tuple[Reader, SourceRef | None]]:
    """``src`` opened as a conversion to ``codec`` reads it: permuted (``job.shuffle_seed``),
    laid out by ``mapping`` (:func:`dstore.layouts.split_layout_options`), images decoded
    unless ``codec`` keeps them encoded; with how a worker reopens it (None: this process
    sends the records)."""
    from ..sources.decoded_images import decoded_for

    with (
        open_reader(
            src, format=job.from_format, scan_progress=job.scan_progress, **dict(job.src_options)
        ) as opened,
        shuffled_source(opened, src, job) as (shuffled, ref),
    ):
        reader: Reader = shuffled
        if mapping is not None:
            from ..layouts import apply_layout

            reader = apply_layout(reader, mapping)
        # a worker reopens the source without the layout: it is then sent the records
        reopen = ref if mapping is None else None
        yield decoded_for(reader, codec.keeps_encoded_images, job.keep_encoded), reopen


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

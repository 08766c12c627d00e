"""Running a check: :func:`check` reads a dataset once; :class:`ConvertCheck` watches
the batches a conversion writes (``dstore convert --check``), so that no second pass
is needed; :func:`leakage_summary` is the line ``dstore bench`` prints.

Reading goes batch by batch (bounded in bytes, as a conversion's); each batch is
hashed on a thread of a small pool while the next is read (SHA-256 of large
buffers, PNG decoding and numpy release the GIL), at most ``workers`` batches
in flight. What stays in memory is the hashes (:mod:`.collect`).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..errors import DstoreError, UsageError
from ..model import Image
from ..model.schema import DEFAULT_BATCH_BYTES, Batch, Schema, batch_rows_for
from .analyse import analyse
from .collect import Collector
from .fields import check_fields
from .report import CheckReport, build_report

__all__ = ["DEFAULT_COSINE", "DEFAULT_NEAR", "ConvertCheck", "check", "leakage_summary"]

#: pHash bits two near-duplicate images may differ by (docs/check.md: how it was chosen)
DEFAULT_NEAR = 4
#: the cosine similarity from which two feature vectors are near-duplicates
DEFAULT_COSINE = 0.98

Progress = Callable[[int, int], None]


def _workers(workers: int | None) -> int:
    if workers is not None:
        if workers < 1:
            raise UsageError(f"workers must be 1 or more. Got {workers}.")
        return workers
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _check_settings(near: int, cosine: float) -> None:
    if not 0 <= near <= 64:
        raise UsageError(f"near must be 0..64 bits of a 64-bit pHash. Got {near}.")
    if not -1.0 <= cosine <= 1.0:
        raise UsageError(f"cosine must be -1..1. Got {cosine}.")


def _encoded_images(schema: Schema, names: Sequence[str]) -> dict[str, set[str]]:
    """``{split: {field}}`` of the checked fields holding encoded images (PNG, JPEG...)."""
    out: dict[str, set[str]] = {}
    for split in schema.splits.values():
        found = {
            n
            for n in names
            if n in split.fields
            and isinstance(kind := split.fields[n].kind, Image)
            and kind.encoding != "raw"
        }
        if found:
            out[split.name] = found
    return out


def check(
    path: str | os.PathLike[str],
    *,
    fields: Sequence[str] | None = None,
    near: int = DEFAULT_NEAR,
    cosine: float = DEFAULT_COSINE,
    format: str | None = None,
    follow_links: bool = False,
    workers: int | None = None,
    progress: Progress | None = None,
    version: int | None = None,
    **options: Any,
) -> CheckReport:
    """Find exact and near duplicates in the dataset at ``path``, within and across splits.

    ``fields`` are the fields compared (default: all but label fields); ``near`` the
    pHash bits two images may differ by, ``cosine`` the similarity from which two
    feature vectors are near-duplicates. ``progress(n, total)`` is called after each
    batch hashed. ``version=N`` checks the dataset as it was at version N (``dstore
    log`` lists them; default: the latest). ``options`` are the input format's
    (``drop=...``).

    >>> report = dstore.check("data.npz")  # doctest: +SKIP
    >>> report.leaked, report.summary_line()  # doctest: +SKIP
    """
    from .. import api

    _check_settings(near, cosine)
    where = os.fspath(path)
    if follow_links:
        options["follow_links"] = True
    if version is not None:
        options["version"] = version
    with api.open_reader(where, format=format, **options) as opened:
        chosen = check_fields(opened.schema, fields)
        encoded = _encoded_images(opened.schema, chosen.exact)
        reader = api.DecodedImages(opened, encoded) if encoded else opened
        collector = Collector(reader.schema, chosen, where)
        _read_all(reader, collector, _workers(workers), progress)
    records = {s.name: s.count for s in reader.schema.splits.values()}
    return build_report(analyse(collector.result(), near, cosine), where, chosen, records)


def _read_all(reader: Any, collector: Collector, workers: int, progress: Progress | None) -> None:
    """Every record of every split through ``collector.add`` on ``workers`` threads."""
    schema = collector.schema
    wanted = (*collector.fields.exact, *collector.fields.labels)
    total = schema.records
    with ThreadPoolExecutor(workers, thread_name_prefix="dstore-check") as pool:
        pending: deque[tuple[Future[None], int]] = deque()

        def settle(keep: int) -> None:
            while len(pending) > keep:
                fut, n = pending.popleft()
                fut.result()
                if progress is not None:
                    progress(n, total)

        try:
            for spec in schema.splits.values():
                names = [n for n in spec.fields if n in wanted]
                rows = batch_rows_for(
                    spec, DEFAULT_BATCH_BYTES, reader.stored_record_bytes(spec.name)
                )
                pos = 0
                for batch in reader.iter_batches(spec.name, fields=names, batch_rows=rows):
                    n = len(next(iter(batch.values()))) if batch else 0
                    pending.append((pool.submit(collector.add, spec.name, pos, batch), n))
                    pos += n
                    del batch
                    settle(workers)
            settle(0)
        finally:
            for fut, _ in pending:
                fut.cancel()


class ConvertCheck:
    """The check of a conversion's records as they are written (``convert --check``):
    the conversion calls :meth:`begin` with its output schema, then the observer with
    each batch written (from any thread); :meth:`report` analyses what it saw.

    Each batch is hashed on a thread of its own pool, at most ``workers`` batches at
    once, so that the conversion's reading and encoding go on meanwhile."""

    def __init__(
        self,
        *,
        fields: Sequence[str] | None = None,
        near: int = DEFAULT_NEAR,
        cosine: float = DEFAULT_COSINE,
        workers: int | None = None,
        where: str = "",
    ) -> None:
        _check_settings(near, cosine)
        self.fields, self.near, self.cosine, self.where = fields, near, cosine, where
        self.workers = _workers(workers)
        self.collector: Collector | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._slots = threading.BoundedSemaphore(self.workers)
        self._errors: list[BaseException] = []  # appended by the pool's threads

    def begin(self, schema: Schema) -> None:
        """Called once, with the schema of the records that will be written."""
        self.collector = Collector(schema, check_fields(schema, self.fields), self.where)
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="dstore-check")

    def __call__(self, split: str, start: int, batch: Batch) -> None:
        if self.collector is None or self._pool is None:
            raise RuntimeError("ConvertCheck called before begin()")
        if self._errors:  # a batch failed: stop the conversion with its error
            raise self._errors[0]
        self._slots.acquire()  # bounds the batches held here, so memory stays bounded
        self._pool.submit(self.collector.add, split, start, batch).add_done_callback(self._done)

    def _done(self, fut: Future[None]) -> None:
        self._slots.release()
        error = fut.exception()
        if error is not None:
            self._errors.append(error)

    def close(self) -> None:
        """Wait for the batches being hashed; the first error they raised is raised."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._errors:
            raise self._errors[0]

    def report(self) -> CheckReport:
        """The check of every record written (call after the conversion succeeded)."""
        self.close()
        if self.collector is None:
            raise RuntimeError("ConvertCheck.report() before the conversion began")
        schema = self.collector.schema
        records = {s.name: s.count for s in schema.splits.values()}
        analysis = analyse(self.collector.result(), self.near, self.cosine)
        return build_report(analysis, self.where, self.collector.fields, records)


def leakage_summary(path: str | os.PathLike[str], **kwargs: Any) -> str:
    """The one line ``dstore bench`` prints about its input: which records of the
    evaluation splits duplicate training records (its accuracy probe measures less
    than it seems when they do); an input it cannot check says why instead."""
    try:
        return check(path, **kwargs).summary_line()
    except DstoreError as e:
        return f"check: not run ({e})"

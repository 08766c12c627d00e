"""``dstore.convert(src, dst, append=True)``: SRC's records after DST's, as DST's next version.

The settings, schema checks and history are :mod:`.append_settings`'s; this module
runs the append the way the dataset's format allows, chosen by capability:

- a sharded format (``Codec.sharded``): new shards in a pending folder, then the next
  version committed by the container (:func:`dstore.engine.append.write_next_version`);
  no existing shard is touched;
- ``Codec.appends_in_place`` (zarr): the format's appender grows the arrays; its
  ``close`` commits (:meth:`dstore.abc.Codec.open_appender`);
- any other format: the dataset is written whole again -- its records, then the new
  ones -- beside it and renamed over it (:mod:`dstore.output`), costing a full rewrite.

Who may append at once: locally one process at a time per dataset, the others wait
(:func:`dstore.locking.append_lock`); on an object store a sharded dataset's commit is
an exclusive create, retried a few times against a concurrent appender, and any other
dataset is claimed first (:func:`dstore.locking.version_claim`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from typing import Any

from .. import fs
from ..abc import Codec, Reader
from ..engine.append import write_next_version
from ..engine.cast import write_splits
from ..engine.dtypes import CastStats
from ..engine.job import ConvertJob
from ..engine.rawsize import RawMeter
from ..engine.run import ShardRun
from ..errors import AppendConflictError, AppendError, ResumableInterrupt
from ..locking import append_lock, version_claim
from ..model import Image
from ..model.checksums import FieldHasher
from ..model.precision import logical_schema
from ..model.schema import Schema
from ..output import path_size
from ..registry import get_codec_class, infer_codec
from ..sharding.versions import begin_version, remove_tree
from ..sources.opening import open_reader, size_or_zero
from ..sources.versions import Concatenated, version_of
from .append_settings import (
    check_agreement,
    check_explicit_policy,
    check_not_appended,
    content_fingerprint,
    dataset_codec,
    dataset_policy,
    first_record,
    merged_schema,
    new_record,
    stat_fingerprint,
)
from .convert import ConvertReport, write_dataset
from .shuffled import conversion_source

__all__ = ["append_job"]

_log = logging.getLogger("dstore")
#: commits an append to an object store tries before giving up to concurrent appenders
ATTEMPTS = 4


def append_job(src: str, dst: str, job: ConvertJob) -> ConvertReport:
    """:func:`dstore.convert` with ``append=True``."""
    cls = get_codec_class(job.to or infer_codec(dst))
    if not fs.exists(dst):
        raise AppendError(
            f"{dst}: no such dataset; append=True adds records to an existing one (convert "
            "to it first)"
        )
    if job.overwrite:
        raise AppendError(f"{dst}: append=True and overwrite=True do not go together")
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with append_lock(dst) if not fs.is_url(dst) else contextlib.nullcontext():
                report = _append_once(src, dst, cls, job)
                _refresh_cards(dst, cls)
                return report
        except AppendConflictError as e:
            if attempt == ATTEMPTS or not cls.sharded:
                raise
            _log.warning("%s; appending again after it (attempt %d)", e, attempt + 1)
    raise AssertionError("unreachable")


def _refresh_cards(dst: str, cls: Any) -> None:
    """The cards dstore wrote for ``dst`` describe the version just committed (#38):
    rewritten after the commit, keeping what the earlier card said (name, license, ...)
    and taking the shards' hashes from the manifest dstore just wrote. A crash between
    the commit and this leaves the previous version's card, whole; ``dstore card``
    rewrites it."""
    from ..card.build import card_of, describe
    from .views import open as open_dataset

    if card_of(dst, cls) is None:
        return
    with open_dataset(dst, format=cls.name) as ds:
        describe(dst, cls, ds.reader, trusted=True)


def _size(dst: str) -> int:
    """Bytes of the dataset now (an object store listed afresh: another writer's files)."""
    if fs.is_url(dst):
        fs.url_fs(dst)[0].invalidate_cache()
    try:
        return path_size(dst)
    except OSError:
        return 0


def _append_once(src: str, dst: str, cls: type[Codec], job: ConvertJob) -> ConvertReport:
    t0 = time.perf_counter()
    pending = begin_version(dst) if cls.sharded else None
    # a folder of shards: the new shards' bytes from the run (no walk of every file)
    before = 0 if pending is not None else _size(dst)
    version = None if pending is None else pending.base
    options = dict(job.options)
    if job.layout is not None:
        from ..layouts import split_layout_options

        _, options = split_layout_options(job.layout, job.options)
    try:
        with open_reader(dst, format=cls.name, decode=False, version=version) as stored:
            codec, _ = dataset_codec(dst, cls, stored, options)
            history = list(stored.schema.versions) or [first_record(dst, stored)]
            layout = _layout(dst, job.layout, history)
            if _stores_encoded(stored.schema):  # images kept as they came: so are the new
                job = job.replace(keep_encoded=True)
            mapping = None
            if layout is not None:
                from ..layouts import split_layout_options

                mapping, _ = split_layout_options(layout, job.options)
            with conversion_source(src, job, codec, mapping) as (reader, ref):
                report = _append_records(
                    src,
                    dst,
                    codec,
                    job.replace(source=ref),
                    stored,
                    history,
                    layout,
                    reader,
                    pending,
                )
    except ResumableInterrupt:
        raise  # its finished shards stay in the pending folder for resume=True
    except BaseException:
        if pending is not None:
            remove_tree(pending.folder)
        raise
    report.seconds = time.perf_counter() - t0
    if report.shards is not None:
        report.bytes_out = report.shards.bytes
    else:  # what the append added (a file written whole: its new size less the old)
        report.bytes_out = max(0, _size(dst) - before)
    return report


def _stores_encoded(schema: Schema) -> bool:
    return any(
        isinstance(f.kind, Image) and f.kind.encoding != "raw"
        for split in schema.splits.values()
        for f in split.fields.values()
    )


def _layout(dst: str, explicit: str | None, history: list[dict[str, Any]]) -> str | None:
    recorded = history[-1].get("layout")
    if explicit is not None and recorded is not None and explicit != recorded:
        raise AppendError(
            f"{dst}: layout {explicit!r} conflicts with the dataset's layout {recorded!r} "
            "(leave layout out)"
        )
    return explicit or recorded


def _append_records(
    src: str,
    dst: str,
    codec: Codec,
    job: ConvertJob,
    stored: Reader,
    history: list[dict[str, Any]],
    layout: str | None,
    reader: Reader,
    pending: Any,
) -> ConvertReport:
    policy = dataset_policy(stored.schema, reader.schema, job.policy.on_overflow)
    check_explicit_policy(dst, job.policy, policy, reader.schema)
    policy = policy.prepare(reader, codec)
    incoming = policy.apply_schema(reader.schema)
    incoming = Schema(incoming.splits, dict(incoming.attrs))
    check_agreement(dst, stored.schema, incoming)
    fingerprint = content_fingerprint(src, getattr(reader, "inputs", ()))
    stat = stat_fingerprint(src)
    if not job.append_again:
        check_not_appended(dst, history, fingerprint, stat, src)
    after = merged_schema(stored.schema, incoming)
    number = version_of(stored) + 1
    added = {s.name: s.count for s in incoming.splits.values()}
    # recorded as version 1's source is: a local path absolute (a URL, @LIST as given)
    where = src if fs.is_url(src) or src.startswith("@") else os.path.abspath(src)
    record = new_record(
        number, "append", after, added, where, fingerprint, stat, codec, policy, layout
    )
    if job.shuffle_seed is not None:  # the records this version added, shuffled
        record["shuffle_seed"] = job.shuffle_seed
    after.versions = [*history, record]
    meter = RawMeter(reader)
    work = job.replace(policy=policy, sources=[src, *getattr(reader, "inputs", ())])
    run: ShardRun | None = None
    if pending is not None:
        run = write_next_version(meter, codec, incoming, after, work, pending)
        stats = run.stats
    elif codec.appends_in_place:
        stats = _in_place(dst, codec, meter, incoming, after, work, number)
    else:
        stats = _rewrite(dst, codec, meter, after, work, number)
    return ConvertReport(
        src=src,
        dst=dst,
        src_format=getattr(reader, "format", None) or job.from_format or infer_codec(src),
        dst_format=codec.name,
        records=incoming.records,
        splits=len(incoming.splits),
        raw_bytes=incoming.nbytes + meter.measured,
        bytes_in=getattr(reader, "bytes_in", None) or size_or_zero(src),
        bytes_out=0,
        seconds=0.0,
        cast=stats,
        shards=run,
        notes=[*reader.notes, *policy.notes(reader.schema)],
        version=number,
    )


def _claimed(dst: str, number: int, cls_name: str) -> Any:
    """The claim to version ``number`` of a dataset on an object store (nothing locally)."""
    if not fs.is_url(dst):
        return contextlib.nullcontext()

    def current() -> int:
        with open_reader(dst, format=cls_name, decode=False) as now:
            return version_of(now)

    return version_claim(dst, number, current)


def _in_place(
    dst: str,
    codec: Codec,
    reader: Reader,
    incoming: Schema,
    after: Schema,
    job: ConvertJob,
    number: int,
) -> dict[str, CastStats]:
    stats: dict[str, CastStats] = {}
    with _claimed(dst, number, codec.name):
        writer = codec.open_appender(dst, incoming, after)
        hasher = FieldHasher(incoming)
        try:
            write_splits(
                reader,
                writer,
                job.policy,
                stats,
                hasher,
                batch_bytes=job.batch_bytes,
                progress=job.progress,
            )
            # the added records' checksums: dstore verify checks each version's records
            after.versions[-1]["checksums"] = hasher.hexdigests()
            writer.close()
        except BaseException:
            writer.abort()
            raise
    return stats


def _rewrite(
    dst: str, codec: Codec, reader: Reader, after: Schema, job: ConvertJob, number: int
) -> dict[str, CastStats]:
    """The dataset written whole again (its records, then the new ones) and renamed over
    it; its earlier versions are then gone (recorded as replaced)."""
    history = [{**v, "readable": False} for v in after.versions[:-1]]
    work = job.replace(overwrite=True, versions=(*history, after.versions[-1]))
    with _claimed(dst, number, codec.name), open_reader(dst, format=codec.name) as old:
        logical = logical_schema(after)
        whole = Concatenated(old, reader, Schema(logical.splits, dict(logical.attrs)))
        if not fs.is_url(dst):
            stats, _ = write_dataset(whole, dst, codec, work)
            return stats
        staging = tempfile.mkdtemp(prefix="dstore-append-")
        try:  # written here, then one PUT replaces the object: readers see old or new
            local = os.path.join(staging, os.path.basename(dst.rstrip("/")))
            stats, _ = write_dataset(whole, local, codec, work.replace(overwrite=False))
            store, p = fs.url_fs(dst)
            store.put(local, p)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return stats

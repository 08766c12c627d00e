"""The convert engine's entry points: :func:`convert` (path to path) and
:func:`write_dataset` (any reader into a codec), and the :class:`ConvertReport`.

One loop -- ``reader.iter_batches`` -> ``policy.apply`` -> ``writer.write`` --
over batches bounded in bytes, into an atomic output (:mod:`dstore.output`);
sharded formats are planned and written shard by shard (:mod:`dstore.engine.run`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..abc import Codec, Reader
from ..engine.cast import BatchObserver, Progress, cast_batches, write_splits
from ..engine.dtypes import CastStats, DtypePolicy, OnOverflow
from ..engine.job import ConvertJob
from ..engine.rawsize import RawMeter
from ..errors import CodecIOError, DstoreError, MissingDependencyError, OptionError, UsageError
from ..model import concat_columns
from ..model.checksums import FieldHasher
from ..model.schema import DEFAULT_BATCH_BYTES, Batch, Schema
from ..output import Overwrite, atomic_output, is_url, path_size, upload_output, url_output
from ..registry import infer_codec
from ..sources.opening import codec_for, size_or_zero
from ._text import fmt_bytes
from .shuffled import conversion_source

if TYPE_CHECKING:
    # imported where a sharded format is written: an npz or HDF5 output never needs them
    from ..engine.dask import RegionTasks
    from ..engine.run import ShardRun

__all__ = ["ConvertReport", "Progress", "convert", "write_dataset"]


@dataclass
class ConvertReport:
    """What a conversion did: counts, sizes, time and the error casts introduced."""

    src: str
    dst: str
    src_format: str
    dst_format: str
    records: int
    splits: int
    raw_bytes: int
    bytes_in: int
    bytes_out: int
    seconds: float
    cast: dict[str, CastStats] = field(default_factory=dict)
    shards: ShardRun | None = None
    #: what the conversion could not carry as it was (attributes, fill values), one line each
    notes: list[str] = field(default_factory=list)
    #: the version of ``dst`` an append made (None: a conversion, version 1)
    version: int | None = None

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.bytes_out if self.bytes_out else float("inf")

    @property
    def mb_per_s(self) -> float:
        return self.raw_bytes / 1e6 / self.seconds if self.seconds else float("inf")

    def summary(self) -> str:
        if self.shards is not None and self.shards.complete:
            return (
                f"{self.dst}: already complete ({self.shards.shards} shards match its manifest, "
                "written from this source with these options): nothing to do"
            )
        line = (
            f"{self.records} records in {self.splits} split(s), {self.src_format} -> "
            f"{self.dst_format}: {fmt_bytes(self.bytes_in)} in, {fmt_bytes(self.bytes_out)} out "
            f"(raw/out {self.ratio:.2f}), {self.seconds:.1f} s, {self.mb_per_s:.0f} MB/s -> {self.dst}"
        )
        if self.version is not None:
            line = f"appended {line}, version {self.version}"
        if self.cast:
            every = CastStats()  # all fields as one: the mean weighs each value alike
            for stats in self.cast.values():
                every.merge(stats)
            line += (
                f"; cast error max abs {every.max_abs_error:.3g}, mean abs "
                f"{every.mean_abs_error:.3g}, max rel {every.max_rel_error:.3g}"
            )
            if every.clipped:
                line += f", {every.clipped} value(s) clipped"
        if self.shards is not None and self.shards.kept:
            line += f"; resumed: {self.shards.kept} of {self.shards.shards} shards kept, {self.shards.written} written"
        if self.shards is not None and self.shards.note:
            line += f"\nnote: {self.shards.note}"
        for note in self.notes:
            line += f"\nnote: {note}"
        return line


def write_dataset(
    reader: Reader,
    dst: str,
    codec: Codec,
    job: ConvertJob | None = None,
    **settings: Any,
) -> tuple[dict[str, CastStats], ShardRun | None]:
    """Stream every split of ``reader`` through ``job.policy`` into ``codec`` at ``dst``.

    ``settings`` are :class:`~dstore.engine.job.ConvertJob` fields (``policy=``,
    ``overwrite=``, ``batch_bytes=``...), applied over ``job``: the keywords this
    function took before the job existed. Sharded formats go through
    ``dstore.engine.run`` (resumable, distributable); the others are written by
    one writer, split after split."""
    job = (job or ConvertJob()).replace(**settings) if settings else (job or ConvertJob())
    policy = job.policy.prepare(reader, codec)  # int8 ranges (one read), bfloat16 storage
    job = job.replace(policy=policy)
    # the source's checksums describe the source's values, not these: a new schema has none
    out_schema = policy.apply_schema(reader.schema)
    out_schema = Schema(
        out_schema.splits, dict(out_schema.attrs), {}, [dict(v) for v in job.versions]
    )
    codec.check_schema(out_schema)
    if job.observe is not None:
        _check_observable(dst, job)
        job.observe.begin(out_schema)

    def sample(split: str, n: int) -> Batch:
        # the first records as they will be written: through the engine, so a reader
        # that yields fewer than its schema says fails here as it would when writing
        parts = list(cast_batches(reader, split, policy, {}, stop=n, batch_bytes=job.batch_bytes))
        fields = out_schema.splits[split].fields
        return {
            name: concat_columns(fields[name].kind, [p[name] for p in parts]) for name in fields
        }

    if codec.sharded:
        from ..engine.local import start_workers

        start_workers(reader, codec, out_schema, dst, job)
    plan = codec.plan_shards(out_schema, sample) if codec.sharded else None
    # the cards (dstore.card) are written into the output before its commit (#38)
    cards = _card_writer(reader, codec, job) if job.card else None
    if plan is not None:
        from ..engine.run import write_sharded

        run = write_sharded(reader, dst, codec, out_schema, plan, job, on_commit=cards)
        return run.stats, run
    if job.resume:
        raise CodecIOError(
            f"{dst}: resume=True needs a sharded output format ('dstore formats' marks them); "
            f"{codec.name} is written by one process"
        )
    tasks = _region_tasks(dst, codec, job.client)
    stats: dict[str, CastStats] = {}
    hasher = FieldHasher(out_schema)
    if is_url(dst):  # straight to the store when the codec can, else staged and uploaded
        output = url_output if codec.supports_urls else upload_output
    else:
        output = atomic_output
    with output(dst, codec=codec, sources=job.sources, overwrite=job.overwrite) as tmp:
        writer = codec.open_writer(tmp, out_schema)
        if tasks is not None:
            writer.write_regions(tasks.submit)
        try:
            write_splits(
                reader,
                writer,
                policy,
                stats,
                hasher,
                batch_bytes=job.batch_bytes,
                progress=job.progress,
                observe=job.observe,
            )
            # stored by close() with the schema, in a slot of their own (not the user's attrs)
            out_schema.checksums = hasher.hexdigests()
            writer.close()
            if tasks is not None:
                tasks.finish()
            if cards is not None:  # card hook (#38): inside the atomic output, before the rename
                cards(tmp, stats)
        except BaseException:
            writer.abort()
            if tasks is not None:
                tasks.cancel()  # no task may write into the output removed next
            raise
    return stats, None


def _card_writer(
    reader: Reader, codec: Codec, job: ConvertJob
) -> Callable[[str, Mapping[str, CastStats]], None]:
    """Card hook (#38): ``cards(root, stats)`` writes ``croissant.json`` (and the Hub's
    README.md) into a folder output at ``root`` before it is committed; ``stats`` hold
    the casts' largest errors over every value."""
    from ..card import Written, write_with_output

    policy = job.policy
    fields = {n for s in reader.schema.splits.values() for n in s.fields}
    try:
        fmt = job.from_format or (infer_codec(job.sources[0]) if job.sources else None)
    except DstoreError:
        fmt = None  # a glob or a list of files: the card names no source format
    written = Written(
        job.sources[0] if job.sources else "arrays in memory",
        reader.schema,
        {n: policy.per_field.get(n, policy.default) for n in fields},
        source_format=fmt,
    )

    def cards(root: str, stats: Mapping[str, CastStats]) -> None:
        write_with_output(root, codec, dataclasses.replace(written, stats=stats))

    return cards


def _check_observable(dst: str, job: ConvertJob) -> None:
    """An observer sees the records this process writes: not those of Dask tasks, nor
    the shards a resumed run keeps."""
    if job.client is not None or job.resume:
        raise UsageError(
            f"{dst}: a check of the records written (observe=) needs every record written "
            f"by this process: it does not go with {'resume' if job.resume else 'a Dask client'}"
        )


def _region_tasks(dst: str, codec: Codec, client: Any) -> RegionTasks | None:
    """The Dask tasks a codec with ``region_writes`` hands its chunks to; a format that
    is one file with one writer is refused with a Dask client."""
    if client is None:
        return None
    if not codec.region_writes:
        raise CodecIOError(
            f"{dst}: {codec.name} cannot be written on Dask: it is a single file with a "
            "single writer; a Dask client needs a sharded or chunked-store output format"
        )
    from ..engine.dask import RegionTasks

    return RegionTasks(client)


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    to: str | None = None,
    from_format: str | None = None,
    dtype: str | Sequence[str] | DtypePolicy | None = None,
    on_overflow: OnOverflow = "error",
    overwrite: Overwrite = False,
    options: Mapping[str, Any] | None = None,
    src_options: Mapping[str, Any] | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    progress: Progress | None = None,
    resume: bool = False,
    client: Any = None,
    layout: str | None = None,
    keep_encoded: bool = False,
    follow_links: bool = False,
    scan_progress: Progress | None = None,
    card: bool = True,
    append: bool = False,
    append_again: bool = False,
    version: int | None = None,
    observe: BatchObserver | None = None,
    shuffle_seed: int | None = None,
) -> ConvertReport:
    """Convert ``src`` to ``dst``, streaming, with an optional dtype policy.

    A folder output (TFRecord, WebDataset, Parquet, ArrayRecord, zarr) is written with
    its cards, ``croissant.json`` and for Parquet the Hub's ``README.md``
    (:func:`dstore.card`), unless ``card=False``.
    ``append=True`` adds ``src``'s records after those of the existing dataset ``dst``,
    split by split, as its next version (:mod:`dstore.api.append`): with ``dst``'s
    settings (format options, dtype policy, layout; an explicit one that differs is an
    error), refused when the schemas disagree or ``src`` is already in ``dst``'s history
    (unless ``append_again=True``). ``version=N`` reads ``src`` as it was at version N.

    ``layout`` (``tf-object-detection``, ``tf-segmentation``, ``tf-classification``
    or a registered one) maps label-maker arrays to a training library's feature
    names, or back when ``src`` already holds them (:mod:`dstore.layouts`); the
    layout's own ``options`` (``class_names``, ``filenames``) are taken out of the codec's.

    Encoded images (PNG/JPEG bytes, e.g. the Object Detection API's) pass
    through byte for byte to TFRecord; other destinations get them decoded to
    pixels (:mod:`dstore.images.decoding`) unless ``keep_encoded=True``.

    ``resume=True`` finishes an interrupted sharded (TFRecord) conversion,
    keeping the shards it completed; ``client`` (a ``dask.distributed.Client``)
    writes each shard as a Dask task. Both give the same bytes as a plain run.

    ``progress(records, total)`` is called after each batch written;
    ``scan_progress(1, files)`` after each file of a many-file ``src`` is scanned for its
    schema, the pass before the first record. ``observe`` sees every batch as it is
    written (:class:`dstore.check.ConvertCheck`: ``convert --check``).
    A source that links to other files (HDF5 external links or virtual datasets,
    zarr symlinks out of the store, folder links in a glob) is refused with
    :class:`~dstore.errors.UnsafeInputError` before anything is written, unless
    ``follow_links=True`` (the same as ``src_options={"follow_links": True}``).

    >>> dstore.convert("data.npz", "out.tfrecords", dtype="float16")  # doctest: +SKIP
    """
    job = ConvertJob.build(
        to=to,
        from_format=from_format,
        dtype=dtype,
        on_overflow=on_overflow,
        overwrite=overwrite,
        options=options,
        src_options=src_options,
        batch_bytes=batch_bytes,
        progress=progress,
        resume=resume,
        client=client,
        layout=layout,
        keep_encoded=keep_encoded,
        follow_links=follow_links,
        scan_progress=scan_progress,
        card=card,
        append=append,
        append_again=append_again,
        observe=observe,
        shuffle_seed=shuffle_seed,
    )
    if version is not None:
        job = job.replace(src_options={**job.src_options, "version": version})
    return convert_job(os.fspath(src), os.fspath(dst), job)


def convert_job(src: str, dst: str, job: ConvertJob) -> ConvertReport:
    """:func:`convert` of a built :class:`~dstore.engine.job.ConvertJob`."""
    if job.append:
        from .append import append_job

        return append_job(src, dst, job)
    mapping, codec_options = None, job.options
    if job.layout is not None:
        from ..layouts import split_layout_options

        mapping, codec_options = split_layout_options(job.layout, job.options)
    dst_codec = _destination_codec(dst, job.to, codec_options, job.layout)
    if isinstance(job.client, str):  # a scheduler address: connect for this conversion only
        with _dask_client(job.client) as connected:
            return convert_job(src, dst, job.replace(client=connected))
    t0 = time.perf_counter()
    with conversion_source(src, job, dst_codec, mapping) as (reader, source):
        # the decoded size of the fields the schema cannot size, as their records pass
        meter = RawMeter(reader)
        stats, run = write_dataset(
            meter,
            dst,
            dst_codec,
            job.replace(
                sources=[src, *getattr(reader, "inputs", ())],
                source=source if dst_codec.sharded else None,
            ),
        )
        schema = reader.schema
        # a multi-source reader (dstore.sources.many_files) knows its files' format and total size
        src_format = getattr(reader, "format", None) or job.from_format or infer_codec(src)
        bytes_in = getattr(reader, "bytes_in", None) or size_or_zero(src)
        notes = [*reader.notes, *dst_codec.attribute_notes(schema), *job.policy.notes(schema)]
    seconds = time.perf_counter() - t0
    return ConvertReport(
        src=src,
        dst=dst,
        src_format=src_format,
        dst_format=dst_codec.name,
        records=schema.records,
        splits=len(schema.splits),
        raw_bytes=schema.nbytes + meter.measured,
        bytes_in=bytes_in,
        bytes_out=path_size(dst),
        seconds=seconds,
        cast=stats,
        shards=run,
        notes=notes,
    )


def _destination_codec(
    dst: str, to: str | None, options: Mapping[str, Any] | None, layout: str | None
) -> Codec:
    """The codec writing ``dst``; with a layout, an unknown ``-o`` key also lists the
    layout's keys: the layout took its own first, so a misspelt one landed here."""
    try:
        return codec_for(dst, to, options)
    except OptionError as e:
        if layout is None or "unknown option" not in str(e):
            raise
        from ..layouts import get_layout_class

        names = get_layout_class(layout).option_names()
        raise OptionError(
            f"{e}; layout {layout}'s: {', '.join(names) or 'none'}" + _did_you_mean(str(e), names)
        ) from None


def _did_you_mean(message: str, layout_keys: Sequence[str]) -> str:
    """``(did you mean class_names?)`` for an unknown key close to one of the layout's."""
    import difflib
    import re

    found = re.search(r"unknown option\(s\) ([^;]+);", message)
    unknown = found.group(1).split(", ") if found else []
    close = [m for key in unknown for m in difflib.get_close_matches(key, layout_keys, 1)]
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _dask_client(address: str) -> Any:
    try:
        from dask.distributed import Client
    except ImportError:
        raise MissingDependencyError("distributed", "dask", "distributed") from None
    try:
        return Client(address, timeout="10s")
    except (OSError, TimeoutError) as e:
        raise CodecIOError(f"{address}: cannot reach the Dask scheduler: {e}") from None

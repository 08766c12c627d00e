"""The library surface: open, convert, save, verify, info.

Everything the CLI does goes through these functions. Conversions are one
loop -- ``reader.iter_batches`` -> ``policy.apply`` -> ``writer.write`` -- over
batches bounded in bytes, into an atomic output (:mod:`dstore.output`);
sharded formats are planned and written shard by shard (:mod:`dstore.shards`).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .codecs.base import Codec, Reader, _concat
from .dtypes import CastStats, DtypePolicy, OnOverflow, parse_policy
from .errors import CodecIOError, DstoreError, MissingDependencyError, SchemaError
from .integrity import CHECKSUM_ATTR, FieldHasher, stored_checksums
from .model import (
    Column,
    Kind,
    Ragged,
    Tensor,
    VarColumn,
    empty_column,
    infer_column,
    record,
    slice_column,
    to_column,
)
from .output import atomic_output, is_url, path_size, upload_output, url_output
from .parallel import prefetch
from .registry import get_codec_class, infer_codec
from .schema import (
    DEFAULT_BATCH_BYTES,
    Batch,
    FieldSpec,
    Schema,
    SplitSpec,
    batch_rows_for,
    check_batch,
    split_key,
)
from .shards import ShardRun, SourceRef, write_sharded

__all__ = [
    "ConvertReport",
    "Dataset",
    "FieldResult",
    "VerifyReport",
    "check",
    "convert",
    "info",
    "open",
    "save",
    "verify",
]

#: Called after each batch with (records in the batch, records in the whole dataset).
Progress = Callable[[int, int], None]


def _codec_for(path: str, name: str | None, options: Mapping[str, Any] | None) -> Codec:
    cls = get_codec_class(name or infer_codec(path))
    # what the path's name implies (x.tfrecords.gz: gzip), unless an option says otherwise
    return cls(**{**cls.path_options(path), **dict(options or {})})


def _check_local_input(path: str) -> None:
    """Refuse a missing path, and anything that is neither a file nor a folder: reading a
    FIFO blocks until someone writes to it, a device never ends."""
    if "://" in path or any(c in path for c in "*?["):
        return
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise CodecIOError(f"{path}: no such file or directory") from None
    except OSError as e:
        raise CodecIOError(f"{path}: cannot stat: {e.strerror or e}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = (
            "a FIFO (named pipe)"
            if stat.S_ISFIFO(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        raise CodecIOError(f"{path}: is {kind}, not a regular file or folder; refusing to read it")


def _open(path: str, format: str | None, options: Mapping[str, Any]) -> tuple[Codec, Reader]:
    _check_local_input(path)
    codec = _codec_for(path, format, options)
    return codec, codec.open_reader(path)


def open_reader(
    path: str | os.PathLike[str], *, format: str | None = None, **options: Any
) -> Reader:
    """A codec reader for ``path`` (format from the extension unless given)."""
    return _open(os.fspath(path), format, options)[1]


# --------------------------------------------------------------------------- open


class FieldView:
    """Lazy view of one field: ``ds["train"]["x"][:8]`` reads only those records.

    An integer index gives one record as the kind defines it: an ndarray
    (tensors, ragged lists, images), a ``str`` (strings) or ``bytes``
    (bytes, encoded images). A slice of a dense field (tensors, raw images of
    one size) is an ndarray with a record axis; a slice of any other field is
    a list of records.
    """

    def __init__(self, reader: Reader, split: SplitSpec, spec: FieldSpec) -> None:
        self._reader = reader
        self._split = split
        self.spec = spec

    @property
    def kind(self) -> Kind:
        return self.spec.kind

    @property
    def shape(self) -> tuple[int, ...]:
        """(records, *record shape) of a dense field; (records,) otherwise."""
        return (self._split.count, *self.spec.shape) if self.spec.dense else (self._split.count,)

    @property
    def dtype(self) -> np.dtype:
        return self.spec.dtype

    def __len__(self) -> int:
        return self._split.count

    def _read(self, start: int, stop: int) -> Column:
        parts = [
            b[self.spec.name]
            for b in self._reader.iter_batches(
                self._split.name, fields=[self.spec.name], start=start, stop=stop
            )
        ]
        return _concat(parts, self.spec)

    def _records(self, col: Column) -> Any:
        if isinstance(col, VarColumn):
            return [record(self.spec.kind, col, i) for i in range(len(col))]
        return col

    def __getitem__(self, index: Any) -> Any:
        n = self._split.count
        if isinstance(index, (int, np.integer)):
            i = int(index) + n if index < 0 else int(index)
            if not 0 <= i < n:
                raise IndexError(f"record {index} out of range for {n} records")
            return record(self.spec.kind, self._read(i, i + 1), 0)
        if isinstance(index, tuple) and index and isinstance(index[0], slice) and self.spec.dense:
            return self[index[0]][(slice(None), *index[1:])]
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step == 1:
                return self._records(self._read(start, max(start, stop)))
            picks = np.arange(start, stop, step)
            if not len(picks):
                return self._records(empty_column(self.spec.kind))
            lo = int(picks.min())
            col = self._read(lo, int(picks.max()) + 1)
            return self._records(
                col.take(picks - lo) if isinstance(col, VarColumn) else col[picks - lo]
            )
        col = self._read(0, n)
        if isinstance(col, VarColumn):
            picks = np.arange(n)[index]
            return self._records(col.take(np.atleast_1d(picks)))
        return col[index]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if not self.spec.dense:
            raise SchemaError(
                f"field {self.spec.name!r} is {self.spec.kind.describe()}: its records vary, "
                "so it is no single array (index it, or read the values + offsets)"
            )
        arr = np.asarray(self._read(0, self._split.count))
        return arr if dtype is None else arr.astype(dtype)

    def __repr__(self) -> str:
        return (
            f"<field {self.spec.name!r} {self.spec.kind.describe()}, {self._split.count} records>"
        )


class Split(Mapping[str, FieldView]):
    """Fields of one split; ``len()`` is the number of fields, ``.count`` of records."""

    def __init__(self, reader: Reader, spec: SplitSpec) -> None:
        self._reader = reader
        self.spec = spec

    @property
    def count(self) -> int:
        return self.spec.count

    def __getitem__(self, name: str) -> FieldView:
        if name not in self.spec.fields:
            raise KeyError(
                f"split {self.spec.name!r} has no field {name!r}; fields: {list(self.spec.fields)}"
            )
        return FieldView(self._reader, self.spec, self.spec.fields[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self.spec.fields)

    def __len__(self) -> int:
        return len(self.spec.fields)

    def iter_batches(self, **kwargs: Any) -> Iterator[Batch]:
        return self._reader.iter_batches(self.spec.name, **kwargs)

    def read(self) -> dict[str, np.ndarray]:
        return self._reader.read(self.spec.name)


class Dataset(Mapping[str, Split]):
    """A lazily read dataset: splits of fields. Use as a context manager to close files."""

    def __init__(self, reader: Reader, format: str) -> None:
        self.reader = reader
        self.format = format

    @property
    def schema(self) -> Schema:
        return self.reader.schema

    def __getitem__(self, split: str) -> Split:
        return Split(self.reader, self.reader.split(split))

    def __iter__(self) -> Iterator[str]:
        return iter(self.reader.schema.splits)

    def __len__(self) -> int:
        return len(self.reader.schema.splits)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        parts = ", ".join(f"{s.name}: {s.count} records" for s in self.schema.splits.values())
        return f"<dstore.Dataset {self.format} {self.reader.path} ({parts})>"


def open(path: str | os.PathLike[str], *, format: str | None = None, **options: Any) -> Dataset:
    """Open a dataset lazily.

    >>> ds = dstore.open("data.npz")        # doctest: +SKIP
    >>> ds["train"]["x"][:8].shape          # doctest: +SKIP
    (8, 256, 256, 3)
    """
    codec, reader = _open(os.fspath(path), format, options)
    return Dataset(reader, codec.name)


# ------------------------------------------------------------------------ convert


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
            f"{self.dst_format}: {_fmt_bytes(self.bytes_in)} in, {_fmt_bytes(self.bytes_out)} out "
            f"(raw/out {self.ratio:.2f}), {self.seconds:.1f} s, {self.mb_per_s:.0f} MB/s -> {self.dst}"
        )
        if self.cast:
            worst_abs = max(s.max_abs_error for s in self.cast.values())
            worst_rel = max(s.max_rel_error for s in self.cast.values())
            clipped = sum(s.clipped for s in self.cast.values())
            line += f"; cast error max abs {worst_abs:.3g}, max rel {worst_rel:.3g}"
            if clipped:
                line += f", {clipped} value(s) clipped"
        if self.shards is not None and self.shards.kept:
            line += f"; resumed: {self.shards.kept} of {self.shards.shards} shards kept, {self.shards.written} written"
        if self.shards is not None and self.shards.note:
            line += f"\nnote: {self.shards.note}"
        for note in self.notes:
            line += f"\nnote: {note}"
        return line


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def write_dataset(
    reader: Reader,
    dst: str,
    codec: Codec,
    *,
    policy: DtypePolicy,
    overwrite: bool = False,
    sources: Sequence[str] = (),
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    progress: Progress | None = None,
    resume: bool = False,
    client: Any = None,
    source: SourceRef | None = None,
) -> tuple[dict[str, CastStats], ShardRun | None]:
    """Stream every split of ``reader`` through ``policy`` into ``codec`` at ``dst``.

    Sharded formats go through ``dstore.shards`` (resumable, distributable);
    the others are written by one writer, split after split."""
    out_schema = policy.apply_schema(reader.schema)
    # the source's checksums describe the source's values, not these
    out_schema = Schema(
        out_schema.splits, {k: v for k, v in out_schema.attrs.items() if k != CHECKSUM_ATTR}
    )
    codec.check_schema(out_schema)

    def sample(split: str, n: int) -> Batch:
        spec = reader.schema.splits[split]
        batch = next(reader.iter_batches(split, stop=n, batch_rows=n))
        return policy.apply(spec, batch, 0, {}, reader.path)

    plan = codec.plan_shards(out_schema, sample)
    if plan is not None:
        run = write_sharded(
            reader,
            dst,
            codec,
            out_schema,
            plan,
            policy=policy,
            overwrite=overwrite,
            sources=sources,
            batch_bytes=batch_bytes,
            progress=progress,
            resume=resume,
            client=client,
            source=source,
        )
        return run.stats, run
    if resume or client is not None:
        what = "--resume" if resume else "a Dask client"
        raise CodecIOError(
            f"{dst}: {what} needs a sharded output format (tfrecord); {codec.name} is written by one process"
        )
    stats: dict[str, CastStats] = {}
    hasher = FieldHasher(out_schema)
    if is_url(dst):  # straight to the store when the codec can, else staged and uploaded
        output = url_output if codec.supports_urls else upload_output
    else:
        output = atomic_output
    with output(dst, codec=codec, sources=sources, overwrite=overwrite) as tmp:
        writer = codec.open_writer(tmp, out_schema)
        try:
            for split in reader.schema.splits.values():
                rows = batch_rows_for(split, batch_bytes)
                pos = 0
                for batch in prefetch(reader.iter_batches(split.name, batch_rows=rows)):
                    n = check_batch(split, batch)
                    cast = policy.apply(split, batch, pos, stats, reader.path)
                    hasher.update(split.name, cast)
                    writer.write(split.name, cast)
                    pos += n
                    if progress is not None:
                        progress(n, reader.schema.records)
                if pos != split.count:
                    raise SchemaError(
                        f"{reader.path}: split {split.name!r} yielded {pos} records, "
                        f"its schema says {split.count}"
                    )
            out_schema.attrs[CHECKSUM_ATTR] = (
                hasher.hexdigests()
            )  # stored by close() with the schema
            writer.close()
        except BaseException:
            writer.abort()
            raise
    return stats, None


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    to: str | None = None,
    from_format: str | None = None,
    dtype: str | Sequence[str] | DtypePolicy | None = None,
    on_overflow: OnOverflow = "error",
    overwrite: bool = False,
    options: Mapping[str, Any] | None = None,
    src_options: Mapping[str, Any] | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    progress: Progress | None = None,
    resume: bool = False,
    client: Any = None,
) -> ConvertReport:
    """Convert ``src`` to ``dst``, streaming, with an optional dtype policy.

    ``resume=True`` finishes an interrupted sharded (TFRecord) conversion,
    keeping the shards it completed; ``client`` (a ``dask.distributed.Client``)
    writes each shard as a Dask task. Both give the same bytes as a plain run.

    >>> dstore.convert("data.npz", "out.tfrecords", dtype="float16")  # doctest: +SKIP
    """
    src, dst = os.fspath(src), os.fspath(dst)
    policy = dtype if isinstance(dtype, DtypePolicy) else parse_policy(dtype, on_overflow)
    dst_codec = _codec_for(dst, to, options)
    if isinstance(client, str):  # a scheduler address: connect for this conversion only
        with _dask_client(client) as connected:
            return convert(
                src,
                dst,
                to=to,
                from_format=from_format,
                dtype=policy,
                overwrite=overwrite,
                options=options,
                src_options=src_options,
                batch_bytes=batch_bytes,
                progress=progress,
                resume=resume,
                client=connected,
            )
    t0 = time.perf_counter()
    with open_reader(src, format=from_format, **dict(src_options or {})) as reader:
        stats, run = write_dataset(
            reader,
            dst,
            dst_codec,
            policy=policy,
            overwrite=overwrite,
            sources=[src],
            batch_bytes=batch_bytes,
            progress=progress,
            resume=resume,
            client=client,
            source=SourceRef(src, from_format, dict(src_options or {})),
        )
        schema = reader.schema
        src_format = from_format or infer_codec(src)
        bytes_in = _size_or_zero(src)
        notes = [*reader.notes, *dst_codec.attribute_notes(schema)]
    seconds = time.perf_counter() - t0
    return ConvertReport(
        src=src,
        dst=dst,
        src_format=src_format,
        dst_format=dst_codec.name,
        records=schema.records,
        splits=len(schema.splits),
        raw_bytes=schema.nbytes,
        bytes_in=bytes_in,
        bytes_out=path_size(dst),
        seconds=seconds,
        cast=stats,
        shards=run,
        notes=notes,
    )


def _dask_client(address: str) -> Any:
    try:
        from dask.distributed import Client
    except ImportError:
        raise MissingDependencyError("distributed", "dask", "distributed") from None
    try:
        return Client(address, timeout="10s")
    except (OSError, TimeoutError) as e:
        raise CodecIOError(f"{address}: cannot reach the Dask scheduler: {e}") from None


def _size_or_zero(path: str) -> int:
    try:
        return path_size(path)
    except OSError:
        return 0


# --------------------------------------------------------------------------- save


class ArrayReader(Reader):
    """A reader over in-memory data (what :func:`save` writes from).

    Each field's kind comes from its value (:func:`dstore.model.infer_column`):
    numeric arrays are tensors, ``<U``/``S`` arrays and lists of ``str`` /
    ``bytes`` are strings / bytes, lists of arrays whose first axis varies are
    ragged; a :class:`~dstore.model.VarColumn` keeps the kind given with it
    through ``kinds={(split, field): kind}``."""

    def __init__(
        self,
        data: Mapping[str, Any],
        path: str = "<memory>",
        kinds: Mapping[tuple[str, str], Kind] | None = None,
    ) -> None:
        self.path = path
        self._data: dict[str, dict[str, Column]] = {}
        nested: dict[str, dict[str, Any]] = {}
        flat: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, Mapping):
                nested[str(key)] = {str(k): v for k, v in value.items()}
            else:
                flat[str(key)] = value
        for key, value in flat.items():
            split, name = split_key(key)
            nested.setdefault(split, {})[name] = value
        splits = {}
        for split, fields in nested.items():
            specs = {}
            counts: dict[str, int] = {}
            columns: dict[str, Column] = {}
            for name, value in fields.items():
                where = f"split {split!r}, field {name!r}"
                given = (kinds or {}).get((split, name))
                if isinstance(value, VarColumn) or given is not None:
                    if given is None:
                        raise SchemaError(
                            f"{where}: a VarColumn needs its kind (kinds={{(split, field): kind}})"
                        )
                    kind, col = given, to_column(given, value, where)
                else:
                    kind, col = infer_column(value, where)
                columns[name] = col
                counts[name] = len(col)
                key = next((k for k in flat if split_key(k) == (split, name)), None)
                specs[name] = FieldSpec(name, kind, key)
            if len(set(counts.values())) > 1:
                detail = ", ".join(f"{n} has {c}" for n, c in counts.items())
                raise SchemaError(
                    f"fields of split {split!r} have different record counts ({detail})"
                )
            self._data[split] = columns
            splits[split] = SplitSpec(split, next(iter(counts.values()), 0), specs)
        self.schema = Schema(splits)

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        split = spec.name
        for pos in range(start, stop, rows):
            end = min(stop, pos + rows)
            yield {n: slice_column(self._data[split][n], pos, end) for n in names}


def save(
    data: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    dtype: str | Sequence[str] | DtypePolicy | None = None,
    on_overflow: OnOverflow = "error",
    overwrite: bool = False,
    kinds: Mapping[tuple[str, str], Kind] | None = None,
    **options: Any,
) -> None:
    """Write in-memory data: ``{"train": {"x": x, "y": y}}`` or flat ``{"x_train": x, ...}``.

    Values are numeric arrays (tensors), ``<U``/``S`` arrays or lists of
    ``str``/``bytes`` (strings/bytes), or lists of arrays whose first axis
    varies (ragged); ``kinds={("train", "img"): dstore.model.Image(...)}``
    names a kind the values cannot show (an image, a VarColumn's kind)."""
    path = os.fspath(path)
    policy = dtype if isinstance(dtype, DtypePolicy) else parse_policy(dtype, on_overflow)
    write_dataset(
        ArrayReader(data, kinds=kinds),
        path,
        _codec_for(path, format, options),
        policy=policy,
        overwrite=overwrite,
    )


# ------------------------------------------------------------------------- verify


@dataclass
class FieldResult:
    split: str
    field: str
    ok: bool
    detail: str


@dataclass
class VerifyReport:
    a: str
    b: str
    results: list[FieldResult]
    #: what was not checked and why (printed after the results)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def lines(self) -> list[str]:
        out = [
            f"{'ok' if r.ok else 'MISMATCH'}  {r.split}/{r.field}: {r.detail}" for r in self.results
        ]
        n_bad = sum(not r.ok for r in self.results)
        if self.a == self.b:  # one dataset checked on its own
            out.append(
                f"{len(self.results)} check(s): "
                + ("all passed" if not n_bad else f"{n_bad} failed")
            )
        else:
            out.append(
                f"{len(self.results)} field(s) compared: "
                + ("all equal" if not n_bad else f"{n_bad} differ")
            )
        out.extend(f"note: {n}" for n in self.notes)
        return out


def _record_bytes(a: np.ndarray) -> np.ndarray:
    """Each record as a row of its bytes (native order), so that values compare by bits:
    NaN payloads, -0.0 and both halves of complex numbers all count."""
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
    return a.view(np.uint8).reshape(
        len(a), int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize
    )


def _compare(a: Column, b: Column) -> np.ndarray:
    """Per-record bit equality; float values in ``b`` may be ``a`` cast to another float dtype
    (then ``a`` is rounded the way a dtype policy rounds it, and the bits are compared)."""
    if isinstance(a, VarColumn) or isinstance(b, VarColumn):
        if not (isinstance(a, VarColumn) and isinstance(b, VarColumn)):
            return np.zeros(len(a), bool)
        same = a.lengths == b.lengths
        if a.shapes is not None or b.shapes is not None:
            same &= (
                a.shapes is not None and b.shapes is not None and np.array_equal(a.shapes, b.shapes)
            )
        eq_values = _compare(a.values, b.values) if np.array_equal(a.offsets, b.offsets) else None
        for i in np.flatnonzero(same):
            lo, hi = int(a.offsets[i]), int(a.offsets[i + 1])
            if eq_values is not None:
                same[i] = bool(eq_values[lo:hi].all())
            else:
                same[i] = bool(
                    _compare(
                        a.values[lo:hi], b.values[int(b.offsets[i]) : int(b.offsets[i + 1])]
                    ).all()
                )
        return same
    if a.dtype.newbyteorder("=") != b.dtype.newbyteorder("="):
        with np.errstate(over="ignore", invalid="ignore"):
            a = a.astype(b.dtype)
    return (_record_bytes(a) == _record_bytes(b)).all(axis=1)


def _same_kind_but_float_width(ka: Kind, kb: Kind) -> bool:
    """Kinds equal, or equal but for the float dtype a dtype policy changes."""
    if ka == kb:
        return True
    if isinstance(ka, Tensor) and isinstance(kb, Tensor):
        return ka.shape == kb.shape and ka.dtype.kind == kb.dtype.kind == "f"
    if isinstance(ka, Ragged) and isinstance(kb, Ragged):
        return ka.inner_shape == kb.inner_shape and ka.dtype.kind == kb.dtype.kind == "f"
    return False


def verify(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    a_format: str | None = None,
    b_format: str | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> VerifyReport:
    """Compare two datasets split by split, field by field, record by record.

    Equal means the same splits, fields, shapes and record values, compared
    bit for bit (so NaNs with other payloads, or 0.0 against -0.0, differ); a
    float field may differ in dtype if ``b`` holds exactly the bits of ``a``
    rounded to it (a dtype policy's output). Never raises on a difference:
    check ``.ok``.
    """
    a, b = os.fspath(a), os.fspath(b)
    results: list[FieldResult] = []
    with open_reader(a, format=a_format) as ra, open_reader(b, format=b_format) as rb:
        sa, sb = ra.schema, rb.schema
        for split in sorted(set(sa.splits) | set(sb.splits)):
            if split not in sa.splits or split not in sb.splits:
                where = b if split not in sb.splits else a
                results.append(FieldResult(split, "*", False, f"split missing in {where}"))
                continue
            pa, pb = sa.splits[split], sb.splits[split]
            names = []
            for name in list(pa.fields) + [n for n in pb.fields if n not in pa.fields]:
                fa, fb = pa.fields.get(name), pb.fields.get(name)
                if fa is None or fb is None:
                    where = b if fb is None else a
                    results.append(FieldResult(split, name, False, f"field missing in {where}"))
                elif pa.count != pb.count:
                    results.append(
                        FieldResult(split, name, False, f"{pa.count} records vs {pb.count}")
                    )
                elif not _same_kind_but_float_width(fa.kind, fb.kind):
                    results.append(
                        FieldResult(
                            split, name, False, f"{fa.kind.describe()} vs {fb.kind.describe()}"
                        )
                    )
                else:
                    names.append(name)
            if not names:
                continue
            rows = batch_rows_for(pa, batch_bytes)
            bad = dict.fromkeys(names, 0)
            first_bad: dict[str, int] = {}
            pos = 0
            for ba, bb in zip(
                ra.iter_batches(split, fields=names, batch_rows=rows),
                rb.iter_batches(split, fields=names, batch_rows=rows),
                strict=True,  # a reader that stops early is a difference, not a pass
            ):
                n = len(ba[names[0]])
                for name in names:
                    if len(bb[name]) != n:
                        raise SchemaError(f"{b}: split {split!r} returned batches of another size")
                    eq = _compare(ba[name], bb[name])
                    k = int(n - np.count_nonzero(eq))
                    if k:
                        bad[name] += k
                        first_bad.setdefault(name, pos + int(np.argmin(eq)))
                pos += n
            for name in names:
                fa, fb = pa.fields[name], pb.fields[name]
                how = (
                    "bit-exact"
                    if fa.dtype == fb.dtype
                    else f"bit-exact to {fa.dtype.name} rounded to {fb.dtype.name}"
                )
                if bad[name]:
                    detail = f"{bad[name]} of {pa.count} records differ, first at record {first_bad[name]}"
                    if fa.dtype.kind in "fc":
                        detail += " (compared bit for bit: NaN payloads and -0.0 count)"
                    results.append(FieldResult(split, name, False, detail))
                else:
                    results.append(FieldResult(split, name, True, f"{pa.count} records {how}"))
    return VerifyReport(a, b, results)


def _first_bad_record(
    reader: Reader, split: SplitSpec, start: int, stop: int
) -> tuple[int | None, int, str]:
    """Re-read ``start:stop`` one record at a time: the first record that fails (the
    records before it decoded), and why.

    A batch fails as a whole; the user needs the record. Only run after a failure.
    The record is None when the failure cannot be pinned on one record: a check over
    many records (a zip member's CRC-32, checked at its end) fails while the record,
    read alone, is fine, or the reader streams and the failure comes at the end."""
    pos = start
    try:
        for batch in reader.iter_batches(
            split.name, start=start, stop=stop, batch_rows=1, verify=False
        ):
            pos += check_batch(split, batch)
    except DstoreError as e:
        why = str(e)
    else:
        return None, pos, "the records decode one by one but not as a batch"
    if pos == split.count - 1 and not reader.random_access:
        return None, pos, why  # a streamed read ends with the checks over the whole stream
    try:
        for batch in reader.iter_batches(split.name, start=pos, stop=pos + 1, verify=False):
            check_batch(split, batch)
    except DstoreError:
        return pos, pos, why
    return None, pos, why


def check(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> VerifyReport:
    """Check one dataset on its own: manifest checksums, then every record decoded.

    Decoding checks what each format carries (TFRecord CRC32C and PNG, zip
    CRC-32, chunk codecs) and that every record has its field's shape. Never
    raises on damage: it is reported in the result, with the first record that
    fails to decode.
    """
    path = os.fspath(path)
    results: list[FieldResult] = []
    notes: list[str] = []
    with open_reader(path, format=format) as reader:
        integrity = reader.check_integrity()
        for ok, what in integrity:
            results.append(FieldResult("*", "manifest", ok, what))
        expected = stored_checksums(reader.schema)
        hasher = FieldHasher(reader.schema)
        failed = False
        for split in reader.schema.splits.values():
            n = 0
            rows = batch_rows_for(split, batch_bytes)
            try:
                for batch in reader.iter_batches(split.name, batch_rows=rows, verify=False):
                    k = check_batch(split, batch)
                    hasher.update(split.name, batch)  # hashed here, per field
                    n += k
            except DstoreError as e:
                failed = True
                bad, decoded, why = _first_bad_record(reader, split, n, min(split.count, n + rows))
                if bad is not None:
                    detail = f"record {bad} fails ({bad} of {split.count} records decoded before it): {why}"
                else:
                    detail = (
                        f"a check over many records fails after {decoded} of {split.count} "
                        f"records were decoded (no single record can be named): {e}"
                    )
                results.append(FieldResult(split.name, "*", False, detail))
                continue
            ok = n == split.count
            results.append(
                FieldResult(split.name, "*", ok, f"{n} of {split.count} records decoded")
            )
            if expected is not None:
                got = hasher.hexdigests()[split.name]
                for name in split.fields:
                    want = expected.get(split.name, {}).get(name)
                    if want is None:
                        results.append(
                            FieldResult(split.name, name, False, "no stored sha256 for this field")
                        )
                    else:
                        same = want == got[name]
                        results.append(
                            FieldResult(
                                split.name,
                                name,
                                same,
                                "sha256 of the values matches"
                                if same
                                else "sha256 of the values differs from the stored one",
                            )
                        )
        if expected is None and not integrity:
            notes.append(
                f"{path}: no stored checksums to check (not written by dstore); "
                + ("every record decoded, but" if not failed else "besides decoding,")
                + " the values could not be checked"
            )
    return VerifyReport(path, path, results, notes)


# --------------------------------------------------------------------------- info


def dtype_name(dtype: np.dtype) -> str:
    """numpy's name (``uint8``, ``float32``), with the byte order only where it is not native."""
    if dtype.kind in "USVO" or dtype.fields:  # numpy's names ("str96") say less than "U3"
        return dtype.str.lstrip("<>|=") if not dtype.fields else str(dtype)
    name = dtype.newbyteorder("=").name if not dtype.isnative else dtype.name
    if dtype.isnative or dtype.itemsize == 1:
        return name
    return f"{name} ({'big' if dtype.byteorder == '>' else 'little'}-endian)"


@dataclass
class InfoReport:
    path: str
    format: str
    bytes_on_disk: int
    schema: Schema
    details: list[str]

    def lines(self) -> list[str]:
        out = [
            f"{self.path}: {self.format}, {_fmt_bytes(self.bytes_on_disk)} on disk, "
            f"{_fmt_bytes(self.schema.nbytes)} raw, {self.schema.records} records"
        ]
        width = max(
            [8]
            + [
                len(dtype_name(f.dtype))
                for s in self.schema.splits.values()
                for f in s.fields.values()
                if f.dense
            ]
        )
        for split in self.schema.splits.values():
            out.append(f"  split {split.name}: {split.count} records, {_fmt_bytes(split.nbytes)}")
            for f in split.fields.values():
                key = f"  (key {f.key})" if f.key and f.key != f.name else ""
                if not f.dense:  # records vary: the kind says what each one is
                    out.append(
                        f"    {f.name:<16} {f.kind.describe():<31} {split.count} records{key}"
                    )
                    continue
                out.append(
                    f"    {f.name:<16} {dtype_name(f.dtype):<{width}} {(split.count, *f.shape)!s:<24}"
                    f" {_fmt_bytes(f.record_bytes * split.count)}{key}"
                )
        out.extend(self.details)
        return out


def info(path: str | os.PathLike[str], *, format: str | None = None) -> InfoReport:
    """Splits, fields, shapes, dtypes and sizes of a dataset, plus codec details."""
    path = os.fspath(path)
    with open_reader(path, format=format) as reader:
        return InfoReport(
            path,
            format or infer_codec(path),
            _size_or_zero(path),
            reader.schema,
            reader.describe(),
        )

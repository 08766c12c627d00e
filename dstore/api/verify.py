"""Checking data: :func:`verify` compares two datasets record by record, :func:`check`
checks one on its own (manifest, decoding, stored sha256); both return a
:class:`VerifyReport` and never raise on a difference."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..abc import Reader
from ..errors import DstoreError, SchemaError
from ..model import Column, Image
from ..model.precision import PRECISION_ATTR, ErrorStats, is_floating, tolerance
from ..model.schema import DEFAULT_BATCH_BYTES, SplitSpec, batch_rows_for, check_batch
from ..sources.opening import open_reader
from ._text import shown
from .verify_compare import (
    compare_records,
    lossy_error_stats,
    measure_pixel_error,
    same_kind_but_float_width,
)
from .verify_versions import ChecksumCheck, other_versions

if TYPE_CHECKING:
    from ..engine.cast import Progress


__all__ = ["FieldResult", "VerifyReport", "check", "verify"]


@dataclass
class FieldResult:
    """One line of a :class:`VerifyReport`: a field of a split (``field`` is ``"*"`` for a
    check of the whole split, such as its record count), whether it passed, and why."""

    split: str
    field: str
    ok: bool
    detail: str
    #: compared by error statistics (a lossy image encoding), not bit for bit
    lossy: bool = False
    #: the error of a lossy ``b`` (cast, encoded): max_abs_error, mean_abs_error, psnr_db
    measured: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclass
class VerifyReport:
    """What :func:`verify` (datasets ``a`` and ``b``) or a check of one dataset alone
    (``a == b``) found: one :class:`FieldResult` per field of each split, and notes on what
    was not checked and why. ``report.ok`` is True when every result passed; ``dstore
    verify`` prints :meth:`lines` and exits 1 unless ``ok``.

    >>> report = dstore.verify("data.npz", "data.tfrecords")
    >>> report.ok, [r.field for r in report.results if not r.ok]
    (True, [])
    """

    a: str
    b: str
    results: list[FieldResult]
    #: what was not checked and why (printed after the results)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every field (and every check of a dataset alone) passed."""
        return all(r.ok for r in self.results)

    def lines(self) -> list[str]:
        """The report as ``dstore verify`` prints it: ``ok  train/x: 40 records bit-exact``
        (or ``MISMATCH ...``) per field, a count, then the notes."""
        out = [
            f"{'ok' if r.ok else 'MISMATCH'}  {shown(r.split)}/{'*' if r.field == '*' else shown(r.field)}: "
            f"{r.detail}"
            for r in self.results
        ]
        n_bad = sum(not r.ok for r in self.results)
        if self.a == self.b:  # one dataset checked on its own
            out.append(
                f"{len(self.results)} check(s): "
                + ("all passed" if not n_bad else f"{n_bad} failed")
            )
        else:
            within = (
                " (lossy fields within their declared error)"
                if any(r.lossy for r in self.results)
                else ""
            )
            out.append(
                f"{len(self.results)} field(s) compared: "
                + (f"all equal{within}" if not n_bad else f"{n_bad} differ")
            )
        out.extend(f"note: {n}" for n in self.notes)
        return out


def verify(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    a_format: str | None = None,
    b_format: str | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    follow_links: bool = False,
    progress: Progress | None = None,
    scan_progress: Progress | None = None,
    version: int | None = None,
) -> VerifyReport:
    """Compare two datasets split by split, field by field, record by record
    (``version=N``: ``b`` as it was at version N).

    Equal means the same splits, fields, shapes and record values, compared
    bit for bit (so NaNs with other payloads, or 0.0 against -0.0, differ); a
    float field may differ in dtype if ``b`` holds exactly the bits of ``a``
    rounded to it (a dtype policy's output). Never raises on a difference:
    check ``.ok``. ``progress(n, total)`` is called after each batch compared,
    ``total`` being ``a``'s record count; ``scan_progress(1, files)`` after each file
    of a many-file dataset is scanned for its schema.
    An input that links to other files (HDF5 external links or
    virtual datasets, zarr symlinks out of the store) is refused with
    :class:`~dstore.errors.UnsafeInputError` unless ``follow_links=True``.
    """
    a, b = os.fspath(a), os.fspath(b)
    results: list[FieldResult] = []
    follow = {"follow_links": follow_links}
    chosen: dict[str, Any] = {"version": version} if version is not None else {}
    with (
        open_reader(a, format=a_format, scan_progress=scan_progress, **follow) as raw_a,
        open_reader(
            b,
            format=b_format,
            scan_progress=scan_progress,
            **follow,
            **chosen,
        ) as raw_b,
    ):
        ra, rb = _decode_against(raw_a, raw_b), _decode_against(raw_b, raw_a)
        sa, sb = ra.schema, rb.schema
        for split in sorted(set(sa.splits) | set(sb.splits)):
            if split not in sa.splits or split not in sb.splits:
                where = b if split not in sb.splits else a
                results.append(FieldResult(split, "*", False, f"split missing in {where}"))
                continue
            names = _comparable_fields(split, sa.splits[split], sb.splits[split], a, b, results)
            if names:
                split_check = _SplitCheck(ra, rb, split, names)
                split_check.compare(batch_bytes, b, progress, sa.records)
                results += split_check.results()
    return VerifyReport(a, b, results)


def _comparable_fields(
    split: str, pa: SplitSpec, pb: SplitSpec, a: str, b: str, results: list[FieldResult]
) -> list[str]:
    """The fields of ``split`` whose records can be compared; a difference in the
    fields themselves (missing, other count, other kind) goes to ``results``."""
    names = []
    for name in list(pa.fields) + [n for n in pb.fields if n not in pa.fields]:
        fa, fb = pa.fields.get(name), pb.fields.get(name)
        if fa is None or fb is None:
            where = b if fb is None else a
            results.append(FieldResult(split, name, False, f"field missing in {where}"))
        elif pa.count != pb.count:
            results.append(FieldResult(split, name, False, f"{pa.count} records vs {pb.count}"))
        elif not same_kind_but_float_width(fa.kind, fb.kind):
            results.append(
                FieldResult(split, name, False, f"{fa.kind.describe()} vs {fb.kind.describe()}")
            )
        else:
            names.append(name)
    return names


class _SplitCheck:
    """The record-by-record comparison of one split's ``names`` in ``ra`` and ``rb``: bit
    for bit, or against the error bound a lossy encoding declares."""

    def __init__(self, ra: Reader, rb: Reader, split: str, names: list[str]) -> None:
        self.ra, self.rb, self.split, self.names = ra, rb, split, names
        self.pa, self.pb = ra.schema.splits[split], rb.schema.splits[split]
        pa, pb = self.pa, self.pb
        # lossy image fields: error statistics against the bound their encoding declares
        self.lossy = {**ra.lossy_fields(split), **rb.lossy_fields(split)}
        self.errors = {n: lossy_error_stats(pa.fields[n].dtype) for n in names if n in self.lossy}
        # a lossy encoding in b (int8, round:N, bfloat16) is checked against the error
        # it declares, unless a holds the very same encoding
        self.declared = {
            n: tol
            for n in names
            if n not in self.errors
            and (tol := tolerance(pb.fields[n])) is not None
            and pa.fields[n].attrs.get(PRECISION_ATTR) != pb.fields[n].attrs.get(PRECISION_ATTR)
        }
        self.precise = {n: ErrorStats() for n in self.declared}
        # a float field b holds rounded to another dtype: its error, besides the bits
        casts = [n for n in names if pa.fields[n].dtype != pb.fields[n].dtype]
        self.cast = {
            n: ErrorStats()
            for n in casts
            if n not in self.errors and n not in self.declared and is_floating(pb.fields[n].dtype)
        }
        self.bad = dict.fromkeys(names, 0)
        self.first_bad: dict[str, int] = {}

    def compare(self, batch_bytes: int, b: str, progress: Progress | None, total: int) -> None:
        """Every pair of batches, in step (a reader that stops early is a difference)."""
        split, names = self.split, self.names
        stored = max(self.ra.stored_record_bytes(split), self.rb.stored_record_bytes(split))
        rows = batch_rows_for(self.pa, batch_bytes, stored)
        pos = 0
        for ba, bb in zip(
            self.ra.iter_batches(split, fields=names, batch_rows=rows),
            self.rb.iter_batches(split, fields=names, batch_rows=rows),
            strict=True,  # a reader that stops early is a difference, not a pass
        ):
            n = len(ba[names[0]])
            for name in names:
                if len(bb[name]) != n:
                    raise SchemaError(f"{b}: split {split!r} returned batches of another size")
                self._compare_field(name, ba[name], bb[name], pos)
            pos += n
            del ba, bb  # not kept while the next pair of batches is read
            if progress is not None:
                progress(n, total)

    def _compare_field(self, name: str, a: Column, b: Column, pos: int) -> None:
        if name in self.precise:
            self.precise[name].update(a, b, *self.declared[name][1:])
            return
        if name in self.cast:
            self.cast[name].update(a, b, math.inf, 0.0)
        eq = (
            compare_records(a, b)
            if name not in self.errors
            else measure_pixel_error(a, b, self.errors[name])
        )
        k = int(len(a) - np.count_nonzero(eq))
        if k:
            self.bad[name] += k
            self.first_bad.setdefault(name, pos + int(np.argmin(eq)))

    def results(self) -> list[FieldResult]:
        out = [self._result(name) for name in self.names]
        for r in out:
            stats = self.errors.get(r.field) or self.precise.get(r.field) or self.cast.get(r.field)
            if stats is not None and r.ok:
                r.measured = {"max_abs_error": stats.max_abs, "mean_abs_error": stats.mean_abs}
                if hasattr(stats, "psnr"):
                    r.measured["psnr_db"] = stats.psnr
        return out

    def _result(self, name: str) -> FieldResult:
        split, count = self.split, self.pa.count
        fa, fb = self.pa.fields[name], self.pb.fields[name]
        if name in self.precise:
            ok, detail = self.precise[name].verdict(count, self.declared[name][0])
            return FieldResult(split, name, ok, detail, lossy=True)
        if name in self.errors and not self.bad[name]:
            return _lossy_result(split, name, count, self.lossy[name], self.errors[name])
        if self.bad[name]:
            detail = (
                f"{self.bad[name]} of {count} records differ, first at record "
                f"{self.first_bad[name]}"
            )
            if fa.dtype.kind in "fc":
                detail += " (compared bit for bit: NaN payloads and -0.0 count)"
            return FieldResult(split, name, False, detail)
        how = (
            "bit-exact"
            if fa.dtype == fb.dtype
            else f"bit-exact to {fa.dtype.name} rounded to {fb.dtype.name}"
        )
        return FieldResult(split, name, True, f"{count} records {how}")


def _decode_against(r: Reader, other: Reader) -> Reader:
    """``r`` with its encoded images decoded where ``other`` holds that field as pixels
    (a conversion decoded them): then the pixels are what is compared."""
    from ..images.decoding import encoded_image_fields
    from ..sources.decoded_images import DecodedImages

    fields: dict[str, set[str]] = {}
    for split, names in encoded_image_fields(r.schema).items():
        theirs = other.schema.splits.get(split)
        for name in names:
            kind = theirs.fields[name].kind if theirs and name in theirs.fields else None
            if isinstance(kind, Image) and kind.encoding == "raw":
                fields.setdefault(split, set()).add(name)
    return DecodedImages(r, fields) if fields else r


def _lossy_result(split: str, name: str, count: int, lossy: Any, stats: Any) -> FieldResult:
    """A lossy field passes when its PSNR reaches the floor its encoding declares."""
    floor = lossy.psnr_floor()
    ok = stats.psnr >= floor
    bound = (
        f"within the PSNR >= {floor:.1f} dB {lossy.describe()} declares"
        if ok
        else f"below the PSNR >= {floor:.1f} dB {lossy.describe()} declares"
    )
    detail = f"{count} records {lossy.format}: {stats.text()}, {bound}"
    return FieldResult(split, name, ok, detail, lossy=True)


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
    follow_links: bool = False,
    progress: Progress | None = None,
    scan_progress: Progress | None = None,
    version: int | None = None,
) -> VerifyReport:
    """Check one dataset on its own: manifest checksums, then every record decoded.
    ``version=N`` checks version N (default: the latest); the other versions a folder
    keeps are checked too (counts, each shard's sha256), and a dataset appended in
    place has its checksums checked version by version.

    Decoding checks what each format carries (TFRecord CRC32C and PNG, zip
    CRC-32, chunk codecs) and that every record has its field's shape. Never
    raises on damage: it is reported in the result, with the first record that
    fails to decode. ``progress(n, total)`` is called after each batch decoded,
    ``scan_progress(1, files)`` after each file of a many-file dataset is scanned;
    ``follow_links`` as in :func:`verify`.
    """
    path = os.fspath(path)
    results: list[FieldResult] = []
    notes: list[str] = []
    # the stored values: the checksums were taken of them (int8 codes, not their floats)
    chosen: dict[str, Any] = {"version": version} if version is not None else {}
    with open_reader(
        path,
        format=format,
        decode=False,
        scan_progress=scan_progress,
        follow_links=follow_links,
        **chosen,
    ) as reader:
        integrity = reader.check_integrity()
        for ok, what in integrity:
            results.append(FieldResult("*", "manifest", ok, what))
        for what, ok, detail in other_versions(path, format, reader, follow_links):
            results.append(FieldResult("*", what, ok, detail))
        sums = ChecksumCheck(reader.schema)
        failed = False
        for split in reader.schema.splits.values():
            n = 0
            rows = batch_rows_for(split, batch_bytes)
            try:
                for batch in reader.iter_batches(split.name, batch_rows=rows, verify=False):
                    k = check_batch(split, batch)
                    sums.update(split.name, batch)  # hashed here, per field
                    n += k
                    if progress is not None:
                        progress(k, reader.schema.records)
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
            for name, same, what in sums.results(split.name):
                results.append(FieldResult(split.name, name, same, what))
        if not sums.any and not integrity:
            notes.append(
                f"{path}: no stored checksums to check (not written by dstore); "
                + ("every record decoded, but" if not failed else "besides decoding,")
                + " the values could not be checked"
            )
    return VerifyReport(path, path, results, notes)

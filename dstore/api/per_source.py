"""``--per-source``: a dataset read from many files written back as one file per source
(:func:`write_per_source`), the inverse of reading them as one dataset
(:mod:`dstore.sources.many_files`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..abc import Codec, Reader
from ..engine.job import ConvertJob
from ..errors import SchemaError, UnsafePathError, UsageError
from ..model import Column, Kind, String, VarColumn, concat_columns
from ..model.schema import DEFAULT_BATCH_BYTES, batch_rows_for
from ..output import Overwrite
from ..registry import get_codec_class
from ..sources.decoded_images import decoded_for
from ..sources.many_files import SOURCE_FIELD, SOURCES_ATTR
from ..sources.opening import open_reader
from ..sources.unify import flat_attrs, unflatten_attrs

__all__ = ["PerSourceFolder", "PerSourceReport", "write_per_source"]


@dataclass
class PerSourceReport:
    """What ``--per-source`` wrote: one file per source under a folder."""

    dst: str
    format: str
    files: int
    records: int

    def summary(self) -> str:
        return (
            f"{self.records} records from {self.files} sources -> {self.files} "
            f"{self.format} files in {self.dst}"
        )


def _runs(reader: Reader, field: str) -> dict[str, dict[str, tuple[int, int]]]:
    """source name -> split -> (start, stop) of its records, in order of first appearance."""
    runs: dict[str, dict[str, tuple[int, int]]] = {}
    for split in reader.schema.splits.values():
        if field not in split.fields or not isinstance(split.fields[field].kind, String):
            raise SchemaError(
                f"{reader.path}: split {split.name!r} has no string field {field!r} naming "
                "each record's file: --per-source needs a dataset read from many files"
            )
        pos = 0
        last: str | None = None
        for batch in reader.iter_batches(split.name, fields=[field]):
            col = batch[field]
            assert isinstance(col, VarColumn)
            for name in col.to_str_list(f"{reader.path}: split {split.name!r}, field {field!r}"):
                if name != last:
                    spans = runs.setdefault(name, {})
                    if split.name in spans:
                        raise SchemaError(
                            f"{reader.path}: split {split.name!r}, record {pos}: the records of "
                            f"source {name!r} are not contiguous"
                        )
                    spans[split.name] = (pos, pos)
                    last = name
                start, _ = spans[split.name]
                spans[split.name] = (start, pos + 1)
                pos += 1
    return runs


class PerSourceFolder:
    """What ``--overwrite`` may replace for ``--per-source``: a folder (no links)
    holding only outputs of one format under its extension, each owned by that
    format -- never a folder that also holds anything else."""

    def __init__(self, cls: type[Codec], ext: str) -> None:
        self.cls, self.ext, self.name = cls, ext, cls.name

    def owns(self, path: str) -> bool:
        if os.path.islink(path) or not os.path.isdir(path):
            return False
        found = False
        for entry in os.scandir(path):
            if entry.is_symlink():
                return False
            if entry.name.endswith(self.ext) and self.cls.owns(entry.path):
                found = True
            elif not (entry.is_dir() and self.owns(entry.path)):
                return False
        return found

    def foreign_files(self, path: str) -> list[str]:
        """Files inside the outputs of the folder (which :meth:`owns` it) that their
        format did not write, relative to ``path``."""
        found = []
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if entry.name.endswith(self.ext) and self.cls.owns(entry.path):
                found += [os.path.join(entry.name, f) for f in self.cls.foreign_files(entry.path)]
            elif entry.is_dir():
                found += [os.path.join(entry.name, f) for f in self.foreign_files(entry.path)]
        return found


def write_per_source(
    src: str,
    dst: str,
    *,
    to: str | None = None,
    from_format: str | None = None,
    dtype: Any = None,
    on_overflow: Any = "error",
    options: Mapping[str, Any] | None = None,
    overwrite: Overwrite = False,
    follow_links: bool = False,
    src_options: Mapping[str, Any] | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    resume: bool = False,
    client: Any = None,
    keep_encoded: bool = False,
) -> PerSourceReport:
    """Write ``src`` back as one file per source (its ``source`` field) in the new folder
    ``dst``: ``features/img1.json`` becomes ``dst/features/img1.<ext>``. The folder
    appears whole or not at all; ``overwrite`` replaces only an earlier such folder
    (:class:`PerSourceFolder`). Encoded images are decoded to pixels for formats that
    do not keep them, unless ``keep_encoded``, as :func:`dstore.convert` does.
    ``resume`` and ``client`` are refused in one line:
    the folder is written whole by this process, so there is nothing to resume or share
    out (they were once taken and ignored)."""
    job = ConvertJob.build(
        to=to,
        from_format=from_format,
        dtype=dtype,
        on_overflow=on_overflow,
        options=options,
        overwrite=overwrite,
        follow_links=follow_links,
        src_options=src_options,
        batch_bytes=batch_bytes,
        resume=resume,
        client=client,
        keep_encoded=keep_encoded,
        sources=[src],
    )
    return _write_per_source(src, dst, job)


def _write_per_source(src: str, dst: str, job: ConvertJob) -> PerSourceReport:
    """:func:`write_per_source` of a built job."""
    from ..model import names
    from ..output import atomic_output
    from ..registry import default_extension
    from ..sources.memory import ArrayReader
    from .convert import write_dataset

    if job.resume or job.client is not None:
        what = "resume=True" if job.resume else "a Dask client="
        raise UsageError(
            f"{dst}: {what} does not go with writing one file per source: its folder is written whole by "
            "this process (convert, then split)"
        )
    # each file of the folder is a new output inside the new folder: nothing to replace
    each = job.replace(overwrite=False, resume=False)
    with open_reader(src, format=job.from_format, **dict(job.src_options)) as opened:
        held = opened.schema.attrs.get(SOURCES_ATTR) or {}
        field = str(held.get("field", SOURCE_FIELD))
        fmt = job.to or held.get("format")
        if fmt is None:
            raise SchemaError(
                f"{dst}: writing one file per source makes a folder: name its format with to="
            )
        cls = get_codec_class(str(fmt))
        reader = decoded_for(opened, cls.keeps_encoded_images, job.keep_encoded)
        ext = default_extension(cls.name)
        runs = _runs(reader, field)
        varying = dict(zip(held.get("files", []), held.get("attrs", []), strict=False))
        common = flat_attrs(reader.schema.attrs)
        records = 0
        owner: Any = PerSourceFolder(cls, ext)
        rels = {name: os.path.splitext(name)[0] + ext for name in runs}
        # a.1 and a.2 both become a.json; x.json and X.json replace each other where case
        # does not count: refused by name before anything is written
        names.check_case_distinct(
            rels.items(),
            f"{dst}: sources",
            "macOS and Windows file systems: one file would replace the other",
        )
        with atomic_output(dst, codec=owner, sources=job.sources, overwrite=job.overwrite) as tmp:
            os.mkdir(tmp)
            for name, spans in runs.items():
                rel = rels[name]
                try:
                    names.check_relative(dst, rel)  # a name from data never leaves the folder
                except UnsafePathError as e:
                    # the component alone ('..') does not say which record to fix
                    raise UnsafePathError(
                        f"{e} (it comes from source {name!r}, field {field!r} of {src})"
                    ) from None
                data: dict[str, dict[str, Column]] = {}
                kinds: dict[tuple[str, str], Kind] = {}
                for split, (start, stop) in spans.items():
                    spec = reader.schema.splits[split]
                    cols = [n for n in spec.fields if n != field]
                    parts = list(
                        reader.iter_batches(
                            split,
                            fields=cols,
                            start=start,
                            stop=stop,
                            batch_rows=batch_rows_for(spec, job.batch_bytes),
                        )
                    )
                    data[split] = {
                        n: concat_columns(spec.fields[n].kind, [b[n] for b in parts]) for n in cols
                    }
                    kinds.update({(split, n): spec.fields[n].kind for n in cols})
                    records += stop - start
                one = ArrayReader(data, path=f"{src} [{name}]", kinds=kinds)
                # the attributes all files shared, and this file's own (merged key by key)
                one.schema.attrs.update(unflatten_attrs({**common, **varying.get(name, {})}))
                out = os.path.join(tmp, *rel.split("/"))
                os.makedirs(os.path.dirname(out), exist_ok=True)
                codec = cls(**{**cls.path_options(out), **dict(job.options)})
                write_dataset(one, out, codec, each)
    return PerSourceReport(dst, cls.name, len(runs), records)

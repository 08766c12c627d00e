"""What an append takes from the dataset it grows: its settings, its schema, its history.

An append writes new records as the dataset's first ones were written, so every
setting defaults to the dataset's own, and an explicit one that differs is refused
naming both (:class:`~dstore.errors.AppendError`, nothing written):

- the format's options (``-o``) its manifest records (a folder of shards);
- the dtype policy, read back from the stored schema: each floating field is cast to
  the dtype it is stored as, and a lossy encoding (bfloat16, ``round:N``, int8 codes
  with the dataset's own scale and offset) is applied again as recorded;
- the layout the last version recorded.

The source's schema, after that policy, must then be the dataset's for every split
they share (names, kinds, dtypes, shapes): one line names the first field that is
not. And a source whose content fingerprint is already in the dataset's history is
refused by the version that holds it, unless ``append_again=True``, so that running
an append again after a crash never adds its records twice.
"""

from __future__ import annotations

import datetime
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .. import fs
from .._dist import __version__
from ..abc import Codec, Reader
from ..engine.dtypes import DtypePolicy
from ..errors import AppendError
from ..model import Ragged, Tensor
from ..model import precision as prec
from ..model.schema import FieldSpec, Schema
from ..sharding.manifest import MANIFEST
from ..sharding.versions import latest_version

__all__ = [
    "check_agreement",
    "check_not_appended",
    "content_fingerprint",
    "dataset_codec",
    "dataset_policy",
    "first_record",
    "utc_now",
]


def utc_now(stamp: float | None = None) -> str:
    when = datetime.datetime.fromtimestamp(stamp, datetime.UTC) if stamp else None
    return (when or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def dataset_codec(
    dst: str, cls: type[Codec], stored: Reader, explicit: Mapping[str, Any]
) -> tuple[Codec, dict[str, Any]]:
    """The codec writing the dataset's new records: the options its manifest records,
    explicit ``options`` over them where they agree; and the recorded options."""
    manifest = getattr(stored, "manifest", None)
    written = dict(manifest.get("options", {})) if isinstance(manifest, Mapping) else {}
    base = cls(**{**cls.path_options(dst), **written})
    mine = base.get_config()
    for key, value in explicit.items():
        if key not in written or key == "workers":
            continue
        theirs = cls(**{**written, key: value}).get_config().get(key)
        if theirs != mine.get(key):
            raise AppendError(
                f"{dst}: option {key}={value} conflicts with the dataset's {key}={mine.get(key)} "
                "(an append writes as the dataset was written; leave the option out)"
            )
    return cls(**{**cls.path_options(dst), **written, **explicit}), written


def _floating(spec: FieldSpec) -> bool:
    return prec.is_floating(spec.dtype) and isinstance(spec.kind, (Tensor, Ragged))


def dataset_policy(stored: Schema, source: Schema, on_overflow: str) -> DtypePolicy:
    """The policy that stores ``source``'s floating fields as ``stored`` holds them."""
    floating = {f.name for s in source.splits.values() for f in s.fields.values() if _floating(f)}
    per_field: dict[str, str] = {}
    quant: dict[str, Any] = {}
    bfloat16_as = None
    for split in stored.splits.values():
        for f in split.fields.values():
            if f.name not in floating or f.name in per_field:
                continue
            record = f.attrs.get(prec.PRECISION_ATTR)
            if isinstance(record, Mapping) and record.get("policy"):
                per_field[f.name] = str(record["policy"])
                if str(record["policy"]).split(":")[0] in ("int8", "uint8"):
                    quant[f.name] = dict(record)
                if record["policy"] == "bfloat16":
                    bfloat16_as = str(record.get("stored") or "uint16")
            elif _floating(f):
                per_field[f.name] = f.dtype.name
    return DtypePolicy("keep", per_field, on_overflow, quant, bfloat16_as)  # type: ignore[arg-type]


def _shown(spec: FieldSpec) -> str:
    record = spec.attrs.get(prec.PRECISION_ATTR)
    how = f" ({record['policy']})" if isinstance(record, Mapping) and "policy" in record else ""
    return f"{spec.kind.describe()}{how}"


def _same(a: FieldSpec, b: FieldSpec) -> bool:
    """Same kind, dtype (byte order aside) and shape, same lossy encoding if any."""
    if type(a.kind) is not type(b.kind) or a.shape != b.shape:
        return False
    if a.dtype.newbyteorder("=") != b.dtype.newbyteorder("="):
        return False
    ra, rb = a.attrs.get(prec.PRECISION_ATTR), b.attrs.get(prec.PRECISION_ATTR)
    return (ra or {}).get("policy") == (rb or {}).get(
        "policy"
    ) and a.kind.describe() == b.kind.describe()


def check_agreement(dst: str, stored: Schema, incoming: Schema, what: str = "the source") -> None:
    """Refuse records whose schema (``incoming``, after the dataset's policy) is not the
    dataset's (``stored``) in a split both have: one line naming the field and both."""
    for name, split in incoming.splits.items():
        mine = stored.splits.get(name)
        if mine is None:
            continue
        if set(split.fields) != set(mine.fields):
            extra = sorted(set(split.fields) - set(mine.fields))
            missing = sorted(set(mine.fields) - set(split.fields))
            said = (
                f"{what} has field(s) {', '.join(map(repr, extra))} the dataset does not"
                if extra
                else f"{what} lacks field(s) {', '.join(map(repr, missing))}"
            )
            raise AppendError(
                f"{dst}: split {name!r}: {said} (its fields: {', '.join(mine.fields)}); "
                "nothing was appended"
            )
        for field, spec in split.fields.items():
            if not _same(spec, mine.fields[field]):
                raise AppendError(
                    f"{dst}: split {name!r}, field {field!r}: the dataset stores "
                    f"{_shown(mine.fields[field])}, {what} gives {_shown(spec)} after the "
                    "dataset's dtype policy; nothing was appended"
                )


def check_explicit_policy(
    dst: str, explicit: DtypePolicy, derived: DtypePolicy, source: Schema
) -> None:
    """An explicit dtype policy must store every field as the dataset's does."""
    if explicit.default == "keep" and not explicit.per_field:
        return
    explicit = DtypePolicy(
        explicit.default,
        explicit.per_field,
        explicit.on_overflow,
        derived.quant,
        derived.bfloat16_as or "float32",
    )
    for split in source.splits.values():
        for spec in split.fields.values():
            if not _floating(spec):
                continue
            ours, theirs = derived._target(spec), explicit._target(spec)
            differs = ours.op != theirs.op or derived.target(spec) != explicit.target(spec)
            if differs or (ours.lossy_record and ours.spec != theirs.spec):
                raise AppendError(
                    f"{dst}: dtype {theirs.spec} for field {spec.name!r} conflicts with the "
                    f"dataset's {ours.spec} (an append stores fields as the dataset does; "
                    "leave dtype out)"
                )


def _hash_tree(h: Any, folder: str) -> None:
    """A folder's files into ``h``: a dstore dataset by its latest manifest (which lists
    each shard's sha256), anything else file by file, in name order."""
    if fs.exists(fs.join(folder, MANIFEST)):
        _, path = latest_version(folder)
        with fs.open_binary(path) as f:
            h.update(f.read())
        return
    if fs.is_url(folder):
        store, p = fs.url_fs(folder)
        files = sorted(store.find(p))
        protocol = folder.split("://", 1)[0]
        paths = [f"{protocol}://{f}" for f in files]
    else:
        paths = sorted(os.path.join(r, n) for r, _, names in os.walk(folder) for n in names)
    for path in paths:
        h.update(os.path.basename(path).encode() + b"\0" + fs.sha256_file(path)[1].encode())


def content_fingerprint(src: str, inputs: Sequence[str] = ()) -> str:
    """``sha256:...`` of the source's content: its files' bytes (a dstore folder: its
    manifest, which lists every shard's sha256). Where it was read from does not count."""
    h = hashlib.sha256()
    for path in list(inputs) or [src]:
        if fs.isdir(path):
            _hash_tree(h, path)
        elif fs.exists(path):
            h.update(fs.sha256_file(path)[1].encode())
        else:
            h.update(str(path).encode())  # a glob or pattern the reader expanded: its text
    return "sha256:" + h.hexdigest()


def stat_fingerprint(src: str) -> list[Any]:
    """The source as a conversion's run records it (path, size, mtime): what identifies
    the source of a version 1 written before versions recorded content fingerprints."""
    try:
        st = os.stat(src)
    except (OSError, ValueError):
        return [src, None, None]
    return [os.path.abspath(src), st.st_size, st.st_mtime_ns]


def check_not_appended(
    dst: str, history: Sequence[Mapping[str, Any]], fingerprint: str, stat: list[Any], src: str
) -> None:
    """Refuse a source already in the dataset's history, naming the version."""
    for record in history:
        same = record.get("fingerprint") == fingerprint or (
            stat[1] is not None and [stat] == record.get("stat")
        )
        if same:
            raise AppendError(
                f"{dst}: {src} is already in it: version {record.get('version')} "
                f"({record.get('operation', 'append')} of {record.get('time', '?')}) holds its "
                "records; pass append_again=True to append them once more"
            )


def first_record(dst: str, stored: Reader) -> dict[str, Any]:
    """Version 1 of a dataset written before it had versions: what its manifest (or
    its schema) says, the time its files were written."""
    manifest = getattr(stored, "manifest", None)
    manifest = manifest if isinstance(manifest, Mapping) else {}
    try:
        where = fs.join(dst, MANIFEST) if fs.isdir(dst) and manifest else dst
        stamp = os.stat(where).st_mtime if not fs.is_url(where) else None
    except OSError:
        stamp = None
    run = manifest.get("run") or {}
    sources = run.get("source") or []
    record: dict[str, Any] = {
        "version": 1,
        "time": utc_now(stamp) if stamp else None,
        "operation": "convert",
        "records": {s.name: s.count for s in stored.schema.splits.values()},
        "source": sources[0][0] if len(sources) == 1 else None,
        "fingerprint": None,
        "stat": sources if sources else None,
        "dstore_version": manifest.get("dstore_version"),
    }
    if stored.schema.checksums:
        record["checksums"] = stored.schema.checksums
    return record


def new_record(
    number: int,
    operation: str,
    after: Schema,
    added: Mapping[str, int],
    source: str | None,
    fingerprint: str | None,
    stat: list[Any] | None,
    codec: Codec,
    policy: DtypePolicy,
    layout: str | None,
) -> dict[str, Any]:
    """The record of a version being written: what ``dstore log`` shows of it."""
    options = {k: v for k, v in codec.get_config().items() if k not in ("name", "workers")}
    return {
        "version": number,
        "time": utc_now(),
        "operation": operation,
        "records": {s.name: s.count for s in after.splits.values()},
        "added": dict(added),
        "source": source,
        "fingerprint": fingerprint,
        "stat": [stat] if stat and stat[1] is not None else None,
        "dstore_version": __version__,
        "options": options,
        "policy": dict(policy.per_field),
        "layout": layout,
    }


def merged_schema(stored: Schema, incoming: Schema) -> Schema:
    """The dataset once ``incoming``'s records follow its own: counts added, a split only
    ``incoming`` has after the others (its fields as incoming stores them)."""
    splits = dict(stored.splits)
    for name, split in incoming.splits.items():
        if name in splits:
            mine = splits[name]
            splits[name] = type(mine)(name, mine.count + split.count, mine.fields)
        else:
            splits[name] = split
    return Schema(splits, dict(stored.attrs), {}, [dict(v) for v in stored.versions])

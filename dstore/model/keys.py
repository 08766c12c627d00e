"""Where a schema's fields sit in flat stores and group trees: a flat key's split and
field (``x_train``, ``train/x``) and back, and each field's path in an HDF5 file or
zarr store (root splits kept at the root), and a schema built from flat keys."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SchemaError
from . import names
from .kinds import Kind
from .schema import _SUFFIX_RE, DEFAULT_SPLIT, KNOWN_SPLITS, FieldSpec, Schema, SplitSpec

__all__ = ["ROOT_SPLITS_ATTR", "key_for", "schema_from_fields", "split_key", "stored_paths"]


def split_key(key: str) -> tuple[str, str]:
    """Map a flat key to (split, field): ``x_train``, ``train/x``, else the default split."""
    if "/" in key:
        split, _, name = key.rpartition("/")
        return split, name
    m = _SUFFIX_RE.match(key)
    if m:
        return m.group("split"), m.group("field")
    return DEFAULT_SPLIT, key


#: ``Schema.attrs`` key: the splits whose fields were arrays at the root of a foreign
#: HDF5 file or zarr store (``/features``, ``/labels``: h5py's common layout), not in
#: a group. Every format keeps it in its stored schema, so HDF5 and zarr write those
#: fields at the root again and A -> B -> A restores the paths.
ROOT_SPLITS_ATTR = "dstore.root_splits"


def stored_paths(schema: Schema) -> dict[tuple[str, str], str]:
    """Where a group tree (HDF5, zarr) stores each field: ``split/field`` (escaped,
    :func:`dstore.names.field_path`), or the field's flat key at the root for the
    splits :data:`ROOT_SPLITS_ATTR` names. A root split stays in its group when one of
    its names would not be flat, would be taken twice, or would be another split's
    group, or when the split has group attributes (the root has none of its own)."""
    from .attrs import group_attrs  # attrs imports nothing of dstore; kept local anyway

    paths = {
        (s.name, f): "/".join(names.field_path(s.name, f))
        for s in schema.splits.values()
        for f in s.fields
    }
    listed = schema.attrs.get(ROOT_SPLITS_ATTR)
    if not isinstance(listed, list) or not listed:
        return paths
    _, split_attrs = group_attrs(schema.attrs)
    taken = {
        names.split_parts(s)[0] for s in schema.splits if s not in listed or split_attrs.get(s)
    }
    for name in listed:
        split = schema.splits.get(name) if isinstance(name, str) else None
        if split is None or not split.fields or split_attrs.get(name):
            continue
        flat = {f: key_for(name, spec) for f, spec in split.fields.items()}
        if any("/" in k or k in taken for k in flat.values()) or len(set(flat.values())) < len(
            flat
        ):
            continue
        taken.update(flat.values())
        paths.update({(name, f): k for f, k in flat.items()})
    return paths


def key_for(split: str, spec: FieldSpec) -> str:
    """The flat key a field gets in a flat container (npz): the original one if known and plain.

    Names are escaped (:mod:`dstore.model.names`), so ``../evil/x`` never becomes a
    member that ``unzip`` would write outside its folder, and a field with
    ``/`` cannot take the key of another split's field; the zip comment's
    schema restores the original names."""
    if (
        spec.key is not None
        and split_key(spec.key) == (split, spec.name)
        and all(names.is_plain(part) for part in spec.key.split("/"))
    ):
        return spec.key
    stored_split = "/".join(names.split_parts(split))
    name = names.escape(spec.name)
    if split == DEFAULT_SPLIT:
        candidate = name
    elif split in KNOWN_SPLITS:
        candidate = f"{name}_{split}"
    else:
        candidate = f"{stored_split}/{name}"
    if split_key(candidate) != (stored_split, name):
        candidate = f"{stored_split}/{name}"
    return candidate


def _mismatch(source: str, split: str, counts: Mapping[str, int]) -> str:
    """Record counts that differ within a split: name the keys outside the largest group
    (pyspacer's 3-row ``meta`` beside 30 feature rows) and how to leave them out.

    Not guessed away: label-maker's ``x_train`` and ``y_train`` of different lengths are
    a damaged file, and pairing records by position would then be wrong."""
    detail = ", ".join(f"{k!r} has {n}" for k, n in counts.items())
    groups: dict[int, list[str]] = {}
    for key, n in counts.items():
        groups.setdefault(n, []).append(key)
    main = max(groups, key=lambda n: (len(groups[n]), n))
    odd = [k for k, n in counts.items() if n != main]
    return (
        f"{source}: fields of split {split!r} have different record counts ({detail}): "
        f"{', '.join(repr(k) for k in odd)} {'does' if len(odd) == 1 else 'do'} not line up "
        f"with the {len(groups[main])} field(s) of {main} records; "
        f"leave {'it' if len(odd) == 1 else 'them'} out with "
        + " ".join(f"drop={k!r}" for k in odd)
    )


def schema_from_fields(fields: Mapping[str, tuple[Kind, int]], source: str) -> Schema:
    """Build a schema from flat keys -> (kind, record count), grouping keys into splits."""
    grouped: dict[str, dict[str, tuple[str, Kind, int]]] = {}
    for key, (kind, count) in fields.items():
        split, name = split_key(key)
        grouped.setdefault(split, {})[name] = (key, kind, count)
    splits = {}
    for split, members in grouped.items():
        counts = {key: count for key, _, count in members.values()}
        if len(set(counts.values())) > 1:
            raise SchemaError(_mismatch(source, split, counts))
        specs = {name: FieldSpec(name, kind, key) for name, (key, kind, _) in members.items()}
        splits[split] = SplitSpec(split, next(iter(counts.values())), specs)
    return Schema(splits)

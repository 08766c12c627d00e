"""The Hugging Face Hub's dataset card: ``README.md`` of a Parquet folder.

Its YAML front matter is what the Hub and ``datasets.load_dataset(folder)``
read: ``configs`` (the ``default`` config, each split's ``data_files`` its own
shards, named one by one, so that no other file of the folder -- the
manifest, ``croissant.json`` -- is ever taken for data), ``dataset_info``
(the features in ``datasets``' YAML syntax, taken from the ``huggingface``
features each shard carries; per split ``num_examples`` and ``num_bytes``,
the uncompressed size the Parquet footers give; ``download_size`` the files'
bytes; ``dataset_size`` the splits' sum) and ``license``. Below it, a short
card for people: the fields, how the folder was written, the lossy choices
and their measured error, and what is left to fill in by hand.

The YAML is written here (``import dstore`` needs no YAML library): block style,
strings double-quoted as JSON writes them unless plain.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .. import fs
from .._dist import __version__
from ..errors import CodecIOError
from ..sharding.manifest import CARD_MARK
from .facts import Facts

__all__ = ["hub_card", "to_yaml"]

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*\Z")
_RESERVED = {"y", "n", "yes", "no", "true", "false", "on", "off", "null", "none", "~"}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    return json.dumps(text, ensure_ascii=False)


def _lines(value: Any, indent: str) -> list[str]:
    out: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(v, (Mapping, list)) and v:
                out.append(f"{indent}{_scalar(k)}:")
                out.extend(_lines(v, indent + ("" if isinstance(v, list) else "  ")))
            else:
                out.append(f"{indent}{_scalar(k)}: {_block_or_empty(v)}")
    else:
        for item in value:
            sub = _lines(item, indent + "  ") if isinstance(item, (Mapping, list)) else None
            if sub:
                out.append(f"{indent}- {sub[0][len(indent) + 2 :]}")
                out.extend(sub[1:])
            else:
                out.append(f"{indent}- {_block_or_empty(item)}")
    return out


def _block_or_empty(v: Any) -> str:
    if isinstance(v, Mapping):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return _scalar(v)


def to_yaml(value: Mapping[str, Any]) -> str:
    """``value`` (mappings, lists, strings, numbers, bools) as block-style YAML."""
    return "\n".join(_lines(value, "")) + "\n"


# ----------------------------------------------------------------- dataset_info


def _yaml_feature(f: Mapping[str, Any]) -> Any:
    """A feature of the ``huggingface`` metadata (``{"_type": "Value", ...}``) in the YAML
    form ``datasets`` writes in cards (``Features._to_yaml_list``)."""
    t = f.get("_type")
    if t == "Value":
        return {"dtype": f["dtype"]}
    if t == "Image":
        return {"dtype": "image"}
    if t == "ClassLabel":
        return {"dtype": {"class_label": {"names": {str(i): n for i, n in enumerate(f["names"])}}}}
    if t in ("List", "Sequence", "LargeList"):
        inner = _yaml_feature(f["feature"])
        if set(inner) == {"dtype"} and isinstance(inner["dtype"], str):
            inner = inner["dtype"]  # a list of plain values: `list: float32`
        out: dict[str, Any] = {"list": inner}
        if f.get("length", -1) not in (-1, None):
            out["length"] = f["length"]
        return out
    raise CodecIOError(f"feature type {t!r} has no card form here")


def _footer(path: str) -> tuple[dict[str, Any] | None, int, int]:
    """A shard's ``huggingface`` features, rows, and uncompressed bytes (its footer)."""
    import pyarrow.parquet as pq

    with fs.open_binary(path) as f:
        meta = pq.ParquetFile(f).metadata
        rows = meta.num_rows
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        kv = meta.metadata or {}
    hf = kv.get(b"huggingface")
    features = json.loads(hf).get("info", {}).get("features") if hf else None
    return features, rows, size


def dataset_info(facts: Facts) -> tuple[dict[str, Any], dict[str, Any]]:
    """``configs`` and ``dataset_info`` of the folder, from its shards' footers."""
    features: dict[str, Any] | None = None
    splits, data_files = [], []
    for split, names in facts.split_files.items():
        rows = size = 0
        for name in names:
            found, n, b = _footer(fs.join(facts.card_dir, name))
            features = features or found
            rows, size = rows + n, size + b
        if rows != facts.schema.splits[split].count:
            raise CodecIOError(
                f"{facts.path}: split {split!r}: the Parquet footers hold {rows} rows, the "
                f"dataset {facts.schema.splits[split].count} records"
            )
        splits.append({"name": split, "num_bytes": size, "num_examples": rows})
        data_files.append({"split": split, "path": list(names)})
    info: dict[str, Any] = {}
    if features:
        info["features"] = [{"name": k, **_yaml_feature(v)} for k, v in features.items()]
    info["splits"] = splits
    info["download_size"] = sum(f.bytes for f in facts.files)
    info["dataset_size"] = sum(s["num_bytes"] for s in splits)
    return {"config_name": "default", "data_files": data_files}, info


# ------------------------------------------------------------------- the card


def _license(value: str) -> dict[str, Any]:
    """The Hub's ``license``: its identifier, or ``other`` with a link for a URL."""
    if "://" in value:
        return {"license": "other", "license_link": value}
    return {"license": value}


def _field_rows(facts: Facts, types: Mapping[tuple[str, str], str]) -> list[str]:
    rows = ["| split | field | stored as | Croissant dataType |", "|---|---|---|---|"]
    for split in facts.schema.splits.values():
        for name, spec in split.fields.items():
            lossy = facts.lossy.get(split.name, {}).get(name)
            stored = spec.kind.describe()
            if lossy is not None:
                stored += f", {lossy.describe()} images"
            elif name in facts.images.get(split.name, set()):
                stored += ", lossless images"
            rows.append(
                f"| {split.name} | {name} | {stored} | {types.get((split.name, name), '')} |"
            )
    return rows


def hub_card(
    facts: Facts,
    about: Mapping[str, Any],
    protocol: Sequence[str],
    made: str,
    to_fill: Sequence[str],
    types: Mapping[tuple[str, str], str],
) -> str:
    """The ``README.md`` text: front matter, then the card for people. ``made`` says how
    the folder was written, ``to_fill`` what is left to write by hand, ``types`` the
    Croissant dataType of each (split, field)."""
    config, info = dataset_info(facts)
    head = {
        **_license(str(about["license"])),
        "pretty_name": str(about["name"]),
        "configs": [config],
        "dataset_info": info,
    }
    mark = CARD_MARK.decode()
    lines = [
        "---",
        f"# {mark} {__version__}; 'dstore card PATH --hf' writes it again from the data",
        *to_yaml(head).splitlines(),
        "---",
        "",
        f"# {about['name']}",
        "",
        str(about["description"]),
        "",
        "## Fields",
        "",
        *_field_rows(facts, types),
        "",
        "## How it was written",
        "",
        made,
        "",
        "`croissant.json` describes the same files in Croissant 1.1 (MLCommons), with each "
        "file's sha256; `dstore.json` is dstore's manifest.",
        "",
        "## Lossy choices and their measured error",
        "",
        *([f"- {line}" for line in protocol] or ["None: every value is stored as it was read."]),
        "",
        "## To fill in by hand",
        "",
        *[f"- {item}" for item in to_fill],
        "",
    ]
    return "\n".join(lines)

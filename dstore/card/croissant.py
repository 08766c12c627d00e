"""The Croissant 1.1 JSON-LD of a dataset (http://mlcommons.org/croissant/1.1).

* ``distribution``: every data file as a ``cr:FileObject`` (``contentUrl``
  relative to the card, ``encodingFormat``, ``contentSize``, ``sha256``), and per
  split a ``cr:FileSet`` whose ``includes`` select exactly that split's files
  (a glob when one selects them and nothing else, else their names) or, for a
  store, its folder; a FileSet without ``containedIn`` is read from the card's own
  folder, as mlcroissant reads a local dataset;
* ``recordSet``: one per split, ``@id`` the split's name, one ``cr:Field`` per
  field (``@id`` ``"<split>/<field>"``) with the stored ``dataType``
  (:mod:`.datatypes`), ``isArray``/``arrayShape``, and a ``source`` where a
  Croissant reader reaches the values: Parquet columns (an Image column's
  ``bytes``), JSON Lines keys (a file of one split, or files holding one split
  each, whose path is the ``source`` field of many files). Other formats' fields
  have no ``source``
  (mlcroissant reads none of them: mlcommons/croissant#697).

``@id`` values never hold whitespace (mlcroissant refuses it): they are
percent-encoded, names and ``contentUrl`` stay as the files are named.
"""

from __future__ import annotations

import fnmatch
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from ..model import Bytes, Image, Tensor
from ..model import names as naming
from ..model.precision import describe_precision
from ..model.schema import FieldSpec
from .datatypes import DataTypeOf, array_shape, data_type
from .facts import Facts

__all__ = ["CONFORMS_TO", "CONTEXT", "PARQUET", "croissant"]

CONFORMS_TO = "http://mlcommons.org/croissant/1.1"
#: media types whose files mlcroissant reads columns of
PARQUET = "application/x-parquet"
JSON_LINES = "application/jsonlines"
_TEXT_MEDIA = ("application/json", JSON_LINES)
#: metadata files a store keeps beside its chunks: JSON whatever the store's format
_JSON_META = ("zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata")

#: Croissant 1.1's recommended JSON-LD context (its spec's appendix, schema.org as
#: mlcroissant and the Hub write it), with the RAI and PROV-O prefixes
CONTEXT: dict[str, Any] = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "sc": "https://schema.org/",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "dct": "http://purl.org/dc/terms/",
    "prov": "http://www.w3.org/ns/prov#",
    "annotation": "cr:annotation",
    "arrayShape": "cr:arrayShape",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "containedIn": "cr:containedIn",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "description": {"@container": "@language"},
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "excludes": "cr:excludes",
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "name": {"@container": "@language"},
    "parentField": "cr:parentField",
    "path": "cr:path",
    "readLines": "cr:readLines",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sdVersion": "cr:sdVersion",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
    "unArchive": "cr:unArchive",
}


def _id(text: str) -> str:
    # a lone surrogate (a name from data) is percent-encoded as its surrogate bytes
    quoted = urllib.parse.quote(text, safe="/-_.~:", errors="surrogatepass")
    # a "." or ".." segment (a split named "..") would be resolved away as a relative IRI
    return "/".join(p.replace(".", "%2E") if p in (".", "..") else p for p in quoted.split("/"))


def _escape(name: str) -> str:
    """A file name as a glob matching only itself."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _includes(names: Sequence[str], every: Sequence[str]) -> list[str]:
    """Globs selecting exactly ``names`` among ``every`` file: one when a prefix and
    suffix they share do, else each name."""
    head, tail = names[0], names[0]
    for n in names[1:]:
        while not n.startswith(head):
            head = head[:-1]
        while not n.endswith(tail):
            tail = tail[1:]
    if len(head) + len(tail) <= min(len(n) for n in names):
        pattern = f"{_escape(head)}*{_escape(tail)}"
        if sorted(fnmatch.filter(every, pattern)) == sorted(names):
            return [pattern]
    return [_escape(n) for n in names]


def _distribution(facts: Facts) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """FileObjects and per-split FileSets, and each split's FileSet ``@id``."""
    out: list[dict[str, Any]] = []
    for f in facts.files:
        media = facts.media_type if f.name.rsplit("/", 1)[-1] not in _JSON_META else None
        out.append(
            {
                "@type": "cr:FileObject",
                "@id": _id(f.name),
                "name": f.name,
                "contentUrl": f.name,
                "encodingFormat": media or "application/json",
                "contentSize": f"{f.bytes} B",
                "sha256": f.sha256,
            }
        )
    every = [f.name for f in facts.files]
    sets: dict[str, str] = {}
    for split, names in facts.split_files.items():
        sets[split] = f"fileset/{_id(split)}"
        out.append(_file_set(facts, sets[split], split, _includes(names, every)))
    for split, folder in facts.split_dirs.items():
        sets[split] = f"fileset/{_id(split)}"
        out.append(_file_set(facts, sets[split], split, [f"{_escape(folder)}/*"]))
    if sets:
        # a split without records has no file: a set that matches none, so that its
        # fields have a source (a Croissant reader refuses the whole card for a field
        # without one) and its records are none, never another split's
        for split, spec in facts.schema.splits.items():
            if split not in sets and not spec.count:
                sets[split] = f"fileset/{_id(split)}"
                out.append(_file_set(facts, sets[split], split, [_no_file(split, every)]))
    return out, sets


def _no_file(split: str, every: Sequence[str]) -> str:
    """A glob matching none of ``every`` file, named after ``split``."""
    pattern = _escape(f"{naming.escape(split)}.no-records")
    while fnmatch.filter(every, pattern):
        pattern += "-"
    return pattern


def _file_set(facts: Facts, id_: str, split: str, includes: list[str]) -> dict[str, Any]:
    about = f"The {facts.format} files holding the records of split {split!r}."
    if not facts.schema.splits[split].count:
        about = f"Split {split!r} has no records: this set matches no file."
    return {
        "@type": "cr:FileSet",
        "@id": id_,
        "name": f"{split} files",
        "description": about,
        "encodingFormat": facts.media_type or "application/octet-stream",
        "includes": includes,
    }


def _source(
    facts: Facts, split: str, spec: FieldSpec, sets: Mapping[str, str]
) -> dict[str, Any] | None:
    """Where the field's values are: a column a Croissant reader extracts (Parquet, JSON
    Lines of one split), else the files that hold them, with nothing to extract (no
    Croissant reader reads those formats; dstore does)."""
    where: dict[str, Any]
    if split in sets:
        where = {"fileSet": {"@id": sets[split]}}
    elif facts.files:
        where = {"fileObject": {"@id": _id(facts.files[0].name)}}
    else:
        return None  # no file holds a record (every split is empty)
    if not _readable(facts, split):
        return where
    if spec.name == facts.source_field:  # the file each record comes from, by its path
        where["extract"] = {"fileProperty": "fullpath"}
        return where
    where["extract"] = {"column": spec.name}
    if spec.name in facts.images.get(split, set()):
        where["transform"] = {"jsonPath": "bytes"}  # the Hub's Image struct {bytes, path}
    return where


def _readable(facts: Facts, split: str) -> bool:
    """Does a Croissant reader extract the split's records from its files, in order:
    Parquet columns; JSON Lines keys, from a file of one split or from files that each
    hold only this split (mlcroissant reads a file set's files in sorted order)."""
    if facts.media_type == PARQUET:
        return split in facts.split_files
    if facts.media_type != JSON_LINES:
        return False
    if len(facts.schema.splits) == 1 and len(facts.files) == 1:
        return True
    names = facts.split_files.get(split, [])
    # files of one split each: a folder's, as its manifest lists them, or many files
    # read as one dataset, each record's file named by the field the card extracts
    apart = facts.manifest is not None or facts.source_field is not None
    return bool(names) and names == sorted(names) and apart


def _field_type(facts: Facts, split: str, spec: FieldSpec) -> tuple[DataTypeOf, dict[str, Any]]:
    image = spec.name in facts.images.get(split, set())
    kind = spec.kind
    if facts.media_type in _TEXT_MEDIA and (
        isinstance(kind, Bytes) or (isinstance(kind, Image) and kind.encoding != "raw")
    ):
        # JSON holds bytes and encoded images as base64 text
        return DataTypeOf("sc:Text", "base64 text of the bytes"), {}
    return data_type(spec, image), array_shape(spec, image)


def _what(spec: FieldSpec) -> str:
    """``int64`` for a scalar, the kind's own words (``float16 (4,)``) otherwise."""
    if isinstance(spec.kind, Tensor) and not spec.kind.shape:
        return spec.kind.dtype.name
    return spec.kind.describe()


def _field(facts: Facts, split: str, spec: FieldSpec, sets: Mapping[str, str]) -> dict[str, Any]:
    found, shape = _field_type(facts, split, spec)
    lossy = facts.lossy.get(split, {}).get(spec.name)
    notes = [_what(spec)]
    if spec.name in facts.images.get(split, set()) and lossy is None:
        notes.append("stored as lossless images")
    for note in (found.note, describe_precision(spec), lossy and f"stored as {lossy.describe()}"):
        if note:
            notes.append(note)
    names = getattr(facts.encodings(split).get(spec.name), "class_names", None)
    if names:
        notes.append("class names: " + ", ".join(f"{i} {n}" for i, n in enumerate(names)))
    out: dict[str, Any] = {
        "@type": "cr:Field",
        "@id": f"{_id(split)}/{_id(spec.name)}",
        "name": spec.name,
        "description": "; ".join(notes),
    }
    if found.data_type is not None:
        out["dataType"] = found.data_type
    out.update(shape)
    source = _source(facts, split, spec, sets)
    if source is not None:
        out["source"] = source
    return out


def _tail(facts: Facts) -> str:
    """What the record set's description says of lines that hold no record: a JSON Lines
    file dstore wrote before ends with its schema alone on a line, which a reader of the
    lines as records (mlcroissant, pandas) takes for one more record (of nulls)."""
    if not facts.trailing:
        return ""
    where = "The file's" if len(facts.files) == 1 else "A file's"
    return f" {where} last line is dstore's schema (key 'dstore:schema'), not a record."


def croissant(
    facts: Facts, about: Mapping[str, Any], protocol: Sequence[str], generated_by: str
) -> dict[str, Any]:
    """The Croissant document: ``about`` holds the dataset-level values (name,
    description, license, creator, url, version, datePublished), ``protocol`` the
    preprocessing lines, ``generated_by`` the PROV-O activity label (dstore's mark)."""
    distribution, sets = _distribution(facts)
    record_sets = []
    for split in facts.schema.splits.values():
        record_sets.append(
            {
                "@type": "cr:RecordSet",
                "@id": _id(split.name),
                "name": split.name,
                "description": f"Split {split.name!r}: {split.count} records.{_tail(facts)}",
                "field": [_field(facts, split.name, f, sets) for f in split.fields.values()],
            }
        )
    doc: dict[str, Any] = {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "prov:wasGeneratedBy": {"@type": "prov:Activity", "prov:label": generated_by},
        **about,
    }
    if protocol:
        doc["rai:dataPreprocessingProtocol"] = list(protocol)
    doc["distribution"] = distribution
    doc["recordSet"] = record_sets
    return doc

"""Writing a dataset's cards: with every folder output, and by ``dstore card``.

:func:`write_with_output` runs inside a conversion's atomic output, after the
manifest (or the store's metadata) is complete and before the folder is renamed
into place, so the cards are part of the same commit: a failed conversion leaves
neither. :func:`card` describes any dataset afterwards, reading it as stored.

A card file is replaced only if dstore wrote it (it carries
:data:`~dstore.sharding.manifest.CARD_MARK`), by a rename: a user's own
``croissant.json`` or ``README.md`` is never overwritten. Dataset-level values
the user gave an earlier card (name, license...) are kept, and so are the
measured errors of an earlier card of the very same files (their sha256 equal);
a value nobody gave gets a neutral default and is reported missing.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from .. import fs
from .._dist import __version__
from ..errors import OutputExistsError, UsageError
from ..sharding.manifest import CARD_FILES, CARD_MARK
from .croissant import croissant
from .facts import Facts, gather
from .hf import hub_card
from .rai import Written, bench_lines, line_field, protocol_lines

__all__ = ["ABOUT", "CardReport", "describe", "write_with_output"]

CROISSANT, README = CARD_FILES
#: the dataset-level values a person gives (``dstore card --name ...``)
ABOUT = ("name", "description", "license", "creator", "url")
#: what dstore cannot know, left out of the card: the RAI and citation fields to write
LEFT_OUT = (
    "citeAs (how to cite the dataset)",
    "keywords",
    "rai:dataCollection, rai:dataCollectionType (how the data was collected)",
    "rai:dataAnnotationProtocol (how labels were made)",
    "rai:dataBiases, rai:dataLimitations",
    "rai:dataUseCases, rai:dataSocialImpact",
    "rai:personalSensitiveInformation",
    "rai:dataReleaseMaintenancePlan",
)
_UNKNOWN = "unknown"
#: the name a dataset nobody named gets: the same wherever it is written (a card written
#: with the conversion depends on the data and the options only, never on paths or dates)
_UNTITLED = "untitled"


@dataclasses.dataclass
class CardReport:
    """What :func:`card` wrote, and what the user still has to fill in."""

    written: list[str]
    #: dataset-level values given a neutral default (pass them: ``--license`` ...)
    missing: list[str]
    left_out: list[str] = dataclasses.field(default_factory=lambda: list(LEFT_OUT))
    notes: list[str] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"wrote {p}" for p in self.written]
        if self.missing:
            out.append("missing (a neutral default was written): " + ", ".join(self.missing))
        out.append("left out, to fill in by hand: " + "; ".join(self.left_out))
        out.extend(f"note: {n}" for n in self.notes)
        return out


def _summary(facts: Facts) -> str:
    splits = ", ".join(f"{s.name} ({s.count})" for s in facts.schema.splits.values())
    fields = sorted({n for s in facts.schema.splits.values() for n in s.fields})
    return (
        f"{facts.schema.records} records in splits {splits}; fields {', '.join(fields)}; "
        f"stored as {facts.format} by dstore."
    )


def _defaults(facts: Facts) -> dict[str, Any]:
    if fs.is_url(facts.path):  # the card inside the dataset says "./", as a local one does
        inside = facts.path.rstrip("/") == facts.card_dir.rstrip("/")
        rel = "." if inside else facts.path
    else:
        rel = os.path.relpath(facts.path, facts.card_dir)
    return {
        "name": _UNTITLED,
        "description": _summary(facts),
        "license": _UNKNOWN,
        "creator": _UNKNOWN,
        "url": "./" if rel == "." else rel,
    }


def _about(
    facts: Facts, given: Mapping[str, str | None], previous: Mapping[str, Any], dated: bool
) -> tuple[dict[str, Any], list[str]]:
    """The dataset-level values (given, else an earlier card's, else a default), and the
    names of those left at their default. ``dated``: with ``datePublished`` (an earlier
    card's, else today's); a card written with the conversion has none."""
    defaults = _defaults(facts)
    values, missing = {}, []
    for key in ABOUT:
        value = given.get(key) or previous.get(key)
        if not value:
            value = defaults[key]
            missing.append(key)
        values[key] = value
    about = {
        "name": values["name"],
        "description": values["description"],
        "license": values["license"],
        "creator": {"@type": "sc:Person", "name": values["creator"]},
        "url": values["url"],
        "version": f"{facts.version}.0.0",
    }
    if dated:
        today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        about["datePublished"] = previous.get("datePublished") or today
    return about, missing


def _read_ours(path: str) -> dict[str, Any] | None:
    """The Croissant card at ``path`` if dstore wrote it, else None (absent or a user's)."""
    if not fs.exists(path) or not _is_ours(path):
        return None
    try:
        with fs.open_binary(path) as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _is_ours(path: str) -> bool:
    try:
        with fs.open_binary(path) as f:
            return CARD_MARK in f.read(4096)
    except OSError:
        return False


def _previous(path: str, facts: Facts) -> tuple[dict[str, Any], dict[str, str]]:
    """What an earlier dstore card at ``path`` said that still holds: the values a person
    gave (not a default), and, when it lists these very files, its protocol lines."""
    doc = _read_ours(path)
    if doc is None:
        return {}, {}
    elsewhere = _folder_of(path) != facts.card_dir  # a card beside the folder before
    defaults = _defaults(dataclasses.replace(facts, card_dir=_folder_of(path)))
    given = {}
    for key in ABOUT:
        value = doc.get(key)
        if key == "creator" and isinstance(value, dict):
            value = value.get("name")
        if isinstance(value, str) and value and value != defaults[key]:
            given[key] = value
    files = {
        (d.get("contentUrl"), d.get("sha256"))
        for d in doc.get("distribution", [])
        if isinstance(d, dict) and d.get("@type") == "cr:FileObject"
    }
    lines: dict[str, str] = {}
    if not elsewhere and files == {(f.name, f.sha256) for f in facts.files}:
        date = doc.get("datePublished")
        if isinstance(date, str):
            given["datePublished"] = date
        for line in doc.get("rai:dataPreprocessingProtocol", []):
            if isinstance(line, str) and "error not measured" not in line:
                lines[line_field(line)] = line
    return given, lines


def _write(path: str, text: str, replace: bool) -> None:
    """``text`` at ``path``, whole or not at all; an existing file only if dstore wrote it."""
    link = not fs.is_url(path) and os.path.islink(path)
    if link or (fs.exists(path) and (fs.isdir(path) or not (replace and _is_ours(path)))):
        what = f"{path}: exists and dstore did not write it; refusing to replace it"
        raise OutputExistsError(f"{what} (pass out=FILE; nothing was written)")
    if fs.is_url(path):
        with fs.open_binary(path, "wb") as f:  # an object appears whole or not at all
            f.write(text.encode("utf-8", "backslashreplace"))
        return
    folder, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{base}.dstore-tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        # a name from data may hold a lone surrogate, which UTF-8 cannot: written as \udXXX
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise


def _made(written: Written | None, facts: Facts) -> str:
    """How the dataset came to be, as far as dstore saw it (no path: a card written with
    the conversion is the same wherever it is written)."""
    if written is None:
        return f"dstore {__version__} described the {facts.format} dataset as stored."
    source = f" from {written.source_format}" if written.source_format else ""
    return f"dstore {__version__} converted it{source} to {facts.format}."


def _render(
    facts: Facts,
    given: Mapping[str, str | None],
    written: Written | None,
    extra: tuple[Mapping[tuple[str, str], Mapping[str, float]] | None, str | None, Sequence[str]],
    previous: tuple[dict[str, Any], dict[str, str]],
    hf: bool,
    dated: bool = True,
) -> tuple[str, str | None, list[str]]:
    """croissant.json's text, README.md's (or None), and the values left at defaults."""
    verified, source, bench = extra
    about, missing = _about(facts, given, previous[0], dated)
    protocol = protocol_lines(facts, written, verified, source, previous[1]) + list(bench)
    made = _made(written, facts)
    doc = croissant(facts, about, protocol, f"{CARD_MARK.decode()}: {made}")
    text = json.dumps(doc, indent=1) + "\n"  # ASCII: a name may hold a lone surrogate
    if not hf:
        return text, None, missing
    types = {
        (rs["name"], f["name"]): str(f.get("dataType", ""))
        for rs in doc["recordSet"]
        for f in rs["field"]
    }
    fill = [f"{key} (given the default {about[key]!r})" for key in missing if key != "creator"]
    fill += [f"creator (given {_UNKNOWN!r})"] if "creator" in missing else []
    return text, hub_card(facts, about, protocol, made, fill + list(LEFT_OUT), types), missing


def write_with_output(root: str, codec: Any, written: Written) -> None:
    """The cards of a folder output being committed at ``root`` (its temporary folder):
    Croissant, and the Hub's card where the format is one the Hub reads; they depend on
    the data and the options only (no path, no date: ``dstore card`` adds the day). A
    single-file output gets none (``dstore card`` writes one)."""
    if not fs.isdir(root) or not codec.card_inside(root):
        return
    with codec.open_reader(root) as reader:
        facts = gather(reader, root, root, codec, trusted=True)
    text, readme, _ = _render(
        facts, {}, written, (None, None, ()), ({}, {}), codec.hub_card, dated=False
    )
    _write(fs.join(root, CROISSANT), text, replace=False)
    if readme is not None:
        _write(fs.join(root, README), readme, replace=False)


def _target(path: str, out: str | os.PathLike[str] | None, inside: bool) -> str:
    """Where the Croissant card goes: ``out``, else inside the dataset's folder, else beside
    the dataset (a file, or a folder a card inside would trouble: ``Codec.card_inside``)."""
    if out is not None:
        return os.fspath(out)
    return fs.join(path, CROISSANT) if inside else _beside(path)


def _beside(path: str) -> str:
    return f"{path.rstrip('/')}.croissant.json"


def _places(
    path: str, codec: Any, out: str | os.PathLike[str] | None, folder: bool
) -> tuple[str, str]:
    """Where the card goes, and the earlier card whose given values it keeps: the same
    place, or the card beside a folder whose card can now be inside it."""
    inside = out is None and folder and codec.card_inside(path, make_room=True)
    target = _target(path, out, inside)
    earlier = _beside(path) if inside and _read_ours(target) is None else target
    return target, earlier


def _folder_of(target: str) -> str:
    if fs.is_url(target):
        return target.rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(target))


def describe(
    path: str,
    codec: Any,
    reader: Any,
    *,
    out: str | os.PathLike[str] | None = None,
    hf: bool = False,
    about: Mapping[str, str | None] | None = None,
    measured: tuple[Written, Mapping[tuple[str, str], Mapping[str, float]]] | None = None,
    bench: str | os.PathLike[str] | None = None,
    trusted: bool = False,
) -> CardReport:
    """Write the cards of the dataset ``reader`` reads at ``path`` (its ``codec``):
    :func:`dstore.card`'s work once the dataset is open and, with ``measured``, its
    errors against the source are known (the written source and ``verify``'s figures).
    ``trusted``: the shards' sizes and sha256 are taken from the manifest, not hashed
    again (only right just after dstore wrote them: :func:`refresh_after_version`)."""
    folder = fs.isdir(path)
    if hf and not (folder and codec.hub_card):
        raise UsageError(
            f"{path}: the Hub's README.md card is written for a folder the Hub reads as "
            f"it is (Parquet); this is {codec.name} {'folder' if folder else 'file'}"
        )
    target, earlier = _places(path, codec, out, folder)
    facts = gather(reader, path, _folder_of(target), codec, trusted=trusted)
    written, verified = measured if measured is not None else (None, None)
    source = written.source if written is not None else None
    bench_text = bench_lines(os.fspath(bench), facts.format) if bench is not None else []
    readme_path = fs.join(path, README) if folder else None
    hf = hf or bool(
        readme_path and facts.hub_card and fs.exists(readme_path) and _is_ours(readme_path)
    )
    previous = _previous(earlier, facts)
    text, readme, missing = _render(
        facts, about or {}, written, (verified, source, bench_text), previous, hf
    )
    _write(target, text, replace=True)
    report = CardReport([target], missing)
    if earlier != target and previous != ({}, {}):
        report.notes.append(
            f"{earlier}, the card written beside the dataset before its card could be "
            "inside it, is left as it was: the card inside replaces it (the values given "
            "it are kept; pass --source again to state measured errors)"
        )
    if readme is not None and readme_path is not None:
        _write(readme_path, readme, replace=True)
        report.written.append(readme_path)
    return report


def card_of(path: str, codec: Any) -> str | None:
    """The Croissant card dstore wrote for the dataset at ``path``, where it is (inside
    its folder, else beside it), or None (none there, or one dstore did not write)."""
    for target in ([fs.join(path, CROISSANT)] if fs.isdir(path) else []) + [_beside(path)]:
        if fs.exists(target) and _is_ours(target):
            return target
    return None

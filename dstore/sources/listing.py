"""Which files a source names: a glob, a folder or a list file, expanded in a stable
order, each claimed by a format; links out of a folder and files no format claims
are reported, never followed silently."""

from __future__ import annotations

import os

from .. import links
from ..errors import CodecIOError, UnknownCodecError
from ..registry import available_codecs, get_codec_class, infer_codec
from ..sharding.manifest import is_own_card

__all__ = ["expand", "is_multi"]

_MAGIC = set("*?[")


def _has_magic(path: str) -> bool:
    return any(c in _MAGIC for c in path)


def is_multi(path: str, format: str | None = None) -> bool:
    """True when ``path`` names many files: ``@list``, a glob, or a folder that is not
    itself a dataset (its name claims no format and no format's marker is inside)."""
    if "://" in path or (os.path.exists(path) and not os.path.isdir(path)):
        return False
    if path.startswith("@") or _has_magic(path):
        return True
    if not os.path.isdir(path):
        return False
    if format is not None:
        # a format whose dataset is a folder (shards, a zarr store) reads it itself;
        # for any other, a folder can only be many files of it, whatever their names
        return not (get_codec_class(format).reads_folders or _claimed(path) == format)
    try:
        infer_codec(path)
    except UnknownCodecError:
        return True
    return False


def folder_format(path: str, follow_links: bool = False) -> str | None:
    """The format of a plain folder (its name claims none, no marker inside) whose files
    are all one format's shards, for readers that open one dataset by record (``to_torch``,
    ``to_tf_dataset``); None when it is not such a folder. Links out of the folder are
    refused as :func:`expand` refuses them (unless ``follow_links``)."""
    if "://" in path or not os.path.isdir(path) or _claimed(path) is not None:
        return None
    paths, _ = expand(path, follow_links=follow_links)
    names = {_claimed(p) for p in paths}
    if len(names) != 1 or None in names:
        return None
    name = names.pop()
    assert name is not None
    return name if get_codec_class(name).reads_folders else None


def _claimed(name: str) -> str | None:
    try:
        return infer_codec(name)
    except UnknownCodecError:
        return None


def expand(
    spec: str,
    format: str | None = None,
    *,
    follow_links: bool = False,
    skipped: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """The files ``spec`` names and each one's source name, in reading order.

    A glob or folder enters a folder link only with ``follow_links`` (the links it
    did not enter are appended to ``skipped``), and never one real folder twice;
    the same real file named twice is refused (:mod:`dstore.links`)."""
    paths, names = _expand(spec, format, follow_links, [] if skipped is None else skipped)
    links.check_distinct(spec, paths)
    return paths, names


def _expand(
    spec: str, format: str | None, follow_links: bool, skipped: list[str]
) -> tuple[list[str], list[str]]:
    if spec.startswith("@") and not os.path.exists(spec):
        return _listed_files(spec[1:])
    if _has_magic(spec):
        return _glob_files(spec, follow_links, skipped)
    return _folder_files(spec, format, follow_links, skipped)


def _listed_files(listing: str) -> tuple[list[str], list[str]]:
    """``@list.txt``: one file a line (relative to the list's folder), ``#`` comments."""
    try:
        with open(listing, encoding="utf-8") as f:
            lines = [ln.strip() for ln in f]
    except OSError as e:
        raise CodecIOError(f"{listing}: cannot read the list of files: {e.strerror}") from None
    names = [ln for ln in lines if ln and not ln.startswith("#")]
    base = os.path.dirname(listing)
    paths = [n if os.path.isabs(n) else os.path.join(base, n) for n in names]
    for i, p in enumerate(paths):
        if not os.path.isfile(p):
            raise CodecIOError(f"{listing}: entry {i + 1}, {names[i]}: no such file")
    if not paths:
        raise CodecIOError(f"{listing}: the list names no file")
    return paths, names


def _glob_files(spec: str, follow_links: bool, skipped: list[str]) -> tuple[list[str], list[str]]:
    """The files a glob matches, named relative to the pattern's fixed leading folders."""
    # dstore's own Croissant cards (f.json.croissant.json beside f.json) describe files;
    # they are none of them, whatever the pattern
    paths = [p for p in links.glob_files(spec, follow_links, skipped) if not is_own_card(p)]
    if not paths:
        raise CodecIOError(f"{spec}: the pattern matches no file (nothing was written)")
    parts = spec.replace(os.sep, "/").split("/")
    fixed = []
    for part in parts[:-1]:
        if _has_magic(part):
            break
        fixed.append(part)
    root = "/".join(fixed) or "."
    return paths, [os.path.relpath(p, root).replace(os.sep, "/") for p in paths]


def _folder_files(
    spec: str, format: str | None, follow_links: bool, skipped: list[str]
) -> tuple[list[str], list[str]]:
    """The files of a folder tree a format claims (``format``'s and unclaimed ones, when
    named), named relative to the folder."""
    paths = []
    # a folder that is a dataset itself (x.zarr, x.tfrecords) is not walked into
    for path in links.walk_files(
        spec, follow_links, lambda d: not d.startswith(".") and _claimed(d) is None, skipped
    ):
        fname = os.path.basename(path)
        if fname.startswith(".") or is_own_card(path):  # a card of dstore's is no source
            continue
        fmt = _claimed(fname)
        # with a format named (--from): its files and those no format claims (features
        # saved as "0001.fv"), not another format's; else every file a format claims
        if fmt in (format, None) if format is not None else fmt is not None:
            links.check_regular(spec, path)
            paths.append(path)
    if not paths and format is not None:
        raise CodecIOError(f"{spec}: the folder holds no {format} file (nor one without a format)")
    if not paths:
        raise UnknownCodecError(
            spec,
            list(available_codecs()),
            f"{spec}: no format claims this folder or any file in it (name one with from_format=)",
        )
    return paths, [os.path.relpath(p, spec).replace(os.sep, "/") for p in paths]


# --------------------------------------------------------------------- kinds

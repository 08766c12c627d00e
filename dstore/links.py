"""Symbolic links in local inputs: a read never leaves the input unless the user allows it.

DESIGN.md, "What must never happen": *a read outside the input*. A zarr store
whose chunk file or array folder is a symlink to ``/etc`` would put that file's
bytes in the output; a folder read as many sources that holds a link back to
itself would be read once per loop level (2 files gave 82 records), and two
such links make that exponential. So, for local folders:

* :func:`check_store`: a store (zarr) is refused when an entry links out of
  it, unless ``follow``; a folder reached twice (a link to a folder already in
  it, a loop) is refused always, as HDF5 groups reached twice are.
* :func:`glob_files` and :func:`walk_files`: many-file sources never follow a
  folder link unless ``follow``, and never walk one real folder twice.
* :func:`check_distinct`: the same real file named twice is refused by name.
* :func:`check_inside`: files found in a folder (a folder's shards, a glob's or a
  brace pattern's matches, an index beside a shard) that are links out of it are
  refused unless ``follow``: a shard linked in from another dataset would be read
  as this one's.
* :func:`check_regular`: a FIFO, device or socket among a folder's files is
  refused: opening one blocks for ever (a FIFO nobody writes, and a C reader
  such as Arrow's cannot even be interrupted) or never ends (``/dev/zero``).

URLs have no symlinks; these functions are for local paths only.
"""

from __future__ import annotations

import fnmatch
import glob as _glob
import os
import stat
from collections.abc import Callable, Iterator, Sequence

from .errors import UnsafeInputError

__all__ = [
    "check_distinct",
    "check_inside",
    "check_regular",
    "check_store",
    "glob_files",
    "is_inside",
    "pattern_root",
    "walk_files",
]


def is_inside(real: str, top: str) -> bool:
    """Is the resolved path ``real`` the folder ``top`` (resolved) or inside it?"""
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def check_inside(root: str, paths: Sequence[str], follow: bool, what: str = "folder") -> None:
    """Refuse any of ``paths`` (found in the local folder ``root``) that is, or lies
    behind, a symlink leading out of ``root``, unless ``follow``; name the first."""
    if follow:
        return
    top = os.path.realpath(root)
    for path in paths:
        real = os.path.realpath(path)
        if not is_inside(real, top):
            name = os.path.relpath(path, root)
            raise UnsafeInputError(f"{root}: {name!r} is a symlink to {real}, outside the {what}")


def check_regular(root: str, path: str) -> None:
    """Refuse ``path`` (found in the local folder ``root``, not named by the user) when
    it is a FIFO, a device or a socket."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing or unreadable: the format's reader says so in its own words
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    name = os.path.relpath(path, root) if root else path
    raise UnsafeInputError(
        f"{root}: {name!r} is not a regular file (a FIFO, device or socket); refused",
        hint=False,
    )


def pattern_root(pattern: str) -> str:
    """The fixed leading folders of a glob or brace pattern (``a/b/*/c.tar`` -> ``a/b``),
    ``.`` when the first component already varies."""
    parts = pattern.split(os.sep)
    fixed: list[str] = []
    for part in parts[:-1]:
        if _glob.has_magic(part) or "{" in part:
            break
        fixed.append(part)
    if fixed == [""]:
        return os.sep
    return os.sep.join(fixed) or os.curdir


def _walked(real: str, seen: set[str]) -> str | None:
    """The folder of ``seen`` that ``real`` is or lies in (then it was walked already)."""
    path = real
    while True:
        if path in seen:
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def check_store(root: str, follow: bool, what: str = "store") -> None:
    """Refuse a local folder ``root`` holding a symlink whose target lies outside it.

    Every entry is looked at before anything is read (``os.scandir`` knows links
    without a ``stat``): a file or folder linking out of ``root`` is refused unless
    ``follow`` (then a linked folder is checked the same way); a folder link to a
    folder already walked (inside ``root``, or a loop) is refused always -- the
    reader would read that folder under two names, or for ever."""
    top = os.path.realpath(root)
    seen = {top}
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # unreadable: the format's reader says so in its own words
        for entry in entries:
            if entry.is_symlink():
                _check_link(entry.path, root, top, follow, what, seen, stack)
            elif entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)


def _check_link(
    path: str, root: str, top: str, follow: bool, what: str, seen: set[str], stack: list[str]
) -> None:
    real = os.path.realpath(path)
    name = os.path.relpath(path, root)
    if not is_inside(real, top) and not follow:
        raise UnsafeInputError(f"{root}: {name!r} is a symlink to {real}, outside the {what}")
    if not os.path.isdir(real):
        return  # a file (or a dangling link): read where it points, nothing to walk
    again = _walked(real, seen)
    if again is not None:
        first = "the store itself" if again == top else again
        raise UnsafeInputError(
            f"{root}: {name!r} is a symlink to the folder {real}, which is already read "
            f"(as part of {first}); each folder is read under one name",
            hint=False,
        )
    seen.add(real)
    stack.append(path)


def _first_visit(path: str, seen: set[str]) -> bool:
    """Is the real folder behind ``path`` not walked yet? (Then it is, from now.)"""
    real = os.path.realpath(path)
    if real in seen:
        return False
    seen.add(real)
    return True


def walk_files(
    folder: str, follow: bool, keep_dir: Callable[[str], bool], skipped: list[str]
) -> Iterator[str]:
    """Files under ``folder``, sorted top-down as ``os.walk`` gives them; a folder is
    walked into when ``keep_dir(name)`` says so. Folder links are followed only
    when ``follow``, and then no real folder is walked twice (a loop, a link to an
    ancestor of ``folder``, a second name); the links not followed are appended
    to ``skipped``. A file link leading out of ``folder`` is refused unless ``follow``."""
    seen = {os.path.realpath(folder)}
    for top, dirs, files in os.walk(folder, followlinks=follow):
        kept = []
        for d in sorted(dirs):
            path = os.path.join(top, d)
            if not keep_dir(d):
                continue
            if not follow and os.path.islink(path):
                skipped.append(path)
                continue
            if follow and not _first_visit(path, seen):
                continue  # its files are read once, under the name that reached it first
            kept.append(d)
        dirs[:] = kept  # os.walk descends into what is left, in this order
        for f in sorted(files):
            path = os.path.join(top, f)
            if not follow and os.path.islink(path):
                check_inside(folder, [path], follow)
            yield path


def glob_files(pattern: str, follow: bool, skipped: list[str]) -> list[str]:
    """Files matching ``pattern`` as :func:`glob.glob` with ``recursive=True`` matches
    them (names starting with ``.`` only by a pattern that does), except that a
    folder link below the pattern's fixed part is entered only when ``follow``, and
    ``**`` never walks one real folder twice. Links not entered go to ``skipped``.

    The standard glob follows every link: a folder linking to itself made
    ``feats/**/*.json`` read each file once per loop level, and two such links
    make 2**40 paths. A matched file that is a link out of the pattern's fixed
    folder is refused unless ``follow`` (:func:`check_inside`)."""
    parts = pattern.split(os.sep)
    fixed: list[str] = []
    for part in parts[:-1]:
        if _glob.has_magic(part):
            break
        fixed.append(part)
    root = os.sep.join(fixed) if fixed else ""
    if fixed == [""]:  # an absolute pattern: its fixed part is the root folder
        root = os.sep
    rest = parts[len(fixed) :]
    seen = {os.path.realpath(root or os.curdir)}
    found = sorted(p for p in _match(root, rest, follow, skipped, seen) if os.path.isfile(p))
    check_inside(root or os.curdir, [p for p in found if os.path.islink(p)], follow)
    return found


def _children(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder or os.curdir))
    except OSError:
        return []


def _enter(path: str, follow: bool, skipped: list[str], seen: set[str] | None) -> bool:
    """May a pattern go on into the folder ``path``? ``seen`` (given by ``**``, which
    walks whole folders) holds the real folders walked: none is walked twice."""
    if not follow:
        if os.path.islink(path):
            skipped.append(path)
            return False
        return True  # without links, folders form a tree: each is reached once
    # one component deeper (no ``seen``): bounded by the pattern; duplicates are refused
    return seen is None or _first_visit(path, seen)


def _match(
    folder: str, parts: Sequence[str], follow: bool, skipped: list[str], seen: set[str]
) -> Iterator[str]:
    """Paths under ``folder`` matching the pattern components ``parts``."""
    part, rest = parts[0], parts[1:]
    if part == "**":
        yield from _match_any_depth(folder, rest, follow, skipped, seen)
        return
    if not _glob.has_magic(part):
        names = [part] if os.path.lexists(os.path.join(folder, part)) else []
    else:
        hidden = part.startswith(".")
        names = [
            n
            for n in _children(folder)
            if (hidden or not n.startswith(".")) and fnmatch.fnmatchcase(n, part)
        ]
    for name in names:
        path = os.path.join(folder, name) if folder else name
        if not rest:
            yield path
        elif os.path.isdir(path) and _enter(path, follow, skipped, None):
            yield from _match(path, rest, follow, skipped, seen)


def _match_any_depth(
    folder: str, rest: Sequence[str], follow: bool, skipped: list[str], seen: set[str]
) -> Iterator[str]:
    """``**`` followed by ``rest``: ``rest`` in ``folder`` and in every folder below it
    (not hidden ones), each real folder once."""
    if not rest:  # a trailing ``**`` matches the files below too
        rest = ["*"]
    stack = [folder]
    while stack:
        current = stack.pop()
        yield from _match(current, rest, follow, skipped, seen)
        below = []
        for name in _children(current):
            path = os.path.join(current, name) if current else name
            if name.startswith(".") or not os.path.isdir(path):
                continue
            if _enter(path, follow, skipped, seen):
                below.append(path)
        stack.extend(reversed(below))


def check_distinct(spec: str, paths: Sequence[str]) -> None:
    """Refuse the same real file named twice (two links to it, a list naming it twice):
    its records would be read twice as if they were different files'."""
    first: dict[str, str] = {}
    for path in paths:
        real = os.path.realpath(path)
        if real in first:
            raise UnsafeInputError(
                f"{spec}: {path} is the same file as {first[real]} ({real}); each source "
                "is read once",
                hint=False,
            )
        first[real] = path

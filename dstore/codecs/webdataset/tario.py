"""Tar members both ways with the standard library's ``tarfile``; nothing is extracted."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from typing import IO

from ...errors import CodecIOError

BLOCK = 512
END = b"\0" * (2 * BLOCK)  # end-of-archive
_REGULAR = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_WHAT = {
    tarfile.LNKTYPE: "hard link",
    tarfile.SYMTYPE: "symbolic link",
    tarfile.CHRTYPE: "character device",
    tarfile.BLKTYPE: "block device",
    tarfile.FIFOTYPE: "FIFO",
}


def member(name: str, data: bytes) -> bytes:
    """One regular file member whose bytes depend on its name and data alone."""
    info = tarfile.TarInfo(name)  # mtime 0, uid/gid 0, no user names, mode 0644
    info.size = len(data)
    header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    return header + data + b"\0" * (padded(len(data)) - len(data))


def padded(size: int) -> int:
    """Bytes a member's data of ``size`` bytes takes, padded to whole blocks."""
    return size + -size % BLOCK


def is_tar_header(block: bytes) -> bool:
    """A first block that parses as a tar header (checksum included)."""
    try:
        return block[:BLOCK] != b"\0" * BLOCK and bool(
            tarfile.TarInfo.frombuf(block[:BLOCK], "utf-8", "surrogateescape")
        )
    except tarfile.HeaderError:
        return False


def _check(info: tarfile.TarInfo, path: str, size: int) -> None:
    where, name = f"{path}: byte {info.offset}: member {info.name!r}", info.name
    if info.offset_data + info.size > size:
        raise CodecIOError(f"{where} claims {info.size} bytes past the end")
    if info.type not in _REGULAR and not info.isdir():
        what = _WHAT.get(info.type, f"member of type {info.type!r}")
        raise CodecIOError(f"{where} is a {what}; only files are read")
    if name.startswith("/") or ".." in name.split("/") or "\\" in name or "\0" in name:
        raise CodecIOError(f"{where} is an absolute path or leaves the archive")


def walk(f: IO[bytes], path: str, size: int) -> Iterator[tarfile.TarInfo]:
    """The regular members of the tar in ``f`` (``size`` bytes), directories passed over;
    links, devices, names leaving the archive and sizes past the end refused by member."""
    if size == 0:
        return  # no members (tarfile calls it no tar)
    try:
        with tarfile.open(fileobj=f, mode="r:", encoding="utf-8", errors="surrogateescape") as tar:
            for info in tar:
                _check(info, path, size)
                if not info.isdir():
                    yield info
    except tarfile.ReadError as e:
        raise CodecIOError(f"{path}: not a tar header, or a truncated tar ({e})") from None
    # tarfile stops quietly at a cut or bad header after the first: that must be the end
    f.seek(tar.offset)
    tail = f.read(BLOCK)
    if tar.offset < size and tail != b"\0" * BLOCK:
        what = "truncated tar (ends inside a header)" if len(tail) < BLOCK else "not a tar header"
        raise CodecIOError(f"{path}: byte {tar.offset}: {what}")

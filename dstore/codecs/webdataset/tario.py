"""Tar streams, both ways, with the standard library's header code and nothing extracted.

Writing: :func:`member` is one regular file (header, data, zero padding to
512 bytes) with every field that could vary fixed -- mtime 0, uid/gid 0, no
user or group names, mode 0644, PAX headers only for names ustar cannot hold
-- so a member's bytes depend on its name and data alone. :data:`END` (two
zero blocks) closes an archive.

Reading: :func:`walk` steps from header to header (one 512-byte read each,
data is skipped by seeking), following GNU long names and PAX ``path`` /
``size`` records, and yields each regular member's name, data offset and size.
Directories are passed over; links, devices and FIFOs, and names that are
absolute or hold ``..``, are refused in one line naming the member, as is a
member reaching past the end of the file (a size merely declared).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from ...errors import CodecIOError

__all__ = ["END", "Member", "is_tar_header", "member", "walk"]

BLOCK = 512
END = b"\0" * (2 * BLOCK)
_REGULAR = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_WHAT = {
    tarfile.LNKTYPE: "hard link",
    tarfile.SYMTYPE: "symbolic link",
    tarfile.CHRTYPE: "character device",
    tarfile.BLKTYPE: "block device",
    tarfile.FIFOTYPE: "FIFO",
}


def _pad(n: int) -> int:
    return -n % BLOCK


def member(name: str, data: bytes) -> bytes:
    """One regular file member, deterministic whatever the process, user or clock."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    return header + data + b"\0" * _pad(len(data))


def is_tar_header(block: bytes) -> bool:
    """A first block that parses as a tar header (checksum included)."""
    if len(block) < BLOCK or block[:BLOCK] == b"\0" * BLOCK:
        return False
    try:
        tarfile.TarInfo.frombuf(block[:BLOCK], "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


@dataclass(frozen=True)
class Member:
    """A regular member: its name, where its header and its data start, its size."""

    name: str
    header: int
    data: int
    size: int

    @property
    def end(self) -> int:
        return self.data + self.size + _pad(self.size)


def _pax(data: bytes, where: str) -> dict[str, str]:
    """PAX extended header records ``"<len> key=value\\n"``."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        sp = data.find(b" ", pos)
        try:
            length = int(data[pos:sp])
            key, _, value = data[sp + 1 : pos + length - 1].partition(b"=")
        except ValueError:
            raise CodecIOError(f"{where}: bad PAX header") from None
        if length <= 0:
            raise CodecIOError(f"{where}: bad PAX header")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _check_name(name: str, where: str) -> None:
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or "\\" in name or "\0" in name:
        raise CodecIOError(f"{where}: member {name!r} is an absolute path or leaves the archive")


def walk(f: IO[bytes], path: str, size: int, start: int = 0) -> Iterator[Member]:
    """The regular members of the tar in ``f`` (``size`` bytes) from offset ``start``."""
    pos = start
    ext: dict[str, str] = {}
    while pos + BLOCK <= size:
        f.seek(pos)
        block = f.read(BLOCK)
        if block == b"\0" * BLOCK:
            return  # end-of-archive
        where = f"{path}: byte {pos}"
        try:
            info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        except tarfile.HeaderError as e:
            raise CodecIOError(f"{where}: not a tar header ({e})") from None
        length = int(ext.pop("size", info.size))
        data = pos + BLOCK
        if length < 0 or data + length > size:
            raise CodecIOError(f"{where}: member {info.name!r} claims {length} bytes past the end")
        if info.type in (tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE, tarfile.XGLTYPE):
            body = f.read(length)
            if info.type == tarfile.GNUTYPE_LONGNAME:
                ext["path"] = body.rstrip(b"\0").decode("utf-8", "surrogateescape")
            elif info.type == tarfile.XHDTYPE:
                ext.update(_pax(body, where))
            pos = data + length + _pad(length)
            continue
        name = ext.pop("path", info.name)
        ext.clear()
        if info.type not in _REGULAR and info.type != tarfile.DIRTYPE:
            what = _WHAT.get(info.type, f"member of type {info.type!r}")
            raise CodecIOError(f"{where}: member {name!r} is a {what}; only files are read")
        _check_name(name, where)
        if info.type != tarfile.DIRTYPE:
            yield Member(name, pos, data, length)
        pos = data + length + _pad(length)
    if pos != size:  # ends inside a header or a member's padding (no end-of-archive blocks)
        raise CodecIOError(f"{path}: truncated tar (ends at byte {size}, inside a member)")

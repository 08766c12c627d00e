"""The fast tar member index (dstore.codecs.webdataset.tar_index) against tarfile's walk."""

from __future__ import annotations

import glob
import io
import os
import tarfile

import numpy as np
import pytest

import dstore
from dstore.codecs.webdataset.reader import walk
from dstore.codecs.webdataset.tar_index import BLOCK, simple_members


def _both(path: str):
    """(simple_members, tarfile's members) of one tar, as (name, offset, data offset, size)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        simple = simple_members(f, size)
        f.seek(0)
        slow = [(m.name, m.offset, m.offset_data, m.size) for m in walk(f, path, size)]
    return None if simple is None else [tuple(m) for m in simple], slow


def test_dstore_tars_are_indexed_as_tarfile_indexes_them(tmp_path, tiles):
    x, y = tiles
    path = str(tmp_path / "d.wds")
    dstore.save({"x": x, "y": y.argmax(1), "name": [f"tile {i}" for i in range(len(x))]}, path)
    shards = sorted(glob.glob(os.path.join(path, "*.tar")))
    assert shards
    for shard in shards:
        simple, slow = _both(shard)
        assert simple == slow and len(slow) == 3 * len(x)


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("stem", ["k", "sub/dir/k", "d" * 60 + "/" + "k" * 60])
def test_plain_headers_match_tarfile_and_the_rest_is_left_to_it(tmp_path, fmt, stem):
    """Directories, ustar's name prefix (a 127-byte name in USTAR) and empty members are
    read as tarfile reads them; a GNU long-name or PAX header makes the index answer
    None (tarfile then walks the tar), and the dataset reads the same either way."""
    path = str(tmp_path / "t.tar")
    with tarfile.open(path, "w", format=fmt) as tf:
        folder = tarfile.TarInfo("sub")
        folder.type = tarfile.DIRTYPE
        tf.addfile(folder)
        for i in range(3):
            for ext, data in (("txt", b"" if i == 1 else f"text {i}".encode()), ("cls", b"7")):
                info = tarfile.TarInfo(f"{stem}{i}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    simple, slow = _both(path)
    if len(stem) > 100 and fmt != tarfile.USTAR_FORMAT:
        assert simple is None  # a long-name header: tarfile's walk reads it
    else:
        assert simple == slow
        assert len(slow) == 6
    with dstore.open(path) as ds:
        assert ds["data"]["cls"][:].tolist() == [7, 7, 7]
        assert [ds["data"]["txt"][i] for i in range(3)] == ["text 0", "", "text 2"]


def test_a_bad_checksum_or_a_cut_tar_is_left_to_tarfile(tmp_path):
    path = str(tmp_path / "t.tar")
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(2):
            info = tarfile.TarInfo(f"{i}.cls")
            info.size = 1
            tf.addfile(info, io.BytesIO(b"1"))
    with open(path, "rb") as f:
        data = bytearray(f.read())
    bad = bytearray(data)
    bad[512 * 2 + 10] ^= 0x01  # the second header's name: its checksum no longer holds
    for blob in (bytes(bad), bytes(data[: 512 * 2 + 100])):
        with io.BytesIO(blob) as f:
            assert simple_members(f, len(blob)) is None
    with io.BytesIO(bytes(data)) as f:
        found = simple_members(f, len(data))
    assert found is not None and [m.name for m in found] == ["0.cls", "1.cls"]
    assert np.diff([m.offset for m in found]).tolist() == [1024]


def _header(name: bytes, size_field: bytes, mtime: bytes = b"00000000000\0") -> bytes:
    """A ustar header written byte by byte (tarfile cannot write the fields below)."""
    head = bytearray(BLOCK)
    head[0 : len(name)] = name
    head[100:124] = b"0000644\0" + b"0000000\0" * 2
    head[124:136] = size_field.ljust(12, b"\0")
    head[136:148] = mtime
    head[148:156] = b" " * 8
    head[156:157] = b"0"
    head[257:265] = b"ustar\x0000"
    head[148:156] = b"%06o\0 " % sum(head)
    return bytes(head)


def _file(name: bytes, data: bytes) -> bytes:
    return _header(name, b"%011o\0" % len(data)) + data + bytes(-len(data) % BLOCK)


@pytest.mark.parametrize(
    "blob",
    [
        # '-0000000001': the next header sits where this member's data would start; the
        # member read as b"" (an empty caption returned as data)
        _file(b"k0.cls", b"1")
        + _header(b"k0.txt", b"-0000000001\0")
        + _file(b"k1.cls", b"2")
        + _file(b"k1.txt", b"bye"),
        # '-1000' (-512 bytes): the header is read again, for ever (memory without bound)
        _file(b"k0.cls", b"1") + _header(b"k1.cls", b"-1000\0"),
        # '-2000' (-1024): back to the first header, and round again
        _header(b"k0.cls", b"0\0") + _header(b"k1.cls", b"-2000\0"),
    ],
    ids=["minus-1", "minus-512", "minus-1024"],
)
def test_a_negative_size_is_refused_by_name(tmp_path, blob):
    """Octal digits may carry a sign ('-1' parses with int(..., 8), in tarfile too): a
    member of negative size is one error naming the file and member, never read as an
    empty member nor walked in a loop."""
    path = str(tmp_path / "t.tar")
    with open(path, "wb") as f:
        f.write(blob + bytes(2 * BLOCK))
    with open(path, "rb") as f:
        assert simple_members(f, os.path.getsize(path)) is None
    with pytest.raises(
        dstore.CodecIOError, match=r"t\.tar: byte \d+: member 'k[01]\.(txt|cls)'.*negative"
    ):
        dstore.open(path)


@pytest.mark.parametrize("field", [slice(100, 108), slice(136, 148), slice(329, 337)])
def test_a_header_tarfile_refuses_is_refused_by_the_index_too(tmp_path, field):
    """A mode, mtime or device number that is no number: tarfile refuses the header, so
    the index leaves it to tarfile (before, the same tar read through the index, and was
    refused once another member had a long name)."""
    blob = bytearray(_file(b"k0.cls", b"1") + _file(b"k1.cls", b"2") + bytes(2 * BLOCK))
    head = bytearray(blob[BLOCK * 2 : BLOCK * 3])
    head[field] = b"zz".ljust(field.stop - field.start, b"\0")
    head[148:156] = b" " * 8
    head[148:156] = b"%06o\0 " % sum(head)
    blob[BLOCK * 2 : BLOCK * 3] = head
    path = str(tmp_path / "t.tar")
    with open(path, "wb") as f:
        f.write(blob)
    with open(path, "rb") as f:
        assert simple_members(f, len(blob)) is None
    with pytest.raises(dstore.CodecIOError, match=r"t\.tar: byte 1024: not a tar header"):
        dstore.open(path)

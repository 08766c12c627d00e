"""A deflated npz only streams (a member's record *i* is reached by inflating all before
it); the same archive with its members stored is memory-mapped at any record. For a
reader that needs single records at random (a global shuffle), :func:`stored_copy`
writes that archive once: every member inflated as it is copied (zipfile checks its
CRC-32), the zip comment (dstore's schema) kept, so it reads as the same dataset."""

from __future__ import annotations

import os
import shutil
import zipfile

from ... import fs
from ...errors import CodecIOError
from .options import _COPY_CHUNK, _ZIP_ERRORS

__all__ = ["stored_copy"]


def stored_copy(path: str, folder: str) -> str:
    """``path``'s npz with every member stored, written in ``folder`` (which the caller
    owns); its path. Free space is checked first: the copy is the members' full size."""
    from ...output import check_room

    dst = os.path.join(folder, os.path.basename(path.rstrip("/")) or "data.npz")
    try:
        with fs.open_binary(path) as f, zipfile.ZipFile(f) as src:
            infos = src.infolist()
            need = sum(i.file_size + 128 + len(i.filename) for i in infos) + len(src.comment)
            check_room(path, folder, need, "its members once inflated, for random access")
            with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED, allowZip64=True) as out:
                for info in infos:
                    entry = zipfile.ZipInfo(info.filename, info.date_time)
                    with src.open(info) as r, out.open(entry, "w", force_zip64=True) as w:
                        shutil.copyfileobj(r, w, _COPY_CHUNK)
                out.comment = src.comment
    except CodecIOError:
        raise
    except _ZIP_ERRORS as e:
        raise CodecIOError(f"{path}: cannot inflate its members: {e}") from None
    return dst

"""A random-access copy of a dataset that only streams, owned by the reader that made it.

A deflated npz (dstore's default) is read front to back; a global shuffle, or a
map-style dataset, reads single records at random. Its codec makes a copy that does
(:meth:`dstore.abc.Codec.random_access_copy`: the npz with its members stored) once,
in a folder this object creates under the system's temporary folder and removes when
it is closed, garbage-collected or the process ends. It says so on stderr once (the
``dstore`` logger): the copy takes the dataset's full, inflated size.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import weakref

from ..output import fmt_bytes
from ..registry import get_codec_class

__all__ = ["RandomAccessCopy"]

_log = logging.getLogger("dstore")


class RandomAccessCopy:
    """The copy of ``path`` (format ``format``) that ``what`` reads; :attr:`path` is None
    when the format makes none."""

    def __init__(self, path: str, format: str, what: str) -> None:
        self.folder = tempfile.mkdtemp(prefix="dstore-random-access-")
        self._remove = weakref.finalize(self, shutil.rmtree, self.folder, True)
        try:
            self.path = get_codec_class(format).random_access_copy(path, self.folder)
        except BaseException:
            self.close()
            raise
        if self.path is None:
            self.close()
            return
        size = sum(
            os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(self.folder) for f in fs
        )
        _log.warning(
            "%s only streams (a %s read in order); for %s, a copy that reads any record "
            "was written once to %s (%s), removed when the dataset is closed",
            path,
            format,
            what,
            self.folder,
            fmt_bytes(size),
        )

    def close(self) -> None:
        """Remove the copy (only the folder this object created)."""
        self._remove()

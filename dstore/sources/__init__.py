"""Where a conversion's records come from: a path, URL, glob, folder or ``@list`` opened as
a reader, and the reader wrappers that sit between a format's reader and its users.

- :mod:`~dstore.sources.opening`: from a path (or URL) and an optional format name
  to a codec and an open reader (:func:`open_reader`, :func:`open_source`);
- :mod:`~dstore.sources.many_files`: many files read as one dataset (globs,
  folders, ``@list``), the files named in a source field;
- reader wrappers, each a :class:`~dstore.abc.Reader` over another:
  :mod:`~dstore.sources.decoded_images` (encoded images as pixels),
  :mod:`~dstore.sources.logical` (lossy-stored fields as their values),
  :mod:`~dstore.sources.drop` (fields left out), and
  :mod:`~dstore.sources.memory` (in-memory arrays, what ``save`` writes from).
  Layouts (:mod:`dstore.layouts`) are the one wrapper kept in a package of its own:
  they are plug-ins with entry points.

Below :mod:`dstore.api` and :mod:`dstore.engine.run` (a Dask worker writing a
shard opens its source itself), above the formats: imports point down only.
"""

from __future__ import annotations

from .opening import check_local_input, codec_for, open_reader, open_source, size_or_zero

__all__ = ["check_local_input", "codec_for", "open_reader", "open_source", "size_or_zero"]

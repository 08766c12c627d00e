"""The exception tree of dstore.

Every error a user can cause derives from :class:`DstoreError` (the CLI prints
those as one line and exits non-zero) and from the matching built-in error, so
``except ValueError`` keeps working for callers who do not know dstore.
"""

from __future__ import annotations

import functools
from typing import Any

from ._dist import install_hint

__all__ = [
    "AppendConflictError",
    "AppendError",
    "CodecIOError",
    "DstoreError",
    "DtypePolicyError",
    "LabelError",
    "MissingDependencyError",
    "OldOutputLeftError",
    "OptionError",
    "OutputExistsError",
    "ReaderStateError",
    "ResumableInterrupt",
    "SchemaError",
    "UnknownCodecError",
    "UnsafeInputError",
    "UnsafePathError",
    "UnsupportedDtypeError",
    "UsageError",
    "VersionError",
]


class DstoreError(Exception):
    """Base of every error dstore raises on purpose."""


class UnknownCodecError(DstoreError, ValueError):
    """No registered codec has this name or claims this path."""

    def __init__(self, name: str, available: list[str], what: str | None = None) -> None:
        self.name = name
        self.available = available
        what = what or f"unknown format {name!r}"
        super().__init__(f"{what}; available: {', '.join(available)}")


class MissingDependencyError(DstoreError, ImportError):
    """A codec's optional dependency is not installed.

    ``extra`` is the extra of dstore that installs it; None when none does (an
    fsspec protocol such as ``gs://``), and ``missing`` then says what to install.
    ``what`` names the feature that needs it when that is not a format.
    """

    def __init__(
        self, codec: str, extra: str | None, missing: str, *, what: str | None = None
    ) -> None:
        self.codec = codec
        self.extra = extra
        self.missing = missing
        if extra is None:
            super().__init__(f"{codec}: {missing}")
        else:
            super().__init__(
                f"{what or f'the {codec} format'} needs {missing!r}, which is not installed: "
                f"{install_hint(extra)}"
            )


class SchemaError(DstoreError, ValueError):
    """Data does not fit the dataset model (ragged record counts, bad keys, ...)."""


class LabelError(SchemaError):
    """Labels the accuracy probe of ``dstore bench`` cannot use: their shape fits no probe
    (class ids, one-hot, boxes, masks) or their values cannot be learnt (one class only)."""


class UnsafePathError(DstoreError, ValueError):
    """A path built from names in the data would leave the destination (refused before writing)."""


class UnsafeInputError(DstoreError, ValueError):
    """Reading the input would read another file: an HDF5 external link or virtual
    dataset, a zarr file or folder linked out of the store, a glob's folder link.

    Refused before a byte is written unless the caller allowed links
    (``follow_links=True``; the command line says ``--follow-links``). ``hint=False`` for what no option allows (a virtual
    dataset whose source file is missing would read as fill values)."""

    def __init__(self, message: str, *, hint: bool = True) -> None:
        super().__init__(message + ("; refused (follow_links=True reads it)" if hint else ""))
        self._parts = (message, hint)

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from the message and the hint flag: from its args (the message with
        # the hint) a worker process's error came back with the hint twice
        message, hint = self._parts
        return (functools.partial(type(self), hint=hint), (message,))


class UnsupportedDtypeError(SchemaError):
    """A codec cannot store a field's dtype or shape."""


class DtypePolicyError(DstoreError, ValueError):
    """A lossy cast was refused (overflow to inf, unknown policy)."""


class UsageError(DstoreError, ValueError):
    """An argument that cannot work: a malformed ``MODULE:FUNCTION``, a report name, ..."""


class OptionError(UsageError):
    """A codec option (``-o KEY=VALUE``) that is unknown, unreadable or out of range."""


class ReaderStateError(UsageError):
    """A training reader's state (``load_state_dict``) that is malformed, impossible, or
    of another dataset, split, seed or shuffle than the reader it is loaded into."""


class CodecIOError(DstoreError, OSError):
    """Reading or writing a file failed: corrupt, truncated or not the expected format."""


class OutputExistsError(DstoreError, FileExistsError):
    """The destination exists (and ``overwrite`` was not given), is the input, or
    is not an output of the target format (so ``overwrite`` may not replace it).

    The message names the library's ``overwrite=True``; the command line says
    ``--overwrite`` (:mod:`dstore.cli.words`)."""


class AppendError(DstoreError, ValueError):
    """Records that cannot be appended to a dataset as asked: their schema disagrees
    with the dataset's after its dtype policy, a setting conflicts with the dataset's
    own, or the source is already in the dataset's history (``append_again=True``
    appends it again). Nothing was written."""


class AppendConflictError(DstoreError, FileExistsError):
    """Another writer committed a version (or holds the claim to the next one) of the
    dataset this append was writing: nothing of this append was kept, and running it
    again appends after the other one."""


class VersionError(DstoreError, LookupError):
    """A version of a dataset that does not exist, was pruned, or was replaced by a
    rewrite (npz, HDF5, JSON keep their latest version only)."""


class OldOutputLeftError(CodecIOError):
    """The new output is complete and in place, but the old one (or a leftover of
    an earlier run) could not be deleted entirely: it is left at ``left``."""

    def __init__(self, message: str, *, output: str, left: str) -> None:
        super().__init__(message)
        self.output = output
        self.left = left


class Terminated(KeyboardInterrupt):
    """SIGTERM (systemd, ``timeout``, Kubernetes) received by the ``dstore`` command,
    which raises it to be handled as Ctrl-C is: the output is removed at once."""


class ResumableInterrupt(KeyboardInterrupt):
    """Ctrl-C during a sharded write: finished shards are kept for ``--resume``."""

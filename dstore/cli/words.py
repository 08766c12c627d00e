"""The library's words in an error, said as the command line's flags.

The library speaks its own keywords (``overwrite=True``, ``resume=True``,
``follow_links=True``...) to a library caller; this table is the one place that
says which flag sets each, so ``dstore`` prints ``--overwrite`` where
``dstore.convert`` says ``overwrite=True``. A message with none of them passes
through unchanged.
"""

from __future__ import annotations

import re

__all__ = ["FLAGS", "cli_words"]

#: a keyword as the library's messages write it -> the flag that sets it
FLAGS: dict[str, str] = {
    "pass overwrite='foreign'": "use --overwrite-foreign",
    "pass overwrite=True": "use --overwrite",
    "overwrite='foreign'": "--overwrite-foreign",
    "overwrite=True": "--overwrite",
    "resume=True": "--resume",
    "pass append_again=True": "use --append-again",
    "append_again=True": "--append-again",
    "append=True": "--append",
    "leave dtype out": "leave --dtype out",
    "on_overflow='clip'": "--on-overflow clip",
    "keep_encoded=True": "--keep-encoded",
    "follow_links=True": "--follow-links",
    "shuffle_seed=": "--shuffle-seed",
    "a Dask client=": "--scheduler",
    "writing one file per source": "--per-source",
    "to=/from_format=": "--to/--from",
    "from_format=": "--from",
    "to=": "--to",
    "pass out=FILE": "use --out FILE",
}

# longest first: "pass overwrite=True" before "overwrite=True"
_KEYWORDS = re.compile("|".join(re.escape(k) for k in sorted(FLAGS, key=len, reverse=True)))
#: "leave it out with drop='meta'" (a source option) -> "... with --drop meta"
_LEAVE_OUT = re.compile(r"(?<=out with )(?:drop='[^']*'(?: |$|(?=\W)))+")
_DROP = re.compile(r"drop='([^']*)'")


def cli_words(message: str) -> str:
    """``message`` with the library's keywords replaced by their flags."""
    message = _LEAVE_OUT.sub(lambda m: _DROP.sub(r"--drop \1", m.group(0)), message)
    return _KEYWORDS.sub(lambda m: FLAGS[m.group(0)], message)

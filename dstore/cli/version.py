"""``dstore --version``: dstore's, Python's and each format library's versions, with the
extras that install them (:func:`dstore._dist.version_report`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["VersionAction"]


class VersionAction(argparse.Action):
    """``--version``: computed only when asked (it reads installed packages' metadata)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from .._dist import version_report

        print("\n".join(version_report()))
        parser.exit()

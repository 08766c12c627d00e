"""Flags several subcommands share: ``--drop`` and ``--follow-links``."""

from __future__ import annotations

import argparse

__all__ = ["_add_drop", "_add_follow_links", "_drop_options"]


def _drop_options(args: argparse.Namespace) -> dict[str, str]:
    """``--drop KEY``: the reading codec leaves those keys out (npz's ``drop`` option)."""
    return {"drop": ",".join(args.drop)} if getattr(args, "drop", None) else {}


def _add_drop(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--drop",
        action="append",
        metavar="KEY",
        help="leave key KEY of the input out, repeatable: a member whose record count does not "
        "line up with the others (pyspacer's npz 'meta'), a 0-d member; other formats: a "
        "field name, or SPLIT/FIELD (default: keep all)",
    )


def _add_follow_links(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--follow-links",
        action="store_true",
        help="read what links lead to outside the input: HDF5 external links and virtual "
        "datasets, files or folders symlinked out of a zarr store or a folder of shards, "
        "files linked out of a glob's or folder's own folder, folder links in a glob or folder "
        "of sources (default: refuse them, naming the link)",
    )

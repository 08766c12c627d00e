"""What the subcommands share: exit codes, progress bars, ``KEY=VALUE`` options, the
``--drop``/``--follow-links``/``--from`` arguments, and help texts that list the
registered formats only when help is printed."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import DstoreError

EXIT_ERROR = 2
EXIT_MISMATCH = 1
EXIT_INTERRUPTED = 130
#: 128 + SIGTERM, as a shell reports a process that SIGTERM ended.
EXIT_TERMINATED = 143
#: 128 + SIGPIPE, as coreutils exit when the reader of their output goes away (``| head``).
EXIT_BROKEN_PIPE = 141


def key_values(pairs: Sequence[str] | None) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


class ProgressBar:
    """A tqdm bar on a terminal, created on the first batch (when the total is known)."""

    def __init__(self, desc: str, unit: str = "rec") -> None:
        self.desc = desc
        self.unit = unit
        self.bar: Any = None

    def __call__(self, n: int, total: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, desc=self.desc, unit=self.unit, unit_scale=True, leave=False
            )
        self.bar.update(n)
        if self.bar.n >= total:  # done: off the terminal before the next bar (scan, convert)
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@contextlib.contextmanager
def bars(*specs: tuple[str, str]) -> Iterator[list[ProgressBar | None]]:
    """One :class:`ProgressBar` per ``(desc, unit)`` when stderr is a terminal (else None:
    a log file gets no bar), all closed at the end, error or not."""
    bars = [ProgressBar(desc, unit) if sys.stderr.isatty() else None for desc, unit in specs]
    try:
        yield bars
    finally:
        for bar in bars:
            if bar is not None:
                bar.close()


def drop_options(args: argparse.Namespace) -> dict[str, str]:
    """``--drop KEY``: the reading codec leaves those keys out (npz's ``drop`` option)."""
    return {"drop": ",".join(args.drop)} if getattr(args, "drop", None) else {}


def add_drop(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--drop",
        action="append",
        metavar="KEY",
        help="leave key KEY of the input out, repeatable: a member whose record count does not "
        "line up with the others (pyspacer's npz 'meta'), a 0-d member; other formats: a "
        "field name, or SPLIT/FIELD (default: keep all)",
    )


def add_follow_links(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--follow-links",
        action="store_true",
        help="read what links lead to outside the input: HDF5 external links and virtual "
        "datasets, files or folders symlinked out of a zarr store or a folder of shards, "
        "files linked out of a glob's or folder's own folder, folder links in a glob or folder "
        "of sources (default: refuse them, naming the link)",
    )


def print_lines(lines: Sequence[str]) -> None:
    """Report lines, each printed as one line with nothing a terminal acts on: names
    are quoted where the reports print them, and this catches any a codec's own
    details (``describe()``) print raw."""
    from ..model.names import printable

    print("\n".join(printable(line) for line in lines))


class HelpList:
    """A list of names put into a help string by argparse's ``%(name)s`` when help is
    printed, not when the parser is built: the registries load entry points (and, for
    what a format can do, its codec module), which ``dstore info x.npz`` never needs."""

    def __init__(self, make: Callable[[], list[str]]) -> None:
        self.make = make

    def __str__(self) -> str:
        return ", ".join(self.make())


def codec_names() -> list[str]:
    from ..registry import codec_names

    return codec_names()


def codecs_where(flag: str) -> list[str]:
    """The formats whose codec class sets ``flag`` (``sharded``, ``keeps_encoded_images``);
    a format whose extra is missing cannot say, and is left out."""
    from ..registry import get_codec_class

    out = []
    for name in codec_names():
        try:
            if getattr(get_codec_class(name), flag, False):
                out.append(name)
        except (DstoreError, ImportError):
            continue
    return out


def layout_names() -> list[str]:
    from ..layouts import layout_names

    return layout_names()


def fill_help(action: argparse.Action, **lists: Callable[[], list[str]]) -> argparse.Action:
    """Give ``action`` the attributes its help's ``%(name)s`` placeholders name (argparse
    fills them from the action's own attributes)."""
    for key, make in lists.items():
        setattr(action, key, HelpList(make))
    return action


def with_lazy_epilog(parser: argparse.ArgumentParser, make: Callable[[], str]) -> None:
    """Build ``parser``'s epilog only when help is printed (it imports every codec)."""
    plain = parser.format_help

    def format_help() -> str:
        parser.epilog = make()
        return plain()

    # argparse has no hook for a lazy epilog: the instance's bound method is replaced
    parser.format_help = format_help  # type: ignore[method-assign]


def from_argument(p: argparse.ArgumentParser, help: str, *aliases: str) -> None:
    """``--from FORMAT`` (and ``aliases``), its help listing the registered formats."""
    action = p.add_argument("--from", *aliases, dest="from_format", metavar="FORMAT", help=help)
    fill_help(action, formats=codec_names)

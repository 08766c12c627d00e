"""The ``dstore`` command: argument parsing and printing only; the work is in the library.

Errors are one line on stderr (``TypeName: message``) and a non-zero exit
code; ``--debug`` shows the traceback instead. Ctrl-C exits 130, SIGTERM
(systemd, ``timeout``, Kubernetes) is handled the same way and exits 143; a
reader that goes away (``dstore info x.npz | head -1``) ends the command
quietly with 141.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Sequence

from ..errors import DstoreError
from .bench import add_bench
from .card import add_card
from .check import add_check_command
from .common import EXIT_BROKEN_PIPE, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED
from .compact import add_compact, add_prune
from .convert import add_convert
from .demo import add_demo
from .descriptions import describe_commands
from .exits import SigtermAsInterrupt, error_line, memory_error_line, warning_line
from .formats import add_formats
from .globs import expanded_glob
from .index import add_index
from .info import add_info
from .log import add_log
from .verify import add_verify
from .version import VersionAction
from .words import cli_words

# The library (numpy and up) is imported by the commands that use it, not here: `dstore
# --help` and `--version` then start in the time Python itself takes (see docs/benchmarks.md, Start-up).

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dstore",
        description="Move ML datasets between formats ('dstore formats' lists them); "
        "measure the cost.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (default: one line)"
    )
    parser.add_argument(
        "--version",
        action=VersionAction,
        help="print the versions of dstore, Python and each format's library (with its extra)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    add_convert(sub)

    add_info(sub)

    add_index(sub)

    add_verify(sub)

    add_check_command(sub)

    add_card(sub)

    add_bench(sub)

    add_formats(sub)

    add_log(sub)
    add_compact(sub)
    add_prune(sub)
    add_demo(sub)

    describe_commands(sub.choices)
    for command in sub.choices.values():
        # after the command as well as before it: `dstore convert a b --debug` is how the
        # flag is typed when re-running a failed command
        command.add_argument(
            "--debug",
            dest="debug_after",
            action="store_true",
            help="show the traceback of an error, as --debug before the command does "
            "(default: one line)",
        )
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, with one line of advice for an unquoted glob."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        message = expanded_glob(parser, args, extra)
        if message is not None:
            parser.exit(EXIT_ERROR, message + "\n")
        parser.error(f"unrecognized arguments: {' '.join(extra)}")  # as parse_args says it
    args.debug = args.debug or getattr(args, "debug_after", False)
    return args


def _run(argv: Sequence[str] | None) -> int:
    args = _parse(build_parser(), argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING, format="%(message)s"
    )
    try:
        return int(args.func(args))
    except KeyboardInterrupt as e:
        print(cli_words(str(e)) or "interrupted: no output was left behind", file=sys.stderr)
        return EXIT_TERMINATED if _sigterm.received else EXIT_INTERRUPTED
    except BrokenPipeError:
        raise  # the reader of our output went away: main() ends quietly
    except MemoryError as e:  # numpy's _ArrayMemoryError among them: one line, not a traceback
        if args.debug:
            raise
        print(memory_error_line(args, e), file=sys.stderr)
        return EXIT_ERROR
    except (DstoreError, ValueError, OSError, argparse.ArgumentTypeError) as e:
        if args.debug:
            raise
        print(error_line(args, e), file=sys.stderr)
        return EXIT_ERROR


_sigterm = SigtermAsInterrupt()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            with _sigterm, warnings.catch_warnings():
                warnings.showwarning = warning_line
                # shown, whatever filters the caller set (pytest's "error", say): an old
                # option name must not fail a conversion
                warnings.filterwarnings("default", category=FutureWarning)
                return _run(argv)
        finally:  # also after --help's SystemExit
            # Flush here so that a reader which left (``| head -1``) shows up now, not as
            # "Exception ignored ... BrokenPipeError" when the interpreter exits.
            sys.stdout.flush()
    except BrokenPipeError:
        # The documented pattern: point stdout at devnull so the flush at exit is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE

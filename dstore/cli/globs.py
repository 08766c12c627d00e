"""The advice ``dstore`` gives when the shell expanded an unquoted glob into many paths."""

from __future__ import annotations

import argparse
import os

__all__ = ["expanded_glob"]


def command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise LookupError(name)  # build_parser always adds the subcommands


def expanded_glob(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]
) -> str | None:
    """The one-line error for positional arguments beyond those the command takes when
    they are existing files (a glob the shell expanded: ``feats/*.json`` unquoted), else
    None. The last one may be a new output (``convert feats/*.json out.npz``)."""
    if not extra or any(e.startswith("-") for e in extra):
        return None
    command = command_parser(parser, args.command)
    wanted = [a for a in command._actions if not a.option_strings]
    given = [getattr(args, a.dest) for a in wanted if isinstance(getattr(args, a.dest), str)]
    names = [*given, *extra]
    files = [n for n in names if os.path.exists(n)]
    # a glob gives two existing paths at least; one path and a stray word is argparse's
    if len(files) < max(2, len(names) - 1) or not os.path.exists(names[0]):
        return None
    takes = " ".join(str(a.metavar or a.dest).upper() for a in wanted)
    # the glob's files share the first one's folder and extension; an existing output
    # (convert's DST, out.npz from an earlier run) does not
    folder, ext = os.path.dirname(files[0]), os.path.splitext(files[0])[1]
    matched = [f for f in files if os.path.dirname(f) == folder and f.endswith(ext)]
    pattern = os.path.join(folder, "*" + ext) if len(matched) > 1 else None
    quote = f', e.g. "{pattern}"' if pattern else ""
    return (
        f"{command.prog}: error: {len(names)} paths where it takes {takes} ({files[0]}, "
        f"{files[1]}, ... {len(matched)} existing files): did the shell expand a glob? "
        f"quote it{quote}"
    )

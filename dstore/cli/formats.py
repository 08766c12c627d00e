"""``dstore formats``: every registered format, whether it is usable, its ``-o`` options,
and the training layouts (also the epilog of ``dstore convert --help``)."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import DstoreError

__all__ = ["add_formats", "cmd_formats", "formats_text"]


def add_formats(sub: Any) -> None:
    """Add ``dstore formats`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "formats", help="registered formats, whether each is usable, and their -o options"
    )
    p.set_defaults(func=cmd_formats)


def option_lines(name: str) -> list[str]:
    """The ``-o KEY=VALUE`` options of codec ``name``: key, default and what it does."""
    from ..registry import get_codec_class

    try:
        options = get_codec_class(name).Options
    except (
        DstoreError,
        ImportError,
    ) as e:  # a codec whose extra is missing: say so instead of its keys
        return [f"    (options unknown: {str(e).splitlines()[0]})"]
    return dataclass_option_lines(options)


def dataclass_option_lines(options: Any) -> list[str]:
    import dataclasses

    from ..options import option_help

    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        return ["    (no -o options)"]
    # the keys, their defaults and help come from the codec's option dataclass
    keys = [(f"-o {key}={shown}", text) for key, shown, text in option_help(options)]
    width = max((len(k) for k, _ in keys), default=0)
    return [f"    {k:<{width}}  {h}".rstrip() for k, h in keys]


def formats_text() -> str:
    from ..registry import available_codecs, get_codec_class, registry

    out = []
    codecs = available_codecs()
    width = max(10, *map(len, codecs))  # names line up whatever a codec is called
    for name, hint in codecs.items():
        exts = " ".join(registry[name].extensions)
        state = "usable" if hint is None else f"not installed: {hint}"
        if hint is None and get_codec_class(name).sharded:
            state += ", sharded (--resume, Dask)"
        elif hint is None and get_codec_class(name).region_writes:
            state += ", Dask (chunk regions)"
        out.append(f"{name:<{width}} {exts:<32} {state}")
        out.extend(option_lines(name))
    out.extend(layout_lines())
    return "\n".join(out)


def layout_lines() -> list[str]:
    """``--layout`` names with what they write, and their ``-o`` options."""
    from ..layouts import get_layout_class, layout_names

    out = ["layouts (convert --layout NAME; the same NAME maps such files back):"]
    for name in layout_names():
        try:
            cls = get_layout_class(name)
        except (DstoreError, ImportError) as e:
            out.append(f"  {name:<22} (cannot load: {str(e).splitlines()[0]})")
            continue
        out.append(f"  {name:<22} {cls.help}")
        out.extend(dataclass_option_lines(cls.Options))
    return out


def cmd_formats(args: argparse.Namespace) -> int:
    print(formats_text())
    return 0

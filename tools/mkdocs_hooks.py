"""MkDocs hook: the CLI reference is rendered from dstore's argparse parser at build time.

``docs/cli.md`` holds the marker below; each build replaces it with the help of
``dstore`` and of every subcommand, as ``dstore.cli.build_parser()`` prints it,
so the page can never drift from the code. ``mkdocs.yml`` names this file
under ``hooks:``; ``tests/test_docs.py`` checks the rendering.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

MARKER = "<!-- cli-reference -->"
#: The width help is wrapped at, whatever terminal the build runs in.
COLUMNS = "100"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _block(title: str, anchor: str, text: str) -> list[str]:
    return [f"## `{title}` {{#{anchor}}}", "", "```text", text.rstrip(), "```", ""]


def render() -> str:
    """Markdown for the help of ``dstore`` and each subcommand, in the parser's order."""
    from dstore.cli import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS  # argparse wraps at the terminal's width
    try:
        parser = build_parser()
        out = _block("dstore", "dstore", parser.format_help())
        for name, sub in _subcommands(parser).items():
            out += _block(f"dstore {name}", name, sub.format_help())
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, render())
    return markdown

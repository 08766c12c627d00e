"""Griffe extension for the API reference: docstring doctests (``>>>`` lines and their
output) become fenced ``pycon`` blocks, so Markdown does not read ``ds["train"]["x"]``
as a link. The docstrings stay plain doctests; ``mkdocs.yml`` loads this file."""

from __future__ import annotations

from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    out: list[str] = []
    block: list[str] = []
    indent = ""
    for line in [*text.split("\n"), ""]:
        stripped = line.lstrip()
        if not block and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
        if stripped.startswith(">>>") or (block and stripped):
            block.append(line[len(indent) :] if line.startswith(indent) else stripped)
            continue
        if block:  # a blank line ends the example
            out += [f"{indent}```pycon", *(indent + b for b in block), f"{indent}```"]
            block = []
        out.append(line)
    return "\n".join(out[:-1])


class FenceDoctests(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)

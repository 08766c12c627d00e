"""Griffe extension for the API reference: Sphinx cross-reference roles in docstrings
(``:class:`~dstore.errors.UnsafeInputError```, ``:func:`dstore.to_torch```, ``:mod:`.grid```)
become Markdown code spans (``UnsafeInputError``, ``dstore.to_torch``, ``grid``), as Sphinx
shows them, instead of reaching the page as raw text. The docstrings keep their roles
(``help()`` and editors read them); ``mkdocs.yml`` loads this file."""

from __future__ import annotations

import re
from typing import Any

import griffe

#: ``:role:`target``` for the Python domain's roles, with or without ``py:``.
ROLE = re.compile(r":(?:py:)?(?:class|mod|meth|func|data|attr|exc|obj|const):`([^`]+)`")


def _shown(target: str) -> str:
    """What Sphinx shows for a role's target: ``~a.b.C`` -> ``C``; ``.grid`` -> ``grid``;
    an explicit title (``title <a.b>``) -> the title."""
    titled = re.fullmatch(r"(.+?)\s*<[^>]+>", target)
    if titled:
        return titled.group(1)
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target.lstrip(".")


def roles_as_code(text: str) -> str:
    return ROLE.sub(lambda m: f"`{_shown(m.group(1))}`", text)


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = roles_as_code(obj.docstring.value)

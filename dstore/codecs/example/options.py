"""The ``-o`` options every format that stores ``tf.train.Example`` records takes
(TFRecord, ArrayRecord), declared once here."""

from __future__ import annotations

from typing import Any

from ...options import option

__all__ = ["example_images_option", "feature_rename_option"]


def example_images_option() -> Any:
    """The ``images`` field: which fields are stored as PNG in the Example."""
    return option(
        None, "comma-separated fields stored as PNG; auto = image-like fields; none", none="auto"
    )


def feature_rename_option() -> Any:
    """The ``rename`` field: feature names in the Example (option() gives each instance its
    own copy of the mutable default)."""
    return option({}, "feature names in the Example, e.g. x=image,y=label")

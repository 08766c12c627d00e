"""One small class per way a field is stored in a ``tf.train.Example`` feature.

The way TFDS has one ``FeatureConnector`` per feature, each encoding is a class
that says what its feature holds (:attr:`ExampleEncoding.wire`), how a record
becomes the feature and back, what a record lacking it reads as, whether the
bytes read may be written again as they are, and the TensorFlow line that parses
it (:mod:`.base`). Each class registers itself in :data:`ENCODINGS` under the
name manifests store (``dstore.json``'s ``fields``), which never changes: files
written by any dstore version read with these.

=============== ============ ===============================================
name            feature      a record
=============== ============ ===============================================
``png``         bytes_list   pixels as one PNG (dstore decodes it back)
``jpeg`` ...    bytes_list   pixels as one lossy image (``webp``, ``jxl`` too)
``encoded``     bytes_list   an encoded image's bytes, passed through
``int64``       int64_list   integers and bools (uint64 as its bit pattern)
``float``       float_list   float32 numbers
``raw``         bytes_list   any other dtype's little-endian bytes
``bytes``       bytes_list   a String or Bytes record, one value
``strings``     bytes_list   a list of strings, 0..n values
``tensor``      bytes_list   ``tf.io.serialize_tensor`` bytes (read only)
``feature``     any          a serialized Feature kept as it is (Bytes)
``seq_*``       feature list one Feature per step (a SequenceExample)
=============== ============ ===============================================

The families live in :mod:`.numbers`, :mod:`.text` and :mod:`.images`; importing
this package imports them, which is what registers their encodings.
"""

from . import images, numbers, text  # noqa: F401 - each module registers its encodings
from .base import DECODE_RAW_DTYPES, ENCODINGS, ExampleEncoding, FieldEncoding

__all__ = ["DECODE_RAW_DTYPES", "ENCODINGS", "ExampleEncoding", "FieldEncoding"]

"""label-maker's arrays in the layouts TensorFlow's model libraries read.

label-maker's ``package`` step writes ``x_<split>`` uint8 tiles ``(N, H, W, 3)``
and ``y_<split>``: a one-hot class vector (classification), ``(N, max_boxes, 5)``
rows ``[xmin, ymin, xmax, ymax, class]`` in pixels, zero-padded to the largest
box count (object detection; classes count from 1, 0 is the background), or
``(N, H, W, 1)`` masks (segmentation).

* ``tf-object-detection``: the feature keys of the Object Detection API's
  ``TfExampleDecoder`` -- ``image/encoded``, ``image/format``, ``image/height``,
  ``image/width``, ``image/filename``, ``image/source_id``,
  ``image/object/bbox/{xmin,ymin,xmax,ymax}`` (normalised to [0, 1] by the
  tile's width and height), ``image/object/class/label`` and, from
  ``-o class_names=a,b``, ``image/object/class/text``.
* ``tf-segmentation``: DeepLab's ``build_data`` keys -- the image, its format
  and size, and ``image/segmentation/class/encoded`` (a PNG mask) with its format.
* ``tf-classification``: ``image`` and ``label``, the names label-maker's own
  TFRecord writer (``label_maker/tfrecords_cl.py``) gives them.

Mapping back restores the arrays exactly: boxes are padded again to the
count stored with the data, pixels come back from the normalised floats by
rounding (``float32(p / W) * W`` is within 1e-4 of ``p`` for any tile under a
million pixels wide), and the original keys, dtypes and shapes are kept in
the schema's attributes.
"""

from .classification import Classification, ClassOptions
from .detection import ObjectDetection, ODOptions
from .segmentation import Segmentation, SegOptions

__all__ = [
    "ClassOptions",
    "Classification",
    "ODOptions",
    "ObjectDetection",
    "SegOptions",
    "Segmentation",
]

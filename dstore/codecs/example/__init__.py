"""The ``tf.train.Example`` family shared by TFRecord and ArrayRecord: the protobuf wire
format written by hand (:mod:`.wire`), the field encodings (:mod:`.encodings`), how a
schema's fields become features and back (:mod:`.fields`), what a foreign file's
features are (:mod:`.infer`), tensors as ``TensorProto`` (:mod:`.tensorproto`),
lists of strings and ragged values (:mod:`.sequence`) and the TensorFlow side of
reading them (:mod:`.tf`)."""

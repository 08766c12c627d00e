"""tf.train.Example encoding: dstore's hand-written wire encoder vs the protobuf runtime.

    python benchmarks/bench_example_encoding.py

Same Examples (a 30 kB PNG-sized bytes value + a 7-value int64 label + a
384-float vector), encoded both ways; bytes must be identical up to field order.
"""

from __future__ import annotations

import time

import numpy as np

from dstore.codecs.example.wire import (
    BYTES,
    FLOAT,
    INT64,
    decode_example,
    encode_example,
    encode_feature,
)


def main(n: int = 20000) -> None:
    from tensorflow.core.example import example_pb2, feature_pb2

    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, 30000, dtype=np.uint8).tobytes()
    label = np.eye(7, dtype=np.int64)[3]
    vec = rng.standard_normal(384).astype(np.float32)

    def ours() -> bytes:
        return encode_example(
            {
                "x": encode_feature(BYTES, image),
                "y": encode_feature(INT64, label),
                "f": encode_feature(FLOAT, vec),
            }
        )

    def protobuf() -> bytes:
        return example_pb2.Example(
            features=feature_pb2.Features(
                feature={
                    "x": feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=[image])),
                    "y": feature_pb2.Feature(
                        int64_list=feature_pb2.Int64List(value=label.tolist())
                    ),
                    "f": feature_pb2.Feature(float_list=feature_pb2.FloatList(value=vec.tolist())),
                }
            )
        ).SerializeToString()

    a, b = decode_example(ours()), decode_example(protobuf())
    assert a.keys() == b.keys() and all(
        np.array_equal(np.asarray(a[k][1]), np.asarray(b[k][1])) for k in a
    )
    results = {}
    for name, fn in (("protobuf runtime", protobuf), ("dstore hand-written", ours)):
        fn()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        results[name] = n / (time.perf_counter() - t)
    base = results["protobuf runtime"]
    print("| encoder | Examples/s | speed vs protobuf |\n|---|---|---|")
    for name, rate in results.items():
        print(f"| {name} | {rate:,.0f} | {rate / base:.2f} |")


if __name__ == "__main__":
    main()

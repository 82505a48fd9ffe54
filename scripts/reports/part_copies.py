"""What one part run through the extension costs at each tensor size: a Relu on ONNX Runtime,
one thread, the median of 300 runs of `Part.run` (numpy in, numpy out).

    python3 scripts/reports/part_copies.py     # a python3 with the cleave package
"""

import statistics
import time

import numpy as np
from onnx import TensorProto, helper

from cleave import _cleave


def main():
    for mib in (0.0625, 1, 4):
        n = int(mib * 1024 * 1024 / 4)
        g = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "relu",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        part = _cleave.open_part(_cleave.load_bytes(m.SerializeToString(), "relu.onnx"), "cpu", "ort", 1)
        feeds = {"x": np.random.default_rng(0).standard_normal(n).astype(np.float32)}
        for _ in range(20):
            part.run(feeds, None, _cleave.Cancel())
        took = []
        for _ in range(300):
            t = time.perf_counter()
            part.run(feeds, None, _cleave.Cancel())
            took.append(time.perf_counter() - t)
        print(f"{mib:g} MiB: median {statistics.median(took) * 1e3:.3f} ms a run")


if __name__ == "__main__":
    main()

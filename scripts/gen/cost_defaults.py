#!/usr/bin/env python3
"""Measures the host CPU figures of crates/device/src/profiles/costs.toml on ONNX Runtime, one
thread: the overhead of one node (a chain of 201 Relu on one float against a single Relu) and
the memory bandwidth an elementwise op reaches (Relu chains over tensors past the caches).
The compute rate comes from `cleave measure MODEL --devices cpu --engine cpu=ort` on resnet50
(its Conv nodes' FLOPs over their time), the launch and copy figures from that command's probe.

Usage: python3 scripts/gen/cost_defaults.py   (needs numpy, onnx, onnxruntime)
"""
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper


def chain(n, shape, runs=50):
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(n)]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    # No fusion: each Relu runs as its own kernel.
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), o, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    for _ in range(10):
        s.run(None, {"v0": x})
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, {"v0": x})
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main():
    one, many = chain(1, [1]), chain(201, [1])
    print(f"op_us: {(many - one) / 200 * 1e6:.2f} us per node (ONNX Runtime {ort.__version__}, one thread)")
    for shape in ([1, 64, 56, 56], [1, 256, 56, 56], [1, 512, 112, 112]):
        a, b = chain(1, shape), chain(11, shape)
        per = (b - a) / 10
        moved = int(np.prod(shape)) * 4 * 2
        print(f"mem_gbps: Relu over {shape}: {per * 1e6:.0f} us, {moved / per / 1e9:.1f} GB/s read and written")


if __name__ == "__main__":
    main()

"""The models and splits scripts/reports/ray_bench.py measures (docs/figures.md, "Tensors between two nodes"):

* b4k, b1m, b16m: x[1, n] through 8 × (Mul by a scalar, Tanh), n giving a 4 KiB, 1 MiB and
  16 MiB tensor at every boundary and little compute; cut into 1 and 2 stages;
* mm: 48 MatMuls by random 256×256 weights on x[256, 256]; cut into 1, 2, 3 and 4 stages.

    python3 scripts/reports/ray_bench_models.py CLEAVE OUT_DIR

writes OUT_DIR/NAME.onnx and, per split, the folder OUT_DIR/NAME-sK (cleave partition
--stages K over cpu, npu, cpu2, npu2), the layout ray_bench.py reads.
"""
import pathlib
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEVICES = ["cpu", "npu", "cpu2", "npu2"]


def chain(n, layers, name, mm=0):
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    shape = [mm, mm] if mm else [1, n]
    for i in range(layers):
        out = "y" if i == layers - 1 else f"t{i}"
        if mm:
            w = (np.eye(mm) + 0.01 * rng.standard_normal((mm, mm))).astype(np.float32)
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [out]))
        else:
            inits.append(numpy_helper.from_array(np.array([1.0 + 0.01 * i], np.float32), f"w{i}"))
            nodes.append(helper.make_node("Mul", [prev, f"w{i}"], [f"m{i}"]))
            nodes.append(helper.make_node("Tanh", [f"m{i}"], [out]))
        prev = out
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cleave, out = sys.argv[1], pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    models = [(name, chain(n, 8, name), (1, 2)) for name, n in (("b4k", 1024), ("b1m", 262144), ("b16m", 4194304))]
    models.append(("mm", chain(0, 48, "mm", mm=256), (1, 2, 3, 4)))
    for name, m, splits in models:
        path = out / f"{name}.onnx"
        onnx.save(m, path)
        for k in splits:
            subprocess.run([cleave, "partition", str(path), "--stages", str(k), "--devices", ",".join(DEVICES[:k]),
                            "-o", str(out / f"{name}-s{k}")], check=True, stdout=subprocess.DEVNULL)
    print(f"wrote {len(models)} models and their splits to {out}")


if __name__ == "__main__":
    main()

"""Write a chain of 8 elementwise ops whose every tensor, input to output, is MIB MiB of float32:
cut into pipeline stages, each boundary is one tensor of that size and the parts compute next
to nothing, so a served deployment's latency is mostly its hops (serve_bench.sh's
CLEAVE_SERVE_BENCH_HOP_MIB).

    python3 scripts/reports/hop_model.py OUT.onnx [MIB]
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
mib = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
n = int(mib * (1 << 20)) // 4
if n < 1:
    sys.exit(f"hop_model: {mib} MiB holds no float32")
nodes, inits, prev = [], [], "x"
for i in range(8):
    c = f"c{i}"
    # Mul and Add alternate so no engine folds the chain into one op.
    inits.append(numpy_helper.from_array(np.array([1.0 + 0.01 * i], np.float32), c))
    y = "y" if i == 7 else f"t{i}"
    nodes.append(helper.make_node("Mul" if i % 2 == 0 else "Add", [prev, c], [y], name=f"op{i}"))
    prev = y
graph = helper.make_graph(
    nodes,
    "hops",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
    inits,
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
onnx.checker.check_model(model, full_check=True)
onnx.save(model, out)

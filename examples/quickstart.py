"""The README's Python example: load, partition, save, run, compare (python examples/quickstart.py)."""
import sys

import numpy as np

import cleave

model = cleave.load("examples/tiny_cnn.onnx", shape={"input": (1, 3, 16, 16)})
plan = model.partition(rules="examples/tiny_cnn.part")  # or devices=["nnapi", "cpu"]
print(plan, [p.backend for p in plan.parts])
print("wrote", plan.save(sys.argv[1] if len(sys.argv) > 1 else "out/tiny_cnn"))
x = np.random.default_rng(0).standard_normal((1, 3, 16, 16), dtype=np.float32)
got = plan.runner(engines={"npu": "onnxruntime"}).run({"input": x}, boundaries=True)
want = model.run({"input": x}, outputs=list(got))
worst = max(float(np.abs(got[k] - want[k]).max()) for k in got)
print(f"{len(got)} tensors, parts match the whole model: max abs diff {worst:.2g}")

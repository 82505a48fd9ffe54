"""Print a seeded random ONE .part file: each node of MODEL on one of BACKENDS by [OPNAME].

    python3 scripts/reports/random_part.py MODEL npu,gpu,cpu SEED > model.part
"""
import random
import sys

import onnx

model, backends, seed = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
m = onnx.load(model, load_external_data=False)
rng = random.Random(seed)
print(f"[partition]\nbackends={','.join(backends)}\ndefault={backends[-1]}\ncomply=opname\n\n[OPNAME]")
for n in m.graph.node:
    # ONE addresses a node without a name by its first output.
    label = n.name or (n.output[0] if n.output else "")
    if label:
        print(f"{label}={rng.choice(backends)}")

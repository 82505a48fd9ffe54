"""Independent check of `cleave optimize`: the rewritten model is valid and computes the same.

    python3 scripts/oracles/check_optimized.py SOURCE.onnx OPTIMIZED.onnx [--tol 1e-4] [--seed N]

1. OPTIMIZED passes onnx.checker.check_model(full_check=True).
2. Both models run in onnxruntime (its own graph optimisations off) on the same seeded random
   inputs. Every tensor name the two graphs share (graph outputs and every intermediate tensor
   that survived the rewrite) is compared, so a rewrite that miswires a channel is seen where
   it happens, not only if it reaches an output.
   Error = max |a - b| / max(1, max |b|) per tensor.
   - local (must be <= --tol): the optimized model reads every shared tensor it consumes from
     the source's run, so each rewritten region is checked on exact inputs. Float rounding of
     a rewrite (BatchNorm folding reorders a multiply) stays at ~1e-6 here, while a miswired
     weight or channel gives errors of order 1.
   - end to end (must be <= --e2e-tol): the optimized model runs alone. Deep random-weight
     nets amplify rounding layer by layer (resnet50: 5e-7 after the first layer, 1e-4 near
     the end), so this bound is looser.

Prints one summary line; exits 1 on a mismatch.
"""
import argparse
import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from check_parts import random_inputs, session  # noqa: E402


def with_all_outputs(model, names):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
    return m


def reading_given(model, shared, values):
    """The model with each shared tensor it reads taken from a graph input fed `values`."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inputs = {i.name for i in m.graph.input}
    given = {}
    for node in m.graph.node:
        for k, name in enumerate(node.input):
            if name in shared and name not in inputs:
                node.input[k] = given.setdefault(name, name + "__given")
    for name, alias in given.items():
        v = np.asarray(values[name])
        elem = onnx.helper.np_dtype_to_tensor_dtype(v.dtype)
        m.graph.input.append(onnx.helper.make_tensor_value_info(alias, elem, v.shape))
    return m, {alias: values[name] for name, alias in given.items()}


def worst_error(names, want_by_name, got_by_name):
    worst, worst_name = 0.0, None
    for name in names:
        want, got = np.asarray(want_by_name[name]), np.asarray(got_by_name[name])
        if got.shape != want.shape:
            return np.inf, f"{name} (shape {got.shape} != {want.shape})"
        if want.dtype.kind in "fc":
            err = float(np.max(np.abs(got.astype(np.float64) - want)) / max(1.0, float(np.max(np.abs(want))))) if want.size else 0.0
        else:
            err = 0.0 if np.array_equal(got, want) else np.inf
        if err > worst:
            worst, worst_name = err, name
    return worst, worst_name


def tensor_names(model):
    return {o for n in model.graph.node for o in n.output if o}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("optimized")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--e2e-tol", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    src = onnx.load(a.source)
    opt = onnx.load(a.optimized)
    onnx.checker.check_model(a.optimized, full_check=True)
    shared = sorted((tensor_names(src) & tensor_names(opt)) | {o.name for o in src.graph.output})
    s_src = session(with_all_outputs(src, shared).SerializeToString())
    s_opt = session(with_all_outputs(opt, shared).SerializeToString())
    # Shaped as the optimized model takes them: `optimize --shape` fixes dims the source leaves
    # free, and the source takes those shapes too.
    feeds = random_inputs(s_opt, np.random.default_rng(a.seed), {})
    r_src = dict(zip([o.name for o in s_src.get_outputs()], s_src.run(None, feeds)))
    r_opt = dict(zip([o.name for o in s_opt.get_outputs()], s_opt.run(None, feeds)))
    local_model, given = reading_given(with_all_outputs(opt, shared), set(shared), r_src)
    s_loc = session(local_model.SerializeToString())
    r_loc = dict(zip([o.name for o in s_loc.get_outputs()], s_loc.run(None, {**feeds, **given})))
    local, local_name = worst_error(shared, r_src, r_loc)
    e2e, e2e_name = worst_error(shared, r_src, r_opt)
    ok = local <= a.tol and e2e <= a.e2e_tol
    print(f"{'ok' if ok else 'FAIL'} {a.optimized}: {len(src.graph.node)} -> {len(opt.graph.node)} nodes, "
          f"{len(shared)} shared tensors, local error {local:.1e} ({local_name}), end-to-end {e2e:.1e} ({e2e_name})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

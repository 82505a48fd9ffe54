"""Standalone reproducer, as filed upstream (docs/engine-disagreements.md): onert returns a stale
buffer for a graph output that another op of the graph also reads, when the outputs are
allocated by onert (NNFW_ENABLE_INTERNAL_OUTPUT_ALLOC, the Python binding's get_output).

    pip install onert==0.1.0 ai-edge-litert==2.3.0 numpy   # ai-edge-litert only for its TFLite schema module
    python3 scripts/reports/onert_output_alias_repro.py                  # m off by 1.679, m holds v
    EXECUTOR=Dataflow python3 scripts/reports/onert_output_alias_repro.py  # both exact

The model (written here, 3 ops, float32):
    m  = MEAN(x[1,8,6,12], axes=[1,2], keep_dims)      graph output 0, also read by the next op
    sq = SQUARED_DIFFERENCE(x, m)
    v  = MEAN(sq, axes=[1,2], keep_dims)               graph output 1
"""
import os
import tempfile

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as S
from onert.native.libnnfw_api_pybind import infer, prepare_config


def model():
    buffers, tensors = [S.BufferT()], []

    def tensor(name, shape, ty=S.TensorType.FLOAT32, data=None):
        b = S.BufferT()
        if data is not None:
            b.data = list(data.tobytes())
        buffers.append(b)
        t = S.TensorT()
        t.name, t.shape, t.type, t.buffer = name, shape, ty, len(buffers) - 1
        tensors.append(t)
        return len(tensors) - 1

    def op(code, inputs, outputs, options_type, options):
        o = S.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = code, inputs, outputs
        o.builtinOptionsType, o.builtinOptions = options_type, options
        return o

    x = tensor("x", [1, 8, 6, 12])
    axes = tensor("axes", [2], S.TensorType.INT32, np.array([1, 2], np.int32))
    m, sq, v = tensor("m", [1, 1, 1, 12]), tensor("sq", [1, 8, 6, 12]), tensor("v", [1, 1, 1, 12])
    keep = S.ReducerOptionsT()
    keep.keepDims = True
    codes = []
    for c in (S.BuiltinOperator.MEAN, S.BuiltinOperator.SQUARED_DIFFERENCE):
        oc = S.OperatorCodeT()
        oc.builtinCode = oc.deprecatedBuiltinCode = c
        oc.version = 1
        codes.append(oc)
    sg = S.SubGraphT()
    sg.tensors, sg.inputs, sg.outputs = tensors, [x], [m, v]
    sg.operators = [
        op(0, [x, axes], [m], S.BuiltinOptions.ReducerOptions, keep),
        op(1, [x, m], [sq], S.BuiltinOptions.SquaredDifferenceOptions, S.SquaredDifferenceOptionsT()),
        op(0, [sq, axes], [v], S.BuiltinOptions.ReducerOptions, keep),
    ]
    mo = S.ModelT()
    mo.version, mo.operatorCodes, mo.subgraphs, mo.buffers = 3, codes, [sg], buffers
    b = flatbuffers.Builder(0)
    b.Finish(mo.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mean_sqdiff_mean.tflite")
        with open(path, "wb") as f:
            f.write(model())
        x = np.random.default_rng(0).standard_normal([1, 8, 6, 12]).astype(np.float32)
        xd = x.astype(np.float64)
        want_m = xd.mean((1, 2), keepdims=True)
        want_v = ((xd - want_m) ** 2).mean((1, 2), keepdims=True)
        s = infer.nnfw_session(path, "cpu")
        s.set_prepare_config(prepare_config.ENABLE_INTERNAL_OUTPUT_ALLOC)
        s.prepare()
        s.set_input(0, x)
        s.run()
        got_m, got_v = (np.array(s.get_output(i)).reshape(1, 1, 1, 12) for i in range(2))
    print(f"EXECUTOR={os.environ.get('EXECUTOR', '(default, Linear)')}")
    print(f"m: max |got - want| = {np.abs(got_m - want_m).max():.7g}; "
          f"m holds v's values: {bool(np.allclose(got_m, want_v, atol=1e-6))}")
    print(f"v: max |got - want| = {np.abs(got_v - want_v).max():.7g}")


if __name__ == "__main__":
    main()

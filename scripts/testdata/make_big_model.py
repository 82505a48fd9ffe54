"""Writes a synthetic model whose weights live in external data, for big-model measurements.

    python3 scripts/testdata/make_big_model.py OUT_DIR [--gb 3] [--files one|many] [--width 8192]

OUT_DIR/big.onnx is a chain of MatMul + Relu layers on a [1, WIDTH] input, each layer a
WIDTH x WIDTH float32 weight, enough layers for about GB gigabytes. With `--files one` every
weight lies in OUT_DIR/big.weights (by offset, as onnx's converter writes them); with
`--files many` each lies in its own file, so a shared-weights partition has to stream them
into one new file. The weights are written in chunks, never held in memory whole. Never commit
the output: it is generated.
"""
import argparse
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--gb", type=float, default=3.0)
    ap.add_argument("--files", choices=["one", "many"], default="one")
    ap.add_argument("--width", type=int, default=8192)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    w = args.width
    layer_bytes = w * w * 4
    layers = max(1, round(args.gb * 1e9 / layer_bytes))
    # Non-negative values of mean 1/WIDTH keep activations alive and finite through many layers.
    rows = 256
    chunk = (np.arange(rows * w, dtype=np.float32).reshape(rows, w) % 97) / (48.0 * w)

    nodes, inits = [], []
    shared = None
    offset = 0
    x = "x"
    for i in range(layers):
        name = f"w{i}"
        location = "big.weights" if args.files == "one" else f"w{i}.bin"
        if args.files == "one":
            shared = shared or open(args.out / location, "wb")
            f = shared
        else:
            f = open(args.out / location, "wb")
            offset = 0
        start = offset
        for _ in range(w // rows):
            f.write(chunk.tobytes())
        offset += layer_bytes
        if args.files == "many":
            f.close()
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[w, w])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", str(start)), ("length", str(layer_bytes))):
            e = t.external_data.add()
            e.key, e.value = k, v
        inits.append(t)
        y = f"h{i}"
        nodes.append(helper.make_node("MatMul", [x, name], [f"m{i}"], name=f"matmul{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [y], name=f"relu{i}"))
        x = y
    if shared:
        shared.close()
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, w])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(args.out / "big.onnx"))
    print(f"{args.out / 'big.onnx'}: {layers} layers, {layers * layer_bytes} bytes of weights in {args.files} file(s)")


if __name__ == "__main__":
    main()

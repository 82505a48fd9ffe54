"""The handles data plane: parts called by Serve handle, independent parts at once, tensors
part to part."""

import asyncio

import numpy as np
import pytest
from onnx import TensorProto, helper
from serve_fakes import FakeHandle, matmuls

from cleave import serve


def test_parts_that_do_not_depend_on_each_other_run_at_once_and_tensors_skip_the_ingress(monkeypatch):
    monkeypatch.setattr(serve.actors, "node_report", lambda: {"node_id": "local"})
    n, layers = 256, 200
    rng = np.random.default_rng(2)
    wa = (np.eye(n) + 1e-3 * rng.standard_normal((n, n))).astype(np.float32)
    wb = (np.eye(n) + 1e-3 * rng.standard_normal((n, n))).astype(np.float32)
    add = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add",
                            [helper.make_tensor_value_info(t, TensorProto.FLOAT, [n, n]) for t in "ab"],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])])
    models = [matmuls("x", "a", n, layers, wa), matmuls("x", "b", n, layers, wb),
              helper.make_model(add, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()]
    specs = [{"index": i + 1, "file": f"p{i}.onnx", "inputs": ins, "outputs": outs, "backend": b,
              "deployment": f"part{i + 1}_{b}"}
             for i, (ins, outs, b) in enumerate([(["x"], ["a"], "npu"), (["x"], ["b"], "gpu"), (["a", "b"], ["y"], "cpu")])]
    log = []
    handles = [FakeHandle(serve.PartReplica(s, m, {}), log) for s, m in zip(specs, models)]
    meta = {"name": "t", "digest": "-", "inputs": ["x"], "outputs": ["y"],
            "parts": [{k: s[k] for k in ("inputs", "outputs", "backend", "deployment")} for s in specs]}
    ingress = serve.Ingress(meta, 60, {"kind": "handles"}, *handles)
    x = rng.standard_normal((n, n)).astype(np.float32)

    r = asyncio.run(ingress.infer({"x": x}))
    # The ingress received the graph output and nothing else.
    assert ingress.received == {"y": 1}
    want = x @ np.linalg.matrix_power(wa.astype(np.float64), layers) + x @ np.linalg.matrix_power(wb.astype(np.float64), layers)
    np.testing.assert_allclose(r["outputs"]["y"], want, rtol=1e-3, atol=1e-3)
    assert [p["deployment"] for p in r["parts"]] == ["part1_npu", "part2_gpu", "part3_cpu"]
    # Only the last part answered to the ingress; a and b went from part to part.
    assert [sum(c.fetched for c in h.calls) for h in handles] == [0, 0, 1]
    # The two branches overlapped in time: each ran while the other did.
    spans = {name: (t0, t1) for name, t0, t1 in log}
    (a0, a1), (b0, b1) = spans["part1_npu"], spans["part2_gpu"]
    assert a0 < b1 and b0 < a1, spans
    assert max(a1, b1) - min(a0, b0) < (a1 - a0) + (b1 - b0), spans
    # Asked for, the boundaries come back too (every part answers then).
    r = asyncio.run(ingress.infer({"x": x}, boundaries=True))
    assert set(r["boundaries"]) == {"a", "b", "y"}
    # A failing part is named, though the ingress only hears of it through the last part.
    bad = serve.Ingress(meta, 60, {"kind": "handles"}, handles[0], handles[1], FakeHandle(serve.PartReplica(specs[2], models[0], {}), log))
    with pytest.raises(RuntimeError, match="part3_cpu .backend cpu. "):
        asyncio.run(bad.infer({"x": x}))

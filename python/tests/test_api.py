"""The Python API against onnxruntime's own Python package as the oracle."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import cleave

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The console script pip installed beside this interpreter.
CLEAVE = os.path.join(os.path.dirname(sys.executable), "cleave")


def ort_outputs(model: onnx.ModelProto, feeds, names):
    """`names` computed by onnxruntime on the whole model, intermediate tensors included (they
    are made graph outputs of a copy; onnxruntime infers their types)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip(names, s.run(list(names), feeds)))


# --- loading ------------------------------------------------------------------------------


def test_load_from_path_bytes_and_modelproto_agree(corpus_model):
    proto = onnx.load(str(corpus_model))
    shape = {"x": (1, 3, 64, 64)}
    a = cleave.load(corpus_model, shape=shape)
    b = cleave.load(corpus_model.read_bytes(), shape=shape)
    c = cleave.load(proto, shape=shape)
    assert a.format == b.format == c.format == "onnx"
    assert a.node_count == b.node_count == c.node_count == len(proto.graph.node)
    assert a.inputs == b.inputs == c.inputs
    assert a.inputs[0] == cleave.TensorInfo("x", "float32", (1, 3, 64, 64))
    assert a.outputs == c.outputs
    assert a.op_counts == c.op_counts
    assert sum(a.op_counts.values()) == a.node_count
    # The bytes went to a private file; the source was only read.
    assert c.path != str(corpus_model) and os.path.isfile(c.path)


def test_dynamic_dims_stay_symbolic_without_shape(corpus_model):
    m = cleave.load(corpus_model)
    dims = m.inputs[0].shape
    assert dims is not None and dims[1] == 3 and all(isinstance(d, str) for d in (dims[0], dims[2], dims[3]))


# --- partition and run, every boundary against onnxruntime --------------------------------


def test_real_model_split_over_two_devices_matches_onnxruntime(corpus_model):
    model = cleave.load(corpus_model, shape={"x": (1, 3, 64, 64)})
    plan = model.partition(["nnapi", "cpu"])
    backends = {p.backend for p in plan.parts}
    assert backends == {"nnapi", "cpu"}, plan
    assert len(plan.parts) >= 3
    # Every node is in exactly one part, or is a constant copied where read.
    q = model.query(["nnapi", "cpu"])
    placed = [n for p in plan.parts for n in p.nodes]
    assert len(placed) == len(set(placed)) == model.node_count - q.constant_nodes
    for p in plan.parts:
        assert all(q.device_of(n) == p.backend for n in p.nodes)

    runner = plan.runner(engines={"nnapi": "onnxruntime", "cpu": "onnxruntime"})
    assert runner.outputs == [o.name for o in model.outputs]
    assert len(runner.boundaries) >= len(plan.parts) - 1
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 64, 64), dtype=np.float32)}
    got = runner.run(feeds, boundaries=True)
    names = runner.outputs + runner.boundaries
    assert sorted(got) == sorted(names)
    want = ort_outputs(onnx.load(str(corpus_model)), feeds, names)
    compared = 0
    for n in names:
        assert got[n].dtype == want[n].dtype, n
        assert got[n].shape == want[n].shape, n
        np.testing.assert_allclose(got[n], want[n], rtol=1e-3, atol=1e-4, err_msg=n)
        compared += 1
    assert compared == len(names)
    # The comparison sees a wiring bug: two different boundaries of one shape swapped.
    same = [n for n in runner.boundaries if got[n].shape == got[runner.boundaries[0]].shape]
    swapped = next((n for n in same[1:] if not np.allclose(got[n], got[same[0]])), None)
    if swapped is not None:
        assert not np.allclose(got[swapped], want[same[0]], rtol=1e-3, atol=1e-4)


def test_outputs_are_numpy_arrays_that_own_their_data(tiny_cnn, tiny_part):
    model = cleave.load(tiny_cnn, shape={"input": (2, 3, 16, 16)})
    plan = model.partition(rules=tiny_part)
    out = plan.runner().run(model.random_inputs(3))
    (name, arr), = out.items()
    assert arr.flags.c_contiguous and arr.dtype == np.float32 and arr.shape[0] == 2
    arr += 1  # writable: the array holds the bytes cleave returned


def test_verify_on_tract_and_whole_model_run(tiny_cnn, tiny_part):
    model = cleave.load(tiny_cnn, shape={"input": (1, 3, 16, 16)})
    plan = model.partition(rules=tiny_part)
    assert [p.backend for p in plan.parts] == ["npu", "cpu", "npu", "cpu"]
    v = cleave.verify(model, plan)
    assert v.passed and v.reference == "tract"
    kinds = {t["kind"] for t in v.tensors}
    assert kinds == {"output", "boundary"}
    assert len(v.tensors) == len(plan.runner().boundaries) + 1
    # The whole model on onnxruntime agrees with its Python package.
    feeds = model.random_inputs(5)
    mine = model.run(feeds, engine="onnxruntime")
    theirs = ort_outputs(onnx.load(str(tiny_cnn)), feeds, list(mine))
    for k in mine:
        np.testing.assert_allclose(mine[k], theirs[k], rtol=1e-5, atol=1e-6)


def test_verify_refuses_a_plan_that_does_not_give_the_models_outputs(tiny_cnn, tiny_part):
    # The same network with its output passed through an Identity: tiny_cnn's plan gives
    # 'probs', which this model computes inside but does not output.
    m = onnx.load(str(tiny_cnn))
    m.graph.node.append(helper.make_node("Identity", ["probs"], ["renamed"]))
    m.graph.output[0].name = "renamed"
    other = cleave.load(m, shape={"input": (1, 3, 16, 16)})
    plan = cleave.load(tiny_cnn, shape={"input": (1, 3, 16, 16)}).partition(rules=tiny_part)
    with pytest.raises(cleave.ArgumentError) as e:
        cleave.verify(other, plan)
    assert str(e.value).endswith(
        "the plan's outputs are not the model's: it lacks the model's outputs 'renamed' "
        "and gives outputs the model does not: 'probs'"
    ), e.value


def test_rules_as_a_dict_equal_the_part_file(tiny_cnn, tiny_part):
    model = cleave.load(tiny_cnn)
    from_file = model.partition(rules=tiny_part)
    from_dict = model.partition(
        rules={"backends": ["npu", "cpu"], "default": "npu", "comply": "opcode",
               "OPCODE": {"ADD": "cpu", "SOFTMAX": "cpu"}}
    )
    assert from_file.parts == from_dict.parts


def test_save_writes_what_the_cli_writes(tmp_path, tiny_cnn, tiny_part):
    conn = cleave.load(tiny_cnn).partition(rules=tiny_part).save(tmp_path / "py")
    assert conn == str(tmp_path / "py" / "tiny_cnn.conn.json")
    cli = subprocess.run(
        [CLEAVE, "partition", str(tiny_cnn), "--rules", str(tiny_part), "-o", str(tmp_path / "cli")],
        capture_output=True, text=True,
    )
    assert cli.returncode == 0, cli.stderr
    py_files = sorted(p.name for p in (tmp_path / "py").iterdir())
    cli_files = sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert py_files == cli_files
    assert "tiny_cnn.00001_npu.onnx" in py_files and "tiny_cnn.conn.ini" in py_files
    for f in py_files:
        if f.endswith(".onnx"):
            assert (tmp_path / "py" / f).read_bytes() == (tmp_path / "cli" / f).read_bytes(), f


def test_parts_in_memory_pass_the_onnx_checker(corpus_model):
    plan = cleave.load(corpus_model, shape={"x": (1, 3, 64, 64)}).partition(["nnapi", "cpu"])
    protos = plan.to_onnx()
    assert len(protos) == len(plan.parts)
    for part, proto in zip(plan.parts, protos):
        onnx.checker.check_model(proto, full_check=True)
        assert [i.name for i in proto.graph.input] == part.inputs
        assert [o.name for o in proto.graph.output] == part.outputs
    assert sum(p.weight_bytes for p in plan.parts) > 1_000_000


def test_report_writes_html(tmp_path, tiny_cnn, tiny_part):
    plan = cleave.load(tiny_cnn).partition(rules=tiny_part)
    out = plan.report(tmp_path / "view.html")
    text = pathlib.Path(out).read_text()
    assert "<svg" in text and "tiny_cnn.00004_cpu.onnx" in text


def test_hints_name_keyword_arguments_not_flags(tiny_cnn):
    """The facade's hints name the command line's flags; Python says what to pass instead."""
    with pytest.raises(cleave.UnsupportedError) as e:
        cleave.load(tiny_cnn).partition(["nnapi"])
    assert 'e.g. devices=["nnapi", "cpu"]' in str(e.value), str(e.value)
    assert "--devices" not in str(e.value)


def test_pipeline_stages_with_memory(tiny_cnn):
    model = cleave.load(tiny_cnn, shape={"input": (1, 3, 16, 16)})
    plan = model.partition(["g0", "g1"], stages=2, memory={"g0": "1MiB", "g1": "1MiB"})
    assert [p.backend for p in plan.parts] == ["g0", "g1"]
    header, *rows, bottleneck = plan.stages
    assert "act. peak" in header and bottleneck.startswith("bottleneck: stage")
    assert [r.split()[:2] for r in rows] == [["1", "g0"], ["2", "g1"]]
    assert cleave.verify(model, plan).passed


def test_a_stages_request_writes_the_same_folder_from_python_and_the_command_line(tmp_path, tiny_cnn):
    """One facade path for both faces: the parts and connection files, stage memory included,
    byte for byte."""
    cli, py = tmp_path / "cli", tmp_path / "py"
    shown = subprocess.run([sys.executable, "-m", "cleave", "partition", str(tiny_cnn), "--shape", "input=1,3,16,16",
                            "--devices", "g0,g1", "--stages", "2", "--memory", "g0=1MiB", "--memory", "g1=1MiB",
                            "-o", str(cli)], check=True, capture_output=True, text=True).stdout
    model = cleave.load(tiny_cnn, shape={"input": (1, 3, 16, 16)})
    plan = model.partition(["g0", "g1"], stages=2, memory={"g0": "1MiB", "g1": "1MiB"})
    plan.save(py)
    # The same stage table from both faces; its last line's hint in each face's own terms.
    *rows, bottleneck = plan.stages
    printed = shown.splitlines()
    assert rows and all(line in printed for line in rows), (plan.stages, shown)
    assert "(give costs= from cleave measure" in bottleneck
    assert bottleneck.replace("costs=", "--costs") in printed, (bottleneck, shown)
    names = sorted(p.name for p in cli.iterdir())
    assert names == sorted(p.name for p in py.iterdir()) and len(names) == 4, names
    for name in names:
        assert (cli / name).read_bytes() == (py / name).read_bytes(), name
    import json

    parts = json.loads((py / "tiny_cnn.conn.json").read_text())["parts"]
    assert all(p["weights_bytes"] > 0 and p["activation_peak_bytes"] > 0 for p in parts), parts


def test_tflite_model_splits_and_runs_on_litert():
    pytest.importorskip("ai_edge_litert")
    from conftest import test_data

    path = test_data() / "tflite" / "face_detection_short_range.tflite"
    if not path.is_file():
        pytest.fail(f"{path} missing: run `bash scripts/testdata/fetch-test-data.sh`")
    model = cleave.load(path.read_bytes())
    assert model.format == "tflite"
    plan = model.partition(rules={"backends": ["npu", "cpu"], "default": "npu", "comply": "opcode",
                                  "OPCODE": {"ADD": "cpu"}})
    assert {p.backend for p in plan.parts} == {"npu", "cpu"} and len(plan.parts) >= 3
    v = cleave.verify(model, plan)
    assert v.passed and v.reference == "litert", v.tensors
    assert any(t["kind"] == "boundary" for t in v.tensors)


def test_parts_run_on_onert_beside_litert_and_circle_parts_on_onert(tmp_path):
    pytest.importorskip("ai_edge_litert")
    pytest.importorskip("onert")
    from conftest import test_data

    path = test_data() / "tflite" / "face_landmark.tflite"
    if not path.is_file():
        pytest.fail(f"{path} missing: run `bash scripts/testdata/fetch-test-data.sh`")
    # onert's cpu backend lacks PRELU: those parts stay on LiteRT, the rest run on onert.
    rules = {"backends": ["npu", "host"], "default": "npu", "comply": "opcode", "OPCODE": {"PRELU": "host"}}
    model = cleave.load(path)
    plan = model.partition(rules=rules)
    v = cleave.verify(model, plan, engines={"npu": "onert"})
    assert v.passed and v.reference == "litert", v.tensors
    assert sum(t["kind"] == "boundary" for t in v.tensors) >= 40
    # The circle twin runs on onert by default, which refuses PRELU in its own words.
    circle = tmp_path / "fl.circle"
    subprocess.run([CLEAVE, "convert", str(path), str(circle)], check=True)
    model = cleave.load(circle)
    assert model.format == "circle"
    plan = model.partition(rules=rules)
    with pytest.raises(cleave.Error, match="NYI for operation 'PReLU'"):
        cleave.verify(model, plan)


def test_a_stateful_model_verifies_invoke_after_invoke_with_its_state_carried():
    pytest.importorskip("ai_edge_litert")
    from conftest import test_data

    path = test_data() / "tflite-stateful" / "okay_nabu.tflite"
    if not path.is_file():
        pytest.fail(f"{path} missing: run `bash scripts/testdata/fetch-test-data.sh`")
    model = cleave.load(path)
    # The variables' ops are kept in one part whatever the rules say of their neighbours.
    plan = model.partition(rules={"backends": ["host", "dsp"], "default": "host", "comply": "opcode",
                                  "OPCODE": {"DEPTHWISE_CONV_2D": "dsp", "FULLY_CONNECTED": "dsp"}})
    assert {p.backend for p in plan.parts} == {"host", "dsp"} and len(plan.parts) >= 3
    v = cleave.verify(model, plan, invokes=5)
    assert v.passed, v.tensors
    seen = {t["tensor"].rsplit(" @", 1)[1] for t in v.tensors}
    assert seen == {"1", "2", "3", "4", "5"}, v.tensors
    assert any(t["kind"] == "boundary" for t in v.tensors)
    # The state matters: on the same input the whole model answers differently from one
    # invoke to the next, so invokes 2..5 catch a part that lost or duplicated its state.
    feeds = model.random_inputs(0)
    whole = model.session()
    answers = [whole.run(feeds) for _ in range(3)]
    assert any(not np.array_equal(answers[0][k], answers[1][k]) for k in answers[0])
    runner = plan.runner()
    for k in range(3):
        got = runner.run(feeds)
        assert all(np.array_equal(got[n], answers[k][n]) for n in answers[k]), k
    with pytest.raises(cleave.ArgumentError, match="invokes"):
        cleave.verify(model, plan, invokes=0)


# --- errors -------------------------------------------------------------------------------


def test_garbage_model_raises_invalid_model_error():
    with pytest.raises(cleave.InvalidModelError) as e:
        cleave.load(b"\x08\x07garbage" * 3)
    # Named as the user gave it, never by the private file cleave wrote it to.
    assert e.value.path == "<bytes>" and str(e.value).startswith("<bytes>: ")
    assert e.value.cause and "\n" not in str(e.value)
    assert isinstance(e.value, cleave.Error)


def test_each_kind_of_failure_has_its_exception(tmp_path, tiny_cnn, tiny_part):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(cleave.FileError) as e:
        cleave.load(missing)
    assert isinstance(e.value, OSError) and e.value.path == str(missing) and e.value.node is None
    # A valid model with an op the listed device does not run: unsupported, not invalid.
    g = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"], name="det")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    onnx.checker.check_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), full_check=True)
    model = cleave.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(cleave.UnsupportedError) as e:
        model.partition(devices=["myriad"])
    assert (e.value.node, e.value.op) == ("det", "Det") and not isinstance(e.value, cleave.InvalidModelError)
    plan = cleave.load(tiny_cnn).partition(rules=tiny_part)
    with pytest.raises(cleave.FileError) as e:
        plan.save("/proc/cleave-cannot-write-here")
    assert e.value.path is not None and e.value.path.startswith("/proc")


def test_invalid_graph_names_node_and_op(tmp_path):
    # 'y' reads 'w', which nothing produces: onnx's checker refuses it too.
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
        "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(m)
    path = tmp_path / "bad.onnx"
    path.write_bytes(m.SerializeToString())
    before = path.read_bytes()
    with pytest.raises(cleave.InvalidModelError) as e:
        cleave.load(path)
    assert e.value.path == str(path)
    assert e.value.node == "add_w" and e.value.op == "Add", e.value.cause
    assert "'w'" in e.value.cause
    assert path.read_bytes() == before


def test_bad_rules_costs_and_memory_raise_argument_error(tmp_path, tiny_cnn):
    model = cleave.load(tiny_cnn, shape={"input": (1, 3, 16, 16)})
    with pytest.raises(cleave.ArgumentError) as e:
        model.partition(rules=tmp_path / "missing.part")
    assert e.value.path == str(tmp_path / "missing.part")
    bad = tmp_path / "bad.part"
    bad.write_text("[partition]\nbackends=npu,cpu\ndefault=gpu\n")
    with pytest.raises(cleave.ArgumentError) as e:
        model.partition(rules=bad)
    assert e.value.path == str(bad) and "gpu" in e.value.cause
    with pytest.raises(cleave.ArgumentError, match="rules: unknown keys"):
        model.partition(rules={"OPCODES": {}})
    # A dict's rules go to Rust as a table: the error names the dict, not a file or a line.
    with pytest.raises(cleave.ArgumentError) as e:
        model.partition(rules={"backends": ["npu", "cpu"], "default": "gpu"})
    assert e.value.path == "<rules dict>" and "gpu" in e.value.cause
    with pytest.raises(cleave.ArgumentError) as e:
        model.partition(rules={"backends": "npu,cpu", "default": "cpu", "OPCODE": {"Conv": "gpu"}})
    assert e.value.cause == "[OPCODE] Conv=gpu: unknown backend 'gpu' (backends are npu,cpu)"
    costs = tmp_path / "costs.json"
    costs.write_text("{not json")
    with pytest.raises(cleave.ArgumentError) as e:
        model.partition(["npu", "cpu"], objective="latency", costs=costs)
    assert e.value.path == str(costs)
    with pytest.raises(cleave.ArgumentError) as e:
        model.partition(["g0", "g1"], stages=2, memory={"g0": "16XB"})
    assert e.value.cause.startswith("memory['g0']='16XB': unknown unit 'xb'"), e.value.cause
    for bad in (True, -1, 2**64, 1.5):
        with pytest.raises(cleave.ArgumentError, match="memory\\['g0'\\]"):
            model.partition(["g0", "g1"], stages=2, memory={"g0": bad})
    # A stages request that contradicts itself is refused before the model loads again.
    with pytest.raises(cleave.ArgumentError, match="stages= and objective=\"latency\""):
        model.partition(["g0", "g1"], stages=2, objective="latency")
    # Bytes as an int are a budget too: 1 byte holds no stage.
    with pytest.raises(cleave.ArgumentError, match="does not fit"):
        model.partition(["g0", "g1"], stages=2, memory={"g0": 1, "g1": "1GiB"})
    # A word neither face knows is refused in Python's terms, listing the words.
    with pytest.raises(cleave.ArgumentError) as e:
        model.partition(["cpu"], objective="fastest")
    assert e.value.cause == "objective=\"fastest\": choose 'fewest' or 'latency'", e.value.cause
    with pytest.raises(cleave.ArgumentError) as e:
        model.partition(["cpu"], optimize="fast")
    assert e.value.cause == "optimize=\"fast\": choose 'basic' or 'device'", e.value.cause


def test_missing_engine_package_names_the_pip_install(monkeypatch, tiny_cnn, tiny_part):
    import cleave._engines as engines

    monkeypatch.delenv("ORT_DYLIB_PATH", raising=False)
    monkeypatch.delenv("CLEAVE_LITERT_LIB", raising=False)
    monkeypatch.setattr(engines, "_package_dir", lambda name: None)
    plan = cleave.load(tiny_cnn).partition(rules=tiny_part)
    with pytest.raises(cleave.EngineError, match="pip install onnxruntime"):
        plan.runner(engines={"npu": "onnxruntime"})
    with pytest.raises(cleave.EngineError, match="pip install ai-edge-litert"):
        cleave.load(tiny_cnn).run({}, engine="litert")
    monkeypatch.delenv("CLEAVE_ONERT_LIB", raising=False)
    with pytest.raises(cleave.EngineError, match="pip install onert"):
        plan.runner(engines={"npu": "onert:cpu"})


def test_openvino_devices_split_by_query_model_and_run_on_openvino(tmp_path, monkeypatch):
    openvino = pytest.importorskip("openvino")
    monkeypatch.setenv("CLEAVE_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(3)
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3, 3, 3], rng.standard_normal(81).astype(np.float32))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Det", ["c"], ["d"], name="det"),  # OpenVINO's ONNX reader lacks it
        helper.make_node("Neg", ["d"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [w],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model = cleave.load(proto)
    with pytest.raises(cleave.UnsupportedError, match="Det") as e:
        model.partition(devices=["ov:CPU"])
    assert (e.value.node, e.value.op) == ("det", "Det"), e.value.cause
    plan = model.partition(devices=["ov:CPU", "ort"])
    assert [p.backend for p in plan.parts] == ["ov-CPU", "ort", "ov-CPU"]
    v = cleave.verify(model, plan, reference="onnxruntime")
    assert v.passed and len(v.tensors) == 3
    # The first part, run by cleave on OpenVINO, equals OpenVINO's own Python run of it.
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    got = plan.runner().run({"x": x}, boundaries=True)
    # Saved, the OpenVINO parts say so in conn.json, and the Ray app reads it from there.
    from cleave import serve

    conn = plan.save(tmp_path / "parts")
    assert [p["engine"] for p in serve.Partition(conn).parts] == ["openvino:CPU", None, "openvino:CPU"]
    onnx.save(plan.to_onnx()[0], str(tmp_path / "first.onnx"))
    # In full precision, as cleave runs it: on a CPU with bf16 units OpenVINO's default is bf16.
    first = openvino.Core().compile_model(str(tmp_path / "first.onnx"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    np.testing.assert_allclose(got["c"], first({"x": x})["c"], rtol=1e-5, atol=1e-6)


def test_bad_feeds_raise_without_crashing(tiny_cnn, tiny_part):
    model = cleave.load(tiny_cnn, shape={"input": (1, 3, 16, 16)})
    runner = model.partition(rules=tiny_part).runner()
    with pytest.raises(cleave.EngineError, match="input"):
        runner.run({})
    with pytest.raises(cleave.EngineError):
        runner.run({"input": np.zeros((1, 3, 16, 16), np.int64)})
    with pytest.raises(cleave.EngineError, match="conv1"):
        runner.run({"input": [1.0, 2.0]})  # a list becomes an array, of the wrong rank
    with pytest.raises(cleave.ArgumentError, match="dtype 'object'"):
        runner.run({"input": object()})


# --- the command line and the Ray app from the package -----------------------------------


def test_console_script_is_the_cli(tmp_path, tiny_cnn, tiny_part):
    v = subprocess.run([CLEAVE, "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout.startswith("cleave ")
    h = subprocess.run([CLEAVE, "serve", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "scripts/" not in h.stdout and "cleave-nn[ray]" in h.stdout
    bad = tmp_path / "trunc.onnx"
    bad.write_bytes(tiny_cnn.read_bytes()[:100])
    r = subprocess.run([CLEAVE, "partition", str(bad), "--rules", str(tiny_part), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and str(bad) in r.stderr and "panick" not in r.stderr
    m = subprocess.run([sys.executable, "-m", "cleave", "query", str(tiny_cnn), "--devices", "nnapi,cpu", "--json"],
                       capture_output=True, text=True)
    assert m.returncode == 0, m.stderr
    assert '"nnapi"' in m.stdout


def test_serve_module_is_importable():
    from cleave.serve import build_app, parse_resources

    assert callable(build_app)
    assert parse_resources('{"npu": {"num_gpus": 1}}') == {"npu": {"num_gpus": 1}}
    h = subprocess.run([sys.executable, "-m", "cleave.serve", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "python -m cleave.serve" in h.stdout


def test_export_writes_the_serving_package_which_runs_on_its_own(tmp_path, tiny_cnn, tiny_part):
    """`export` copies the package as `ray_app`: its folder runs as a program, and it imports
    without cleave (the nodes of a cluster need only the folder)."""
    conn = cleave.load(tiny_cnn).partition(rules=tiny_part).save(tmp_path / "parts")
    out = tmp_path / "app"
    e = subprocess.run([sys.executable, "-m", "cleave.serve", "export", conn, str(out)], capture_output=True, text=True)
    assert e.returncode == 0, e.stderr
    package = out / "ray_app"
    from cleave import serve

    shipped = sorted(f.name for f in package.iterdir())
    source = pathlib.Path(serve.__file__).parent
    assert shipped == sorted(f.name for f in source.iterdir() if f.suffix in (".py", ".json")), shipped
    assert (out / "app.py").is_file() and (out / "serve_config.yaml").is_file()
    # Run as a folder (as the binary runs it), in isolated mode: cleave itself is never imported.
    h = subprocess.run([sys.executable, "-I", str(package), "export", "--help"],
                       capture_output=True, text=True, cwd=out)
    assert h.returncode == 0 and "OUT_DIR" in h.stdout, h.stderr
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import ray_app; "
             "assert 'cleave' not in sys.modules; print(ray_app.build_app.__module__)")
    i = subprocess.run([sys.executable, "-I", "-c", probe, str(out)], capture_output=True, text=True)
    assert i.returncode == 0 and i.stdout.strip() == "ray_app.ingress", i.stderr


def test_builtin_devices():
    names = cleave.builtin_devices()
    assert {"cpu", "nnapi", "myriad", "xnnpack"} <= set(names)


def test_examples_type_check_strictly():
    mypy = pytest.importorskip("mypy.api")
    out, err, code = mypy.run(["--strict", str(ROOT / "examples" / "quickstart.py")])
    assert code == 0, out + err


def test_quickstart_example_runs(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "parts match the whole model" in r.stdout


def test_docstring_examples_run(monkeypatch):
    import doctest

    monkeypatch.chdir(ROOT)
    result = doctest.testmod(cleave, extraglobs={"cleave": cleave}, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8 and result.failed == 0


def test_serve_bodies_are_bounded_and_any_name_round_trips():
    import io
    import zipfile

    from cleave.serve import read_npz, write_npz

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    body = write_npz({"x": x, "file": np.ones(2, np.int64), "gpu_0/data_0": x})
    got = read_npz(body, ["x", "file", "gpu_0/data_0"], 1 << 20)
    assert sorted(got) == ["file", "gpu_0/data_0", "x"]
    np.testing.assert_array_equal(got["x"], x)
    # Members the model does not take are not read; a bomb in one of them is never unpacked.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", _npy(x))
        z.writestr("junk.npy", b"\0" * (64 << 20))
    assert len(buf.getvalue()) < 1 << 20
    assert sorted(read_npz(buf.getvalue(), ["x"], 1 << 20)) == ["x"]
    with pytest.raises(ValueError, match="more than"):
        read_npz(buf.getvalue(), ["x", "junk"], 1 << 20)
    with pytest.raises(ValueError, match="not an .npz"):
        read_npz(b"garbage", ["x"], 1 << 20)


def _npy(a):
    import io

    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def test_readme_python_example_runs():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Python"):]
    code = section[section.index("```python") + len("```python"):]
    code = code[: code.index("```")]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout.strip()) < 1e-5


def test_latency_objective_without_costs_uses_the_built_in_estimates(tmp_path):
    # Convolutions on 8x8 maps with a HardSigmoid (which myriad does not run) after each: the
    # capability split alternates devices; the estimates move the small islands to the CPU.
    nodes, inits = [], []
    rng = np.random.default_rng(7)
    prev = "x"
    for i in range(6):
        w = helper.make_tensor(f"w{i}", TensorProto.FLOAT, [4, 4, 3, 3],
                               rng.standard_normal(144).astype(np.float32).tolist())
        inits.append(w)
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                      name=f"conv{i}"))
        nodes.append(helper.make_node("HardSigmoid", [f"c{i}"], [f"h{i}"], name=f"hs{i}"))
        prev = f"h{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 4, 8, 8])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4, 8, 8])],
                          inits)
    path = tmp_path / "islands.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    model = cleave.load(path)
    capability = model.partition(["myriad", "cpu"])
    assert len(capability.parts) == 12 and capability.prediction is None
    with pytest.warns(UserWarning, match="built-in estimates"):
        plan = model.partition(["myriad", "cpu"], objective="latency")
    p = plan.prediction
    assert p is not None and p["estimated"] == ["myriad", "cpu"], p
    cap_ms, cap_parts = p["compared"]["capability"]
    assert cap_parts == 12 and len(plan.parts) < cap_parts, (len(plan.parts), p)
    assert p["total_ms"] < cap_ms and len(p["part_ms"]) == len(plan.parts)
    assert abs(sum(p["part_ms"]) - p["total_ms"]) < 1e-6 * p["total_ms"]


@pytest.mark.parametrize("external_data", ["inline", "shared"])
def test_constants_kept_in_external_data_reach_the_parts(tmp_path, external_data):
    # Exporters of models over 2 GB put Constant values in external data too (a decoder's
    # rotary inv_freq): the parts live in another folder, so those bytes must travel with them.
    from onnx.external_data_helper import convert_model_to_external_data

    rng = np.random.default_rng(3)

    def value(name, shape):
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Constant", [], ["c"], name="const_c", value=value("cv", (1, 4))),
        helper.make_node("Add", ["x", "c"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Constant", [], ["d"], name="const_d", value=value("dv", (1, 4))),
        helper.make_node("Mul", ["r", "d"], ["m"], name="mul"),
        helper.make_node("MatMul", ["m", "w"], ["y"], name="mm"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [value("w", (4, 4))],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    src = tmp_path / "src"
    src.mkdir()
    convert_model_to_external_data(
        m, all_tensors_to_one_file=True, location="m.onnx_data", size_threshold=0, convert_attribute=True
    )
    onnx.save_model(m, src / "m.onnx")
    assert [a.t.data_location for n in m.graph.node if n.op_type == "Constant" for a in n.attribute] == [1, 1]
    rules = {"backends": ["cpu", "npu"], "default": "cpu", "comply": "opcode"}
    rules["OPCODE"] = {"RELU": "npu", "MATMUL": "npu"}
    conn = cleave.load(src / "m.onnx").partition(rules=rules).save(tmp_path / "out", external_data=external_data)
    x = rng.standard_normal((1, 4)).astype(np.float32)
    want = ort.InferenceSession(str(src / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    values = {"x": x}
    parts = json.loads(pathlib.Path(conn).read_text())["parts"]
    assert len(parts) == 4
    for p in parts:
        path = str(tmp_path / "out" / p["file"])
        onnx.checker.check_model(path, full_check=True)
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        values.update(zip(p["outputs"], s.run(p["outputs"], {i: values[i] for i in p["inputs"]})))
    np.testing.assert_allclose(values["y"], want, rtol=1e-6)
    # A part whose Constant points at data that is not beside it is refused by `cleave check`,
    # naming the node, as onnx's checker refuses it.
    from onnx.external_data_helper import set_external_data

    first = tmp_path / "out" / parts[0]["file"]
    part = onnx.load(first)
    for n in part.graph.node:
        if n.op_type == "Constant":
            t = n.attribute[0].t
            set_external_data(t, "m.onnx_data", 0, 16)
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
    onnx.save(part, first)
    r = subprocess.run([CLEAVE, "check", str(conn)], capture_output=True, text=True)
    assert r.returncode == 2 and "(Constant): attribute 'value': external data" in r.stderr, r.stderr


def test_a_part_tract_cannot_run_runs_on_onnx_runtime_with_a_warning(tmp_path):
    nodes = [
        helper.make_node("Inverse", ["x"], ["g"], name="inverse", domain="com.microsoft"),
        helper.make_node("Sigmoid", ["g"], ["y"], name="sig"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 4])],
        value_info=[helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 4, 4])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    path = tmp_path / "inverse.onnx"
    onnx.save(helper.make_model(g, opset_imports=opsets, ir_version=8), path)
    model = cleave.load(path)
    plan = model.partition(
        rules={"backends": ["cpu", "npu"], "default": "cpu", "comply": "opcode", "OPCODE": {"Inverse": "npu"}}
    )
    with pytest.warns(UserWarning, match="tract could not take it as declared, so it runs on ort"):
        v = cleave.verify(model, plan, reference="ort")
    assert v.passed, v.tensors

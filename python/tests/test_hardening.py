"""What the package does with what it is handed: private temporary files, models named as the
user gave them, links not followed, every failure a cleave.Error, a Plan shared by threads, the
GIL released while files are written, no library found in the working folder."""

import os
import stat
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import cleave
from cleave import _engines


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_model_given_as_bytes_is_written_privately_under_a_fixed_name(tiny_cnn):
    m = cleave.load(onnx.load(tiny_cnn))
    assert os.path.basename(m.path) == "model.onnx"
    assert mode(os.path.dirname(m.path)) == 0o700 and mode(m.path) == 0o600


def test_a_long_graph_name_loads_and_errors_name_what_was_given(tiny_cnn):
    proto = onnx.load(tiny_cnn)
    proto.graph.name = "A" * 300
    m = cleave.load(proto)
    assert m.node_count == cleave.load(tiny_cnn).node_count
    # An invalid model given as a ModelProto: the message names it so, never a temporary path.
    proto.graph.node[0].input[0] = "nothing_makes_this"
    with pytest.raises(cleave.InvalidModelError) as e:
        cleave.load(proto)
    assert e.value.path == f"<ModelProto {'A' * 60!r}>", e.value.path
    assert tempfile.gettempdir() not in str(e.value), str(e.value)


def test_parts_written_for_a_plan_are_private(tiny_cnn, tiny_part):
    plan = cleave.load(tiny_cnn).partition(rules=tiny_part)
    html = plan.report()
    folder = os.path.dirname(html)
    assert mode(folder) == 0o700
    files = [os.path.join(folder, f) for f in os.listdir(folder)]
    assert files and all(mode(f) == 0o600 for f in files if os.path.isfile(f)), [(f, oct(mode(f))) for f in files]


def test_report_replaces_a_planted_link_instead_of_writing_through_it(tmp_path, tiny_cnn, tiny_part):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    dest = tmp_path / "view.html"
    # The fixed temporary name the old copy used, and the destination itself, both links.
    os.symlink(victim, str(dest) + ".tmp")
    plan = cleave.load(tiny_cnn).partition(rules=tiny_part)
    assert plan.report(dest) == str(dest)
    assert victim.read_text() == "keep me"
    assert not dest.is_symlink() and "<html" in dest.read_text().lower()
    os.remove(dest)
    os.symlink(victim, dest)
    plan.report(dest)
    assert victim.read_text() == "keep me" and not dest.is_symlink()


@pytest.mark.parametrize(
    "value",
    [
        np.array([object()] * 768, dtype=object).reshape(1, 3, 16, 16),
        np.full((1, 3, 16, 16), "a", dtype="<U1"),
        np.zeros((1, 3, 16, 16), dtype="datetime64[s]"),
        np.zeros((1, 3, 16, 16), dtype=[("a", "f4"), ("b", "i4")]),
        [[1.0, 2.0], [3.0]],
    ],
    ids=["object", "unicode", "datetime64", "structured", "ragged"],
)
def test_inputs_cleave_cannot_run_raise_argument_error_naming_the_input(tiny_cnn, tiny_part, value):
    runner = cleave.load(tiny_cnn, shape={"input": (1, 3, 16, 16)}).partition(rules=tiny_part).runner()
    with pytest.raises(cleave.ArgumentError, match="input 'input'"):
        runner.run({"input": value})


def test_a_non_native_byte_order_runs_as_the_same_numbers(tiny_cnn, tiny_part):
    model = cleave.load(tiny_cnn, shape={"input": (1, 3, 16, 16)})
    runner = model.partition(rules=tiny_part).runner()
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    swapped = x.astype(x.dtype.newbyteorder("S"))
    want, got = runner.run({"input": x}), runner.run({"input": swapped})
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    with pytest.raises(cleave.ArgumentError, match="str, not int"):
        runner.run({3: x})


def big_model(side=1024, layers=8):
    """MatMuls over random weights: `layers` * side * side * 4 bytes to write (32 MiB)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for k in range(layers):
        inits.append(numpy_helper.from_array(rng.standard_normal((side, side)).astype(np.float32), f"w{k}"))
        op = "MatMul" if k % 2 == 0 else "Gemm"
        nodes.append(helper.make_node(op, [prev, f"w{k}"], [f"h{k}"], name=f"n{k}"))
        prev = f"h{k}"
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, side])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, side])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_plan_is_shared_by_threads_and_its_writes_release_the_gil():
    model = cleave.load(big_model())
    plan = model.partition(rules={"backends": ["npu", "cpu"], "default": "cpu", "OPCODE": {"Gemm": "npu"}})
    # Another thread counts while the first part_bytes writes the parts (32 MiB of weights):
    # at about its own pace if the GIL is released, almost not at all if it is held.
    ticks, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    try:
        before, t = ticks[0], time.perf_counter()
        time.sleep(0.2)
        pace = (ticks[0] - before) / (time.perf_counter() - t)
        before, t = ticks[0], time.perf_counter()
        first = plan.part_bytes()
        took = time.perf_counter() - t
        during = (ticks[0] - before) / took
    finally:
        stop.set()
        counter.join()
    assert len(first) == len(plan.parts) == 8
    # Holding the GIL, the counter gets one switch interval (5 ms) of the whole call.
    assert took < 0.05 or during > 0.2 * pace, (
        f"{during:.0f} ticks/s during {took:.3f} s against {pace:.0f}/s: the GIL was held")
    # Threads using one plan at once: each gets the parts, none an 'already borrowed' error.
    results, errors = [], []

    def use():
        try:
            results.append([len(b) for b in plan.part_bytes()])
            plan.runner()
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            errors.append(e)

    threads = [threading.Thread(target=use) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert results == [[len(b) for b in first]] * 4


def test_a_planted_engine_package_in_the_working_folder_is_not_found(tmp_path, monkeypatch):
    capi = tmp_path / "onnxruntime" / "capi"
    capi.mkdir(parents=True)
    (tmp_path / "onnxruntime" / "__init__.py").write_text("")
    (capi / "libonnxruntime.so.1.31.1").write_bytes(b"not a library")
    monkeypatch.chdir(tmp_path)
    # Not answered from the modules already imported (the oracle's onnxruntime is).
    for name in [m for m in sys.modules if m == "onnxruntime" or m.startswith("onnxruntime.")]:
        monkeypatch.delitem(sys.modules, name)
    # As `python -c` and the REPL have it: the working folder first on sys.path.
    monkeypatch.setattr(sys, "path", ["", str(tmp_path)] + sys.path)
    found = _engines.ort_library()
    assert found is None or not found.startswith(str(tmp_path)), found


def test_arguments_of_the_wrong_type_raise_argument_error(tmp_path, tiny_cnn, tiny_part):
    bad_calls = [
        lambda: cleave.load(tiny_cnn, shape={"input": ("a", 3)}),
        lambda: cleave.load(tiny_cnn, dim={"batch": "x"}),
        lambda: cleave.load(tiny_cnn).partition(rules={"OPCODE": ["Conv"]}),
        lambda: cleave.load(tiny_cnn).partition(["cpu"], costs=3.5),
        lambda: cleave.load(tiny_cnn).partition(["cpu"], margin="wide"),
        lambda: cleave.load(tiny_cnn).partition(["cpu"], memory=["16GiB"]),
    ]
    plan = cleave.load(tiny_cnn).partition(rules=tiny_part)
    bad_calls += [lambda: plan.save(42), lambda: plan.report(3.0), lambda: plan.runner(engines=["ort"])]
    for call in bad_calls:
        with pytest.raises(cleave.ArgumentError):
            call()


def _worker_pids(engine="litert"):
    """This interpreter's child processes that serve `engine` for cleave (the label is their
    last argument)."""
    me, found = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        args = command.rstrip(b"\0").split(b"\0")
        if parent == me and b"_engine_worker" in command and args[-1] == engine.encode():
            found.append(int(pid))
    return found


def _tflite_runner():
    pytest.importorskip("ai_edge_litert")
    from conftest import test_data

    path = test_data() / "tflite" / "face_detection_short_range.tflite"
    if not path.is_file():
        pytest.fail(f"{path} missing: run `bash scripts/testdata/fetch-test-data.sh`")
    model = cleave.load(path)
    plan = model.partition(rules={"backends": ["npu", "cpu"], "default": "npu", "comply": "opcode",
                                  "OPCODE": {"ADD": "cpu"}})
    (info,) = model.inputs
    x = np.random.default_rng(0).standard_normal(info.shape, dtype=np.float32)
    # The plan too: a runner keeps its part files, which the test checks by dropping the plan
    # in the first test and keeping it here.
    return plan.runner(), {info.name: x}, plan


def test_litert_runs_in_a_worker_process_and_a_dead_worker_is_replaced():
    import signal

    runner, feeds, plan = _tflite_runner()
    # The runner alone: its parts load again from files it keeps.
    del plan
    first = runner.run(feeds)
    workers = _worker_pids()
    assert len(workers) == 1, workers
    # As a hostile model crashing LiteRT would: the worker dies, this interpreter does not,
    # and the parts load again into a new worker at their next run.
    os.kill(workers[0], signal.SIGSEGV)
    deadline = time.monotonic() + 10
    while workers[0] in _worker_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    again = runner.run(feeds)
    assert set(again) == set(first) and all(np.array_equal(again[k], first[k]) for k in first)
    assert _worker_pids() and workers[0] not in _worker_pids()


def test_a_worker_killed_during_a_run_is_replaced_and_the_run_answers():
    import signal

    runner, feeds, _plan = _tflite_runner()
    first = runner.run(feeds)
    (worker,) = _worker_pids()
    # Stopped, it takes the next request without answering; killed, it never will. The run
    # is made once more on a new worker (a second crash would be the part's, and an error:
    # the Rust tests of the worker cover it).
    os.kill(worker, signal.SIGSTOP)
    got = []

    def run():
        got.append(runner.run(feeds))

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    os.kill(worker, signal.SIGKILL)
    t.join(30)
    assert not t.is_alive() and len(got) == 1
    assert all(np.array_equal(got[0][k], first[k]) for k in first)
    assert _worker_pids() and worker not in _worker_pids()


def test_a_part_that_keeps_state_is_not_silently_started_over_on_a_new_worker():
    import signal

    pytest.importorskip("ai_edge_litert")
    from conftest import test_data

    path = test_data() / "tflite-stateful" / "okay_nabu.tflite"
    if not path.is_file():
        pytest.fail(f"{path} missing: run `bash scripts/testdata/fetch-test-data.sh`")
    model = cleave.load(path)
    plan = model.partition(rules={"backends": ["host"], "default": "host"})
    runner = plan.runner()
    feeds = model.random_inputs(0)
    runner.run(feeds)
    (worker,) = _worker_pids()
    os.kill(worker, signal.SIGKILL)
    # Loaded again, its variables would start over and its answers drift from the model's.
    with pytest.raises(cleave.EngineError, match="keeps state from run to run"):
        runner.run(feeds)

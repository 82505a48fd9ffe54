"""`bench`'s arithmetic: the cost of each hop against the 1-stage cut, the time around the
compute, and a level given up once requests keep failing."""

import time

import pytest


def test_bench_costs_each_hop_against_the_one_stage_cut_and_rates_against_the_limit():
    from cleave.serve.report import add_costs

    def result(parts, latency, compute, rps):
        return {
            "source": "m.onnx",
            "parts": parts,
            "around_compute_ms": latency - compute,
            "levels": [{"in_flight": 8, "throughput_rps": rps, "cpu_sum_mean_ms": compute + 5.0}],
        }

    one, two, four = result(1, 110.0, 100.0, 9.0), result(2, 115.0, 101.0, 12.0), result(4, 130.0, 104.0, 11.0)
    other = dict(result(2, 50.0, 40.0, 5.0), source="other.onnx")
    add_costs([two, one, four, other], {"m.onnx": {"limit_rps": 20.0}}, 2)
    # ((L_k - C_k) - (L_1 - C_1)) / (k - 1), whatever order the cuts came in.
    assert two["cost_per_hop_ms"] == pytest.approx((14.0 - 10.0) / 1)
    assert four["cost_per_hop_ms"] == pytest.approx((26.0 - 10.0) / 3)
    assert one["cost_per_hop_ms"] is None
    # No 1-stage cut of its model, no limit measured for it: said as unknown, not as zero.
    assert other["cost_per_hop_ms"] is None and other["levels"][0]["of_limit"] is None
    assert [r["levels"][0]["of_limit"] for r in (one, two, four)] == pytest.approx([0.45, 0.6, 0.55])
    # Throughput times the summed compute at that level, over the cores: no limit needed.
    assert other["levels"][0]["parts_computing"] == pytest.approx(5.0 * 0.045 / 2)
    assert four["levels"][0]["parts_computing"] == pytest.approx(11.0 * 0.109 / 2)


def test_bench_splits_the_time_around_the_compute_along_the_graphs_path():
    from cleave.serve.checks import path_at_one

    def parts(hop):
        return [{"compute_s": 0.040, "in_s": 0.001}, {"compute_s": 0.050, "in_s": hop},
                {"compute_s": 0.002, "in_s": hop, "out_s": 0.0008}]

    # Three requests: the medians are the middle one's figures.
    got = path_at_one([0.1, 0.2, 0.1], [parts(0.0005), parts(0.0004), parts(0.0006)])
    assert got["into_graph_ms"] == pytest.approx(1.0)
    assert got["between_parts_ms"] == pytest.approx(1.0) and got["hop_in_run_ms"] == pytest.approx(0.5)
    assert got["out_of_graph_ms"] == pytest.approx(0.8)
    # 100 ms less 92 ms of compute, 2 ms on the way in and between the parts, 0.8 ms back.
    assert got["outside_graph_ms"] == pytest.approx(100 - 92 - 2.0 - 0.8)
    # Parts that did not time the path (the handles plane, another node): no figures at all.
    assert path_at_one([0.1], [[{"compute_s": 0.04}]]) == {}


def test_bench_gives_a_level_up_once_requests_keep_failing():
    from cleave.serve.checks import run_load

    calls = []

    def dead():
        calls.append(1)
        time.sleep(0.01)
        raise TimeoutError("did not answer")

    wall, lat, compute, errors = run_load(dead, 40, 4)
    # Four in flight fail together; no fifth round of them after that.
    assert not lat and 4 <= len(errors) == len(calls) < 8

    answers = iter([RuntimeError("once")] + [[{"compute_s": 0.001}]] * 39)

    def flaky():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    wall, lat, compute, errors = run_load(flaky, 40, 1)
    assert len(lat) == 39 and len(errors) == 1

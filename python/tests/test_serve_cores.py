"""A served part's default threads: its share of the cores its node lets this process use,
the affinity mask and the cgroup's CPU quota both counted."""

import os

import pytest

from cleave.serve import actors


@pytest.mark.parametrize(
    "cpu_max, want",
    [
        (None, None),  # no cgroup v2 file: the affinity alone
        ("max 100000\n", None),  # no quota
        ("100000 100000\n", 1),
        ("150000 100000\n", 2),  # 1.5 cores: 2 threads still progress
        ("garbage\n", None),
    ],
)
def test_the_cgroup_quota_caps_the_cores_a_part_is_given(tmp_path, cpu_max, want):
    affinity = len(os.sched_getaffinity(0))
    if cpu_max is not None:
        (tmp_path / "cpu.max").write_text(cpu_max)
    expected = affinity if want is None else min(affinity, want)
    assert actors.usable_cores(str(tmp_path)) == expected
    assert actors.node_threads(1, str(tmp_path)) == expected
    assert actors.node_threads(expected * 2, str(tmp_path)) == 1

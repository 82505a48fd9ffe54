"""Reaching the cluster and sharing its nodes: Ray's token, autogroup scheduling, and the
package as Ray ships it."""

import pathlib

import pytest
from serve_fakes import _FakeRay

from cleave import serve


def test_a_failed_connection_names_ray_token_authentication(tmp_path, monkeypatch):
    hint = serve.cluster.ray_token_hint
    assert "is the token the cluster's" in hint({"RAY_AUTH_MODE": "token"}, str(tmp_path))
    # Told to connect without a token: nothing to add.
    assert hint({"RAY_AUTH_MODE": "disabled"}, str(tmp_path)) == ""
    # Mode unset: the cluster was asked before connecting, and a token sent if it wanted one.
    monkeypatch.setattr(serve.cluster, "token_probe_available", lambda: True)
    assert hint({}, str(tmp_path)) == ""
    # A Ray that cannot be asked: the hint names what to set.
    monkeypatch.setattr(serve.cluster, "token_probe_available", lambda: False)
    assert "set RAY_AUTH_MODE=token" in hint({}, str(tmp_path)) and "auth_token" not in hint({}, str(tmp_path))
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 64)
    said = hint({}, str(tmp_path))
    assert str(tmp_path / ".ray" / "auth_token") in said and "RAY_AUTH_MODE=disabled" in said, said


def test_the_token_is_sent_only_where_the_cluster_asks_for_it():
    send = serve.ray_token.send_token_if_asked
    # The cluster wants a token and one is at hand: token mode, said.
    ray, env = _FakeRay(wants_token=True, has_token=True), {}
    said = send("127.0.0.1:6379", env, ray.parts)
    assert env == {"RAY_AUTH_MODE": "token"} and ray.reinitialized and ray.asked == "127.0.0.1:6379"
    assert said.startswith("note: ") and "asks for a token" in said, said
    # It wants one and none is at hand: an error naming where to put it; the mode untouched.
    ray, env = _FakeRay(wants_token=True, has_token=False), {}
    said = send("127.0.0.1:6379", env, ray.parts)
    assert said.startswith("error: ") and "~/.ray/auth_token" in said and env == {}, said
    # A cluster without authentication, a token on the machine: nothing sent (token mode would
    # break it), nothing said.
    ray, env = _FakeRay(wants_token=False, has_token=True), {}
    assert send("127.0.0.1:6379", env, ray.parts) is None and env == {} and not ray.reinitialized
    # Unreachable: left to ray.init to say.
    ray, env = _FakeRay(wants_token=True, has_token=True, unreachable=True), {}
    assert send("127.0.0.1:6379", env, ray.parts) is None and env == {}
    # A mode the user set is theirs: the cluster is not even asked.
    ray, env = _FakeRay(wants_token=True, has_token=True), {"RAY_AUTH_MODE": "disabled"}
    assert send("127.0.0.1:6379", env, ray.parts) is None and ray.asked is None
    assert env == {"RAY_AUTH_MODE": "disabled"}


@pytest.mark.parametrize(
    "enabled, cgroup, subtree, want",
    [
        ("1", "4:cpu,cpuacct:/\n0::/\n", None, True),
        ("1", "4:cpu,cpuacct:/docker/abc\n0::/\n", None, False),
        ("0", "4:cpu,cpuacct:/\n", None, False),
        ("1", "0::/\n", None, True),
        ("1", "0::/user.slice/session-3.scope\n", {"": "memory pids", "user.slice": "memory"}, True),
        ("1", "0::/user.slice/session-3.scope\n", {"": "cpu memory pids", "user.slice": "cpu"}, False),
        ("1", "0::/system.slice/ray.service\n", {"": "memory"}, False),  # unreadable below: not assumed
    ],
)
def test_a_node_shares_its_cores_by_autogroup_only_with_autogroups_on_and_no_cpu_cgroup(tmp_path, enabled, cgroup, subtree, want):
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "sys/kernel").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "sys/kernel/sched_autogroup_enabled").write_text(enabled + "\n")
    (proc / "self/cgroup").write_text(cgroup)
    for path, controllers in (subtree or {}).items():
        (root / path).mkdir(parents=True, exist_ok=True)
        (root / path / "cgroup.subtree_control").write_text(controllers + "\n")
    assert serve.actors.shares_cores_by_autogroup(str(proc), str(root)) is want


def test_a_compiled_deployment_on_autogroup_nodes_says_what_its_idling_costs_other_sessions():
    parts = [
        {"deployment": "part1_cpu", "autogroup": True},
        {"deployment": "part2_npu", "autogroup": False},
    ]
    note = serve.cluster.autogroup_note({"data_plane": {"kind": "compiled"}, "parts": parts})
    assert note.startswith("note: the nodes of part1_cpu share their cores") and "part2_npu" not in note
    assert serve.cluster.autogroup_note({"data_plane": {"kind": "handles"}, "parts": parts}) is None
    assert serve.cluster.autogroup_note({"data_plane": {"kind": "compiled"}, "parts": parts[1:]}) is None


def test_the_serving_package_imports_its_own_modules_only_at_module_level():
    """Ray ships the package to other nodes by value (cloudpickle), where no package of its name
    exists: a relative import inside a function fails there with ModuleNotFoundError."""
    import ast

    folder = pathlib.Path(serve.__file__).parent
    inside = []
    for f in sorted(folder.glob("*.py")):
        if f.name == "__main__.py":  # run as a script, never shipped
            continue
        for fn in ast.walk(ast.parse(f.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside += [f"{f.name}:{n.lineno}" for n in ast.walk(fn) if isinstance(n, ast.ImportFrom) and n.level]
    assert inside == [], inside

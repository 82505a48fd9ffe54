"""The serving flags are declared once (serve/flags.json) and both faces take the same ones:
`cleave serve` / `cleave bench --ray` (clap) and `python -m cleave.serve` (argparse)."""

import json
import os
import subprocess

import pytest

from cleave.serve import checks, cli, cluster, ingress


def declared():
    return cli.declared_flags()


def test_the_declared_defaults_are_the_ones_the_application_applies():
    by = {f["flag"]: f for section in declared().values() if isinstance(section, list) for f in section}
    assert by["data-plane"]["choices"] == list(ingress.DATA_PLANES)
    assert by["data-plane"]["default"] == ingress.DEFAULT_DATA_PLANE
    assert int(by["ingress-port"]["default"]) == ingress.DEFAULT_INGRESS_PORT
    assert int(by["http-port"]["default"]) == cluster.DEFAULT_HTTP_PORT
    assert float(by["request-timeout"]["default"]) == ingress.DEFAULT_REQUEST_TIMEOUT_S
    assert by["via"]["choices"] == list(checks.VIAS)


def test_both_faces_take_every_declared_flag_and_check_it_alike(tmp_path):
    cleave = os.environ.get("CLEAVE_BIN") or "cleave"
    helps = {
        "serve": subprocess.run([cleave, "serve", "--help"], capture_output=True, text=True, check=True).stdout,
        "bench": subprocess.run([cleave, "bench", "--help"], capture_output=True, text=True, check=True).stdout,
    }
    faces = {"deploy": ["serve", "bench"], "route": ["serve"], "cluster": ["serve"], "serve": ["serve"],
             "bench": ["bench"]}
    p = cli.parser()
    for section, commands in faces.items():
        for f in declared()[section]:
            for c in commands:
                assert f"--{f['flag']}" in helps[c], (c, f["flag"])
            py = {"bench": "bench", "serve": "serve"}.get(section, "serve")
            words = [py, "x.conn.json", "--address", "h:1", f"--{f['flag']}"]
            if f["kind"] != "switch":
                words.append(f.get("default") or (f.get("choices") or ["1"])[0])
            args = p.parse_args(words)
            assert getattr(args, f["flag"].replace("-", "_")) not in (None, False), f["flag"]

    # The same bad values are refused by both, before anything runs.
    conn = tmp_path / "m.conn.json"
    for flag, bad in [("--ingress-port", "70000"), ("--data-plane", "shm"), ("--timeout", "0"), ("--http-port", "x")]:
        rust = subprocess.run([cleave, "serve", str(conn), "--ray", "h:1", flag, bad], capture_output=True, text=True)
        assert rust.returncode == 2 and flag in rust.stderr, (flag, rust.stderr)
        with pytest.raises(SystemExit) as e:
            p.parse_args(["serve", str(conn), "--ray", "h:1", flag, bad])
        assert e.value.code == 2

    # A deployment's own flags make no sense for an exported application.
    r = subprocess.run([cleave, "serve", str(conn), "--export", str(tmp_path / "out"), "--timeout", "5"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--timeout" in r.stderr and "--ray" in r.stderr, r.stderr


def test_the_file_is_valid_json_with_every_section():
    with open(cli.FLAGS_FILE, encoding="utf-8") as f:
        table = json.load(f)
    assert {"deploy", "route", "cluster", "serve", "bench"} <= set(table)

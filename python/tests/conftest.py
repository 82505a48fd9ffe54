"""Shared fixtures. These tests run against the installed wheel (scripts/test.sh installs it
with `pip install .` into a fresh virtual environment); the source tree is not on sys.path.
onnxruntime's own Python package is the oracle throughout: it never goes through cleave."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def test_data() -> pathlib.Path:
    return pathlib.Path(os.environ.get("CLEAVE_TEST_DATA", pathlib.Path.home() / ".cache/cleave/test-data"))


@pytest.fixture
def corpus_model():
    """A real detector (PaddleOCR v4 det, 672 nodes, dynamic batch, height and width)."""
    path = test_data() / "corpus" / "ppocrv4_det.onnx"
    if not path.is_file():
        pytest.fail(f"{path} missing: run `bash scripts/testdata/fetch-test-data.sh`")
    return path


@pytest.fixture
def tiny_cnn():
    return EXAMPLES / "tiny_cnn.onnx"


@pytest.fixture
def tiny_part():
    return EXAMPLES / "tiny_cnn.part"


_skipped: list = []


def pytest_runtest_logreport(report):
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_collectreport(report):
    # A module-level importorskip skips at collection.
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    """With CLEAVE_NO_SKIPS=1 (scripts/test-python.sh, whose venv installs every engine the
    tests use), a skipped test fails the run: a missing engine must not pass unseen."""
    if _skipped and os.environ.get("CLEAVE_NO_SKIPS") == "1":
        print(f"\nerror: {len(_skipped)} test(s) skipped with CLEAVE_NO_SKIPS=1: {', '.join(_skipped)}")
        session.exitstatus = 1

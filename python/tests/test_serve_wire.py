"""The .npz reader and the body limit: what a request carries is checked against what the
model takes before it is unpacked."""

import io
import zipfile

import numpy as np
import pytest
from serve_fakes import SPECS, npy, npy_header, npz

from cleave import serve


def test_inputs_are_checked_against_the_model_before_they_are_unpacked():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ids = np.array([1, 2], np.int64)
    got = serve.read_npz(npz({"x": npy(x), "ids": npy(ids)}), ["x", "ids"], 1 << 20, SPECS)
    np.testing.assert_array_equal(got["x"], x)
    np.testing.assert_array_equal(got["ids"], ids)
    assert got["x"].flags.writeable
    # A dynamic dim takes any size.
    serve.read_npz(npz({"x": npy(np.zeros((7, 4), np.float32)), "ids": npy(ids)}), ["x", "ids"], 1 << 20, SPECS)
    cases = [
        ({"x": npy(x.astype(np.float64))}, "input 'x' is float64, the model takes float32"),
        ({"x": npy(np.zeros((3, 5), np.float32))}, "input 'x' has shape [3, 5], the model takes [?, 4]"),
        ({"x": npy(np.zeros((3, 4, 1), np.float32))}, "has shape [3, 4, 1]"),
        ({"ids": npy(np.zeros(3, np.int64))}, "input 'ids' has shape [3], the model takes [2]"),
        # A header declaring 4 TiB: refused from the header, nothing allocated.
        ({"x": npy_header("<f4", "(274877906944, 4)")}, "more than 1048576 bytes"),
        # Data shorter than the header says.
        ({"x": npy_header("<f4", "(3, 4)") + b"\0" * 20}, "ends after 20 of the 48 bytes"),
        ({"x": b"not an npy at all"}, "x.npy is not an .npy file"),
    ]
    for how in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED):
        for members, message in cases:
            with pytest.raises(ValueError) as e:
                serve.read_npz(npz(members, how), ["x", "ids"], 1 << 20, SPECS)
            assert message in str(e.value), (how, message, str(e.value))
        with pytest.raises(ValueError, match="Python objects"):
            serve.read_npz(npz({"x": npy_header("|O", "(2,)")}, how), ["x"], 1 << 20)
    # Cut short mid-member: the directory is gone, and zipfile says so.
    with pytest.raises(zipfile.BadZipFile):
        serve.read_npz(npz({"x": npy(x)}, zipfile.ZIP_STORED)[:100], ["x"], 1 << 20, SPECS)


def test_a_stored_member_is_read_over_the_bodys_bytes_where_aligned_and_copied_once_where_not():
    x = np.random.default_rng(3).standard_normal((3, 4))
    # 30 bytes of zip header, the 10 of the name and numpy's 128 of .npy header: the data
    # lies at byte 168 of the body, aligned for float64; under the name "x.npy" at 163.
    aligned = serve.read_npz(npz({"abcdef": npy(x)}, zipfile.ZIP_STORED), ["abcdef"], 1 << 20)["abcdef"]
    moved = serve.read_npz(npz({"x": npy(x)}, zipfile.ZIP_STORED), ["x"], 1 << 20)["x"]
    np.testing.assert_array_equal(aligned, x)
    np.testing.assert_array_equal(moved, x)
    assert not aligned.flags.owndata and not aligned.flags.writeable
    assert moved.flags.owndata and moved.flags.aligned
    # What write_npz writes, np.load reads, and back: 0-d, empty, Fortran-ordered, structured.
    for a in [np.array(2.5), np.zeros((0, 3), np.float32), np.asfortranarray(x), np.zeros(2, [("a", "<f4"), ("b", "<i2")]),
              x[:, ::2]]:
        body = serve.write_npz({"t": a})
        for got in (np.load(io.BytesIO(body))["t"], serve.read_npz(body, ["t"], 1 << 20)["t"]):
            assert got.dtype == a.dtype and got.shape == a.shape and (got == a).all()


def test_the_body_limit_follows_the_inputs_declared_sizes():
    limit, why = serve.body_limit({"x": ["float32", [2, 4]], "ids": ["int64", [3]]}, ["x", "ids"])
    assert limit == 8 * (2 * 4 * 4 + 3 * 8) + 2 * 4096 + 65536 and "declare" in why
    # A dynamic dim or an unknown input: the configured bound.
    assert serve.body_limit(SPECS, ["x", "ids"]) == (serve.MAX_BODY_BYTES, "CLEAVE_MAX_BODY_BYTES")
    assert serve.body_limit({}, ["x"])[0] == serve.MAX_BODY_BYTES
    # An archive of exactly the declared inputs fits under it.
    x, ids = np.zeros((2, 4), np.float32), np.arange(3, dtype=np.int64)
    body = serve.write_npz({"x": x, "ids": ids})
    assert len(body) < limit

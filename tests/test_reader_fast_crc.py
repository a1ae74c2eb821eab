"""The verification's in-process Python reader checks record CRCs in C (issue #28 item 2).

TensorBoard without TensorFlow reads event files through its stub record reader, whose CRC-32C
is a pure-Python loop over every byte: the largest single cost of the Python reader's load in
a reduce of many small runs that rewrites their event files (86 of 485 s, cProfile, 200 runs).
``verify.readers.fast_stub_crc`` puts the same function in C in its place; these tests hold it
to being the same function (every input, corruption still refused by TensorBoard's own reader)
and to being what the verification's Python reader runs with.
"""
import os
import random

import pytest
from tensorboard.compat.tensorflow_stub import errors as stub_errors
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as stub

from tb_footprint_plugin.synth.events import EventWriter
from tb_footprint_plugin.verify import readers


@pytest.fixture
def slow_stub(monkeypatch):
    """The stub's own pure-Python check, put back after each test (the patch is process-wide)."""
    original = stub.masked_crc32c
    while getattr(original, "tbfp_fast", False):  # a test before this one installed it
        original = original.__defaults__[0]
    monkeypatch.setattr(stub, "masked_crc32c", original)
    return original


def _reference(data: bytes) -> int:
    """The stub's CRC by its own table, whatever ``masked_crc32c`` is now."""
    x = stub.crc_finalize(stub.crc_update(stub.CRC_INIT, data)) & 0xFFFFFFFF
    return (((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_fast_crc_is_the_stubs_function_for_every_input(slow_stub):
    assert readers.fast_stub_crc() is True
    fast = stub.masked_crc32c
    assert fast is not slow_stub and fast.tbfp_fast
    rng = random.Random(28)
    samples = [b"", b"\x00", b"\xff" * 8, bytes(range(256))]
    samples += [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 3000))) for _ in range(40)]
    for data in samples:
        assert fast(data) == _reference(data) == slow_stub(data)
    # anything that is not bytes goes to the stub's own loop, unchanged
    assert fast(bytearray(b"abc")) == slow_stub(bytearray(b"abc"))
    assert readers.fast_stub_crc() is True and stub.masked_crc32c is fast  # idempotent


def _event_file(tmp_path) -> str:
    run = tmp_path / "run"
    with EventWriter(str(run)) as w:
        for step in range(50):
            w.scalar("loss", step, 1.0 / (step + 1))
    (path,) = [os.path.join(run, n) for n in os.listdir(run)]
    return path


def _read_all(path: str) -> int:
    reader = stub.PyRecordReader_New(path, 0, None, None)
    n = 0
    while True:
        try:
            reader.GetNext()
        except stub_errors.OutOfRangeError:
            return n
        n += 1


def test_tensorboards_stub_reader_still_refuses_a_damaged_record(tmp_path, slow_stub):
    path = _event_file(tmp_path)
    n_slow = _read_all(path)
    readers.fast_stub_crc()
    assert _read_all(path) == n_slow == 51  # the file_version event and 50 scalars
    data = bytearray(open(path, "rb").read())
    data[len(data) - 6] ^= 0x01  # a byte of the last record's data: its CRC no longer matches
    with open(path, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(stub_errors.DataLossError, match="event crc32"):
        _read_all(path)
    data[len(data) - 6] ^= 0x01
    data[3] ^= 0x10  # the first record's length: its header CRC no longer matches
    with open(path, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(stub_errors.DataLossError, match="header crc32"):
        _read_all(path)


def test_the_verifications_python_reader_loads_with_the_c_check(tmp_path, slow_stub):
    path = _event_file(tmp_path)
    assert not getattr(stub.masked_crc32c, "tbfp_fast", False)
    with readers.Reader(os.path.dirname(path), "python") as r:
        view = r.read()
    assert getattr(stub.masked_crc32c, "tbfp_fast", False)
    assert not view.fatal and view.run_present

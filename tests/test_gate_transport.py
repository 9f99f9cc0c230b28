"""Large tensors travel from the gate's worker to its parent as sealed memory files."""
from __future__ import annotations

import multiprocessing
import os
import socket
from multiprocessing.reduction import sendfds

import numpy as np
import pytest

from gate import transport
from gate.channel import Channel

pytestmark = pytest.mark.skipif(not transport.SEALED_FILES, reason="Linux memory files only")


def _pipe() -> tuple[multiprocessing.connection.Connection, multiprocessing.connection.Connection]:
    return multiprocessing.Pipe(duplex=True)


def test_a_large_tensor_arrives_intact_through_a_sealed_file_and_a_small_one_as_bytes() -> None:
    parent, child = _pipe()
    big = np.arange(1 << 20, dtype=np.int32)
    small = np.arange(10, dtype=np.float32)
    Channel(child).send("out", "v", [("tensor", "int32", big.shape, transport.Sealed.of(big)),
                                     ("tensor", "float32", small.shape, small.tobytes())], 7)
    Channel(child).send("done")
    msg = transport.receive(parent, parent.recv())
    (_, _, outputs, launches) = msg[0], msg[1], msg[2], msg[3]
    assert launches == 7
    assert np.array_equal(transport.raw_numpy(outputs[0]), big)
    assert isinstance(outputs[1][3], bytes)
    assert np.array_equal(transport.raw_numpy(outputs[1]), small)
    assert transport.receive(parent, parent.recv()) == ("done",)
    # content equality (the parent spots input-independent outputs by comparing payloads)
    again = transport.Sealed.of(big)
    Channel(child).send("x", ("tensor", "int32", big.shape, again))
    assert transport.receive(parent, parent.recv())[1] == outputs[0]


def test_a_sealed_file_cannot_be_written_or_resized_by_anyone() -> None:
    sealed = transport.Sealed.of(np.ones(1 << 18, dtype=np.float32))
    try:
        with pytest.raises(PermissionError):
            os.pwrite(sealed.fd, b"\0" * 8, 0)
        with pytest.raises(PermissionError):
            os.ftruncate(sealed.fd, 8)
        import mmap

        with pytest.raises(PermissionError):
            mmap.mmap(sealed.fd, sealed.nbytes, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(sealed.fd)


def test_a_marker_without_its_descriptor_is_a_forged_message() -> None:
    parent, child = _pipe()
    child.send(("out", ("tensor", "int32", (4,), ("__sealed__", 16))))
    child.send(("done",))
    with pytest.raises(transport.BadSealed):
        transport.receive(parent, parent.recv())


def test_a_file_that_can_still_be_written_is_refused() -> None:
    parent, child = _pipe()
    fd = os.memfd_create("open", os.MFD_CLOEXEC)
    os.write(fd, b"\1" * 64)
    try:
        child.send(("out", ("tensor", "int8", (64,), ("__sealed__", 64))))
        with socket.socket(fileno=os.dup(child.fileno())) as sock:
            sendfds(sock, [fd])
        with pytest.raises(transport.BadSealed, match="can still be written"):
            transport.receive(parent, parent.recv())
    finally:
        os.close(fd)


def test_a_file_of_another_size_than_announced_is_refused() -> None:
    parent, child = _pipe()
    sealed = transport.Sealed.of(np.ones(1024, dtype=np.int8))
    child.send(("out", ("tensor", "int8", (4096,), ("__sealed__", 4096))))
    with socket.socket(fileno=os.dup(child.fileno())) as sock:
        sendfds(sock, [sealed.fd])
    os.close(sealed.fd)
    with pytest.raises(transport.BadSealed, match="announced size"):
        transport.receive(parent, parent.recv())


def test_a_gate_whose_outputs_all_travel_sealed_gives_the_same_verdict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end at the interpret tier: every tensor (references, outputs) sent as a sealed
    file passes an honest kernel and still rejects a wrong one."""
    from pathlib import Path

    import gate
    from gate import FailureKind, Tier

    saxpy = Path(__file__).parent / "data" / "cases" / "saxpy"
    monkeypatch.setenv("KLINEAGE_SEALED_MIN_BYTES", "1")
    ok = gate.check_file(saxpy / "saxpy_triton.py", saxpy, Tier.INTERPRET, cache=False)
    assert ok.ok, ok.reason
    wrong = (saxpy / "saxpy_triton.py").read_text().replace("a * x + y", "a * x - y")
    bad = gate.check(wrong, "triton", saxpy, Tier.INTERPRET, cache=False)
    assert not bad.ok and bad.failure_kind is FailureKind.WRONG_OUTPUT


def test_a_worker_that_dies_after_announcing_sealed_tensors_is_a_crash(tmp_path) -> None:
    """A marker whose descriptors never come because the worker died is a crash, not a
    forged message (the parent sees the worker gone before it judges)."""
    from pathlib import Path

    import gate
    from gate import FailureKind, Tier

    saxpy = Path(__file__).parent / "data" / "cases" / "saxpy"
    source = '''
import os
import multiprocessing.connection as mc

def run(a, x, y):
    try:
        raise LookupError
    except LookupError as exc:  # the worker's pipe, through the frames below (gc is refused)
        frame = exc.__traceback__.tb_frame
    pipes = []
    while frame is not None:
        pipes += [getattr(v, "conn", None) for v in list(frame.f_locals.values())]
        frame = frame.f_back
    for o in pipes:
        if isinstance(o, mc.Connection):
            try:
                o.send(("out", "default", "seed", 1, [("tensor", "float32", (4,), ("__sealed__", 16))], 1))
            except Exception:
                pass
    os._exit(3)
'''
    verdict = gate.check(source, "triton", saxpy, Tier.INTERPRET, cache=False)
    assert not verdict.ok
    assert verdict.failure_kind is FailureKind.CRASH, (verdict.failure_kind, verdict.reason)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
def test_a_tensor_copied_straight_into_a_sealed_file_arrives_intact(dtype: str) -> None:
    import torch

    from gate.guards import Captured

    t = torch.arange(3 * 1024 * 256, dtype=torch.float32).reshape(3, 1024, 256).transpose(1, 2)
    t = t.to(getattr(torch, dtype))
    sealed = transport.Sealed.copy_of(t, Captured.take())  # the device tier's path, on any tensor
    parent, child = _pipe()
    Channel(child).send("out", ("tensor", dtype, tuple(t.shape), sealed))
    _, item = transport.receive(parent, parent.recv())
    assert np.array_equal(transport.to_numpy(item), t.float().numpy() if dtype == "bfloat16" else t.numpy())

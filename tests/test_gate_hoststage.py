"""Copies between device and host memory a chunk at a time through two reused buffers
(`gate.hoststage`): the chunked copies give the bytes of a plain copy for every size against the
chunk, and where no GPU takes part the helpers are torch's own copies."""
from __future__ import annotations

import pytest
import torch

from gate import hoststage
from gate.hoststage import Stage


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 128, 1000, 4096 + 7])
def test_chunked_copies_either_way_give_the_bytes_of_a_plain_copy(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
    stage = Stage(64, pinned=False)
    down = torch.zeros(n, dtype=torch.uint8)
    stage.down(src, down)
    assert torch.equal(down, src)
    up = torch.full((n,), 7, dtype=torch.uint8)
    stage.up(src, up)
    assert torch.equal(up, src)
    # the buffers alternate and are reused: a second copy through the same stage lands whole
    other = torch.flip(src, (0,)).contiguous()
    stage.down(other, down)
    assert torch.equal(down, other)
    assert len(stage.buffers) == (2 if n else 0) and all(b.numel() == 64 for b in stage.buffers)


def test_a_chunk_boundary_inside_an_element_keeps_every_value() -> None:
    """Chunks are bytes: a boundary that splits a float's four bytes still copies it whole."""
    x = torch.randn(1001, generator=torch.Generator().manual_seed(5))
    stage = Stage(30, pinned=False)  # not a multiple of 4
    out = torch.empty_like(x)
    stage.down(x.view(torch.uint8), out.view(torch.uint8))
    assert torch.equal(out, x)


def test_without_a_gpu_the_helpers_are_torchs_own_copies() -> None:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    host = hoststage.to_host(x)
    assert torch.equal(host, x) and host.data_ptr() != x.data_ptr()
    t = x.t()  # not contiguous: its strides are kept
    assert hoststage.to_host(t).stride() == t.stride()
    back = hoststage.to_device(host, "cpu")
    assert torch.equal(back, x)
    dst = torch.zeros(3, 4)
    hoststage.write_back(dst, x)
    assert torch.equal(dst, x)


@pytest.mark.gpu
def test_on_the_gpu_staged_copies_match_plain_ones_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hoststage, "_STAGE", Stage(1 << 20))
    x = torch.randn((3 << 20) + 5, device="cuda")
    host = hoststage.to_host(x)
    assert host.device.type == "cpu" and torch.equal(host, x.cpu())
    back = hoststage.to_device(host, "cuda")
    assert torch.equal(back, x)
    dst = torch.zeros_like(host)
    hoststage.write_back(dst, x * 2)
    assert torch.equal(dst, (x * 2).cpu())


@pytest.mark.gpu
def test_on_the_gpu_an_output_in_host_memory_is_judged_as_the_same_output_on_the_device() -> None:
    """A lean plan's sampled output waits in host memory: judged a chunk at a time against a
    reference held on the device or in host memory, its figures are those of the same output
    on the device, and the reference opens again under the fresh key each time."""
    from gate import heldcompare

    g = torch.Generator(device="cuda").manual_seed(4)
    ref = torch.randn((1 << 22) + 3, device="cuda", generator=g)
    out = ref.clone()
    out[12345] += 0.5
    for park in (False, True):
        key = heldcompare.new_key()
        held, _ = heldcompare.hold(ref, key)
        if park:
            held[0].park()
        figures = []
        for where in (out, out.cpu()):
            fresh = heldcompare.new_key()
            figures.append(heldcompare.judge(where, held, key, fresh, [None], (0.01, 0.01)))
            key = fresh
        assert figures[0]["misses"] == figures[1]["misses"] == [1], figures
        assert figures[0]["at"] == figures[1]["at"] and figures[0]["err"] == pytest.approx(figures[1]["err"])

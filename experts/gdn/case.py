"""The `gdn` workload: gated delta net forward, chunked (chunk 64), grouped value heads.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.

Layout as flash-linear-attention's `chunk_gated_delta_rule` takes it: q, k are (B, T, H, K),
L2-normalized over K; v is (B, T, HV, V) with HV a multiple of H (value head j reads query/key
head j // (HV // H)); g (log decay, fp32) and beta (in (0, 1)) are (B, T, HV). The recurrence,
per value head, with state S (K x V) starting at zero and scale = K ** -0.5:
    S = exp(g_t) S;  d = beta_t (v_t - S^T k_t);  S = S + k_t d^T;  o_t = scale * S^T q_t
The output is o, (B, T, HV, V) in v's dtype; the final state is not returned.
"""
from __future__ import annotations

import warnings

import torch

NAME = "gdn"
DESCRIPTION = "gated delta net forward (chunked WY form), 16 q/k heads serving 48 v heads"
PLATFORM = "cuda"
REFERENCE_NAME = "flash-linear-attention chunk_gated_delta_rule (else a PyTorch chunked form)"

CHUNK = 64
SHAPES = {"default": {"B": 1, "T": 4096, "H": 16, "HV": 48, "K": 128, "V": 128, "dtype": "bf16"}}
# The interpreter runs each kernel's first autotune config, so these are the smallest shapes on
# which every path the device runs is exercised: two chunks (T not a multiple of the chunk,
# so the tail is masked), two value heads sharing one key head, K = 128 as on the device (the
# state's second 64-row half, K K^T in four BD = 32 slices), V = 128 (two BV = 64 tiles).
SMALL_SHAPES = {"default": {"B": 1, "T": 100, "H": 1, "HV": 2, "K": 128, "V": 128,
                            "dtype": "fp32"}}

TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}

EXPERTS = [("gdn_triton.py", "triton")]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(q, k, v, g, beta) as the module docstring lays them out; g is fp32, the rest `dtype`."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    b, t, h, hv = shape["B"], shape["T"], shape["H"], shape["HV"]
    q = torch.nn.functional.normalize(torch.randn(b, t, h, shape["K"], generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(b, t, h, shape["K"], generator=gen), dim=-1)
    v = torch.randn(b, t, hv, shape["V"], generator=gen)
    # Decays between about 0.6 and 0.99 per token: state survives a chunk but not the sequence.
    g = torch.nn.functional.logsigmoid(2.0 + torch.randn(b, t, hv, generator=gen))
    beta = torch.sigmoid(torch.randn(b, t, hv, generator=gen))
    return (q.to(device, dt), k.to(device, dt), v.to(device, dt), g.to(device),
            beta.to(device, dt))


def _fla_chunk_gated_delta_rule():
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except ImportError:
        return None
    return chunk_gated_delta_rule


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
              beta: torch.Tensor) -> torch.Tensor:
    """flash-linear-attention on a GPU when importable, else `chunked_reference` in fp32 (on a
    GPU with a `fallback:` warning: the gate flags it and `klineage bench` marks the row)."""
    fla = _fla_chunk_gated_delta_rule() if q.device.type == "cuda" else None
    if fla is not None:
        return fla(q, k, v, g, beta, output_final_state=False)[0]
    if q.device.type == "cuda":
        warnings.warn("fallback: flash-linear-attention is not importable here; a PyTorch "
                      "chunked form in fp32 stands in for chunk_gated_delta_rule", stacklevel=1)
    return chunked_reference(q, k, v, g, beta).to(v.dtype)


def _expand_heads(x: torch.Tensor, hv: int) -> torch.Tensor:
    return x.float().repeat_interleave(hv // x.shape[2], dim=2)


def chunked_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                      beta: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """The chunked (WY) algorithm in fp32 PyTorch; returns fp32 (B, T, HV, V)."""
    b, t, hv, dv = v.shape
    scale = q.shape[-1] ** -0.5
    pad = (-t) % chunk
    n = (t + pad) // chunk

    def blocks(x: torch.Tensor) -> torch.Tensor:
        # (B, T, HV, ...) -> (B, HV, N, C, ...), zero-padded: padded tokens have g = beta = 0.
        x = torch.nn.functional.pad(x.float(), (0, 0) * (x.dim() - 3) + (0, 0, 0, pad))
        x = x.reshape(b, n, chunk, hv, *x.shape[3:])
        return x.permute(0, 3, 1, 2, *range(4, x.dim())).contiguous()

    qc, kc = blocks(_expand_heads(q, hv)), blocks(_expand_heads(k, hv))
    vc, gc, bc = blocks(v), blocks(g).cumsum(-1), blocks(beta)
    idx = torch.arange(chunk, device=v.device)
    lower = idx[:, None] > idx[None, :]
    causal = idx[:, None] >= idx[None, :]
    gap = gc[..., :, None] - gc[..., None, :]
    decay_strict = torch.where(lower, gap, float("-inf")).exp()
    decay = torch.where(causal, gap, float("-inf")).exp()
    a = bc[..., None] * (kc @ kc.transpose(-1, -2)) * decay_strict
    eye = torch.eye(chunk, device=v.device)
    inv = torch.linalg.solve_triangular(eye + a, eye.expand_as(a), upper=False)
    w = inv @ (kc * (bc * gc.exp())[..., None])
    u = inv @ (vc * bc[..., None])
    state = torch.zeros(b, hv, q.shape[-1], dv, device=v.device)
    out = torch.empty_like(vc)
    for i in range(n):
        delta = u[:, :, i] - w[:, :, i] @ state
        attn = (qc[:, :, i] @ kc[:, :, i].transpose(-1, -2)) * decay[:, :, i]
        inter = (qc[:, :, i] * gc[:, :, i, :, None].exp()) @ state
        out[:, :, i] = scale * (inter + attn @ delta)
        last = gc[:, :, i, -1]
        tail = (last[..., None] - gc[:, :, i]).exp()[..., None]
        state = state * last.exp()[..., None, None] + (kc[:, :, i] * tail).transpose(-1, -2) @ delta
    return out.permute(0, 2, 3, 1, 4).reshape(b, n * chunk, hv, dv)[:, :t]


def recurrent_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                        beta: torch.Tensor) -> torch.Tensor:
    """The token-by-token recurrence of the module docstring in fp64; returns fp64."""
    b, t, hv, dv = v.shape
    scale = q.shape[-1] ** -0.5
    qe, ke = _expand_heads(q, hv).double(), _expand_heads(k, hv).double()
    vd, gd, bd = v.double(), g.double(), beta.double()
    state = torch.zeros(b, hv, q.shape[-1], dv, dtype=torch.float64, device=v.device)
    out = torch.empty(b, t, hv, dv, dtype=torch.float64, device=v.device)
    for i in range(t):
        state = state * gd[:, i].exp()[..., None, None]
        kt = ke[:, i]
        delta = bd[:, i, :, None] * (vd[:, i] - (state * kt[..., None]).sum(-2))
        state = state + kt[..., None] * delta[..., None, :]
        out[:, i] = scale * (state * qe[:, i, :, :, None]).sum(-2)
    return out


def flops(shape: dict) -> float:
    """Matrix work per chunk and value head: K K^T, two WY products, the state update (W S,
    K^T delta), the output (Q S, Q K^T, attention @ delta)."""
    c, kd, vd = CHUNK, shape["K"], shape["V"]
    per_chunk = 2.0 * (c * c * kd + c * c * kd + c * c * vd + c * kd * vd + c * kd * vd
                       + c * kd * vd + c * c * kd + c * c * vd)
    chunks = shape["B"] * shape["HV"] * -(-shape["T"] // c)
    return per_chunk * chunks


def bytes_moved(shape: dict) -> float:
    """q, k, v, g, beta read once and o written once (intermediates not counted)."""
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    bt = shape["B"] * shape["T"]
    qk = 2 * bt * shape["H"] * shape["K"] * size
    vo = 2 * bt * shape["HV"] * shape["V"] * size
    gates = bt * shape["HV"] * (4 + size)
    return float(qk + vo + gates)

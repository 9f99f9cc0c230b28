import torch
import torch.nn as nn


class Model(nn.Module):
    """softmax(q k^T / sqrt(d)) v over (batch, heads, sequence, head dim) tensors."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        return torch.softmax(s, dim=-1) @ v


def get_inputs():
    return [torch.randn(1, 2, 72, 16), torch.randn(1, 2, 72, 16), torch.randn(1, 2, 72, 16)]


def get_init_inputs():
    return []

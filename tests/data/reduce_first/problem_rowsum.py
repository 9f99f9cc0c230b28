import torch
import torch.nn as nn


class Model(nn.Module):
    """Each row of x @ w.T halved, summed over the hidden units and scaled by 1.5, kept 2-D."""

    def __init__(self, k, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, k) / k ** 0.5)

    def forward(self, x):
        return ((x @ self.w.T) / 2).sum(dim=1, keepdim=True) * 1.5


rows = 16
k = 64
n = 48


def get_inputs():
    return [torch.randn(rows, k)]


def get_init_inputs():
    return [k, n]

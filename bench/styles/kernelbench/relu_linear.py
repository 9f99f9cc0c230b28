import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x @ w + b) with w stored (in_features, out_features)."""

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.w = nn.Parameter(torch.randn(in_features, out_features) * 0.05)
        self.b = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        return torch.relu(x @ self.w + self.b)


batch_size = 2048
in_features = 1024
out_features = 2048


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]

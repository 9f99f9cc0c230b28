import torch
import torch.nn as nn


class Model(nn.Module):
    """Convolution, a bias of a derived shape, a scale: init arguments of every kind."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, bias_shape, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias) * self.scale


batch_size = 128
in_channels = 16
out_channels = 64
height = width = 128
kernel_size = (3, 5)
stride = (1, 2)
bias_shape = (out_channels, 1, 1)
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, bias_shape, scale]

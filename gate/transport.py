"""Moving tensors from the gate's worker to its parent as plain bytes.

The worker encodes outputs (and, for cases with their own `compare`, inputs) with functions it
captured before candidate code was imported; the parent decodes them with numpy, so the
comparison never runs where a candidate could reach it. An encoded value is a tuple:
("tensor", dtype, shape, bytes) | ("value", python scalar) | ("other", type name, detail).
"""
from __future__ import annotations

from typing import Any

import numpy as np

# torch dtype name -> (numpy dtype of the raw bytes, itemsize). bfloat16 travels as its bits.
_NUMPY = {
    "float16": np.float16, "float32": np.float32, "float64": np.float64, "bfloat16": np.uint16,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "bool": np.bool_,
}
_SHORT = {"float16": "fp16", "float32": "fp32", "float64": "fp64", "bfloat16": "bf16"}


def short_dtype(dtype: str) -> str:
    """The case-table spelling of a dtype ("float16" -> "fp16"); others unchanged."""
    return _SHORT.get(dtype, dtype)


def encode(value: Any, cap: Any) -> tuple[Any, ...]:
    """Encode one output/input. `cap` is the worker's `guards.Captured`."""
    if type(value) is cap.tensor_type:
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype not in _NUMPY:
            return ("other", "tensor", f"unsupported dtype {dtype}")
        host = cap.contiguous(cap.cpu(value))
        if dtype == "bfloat16":
            import torch

            host = cap.view(host, torch.int16)
        return ("tensor", dtype, tuple(value.shape), cap.numpy(host).tobytes())
    if isinstance(value, (bool, int, float)) or value is None:
        return ("value", value)
    return ("other", type(value).__name__, repr(type(value)))


def encode_all(values: Any, cap: Any) -> list[tuple[Any, ...]]:
    """Encode a reference-style result: one tensor, or a tuple/list of them."""
    if isinstance(values, (tuple, list)):
        return [encode(v, cap) for v in values]
    return [encode(values, cap)]


def raw_numpy(item: tuple[Any, ...]) -> np.ndarray:
    """A read-only view of a ("tensor", ...) item's bytes, no copy; bfloat16 as its uint16 bits."""
    _, dtype, shape, data = item
    return np.frombuffer(data, dtype=_NUMPY[dtype]).reshape(shape)


def to_numpy(item: tuple[Any, ...]) -> np.ndarray:
    """Decode a ("tensor", ...) item; bfloat16 widens exactly to float32."""
    arr = raw_numpy(item)
    if item[1] == "bfloat16":
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    return arr


def to_torch(item: tuple[Any, ...]) -> Any:
    """Decode an item into a CPU torch tensor (or the scalar); used for a case's `compare`."""
    import torch

    if item[0] == "value":
        return item[1]
    if item[0] != "tensor":
        return None
    _, dtype, shape, data = item
    arr = np.frombuffer(data, dtype=_NUMPY[dtype]).reshape(shape).copy()
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if dtype == "bfloat16" else t

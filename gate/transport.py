"""Moving tensors from the gate's worker to its parent as plain bytes.

The worker encodes outputs (and, for cases with their own `compare`, inputs) with functions it
captured before candidate code was imported; the parent decodes them with numpy, so the
comparison never runs where a candidate could reach it. An encoded value is a tuple:
("tensor", dtype, shape, bytes) | ("value", python scalar) | ("other", type name, detail).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

try:  # Linux: large tensors travel as sealed memory files, not through the pipe
    import fcntl

    _SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
    SEALED_FILES = hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS")
except (ImportError, AttributeError):  # pragma: no cover — not Linux
    SEALED_FILES = False
# Tensors of at least this many bytes are sent as a sealed memory file (`Sealed`); the
# environment variable KLINEAGE_SEALED_MIN_BYTES overrides it (tests send small ones so).
SEALED_MIN_BYTES = 1 << 20


def _sealed_min() -> int:
    try:
        return int(os.environ.get("KLINEAGE_SEALED_MIN_BYTES", SEALED_MIN_BYTES))
    except ValueError:
        return SEALED_MIN_BYTES

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
        if SEALED_FILES and value.device.type != "cpu" \
                and value.numel() * value.element_size() >= _sealed_min():
            return ("tensor", dtype, tuple(value.shape), Sealed.copy_of(value, cap))
        host = cap.contiguous(cap.cpu(value))
        if dtype == "bfloat16":
            import torch

            host = cap.view(host, torch.int16)
        array = cap.numpy(host)
        if SEALED_FILES and array.nbytes >= _sealed_min():
            return ("tensor", dtype, tuple(value.shape), Sealed.of(array))
        return ("tensor", dtype, tuple(value.shape), array.tobytes())
    if isinstance(value, (bool, int, float)) or value is None:
        return ("value", value)
    return ("other", type(value).__name__, repr(type(value)))


class Sealed:
    """A tensor's bytes in a memory file (`memfd`) sealed against writing, shrinking and
    growing before it leaves the worker: a copy into the file and none through the pipe, where
    a 32 MB output cost a pickle, two socket copies and an unpickle (about 0.1 s each way on a
    small machine). Once sealed, nobody (the worker and its candidate included) can change the
    bytes the parent maps. `Channel.send` replaces each with a marker and passes the file
    descriptors beside the message (`send`); the parent maps them read-only (`receive`)."""

    __slots__ = ("fd", "nbytes")

    def __init__(self, fd: int, nbytes: int) -> None:
        self.fd, self.nbytes = fd, nbytes

    @staticmethod
    def of(array: np.ndarray) -> Sealed:
        fd = os.memfd_create("klineage-out", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            view = memoryview(np.ascontiguousarray(array)).cast("B")
            done = 0
            while done < len(view):
                done += os.write(fd, view[done:])
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS | fcntl.F_SEAL_SEAL)
        except BaseException:
            os.close(fd)
            raise
        return Sealed(fd, len(view))

    @staticmethod
    def copy_of(tensor: Any, cap: Any) -> Sealed:
        """`tensor`'s elements (any device, any strides), row-major, in a sealed memory file,
        by one copy from the tensor into the file's mapping (`cap.copy_`): for a GPU tensor a
        single device-to-host copy, with no host buffer and second copy in between (a 4 GB
        output cost both, seconds each). A host tensor goes through `of` (the kernel's write
        into the file outpaces page faults on a fresh mapping)."""
        import mmap  # noqa: PLC0415

        nbytes = tensor.numel() * tensor.element_size()
        fd = os.memfd_create("klineage-out", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, nbytes)
            mapping = mmap.mmap(fd, nbytes)
            try:
                dst = cap.frombuffer(mapping, dtype=tensor.dtype, count=tensor.numel())
                cap.copy_(cap.view(dst, tuple(tensor.shape)), tensor)
                del dst
            finally:
                mapping.close()  # no writable mapping may remain for the write seal
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS | fcntl.F_SEAL_SEAL)
        except BaseException:
            os.close(fd)
            raise
        return Sealed(fd, nbytes)


_MARK = "__sealed__"
# How long the parent waits for the descriptors announced by a message.
SEALED_WAIT_S = 30.0


def _marked(obj: Any, found: list[Sealed]) -> Any:
    """`obj` (a message: nested tuples and lists) with each `Sealed` replaced by a marker;
    the `Sealed` objects are appended to `found` in order."""
    if isinstance(obj, Sealed):
        found.append(obj)
        return (_MARK, obj.nbytes)
    if isinstance(obj, (tuple, list)):
        items = [_marked(x, found) for x in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


def _is_marker(obj: Any) -> bool:
    return isinstance(obj, tuple) and len(obj) == 2 and obj[0] == _MARK


def _filled(obj: Any, fill: Any) -> Any:
    """`obj` with each marker replaced by `fill(marker's size)`, in order."""
    if _is_marker(obj):
        return fill(obj[1])
    if isinstance(obj, (tuple, list)):
        items = [_filled(x, fill) for x in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


def send(conn: Any, msg: tuple[Any, ...]) -> None:
    """Send `msg` on a socket-backed `multiprocessing` connection; its `Sealed` tensors go as
    file descriptors right after it (closed here once sent)."""
    found: list[Sealed] = []
    plain = _marked(msg, found)
    try:
        conn.send(plain)
        if found:
            import socket  # noqa: PLC0415
            from multiprocessing.reduction import sendfds  # noqa: PLC0415

            with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                sendfds(sock, [s.fd for s in found])
    finally:
        for s in found:
            os.close(s.fd)


# What a message from the worker may hold: the plain types pickle builds without a global
# (str, bytes, numbers, None, bool, tuples, lists, dicts) and these few, each rebuilt from data
# alone. Anything else in a message names a callable for the unpickler to call (a class of the
# candidate's, `eval`): the parent would run it (`load`).
SAFE_GLOBALS = frozenset({
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "complex"),
    ("builtins", "bytearray"), ("builtins", "slice"), ("builtins", "range"),
    ("_codecs", "encode"),
    ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
})


class UnsafeMessage(Exception):
    """A message from the worker that names a global outside `SAFE_GLOBALS` (forged)."""


def load(data: bytes) -> Any:
    """Unpickle one message from the worker (bytes as `Connection.recv_bytes` gives them).
    The worker runs candidate code, which can reach the worker's end of the pipe and send
    any pickle: one whose unpickling calls a global (a `__reduce__` naming `exec`, or a class
    of the candidate's module) would run that code in the parent, which judges the run. Only
    the data types of `SAFE_GLOBALS` are rebuilt; any other global raises `UnsafeMessage`
    before anything is called."""
    import io  # noqa: PLC0415
    import pickle  # noqa: PLC0415

    class Restricted(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) not in SAFE_GLOBALS:
                raise UnsafeMessage(f"a message from the worker names {module}.{name}, which "
                                    f"the parent does not rebuild (unpickling it would call it)")
            return super().find_class(module, name)

    try:
        return Restricted(io.BytesIO(data)).load()
    except UnsafeMessage:
        raise
    except Exception as exc:  # noqa: BLE001 — a malformed pickle is a forged message too
        raise UnsafeMessage(f"a message from the worker does not unpickle: {type(exc).__name__}") from None


def recv(conn: Any) -> Any:
    """The next message on `conn` from the worker, unpickled by `load`."""
    return load(conn.recv_bytes())


class BadSealed(Exception):
    """A message's sealed tensors did not arrive as announced (a forged message)."""


def receive(conn: Any, msg: Any) -> Any:
    """`msg` as received with its markers replaced by read-only views of the sealed files the
    sender passed after it. Raises BadSealed when the descriptors do not come, or a file is
    not sealed against writing or is not the announced size."""
    sizes: list[Any] = []
    _filled(msg, sizes.append)
    if not sizes:
        return msg
    if not SEALED_FILES:
        raise BadSealed("sealed tensors on a machine without memory files")
    if not all(isinstance(n, int) and n > 0 for n in sizes):
        raise BadSealed("a sealed tensor's announced size is not a positive integer")
    import mmap  # noqa: PLC0415
    import socket  # noqa: PLC0415
    from multiprocessing.reduction import recvfds  # noqa: PLC0415

    if not conn.poll(SEALED_WAIT_S):
        raise BadSealed("the sealed tensors' descriptors did not come")
    try:
        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            fds = recvfds(sock, len(sizes))
    except (OSError, RuntimeError, EOFError) as exc:
        raise BadSealed(f"the sealed tensors' descriptors did not arrive: {exc}") from None
    views: list[memoryview] = []
    try:
        for fd, size in zip(fds, sizes):
            if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEALS != _SEALS:
                raise BadSealed("a sealed tensor's file can still be written")
            if os.fstat(fd).st_size != size:
                raise BadSealed("a sealed tensor's file is not the announced size")
            views.append(memoryview(mmap.mmap(fd, size, prot=mmap.PROT_READ)))
    finally:
        for fd in fds:
            os.close(fd)
    it = iter(views)
    return _filled(msg, lambda _size: next(it))


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

"""DLPack capsules (the Python side of the protocol, docs/dlpack.md).

Export: ``Tensor.__dlpack__`` asks libcube for a managed tensor and wraps it
in a PyCapsule named "dltensor" (legacy) or "dltensor_versioned" (when the
consumer passes ``max_version`` >= (1, 0)). A consumer renames the capsule
("used_dltensor"...) when it takes the tensor over; a capsule destroyed
unconsumed calls the tensor's deleter itself, once.

Import: :func:`from_dlpack` calls the producer's ``__dlpack__`` (with the
stream cube's work will run on, and ``max_version=(1, 0)`` when the producer
takes it), hands the managed tensor to libcube and renames the capsule, so
that from then on libcube alone calls the producer's deleter.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple

from . import _lib
from ._core import Buffer, Client, CubeError, StatusCode, Tensor, check, default_client

_api = ctypes.pythonapi
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_SetName.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int

# Capsule names live as long as the module (a capsule keeps a pointer to its name).
_LEGACY = b"dltensor"
_USED_LEGACY = b"used_dltensor"
_VERSIONED = b"dltensor_versioned"
_USED_VERSIONED = b"used_dltensor_versioned"

# DLPack device types with streams (the protocol's stream values apply).
_CUDA, _ROCM = 2, 10
_CPU, _CUDA_HOST, _OPENCL = 1, 3, 4
_BACKEND_OF_DEVICE = {_CPU: "cpu", _CUDA_HOST: "cpu", _CUDA: "cuda", _OPENCL: "opencl"}

READ_ONLY = 1


# The capsules' destructor is libcube's (cube_dlpack_capsule_destructor): a
# consumer may drop a capsule with its own exception pending (NumPy refusing
# a device), and Python code (a ctypes callback) cannot run then; the C
# function reads the capsule as memory and calls no Python function.
_lib.lib.cube_dlpack_capsule_layout.argtypes = [ctypes.c_size_t]
_lib.lib.cube_dlpack_capsule_layout.restype = None
_lib.lib.cube_dlpack_capsule_layout(object.__basicsize__)
_DESTRUCTOR_FN = ctypes.cast(_lib.lib.cube_dlpack_capsule_destructor, _DESTRUCTOR)


def _stream_value(device_type: int, stream: Optional[int]) -> int:
    """The protocol's stream argument as cube_dlpack_export_t.stream."""
    if stream is None:
        # CUDA/ROCm: None means the legacy default stream; elsewhere, no
        # stream: cube waits for its work before handing the tensor out.
        return 1 if device_type in (_CUDA, _ROCM) else 0
    if stream == -1:
        return -1
    if device_type not in (_CUDA, _ROCM):
        raise BufferError(f"cube: stream={stream} given for DLPack device type {device_type}, "
                          "which has no streams (pass None)")
    if stream == 0:
        raise BufferError("cube: stream=0 is ambiguous in the DLPack protocol (use 1 for the "
                          "legacy default stream, 2 for the per-thread one)")
    return int(stream)


def export_capsule(t: Tensor, *, stream: Optional[int] = None,
                   max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> Any:
    """The capsule of ``t.__dlpack__(...)`` (see the module's doc)."""
    dev = t.client.dlpack_device()
    if dl_device is not None and tuple(dl_device) != dev:
        raise BufferError(f"cube: the tensor lives on DLPack device {dev}, not {tuple(dl_device)}"
                          " (cube exports without copying)")
    if copy:
        raise BufferError("cube: copy=True asked, and cube exports its own memory only")
    if t.ndim > _lib.MAX_RANK:
        raise BufferError(f"cube: {t.ndim} dimensions exceed {_lib.MAX_RANK}")
    d = _lib.DLPackExport()
    d.struct_size = ctypes.sizeof(d)
    d.handle = t.buffer.handle
    d.dtype = _lib.DLDataType(*t.dtype)
    d.rank = t.ndim
    for i, (n, s) in enumerate(zip(t.shape, t.strides)):
        d.shape[i] = n
        d.strides[i] = s
    d.byte_offset = t.byte_offset
    d.flags = READ_ONLY if getattr(t, "read_only", False) else 0
    d.stream = _stream_value(dev[0], stream)
    c = t.client._ptr
    if max_version is not None and int(max_version[0]) >= 1:
        out_v = ctypes.POINTER(_lib.DLManagedTensorVersioned)()
        check(_lib.to_dlpack(c, ctypes.byref(d), ctypes.byref(out_v)))
        ptr, name = ctypes.cast(out_v, ctypes.c_void_p).value, _VERSIONED
    else:
        out_l = ctypes.POINTER(_lib.DLManagedTensor)()
        check(_lib.to_dlpack_legacy(c, ctypes.byref(d), ctypes.byref(out_l)))
        ptr, name = ctypes.cast(out_l, ctypes.c_void_p).value, _LEGACY
    try:
        return _api.PyCapsule_New(ptr, name, _DESTRUCTOR_FN)
    except BaseException:
        _capsule_destructor_ptr(ptr, name)
        raise


def _capsule_destructor_ptr(ptr: int, name: bytes) -> None:
    if name == _VERSIONED:
        t = ctypes.cast(ptr, ctypes.POINTER(_lib.DLManagedTensorVersioned))
    else:
        t = ctypes.cast(ptr, ctypes.POINTER(_lib.DLManagedTensor))  # type: ignore[assignment]
    t.contents.deleter(t)


def _client_for(device: Tuple[int, int], client: Optional[Client]) -> Client:
    if client is not None:
        return client
    backend = _BACKEND_OF_DEVICE.get(int(device[0]))
    if backend is None:
        raise CubeError(StatusCode.INVALID_ARGUMENT,
                        f"cube.from_dlpack: DLPack device type {device[0]} has no cube backend")
    return default_client(backend, 0 if backend == "cpu" else int(device[1]))


def from_dlpack(x: Any, client: Optional[Client] = None, *, read_only: bool = False) -> Tensor:
    """A cube tensor on the memory of ``x`` (NumPy, PyTorch, CuPy, a cube
    tensor, anything with ``__dlpack__``/``__dlpack_device__``), without a
    copy. ``client`` defaults to a shared client of the tensor's device. The
    producer's memory stays alive until the last cube reference goes (then
    its deleter runs, once). Refused (CubeError naming why): another device
    than the client's, a dtype cube does not take, strides that are not a
    dense layout, a read-only tensor unless ``read_only=True``."""
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"cube.from_dlpack: {type(x).__name__} has no __dlpack__")
    device = tuple(x.__dlpack_device__()) if hasattr(x, "__dlpack_device__") else (_CPU, 0)
    c = _client_for(device, client)  # type: ignore[arg-type]
    kwargs = {}
    if int(device[0]) in (_CUDA, _ROCM):
        kwargs["stream"] = c.dlpack_stream() or 1
    try:
        capsule = x.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:  # a producer of the legacy protocol (NumPy < 2)
        capsule = x.__dlpack__(**kwargs)
    try:
        h, shape, strides, dtype = _import_capsule(c, capsule, READ_ONLY if read_only else 0)
    finally:
        del capsule  # a refused capsule goes now (its deleter runs), not with the traceback
    t = Tensor(Buffer(c, h), shape, dtype, strides=strides, byte_offset=0)
    t.read_only = read_only  # type: ignore[attr-defined]
    return t


def _import_capsule(c: Client, capsule: Any, flags: int):
    try:
        return _import_capsule_at(c, ctypes.c_void_p(id(capsule)), flags)
    except BaseException:
        capsule = None  # the traceback keeps this frame: it must not keep the capsule
        raise


def _import_capsule_at(c: Client, cap: ctypes.c_void_p, flags: int):
    h = _lib.Handle()
    if _api.PyCapsule_IsValid(cap, _VERSIONED):
        p = _api.PyCapsule_GetPointer(cap, _VERSIONED)
        dl = ctypes.cast(p, ctypes.POINTER(_lib.DLManagedTensorVersioned)).contents.dl_tensor
        shape, strides, dtype = _layout(dl)
        check(_lib.from_dlpack(c._ptr, p, flags, ctypes.byref(h)))
        _api.PyCapsule_SetName(cap, _USED_VERSIONED)
    elif _api.PyCapsule_IsValid(cap, _LEGACY):
        p = _api.PyCapsule_GetPointer(cap, _LEGACY)
        dl = ctypes.cast(p, ctypes.POINTER(_lib.DLManagedTensor)).contents.dl_tensor
        shape, strides, dtype = _layout(dl)
        check(_lib.from_dlpack_legacy(c._ptr, p, flags, ctypes.byref(h)))
        _api.PyCapsule_SetName(cap, _USED_LEGACY)
    else:
        raise CubeError(StatusCode.INVALID_ARGUMENT,
                        "cube.from_dlpack: __dlpack__ returned no unused DLPack capsule")
    return h, shape, strides, dtype


def _layout(dl: _lib.DLTensor):
    n = dl.ndim
    shape = tuple(dl.shape[i] for i in range(n))
    if dl.strides:
        strides = tuple(dl.strides[i] for i in range(n))
    else:
        acc, out = 1, []
        for s in reversed(shape):
            out.append(acc)
            acc *= max(s, 1)
        strides = tuple(reversed(out))
    return shape, strides, (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes)

"""Clients, buffers, tensors, kernels and errors: thin wrappers of the C API.

Every object owns one reference of its C counterpart and drops it in
``close()`` (also called when it is garbage collected); after
``cube.shutdown()`` the C library refuses stale clients and handles with a
status, which is raised here as a :class:`CubeError`.
"""

from __future__ import annotations

import ctypes
import enum
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, Union

from . import _lib
from ._lib import lib

# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class StatusCode(enum.IntEnum):
    """cube_status_code_t."""

    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    ALREADY_EXISTS = 3
    OUT_OF_MEMORY = 4
    FAILED_PRECONDITION = 5
    UNAVAILABLE = 6
    UNIMPLEMENTED = 7
    COMPILATION_FAILED = 8
    LAUNCH_FAILED = 9
    DEADLINE_EXCEEDED = 10
    OUT_OF_RANGE = 11
    UNSUPPORTED = 12
    ABORTED = 13
    INTERNAL = 14
    DATA_LOST = 15
    DEVICE_LOST = 16
    PEER_LOST = 17


class CubeError(Exception):
    """A failed cube call: ``code`` (a :class:`StatusCode`) and the library's
    ``message``, which names the operation, the object and the numbers."""

    def __init__(self, code: int, message: str) -> None:
        try:
            self.code: Union[StatusCode, int] = StatusCode(code)
        except ValueError:
            self.code = code
        self.message = message
        name = self.code.name if isinstance(self.code, StatusCode) else str(code)
        super().__init__(f"[{name}] {message}")


def check(status: Optional[int]) -> None:
    """Raises the status (and frees it) unless it is OK (None/0)."""
    if not status:
        return
    code = _lib.status_code(status)
    raw = _lib.status_message(status)
    message = raw.decode("utf-8", "replace") if raw else ""
    _lib.status_free(status)
    raise CubeError(code, message)


# --------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------

_BACKENDS = {"cpu": 0, "cuda": 1, "opencl": 2, "null": 3}


def _backend_id(name: str) -> int:
    out = ctypes.c_int()
    check(_lib.backend_parse(name.encode(), ctypes.byref(out)))
    return out.value


def version() -> str:
    """The version of the loaded libcube ("0.1.0")."""
    return _lib.version().decode()


def backend_available(backend: str) -> bool:
    """True when ``backend`` ("cpu", "cuda", "opencl", "null") can be used
    here; :func:`backend_status` says why not."""
    s = _lib.backend_status(_backend_id(backend))
    if s:
        _lib.status_free(s)
        return False
    return True


def backend_status(backend: str) -> None:
    """Raises :class:`CubeError` (UNAVAILABLE with the driver's reason) when
    ``backend`` cannot be used here."""
    check(_lib.backend_status(_backend_id(backend)))


def devices(backend: Optional[str] = None) -> List[Tuple[str, int]]:
    """The devices of ``backend`` (every backend when None) as (backend,
    index) pairs; an unavailable backend has none."""
    names = [backend] if backend else list(_BACKENDS)
    out: List[Tuple[str, int]] = []
    for name in names:
        n = ctypes.c_size_t()
        check(_lib.enumerate_devices(_backend_id(name), None, 0, ctypes.byref(n)))
        out.extend((name, i) for i in range(n.value))
    return out


def shutdown() -> None:
    """cube_shutdown: runs what was queued, frees every device. Clients and
    buffers made before are refused afterwards (CubeError); DLPack tensors
    exported before stay valid until their consumers delete them. Not
    thread-safe: nothing else may call cube meanwhile."""
    with _default_lock:
        clients = list(_default_clients.values())
        _default_clients.clear()
    for c in clients:
        c.close()
    _lib.shutdown()


def current_stream() -> int:
    """The calling thread's stream id (each thread has its own)."""
    return int(_lib.stream_current())


def new_stream() -> int:
    """A new stream id, for :meth:`Client.set_stream`."""
    return int(_lib.stream_id_new())


@dataclass(frozen=True)
class DeviceProperties:
    """A subset of cube_device_properties_t."""

    name: str
    backend: str
    index: int
    total_memory: int
    max_page_size: int
    alignment: int
    max_units_per_cube: int
    max_cube_dim: Tuple[int, int, int]
    max_cube_count: Tuple[int, int, int]
    max_shared_memory_size: int
    num_cpu_cores: int
    compute_capability: int


@dataclass(frozen=True)
class MemoryUsage:
    """cube_memory_usage_t: live slices, the bytes they asked for, their
    padding, and the bytes the pools hold from the device."""

    number_allocs: int
    bytes_in_use: int
    bytes_padding: int
    bytes_reserved: int


# --------------------------------------------------------------------------
# Element types
# --------------------------------------------------------------------------

# DLPack type codes.
DL_INT, DL_UINT, DL_FLOAT, DL_OPAQUE, DL_BFLOAT, DL_COMPLEX, DL_BOOL = range(7)

DType = Tuple[int, int, int]  # (DLPack code, bits, lanes)


def _np():
    try:
        import numpy
    except ImportError as e:  # pragma: no cover - numpy is a test dependency
        raise ImportError("this cube call needs NumPy") from e
    return numpy


def dtype_of(dtype: Any) -> DType:
    """(code, bits, lanes) of a NumPy dtype (or anything numpy.dtype takes), or
    of a (code, bits, lanes) tuple given as is."""
    if isinstance(dtype, tuple) and len(dtype) == 3:
        return (int(dtype[0]), int(dtype[1]), int(dtype[2]))
    dt = _np().dtype(dtype)
    kinds = {"i": DL_INT, "u": DL_UINT, "f": DL_FLOAT, "c": DL_COMPLEX, "b": DL_BOOL}
    if dt.kind not in kinds:
        raise TypeError(f"cube: NumPy dtype {dt} has no DLPack equivalent")
    return (kinds[dt.kind], dt.itemsize * 8, 1)


def numpy_dtype(dtype: DType):
    """The NumPy dtype of (code, bits, lanes); TypeError where there is none."""
    np = _np()
    code, bits, lanes = dtype
    letters = {DL_INT: "i", DL_UINT: "u", DL_FLOAT: "f", DL_COMPLEX: "c", DL_BOOL: "b"}
    if lanes != 1 or code not in letters:
        raise TypeError(f"cube: DLPack dtype (code {code}, {bits} bits, {lanes} lanes) has no "
                        "NumPy equivalent")
    return np.dtype("?" if code == DL_BOOL else f"{letters[code]}{bits // 8}")


def _itemsize(dtype: DType) -> int:
    return dtype[1] // 8 * dtype[2]


def aligned_empty(nbytes: int, alignment: int = 4096):
    """An uninitialised NumPy uint8 array of ``nbytes`` whose data starts on
    a page. Copies between it and cube's (page-aligned) buffers keep the
    source and destination at the same offset in their pages: glibc's memcpy
    is several times slower when the destination is a few bytes past the
    source modulo 4 KiB, which is where NumPy's own large arrays start
    (docs/benchmarks.md, "DLPack and Python")."""
    np = _np()
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    off = (-raw.ctypes.data) % alignment
    return raw[off:off + nbytes]


# --------------------------------------------------------------------------
# Host memory of Python objects (the buffer protocol)
# --------------------------------------------------------------------------


class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int),
                ("ndim", ctypes.c_int), ("format", ctypes.c_char_p),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_api = ctypes.pythonapi
_api.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_api.PyObject_GetBuffer.restype = ctypes.c_int
_api.PyBuffer_Release.argtypes = [ctypes.POINTER(_PyBuffer)]
_api.PyBuffer_Release.restype = None
_PYBUF_WRITABLE = 0x0001
_PYBUF_C_CONTIGUOUS = 0x0038


class _HostView:
    """The address and size of a C-contiguous buffer-protocol object, held
    (the object cannot move or be resized) until closed."""

    def __init__(self, obj: Any, writable: bool) -> None:
        self._view = _PyBuffer()
        flags = _PYBUF_C_CONTIGUOUS | (_PYBUF_WRITABLE if writable else 0)
        try:
            _api.PyObject_GetBuffer(obj, ctypes.byref(self._view), flags)
        except ValueError as e:  # NumPy's word for "not contiguous"
            self._view = None
            raise BufferError(f"cube: {e}") from e
        self.ptr = self._view.buf
        self.size = self._view.len

    def close(self) -> None:
        if self._view is not None:
            _api.PyBuffer_Release(ctypes.byref(self._view))
            self._view = None

    def __enter__(self) -> "_HostView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------
# Buffers and tensors
# --------------------------------------------------------------------------


class Buffer:
    """A handle: a view of device memory (cube_handle_t), owned by this
    object. ``size`` is its bytes."""

    def __init__(self, client: "Client", handle: _lib.Handle) -> None:
        self.client = client
        self._handle: Optional[_lib.Handle] = handle

    @property
    def handle(self) -> _lib.Handle:
        if self._handle is None:
            raise CubeError(StatusCode.NOT_FOUND, "the buffer was closed")
        return self._handle

    @property
    def size(self) -> int:
        """Bytes the buffer views (0 once released, also by a shutdown)."""
        return int(_lib.handle_size(self._handle)) if self._handle is not None else 0

    def view(self, offset: int, size: int) -> "Buffer":
        """A buffer viewing ``size`` bytes at ``offset`` of this one (shares
        the memory)."""
        out = _lib.Handle()
        end = self.size - offset - size
        if offset < 0 or size <= 0 or end < 0:
            raise CubeError(StatusCode.INVALID_ARGUMENT,
                            f"Buffer.view: {size} bytes at {offset} do not fit {self.size}")
        check(_lib.handle_offset_view(self.handle, offset, end, ctypes.byref(out)))
        return Buffer(self.client, out)

    def address(self) -> int:
        """Where the memory is in the backend's terms (cube_resource_ptr): a
        host address on the CPU, a device address on CUDA, an opaque value
        on OpenCL."""
        r = ctypes.c_void_p()
        check(_lib.client_get_resource(self.client._ptr, self.handle, ctypes.byref(r)))
        try:
            return int(_lib.resource_ptr(r) or 0)
        finally:
            _lib.resource_release(r)

    def read(self) -> bytes:
        """The bytes, after the work queued before on the calling stream."""
        out = ctypes.create_string_buffer(self.size)
        check(_lib.client_read_into(self.client._ptr, self.handle, out, self.size))
        return out.raw

    def read_into(self, obj: Any) -> None:
        """Reads into a writable C-contiguous buffer-protocol object of
        exactly this buffer's size."""
        with _HostView(obj, writable=True) as v:
            check(_lib.client_read_into(self.client._ptr, self.handle, v.ptr, v.size))

    def write(self, obj: Any) -> None:
        """Writes the bytes of a buffer-protocol object (of this buffer's
        size), ordered after the work queued before on the calling stream."""
        with _HostView(obj, writable=False) as v:
            check(_lib.client_write(self.client._ptr, self.handle, v.ptr, v.size))

    def close(self) -> None:
        """Releases the handle (queued work that uses it keeps the memory)."""
        h, self._handle = self._handle, None
        if h is not None:
            _lib.handle_release(h)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<cube.Buffer {self.size} bytes on {self.client.name}>"


def _row_major(shape: Sequence[int]) -> Tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


class Tensor:
    """A typed view of a buffer: ``shape``, ``strides`` (in elements, as
    DLPack), ``dtype`` ((code, bits, lanes)) and ``byte_offset`` of element 0
    in the buffer. Exchanged with other libraries through DLPack
    (``__dlpack__``, ``__dlpack_device__``, :func:`cube.from_dlpack`)."""

    def __init__(self, buffer: Buffer, shape: Sequence[int], dtype: Any,
                 strides: Optional[Sequence[int]] = None, byte_offset: int = 0) -> None:
        self.buffer = buffer
        self.shape = tuple(int(n) for n in shape)
        self.dtype: DType = dtype_of(dtype)
        self.strides = tuple(int(s) for s in strides) if strides is not None else \
            _row_major(self.shape)
        self.byte_offset = int(byte_offset)

    @property
    def client(self) -> "Client":
        return self.buffer.client

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        return _itemsize(self.dtype)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def is_contiguous(self) -> bool:
        return self.byte_offset == 0 and all(
            s == r or n <= 1 for s, r, n in zip(self.strides, _row_major(self.shape), self.shape))

    def numpy(self):
        """A NumPy copy of the elements (a read after the queued work)."""
        np = _np()
        dt = numpy_dtype(self.dtype)
        raw = aligned_empty(self.buffer.size)
        self.buffer.read_into(raw)
        if self.is_contiguous() and self.buffer.size == self.nbytes:
            return raw.view(dt).reshape(self.shape)
        isz = self.itemsize
        view = np.lib.stride_tricks.as_strided(
            raw[self.byte_offset:].view(np.uint8), shape=self.shape + (isz,),
            strides=tuple(s * isz for s in self.strides) + (1,))
        return np.ascontiguousarray(view).view(dt).reshape(self.shape)

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self.client.dlpack_device()

    def __dlpack__(self, *, stream: Optional[int] = None,
                   max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> Any:
        from ._dlpack import export_capsule
        return export_capsule(self, stream=stream, max_version=max_version,
                              dl_device=dl_device, copy=copy)

    def close(self) -> None:
        self.buffer.close()

    def __repr__(self) -> str:
        return (f"<cube.Tensor shape={self.shape} dtype={self.dtype} strides={self.strides} "
                f"on {self.client.name}>")


# --------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------

ARG_BUFFER, ARG_U32, ARG_I32, ARG_U64, ARG_I64, ARG_F32, ARG_F64 = range(7)
_ARG_NAMES = ["buffer", "u32", "i32", "u64", "i64", "f32", "f64"]
_INT_RANGE = {ARG_U32: (0, 2**32 - 1), ARG_I32: (-2**31, 2**31 - 1), ARG_U64: (0, 2**64 - 1),
              ARG_I64: (-2**63, 2**63 - 1)}

Dim3 = Union[int, Tuple[int, int, int], Sequence[int]]


def _dim3(d: Dim3) -> Tuple[int, int, int]:
    if isinstance(d, int):
        return (d, 1, 1)
    t = tuple(int(x) for x in d)
    return (t + (1, 1, 1))[:3]  # type: ignore[return-value]


class Kernel:
    """A kernel in the cube dialect (docs/dialect.md), compiled by each backend
    at its first launch (or :meth:`Client.precompile`). ``arg_kinds`` is its
    signature, parsed from the source."""

    def __init__(self, source: str, entry: str, *, cube_dim: Dim3 = 1,
                 name: Optional[str] = None,
                 defines: Optional[Union[dict, Iterable[Tuple[str, Optional[str]]]]] = None) -> None:
        d = _lib.KernelDesc()
        _lib.kernel_desc_initialize(ctypes.byref(d))
        x, y, z = _dim3(cube_dim)
        d.cube_dim = _lib.Dim(x, y, z)
        self._keep = [source.encode(), entry.encode(), (name or entry).encode()]
        d.source, d.entry, d.name = self._keep
        pairs = list(defines.items() if isinstance(defines, dict) else (defines or []))
        if pairs:
            arr = (_lib.Define * len(pairs))()
            for i, (k, v) in enumerate(pairs):
                kb = str(k).encode()
                vb = None if v is None else str(v).encode()
                self._keep += [kb, vb]
                arr[i] = _lib.Define(kb, vb)
            self._keep.append(arr)
            d.defines = arr
            d.define_count = len(pairs)
        ptr = ctypes.c_void_p()
        check(_lib.kernel_create(ctypes.byref(d), ctypes.byref(ptr)))
        self._ptr: Optional[int] = ptr.value
        n = _lib.kernel_arg_count(self._ptr)
        self.arg_kinds: Tuple[int, ...] = tuple(_lib.kernel_arg_kind(self._ptr, i) for i in range(n))

    @property
    def name(self) -> str:
        return _lib.kernel_name(self._ptr).decode()

    @property
    def cube_dim(self) -> Tuple[int, int, int]:
        d = _lib.kernel_cube_dim(self._ptr)
        return (d.x, d.y, d.z)

    def close(self) -> None:
        p, self._ptr = self._ptr, None
        if p:
            _lib.kernel_release(p)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover
            pass


# --------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------

Count = Union[int, Tuple[int, int, int], Sequence[int], Buffer, Tensor]
_EXEC_MODES = {"checked": 0, "validate": 1, "unchecked": 2}


class Client:
    """A compute client of one device (cube_client_load): ``Client("cpu")``,
    ``Client("cuda", 0)``, ``Client("opencl")``. Thread-safe: each calling
    thread works on its own stream unless :meth:`set_stream` pins one."""

    def __init__(self, backend: str = "cpu", index: int = 0) -> None:
        self._ptr: Optional[int] = None
        dev = _lib.DeviceId(_backend_id(backend), index)
        ptr = ctypes.c_void_p()
        check(_lib.client_load(dev, ctypes.byref(ptr)))
        self._ptr = ptr.value
        self.backend = backend.lower()
        self.index = int(index)

    @classmethod
    def _adopt(cls, ptr: int, backend: str, index: int) -> "Client":
        c = cls.__new__(cls)
        c._ptr, c.backend, c.index = ptr, backend, index
        return c

    # -- identity ---------------------------------------------------------
    @property
    def name(self) -> str:
        return f"{self.backend}:{self.index}"

    @property
    def properties(self) -> DeviceProperties:
        p = _lib.client_properties(self._ptr)
        if not p:
            raise CubeError(StatusCode.FAILED_PRECONDITION,
                            f"{self.name}: the client was created before cube_shutdown")
        v = p.contents
        hw = v.hardware
        return DeviceProperties(
            name=v.name.decode(), backend=self.backend, index=self.index,
            total_memory=v.memory.total_memory, max_page_size=v.memory.max_page_size,
            alignment=v.memory.alignment, max_units_per_cube=hw.max_units_per_cube,
            max_cube_dim=tuple(hw.max_cube_dim), max_cube_count=tuple(hw.max_cube_count),
            max_shared_memory_size=hw.max_shared_memory_size, num_cpu_cores=hw.num_cpu_cores,
            compute_capability=hw.compute_capability)

    def dlpack_device(self) -> Tuple[int, int]:
        """(DLDeviceType, device_id) of this device."""
        t, i = ctypes.c_int32(), ctypes.c_int32()
        check(_lib.dlpack_device(self._ptr, ctypes.byref(t), ctypes.byref(i)))
        return (t.value, i.value)

    def dlpack_stream(self) -> Optional[int]:
        """The stream cube passes to a producer's ``__dlpack__`` (CUDA: the
        calling stream's CUstream), None where the device has no streams."""
        s = ctypes.c_int64()
        check(_lib.dlpack_stream(self._ptr, ctypes.byref(s)))
        return s.value or None

    # -- streams ----------------------------------------------------------
    def clone(self) -> "Client":
        """Another client of the same device (and pinned stream, if any)."""
        ptr = ctypes.c_void_p()
        check(_lib.client_clone(self._ptr, ctypes.byref(ptr)))
        return Client._adopt(ptr.value, self.backend, self.index)

    def set_stream(self, stream: int) -> None:
        """Pins this client to stream id ``stream`` (see :func:`new_stream`)."""
        _lib.client_set_stream(self._ptr, stream)

    def unset_stream(self) -> None:
        _lib.client_unset_stream(self._ptr)

    @property
    def stream(self) -> int:
        """The stream id calls on this client use now."""
        return int(_lib.client_stream(self._ptr))

    # -- memory -----------------------------------------------------------
    def empty(self, nbytes: int) -> Buffer:
        """An uninitialised buffer of ``nbytes`` (> 0) bytes."""
        h = _lib.Handle()
        check(_lib.client_empty(self._ptr, nbytes, ctypes.byref(h)))
        return Buffer(self, h)

    def upload(self, obj: Any) -> Buffer:
        """A new buffer holding a copy of a C-contiguous buffer-protocol object
        (bytes, bytearray, memoryview, array.array, a NumPy array...)."""
        with _HostView(obj, writable=False) as v:
            h = _lib.Handle()
            check(_lib.client_create_from_slice(self._ptr, v.ptr, v.size, ctypes.byref(h)))
        return Buffer(self, h)

    def from_numpy(self, array: Any) -> Tensor:
        """A tensor holding a copy of a NumPy array (made C-contiguous first)."""
        np = _np()
        a = np.ascontiguousarray(array)
        return Tensor(self.upload(a.reshape(-1).view(np.uint8) if a.size else a), a.shape,
                      a.dtype)

    def empty_tensor(self, shape: Sequence[int], dtype: Any) -> Tensor:
        t = dtype_of(dtype)
        n = 1
        for d in shape:
            n *= int(d)
        return Tensor(self.empty(max(n, 1) * _itemsize(t)), shape, t)

    def read(self, buffer: Union[Buffer, Tensor]) -> bytes:
        """The bytes of a buffer (or of a tensor's buffer)."""
        return (buffer.buffer if isinstance(buffer, Tensor) else buffer).read()

    def to_numpy(self, tensor: Tensor):
        """A NumPy copy of a tensor."""
        return tensor.numpy()

    def copy(self, src: Buffer, dst: Buffer) -> None:
        """cube_client_copy: src into dst (same size), on the device."""
        check(_lib.client_copy(self._ptr, src.handle, dst.handle))

    def memory_usage(self, device: bool = False) -> MemoryUsage:
        """The calling stream's pools (after its queued work), or the whole
        device's with ``device=True``."""
        u = _lib.MemoryUsage()
        fn = _lib.client_memory_usage_device if device else _lib.client_memory_usage
        check(fn(self._ptr, ctypes.byref(u)))
        return MemoryUsage(u.number_allocs, u.bytes_in_use, u.bytes_padding, u.bytes_reserved)

    def memory_cleanup(self) -> None:
        check(_lib.client_memory_cleanup(self._ptr))

    # -- kernels ------------------------------------------------------------
    def kernel(self, source: str, entry: str, *, cube_dim: Dim3 = 1, name: Optional[str] = None,
               defines: Optional[Union[dict, Iterable[Tuple[str, Optional[str]]]]] = None) -> Kernel:
        """A dialect kernel (see :class:`Kernel`)."""
        return Kernel(source, entry, cube_dim=cube_dim, name=name, defines=defines)

    def precompile(self, *kernels: Kernel, mode: str = "checked") -> None:
        arr = (ctypes.c_void_p * len(kernels))(*[k._ptr for k in kernels])
        check(_lib.client_precompile(self._ptr, len(kernels), arr, _EXEC_MODES[mode]))

    def launch(self, kernel: Kernel, count: Count, *args: Any, mode: Optional[str] = None) -> None:
        """Queues ``kernel`` over ``count`` cubes (an int, an (x, y, z) tuple,
        or a buffer holding three u32 read when it runs) with ``args``:
        buffers and tensors for the kernel's arrays, Python numbers for its
        scalars (converted to the kernel's declared type). Every check of
        cube_client_launch applies, and its errors are raised as they are."""
        c = _lib.Count()
        if isinstance(count, (Buffer, Tensor)):
            c.kind = 1
            c.handle = (count.buffer if isinstance(count, Tensor) else count).handle
        else:
            c.kind = 0
            c.x, c.y, c.z = _dim3(count)
        n = len(args)
        arr = (_lib.Arg * max(n, 1))()
        kinds = kernel.arg_kinds
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                a = a.buffer
            if isinstance(a, Buffer):
                arr[i].kind = ARG_BUFFER
                arr[i].v.buffer = a.handle
                continue
            kind = kinds[i] if i < len(kinds) and kinds[i] != ARG_BUFFER else \
                (ARG_F64 if isinstance(a, float) else ARG_I64)
            arr[i].kind = kind
            if kind in (ARG_F32, ARG_F64):
                setattr(arr[i].v, _ARG_NAMES[kind], float(a))
            else:
                if isinstance(a, float) or not isinstance(a, int):
                    raise TypeError(f"launch of '{kernel.name}': args[{i}] is "
                                    f"{type(a).__name__}, the kernel takes {_ARG_NAMES[kind]}")
                lo, hi = _INT_RANGE[kind]
                if not lo <= a <= hi:
                    raise OverflowError(f"launch of '{kernel.name}': args[{i}] = {a} does not "
                                        f"fit {_ARG_NAMES[kind]}")
                setattr(arr[i].v, _ARG_NAMES[kind], a)
        if mode is None:
            check(_lib.client_launch(self._ptr, kernel._ptr, c, n, arr))
        else:
            check(_lib.client_launch_mode(self._ptr, kernel._ptr, c, n, arr, _EXEC_MODES[mode]))

    # -- synchronisation and profiling ----------------------------------------
    def sync(self) -> None:
        """Waits for the calling stream's work; raises its deferred errors."""
        check(_lib.client_sync(self._ptr))

    def flush(self) -> None:
        check(_lib.client_flush(self._ptr))

    def profile(self, fn: Callable[[], Any], name: str = "python") -> Tuple[Any, int]:
        """Runs ``fn()`` with the device to itself and returns (its result,
        the nanoseconds the device took: device timestamps where the backend
        has them). ``fn`` runs on the device's runner thread."""
        box: dict = {}

        def task(_user: Optional[int]) -> Optional[int]:
            try:
                box["result"] = fn()
                return None
            except BaseException as e:  # re-raised below, on the caller
                box["error"] = e
                msg = f"profile '{name}': {type(e).__name__}".replace("%", "%%")
                return _lib.status_make(StatusCode.ABORTED, msg.encode())

        cb = _lib.TASK_FN(task)
        d = _lib.ProfileDuration()
        status = _lib.client_profile(self._ptr, cb, None, name.encode(), ctypes.byref(d))
        if "error" in box:
            if status:
                _lib.status_free(status)
            raise box["error"]
        check(status)
        return box.get("result"), int(d.end_ns - d.start_ns)

    # -- lifetime -----------------------------------------------------------
    def close(self) -> None:
        p, self._ptr = self._ptr, None
        if p:
            _lib.client_release(p)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover
            pass

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<cube.Client {self.name}>"


_default_clients: dict = {}
_default_lock = threading.Lock()


def default_client(backend: str = "cpu", index: int = 0) -> Client:
    """One shared client per device, made on first use."""
    with _default_lock:
        c = _default_clients.get((backend, index))
        if c is None:
            c = _default_clients[(backend, index)] = Client(backend, index)
        return c

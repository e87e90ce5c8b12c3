"""Shared fixtures: the CPU client, random data, and a producer of DLPack
capsules whose deleter is counted (what cube must call exactly once)."""

import ctypes
import threading

import numpy as np
import pytest

import cube
from cube import _lib

_api = ctypes.pythonapi
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p


@pytest.fixture
def client():
    c = cube.Client("cpu")
    yield c
    c.close()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def opencl_client():
    if not cube.backend_available("opencl") or not cube.devices("opencl"):
        pytest.skip("no OpenCL device here")
    return cube.Client("opencl")


class CountingProducer:
    """A DLPack producer over a NumPy array whose deleter counts its calls
    (and the thread each ran on). ``versioned`` picks the capsule form;
    ``dtype``/``shape``/``strides``/``flags``/``device`` override what the
    tensor says, to make tensors cube must refuse."""

    _NAME_V = b"dltensor_versioned"
    _NAME_L = b"dltensor"

    def __init__(self, array, versioned=True, dtype=None, shape=None, strides=None, flags=0,
                 device=(1, 0)):
        self.array = array
        self.versioned = versioned
        self.managed = None
        self.calls = 0
        self.threads = []
        self.lock = threading.Lock()
        n = array.ndim if shape is None else len(shape)
        shp = array.shape if shape is None else shape
        std = [s // array.itemsize for s in array.strides] if strides is None else strides
        self._shape = (ctypes.c_int64 * max(n, 1))(*shp)
        self._strides = (ctypes.c_int64 * max(n, 1))(*std)
        code, bits, lanes = cube.dtype_of(array.dtype) if dtype is None else dtype
        t = _lib.DLTensor()
        t.data = array.ctypes.data
        t.device = _lib.DLDevice(*device)
        t.ndim = n
        t.dtype = _lib.DLDataType(code, bits, lanes)
        t.shape = self._shape
        t.strides = self._strides
        t.byte_offset = 0
        if versioned:
            self._deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_lib.DLManagedTensorVersioned))(
                self._delete)
            self.managed = _lib.DLManagedTensorVersioned()
            self.managed.version = _lib.DLPackVersion(1, 0)
            self.managed.flags = flags
        else:
            self._deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_lib.DLManagedTensor))(
                self._delete)
            self.managed = _lib.DLManagedTensor()
        self.managed.dl_tensor = t
        self.managed.deleter = self._deleter
        self._destructor = _DESTRUCTOR(self._capsule_gone)

    def _delete(self, _ptr):
        with self.lock:
            self.calls += 1
            self.threads.append(threading.get_ident())

    def _capsule_gone(self, capsule):
        name = self._NAME_V if self.versioned else self._NAME_L
        if _api.PyCapsule_IsValid(capsule, name):  # never consumed: delete it ourselves
            self._delete(None)

    def __dlpack_device__(self):
        d = self.managed.dl_tensor.device
        return (d.device_type, d.device_id)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        name = self._NAME_V if self.versioned else self._NAME_L
        return _api.PyCapsule_New(ctypes.addressof(self.managed), name, self._destructor)


@pytest.fixture
def producer():
    return CountingProducer

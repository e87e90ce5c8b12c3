"""Loading libcube and declaring the C functions the package calls (ctypes).

The library is found, in order: the path in the environment variable
``CUBE_LIBRARY``; a ``libcube.so*`` next to this file (what ``pip install``
bundles); the system's loader (``libcube.so.0``, ``libcube.so``, as installed
by ``make install``). The first that loads is kept for the process.

Every function is declared with its argument and result types, so that
ctypes converts and checks them; calls release the GIL (``ctypes.CDLL``),
so a blocking call (a sync, a read) lets other Python threads run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from typing import List, Optional

from ctypes import (POINTER, Structure, Union, c_char, c_char_p, c_double, c_float, c_int,
                    c_int32, c_int64, c_size_t, c_uint8, c_uint16, c_uint32, c_uint64,
                    c_void_p)

MAX_RANK = 12
MAX_KERNEL_ARGS = 64

# --------------------------------------------------------------------------
# Structs (the layouts of include/cube/*.h)
# --------------------------------------------------------------------------


class DeviceId(Structure):
    _fields_ = [("backend", c_int), ("index", c_uint32)]


class Handle(Structure):
    _fields_ = [("id", c_uint64)]


class Dim(Structure):
    _fields_ = [("x", c_uint32), ("y", c_uint32), ("z", c_uint32)]


class Count(Structure):
    _fields_ = [("kind", c_int), ("x", c_uint32), ("y", c_uint32), ("z", c_uint32),
                ("handle", Handle)]


class _ArgValue(Union):
    _fields_ = [("buffer", Handle), ("u32", c_uint32), ("i32", c_int32), ("u64", c_uint64),
                ("i64", c_int64), ("f32", c_float), ("f64", c_double)]


class Arg(Structure):
    _fields_ = [("kind", c_int), ("v", _ArgValue)]


class Define(Structure):
    _fields_ = [("name", c_char_p), ("value", c_char_p)]


class KernelDesc(Structure):
    _fields_ = [("struct_size", c_size_t), ("name", c_char_p), ("cube_dim", Dim),
                ("arg_kinds", POINTER(c_int)), ("arg_count", c_uint32),
                ("shared_memory_size", c_uint64), ("cpu_fn", c_void_p), ("source", c_char_p),
                ("entry", c_char_p), ("defines", POINTER(Define)), ("define_count", c_uint32),
                ("read_only_args", c_uint64)]


class _Memory(Structure):
    _fields_ = [("total_memory", c_uint64), ("max_page_size", c_uint64), ("alignment", c_uint64)]


class _Hardware(Structure):
    _fields_ = [("load_width", c_uint32), ("plane_size_min", c_uint32),
                ("plane_size_max", c_uint32), ("max_bindings", c_uint32),
                ("max_shared_memory_size", c_uint64), ("max_cube_count", c_uint32 * 3),
                ("max_units_per_cube", c_uint32), ("max_cube_dim", c_uint32 * 3),
                ("num_streaming_multiprocessors", c_uint32), ("num_tensor_cores", c_uint32),
                ("min_tensor_cores_dim", c_uint32), ("num_cpu_cores", c_uint32),
                ("max_vector_size", c_uint32), ("l2_cache_size", c_uint64),
                ("compute_capability", c_uint32)]


class DeviceProperties(Structure):
    _fields_ = [("struct_size", c_size_t), ("name", c_char * 128), ("id", DeviceId),
                ("memory", _Memory), ("hardware", _Hardware), ("timing_method", c_int),
                ("layout_policy", c_int)]


class BackendInfo(Structure):
    _fields_ = [("struct_size", c_size_t), ("backend", c_int), ("name", c_char * 32),
                ("version", c_char * 64), ("device_count", c_uint32)]


class MemoryUsage(Structure):
    _fields_ = [("number_allocs", c_uint64), ("bytes_in_use", c_uint64),
                ("bytes_padding", c_uint64), ("bytes_reserved", c_uint64)]


class ProfileDuration(Structure):
    _fields_ = [("start_ns", c_uint64), ("end_ns", c_uint64), ("method", c_int)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor)))]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion), ("manager_ctx", c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, POINTER(DLManagedTensorVersioned))),
    ("flags", c_uint64), ("dl_tensor", DLTensor)]


class DLPackExport(Structure):
    _fields_ = [("struct_size", c_size_t), ("handle", Handle), ("dtype", DLDataType),
                ("rank", c_uint32), ("shape", c_int64 * MAX_RANK),
                ("strides", c_int64 * MAX_RANK), ("byte_offset", c_uint64),
                ("flags", c_uint64), ("stream", c_int64)]


TASK_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p)

# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def _candidates() -> List[str]:
    out: List[str] = []
    env = os.environ.get("CUBE_LIBRARY")
    if env:
        out.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    out.extend(sorted(glob.glob(os.path.join(here, "libcube.so*")), key=len))
    out.extend(["libcube.so.0", "libcube.so"])
    found = ctypes.util.find_library("cube")
    if found:
        out.append(found)
    return out


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("cube: libcube could not be loaded (set CUBE_LIBRARY to its path, or "
                      "reinstall the package so that it builds one); tried:\n  " +
                      "\n  ".join(errors))


lib = _load()
LIBRARY_PATH: Optional[str] = getattr(lib, "_name", None)

_S = c_void_p  # cube_status_t: NULL on success


def _fn(name: str, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


P = POINTER
status_code = _fn("cube_status_code", c_int, _S)
status_message = _fn("cube_status_message", c_char_p, _S)
status_code_name = _fn("cube_status_code_name", c_char_p, c_int)
status_free = _fn("cube_status_free", None, _S)
status_make = _fn("cube_status_make", _S, c_int, c_char_p)
version = _fn("cube_version", c_char_p)
backend_name = _fn("cube_backend_name", c_char_p, c_int)
backend_parse = _fn("cube_backend_parse", _S, c_char_p, P(c_int))
backend_status = _fn("cube_backend_status", _S, c_int)
enumerate_devices = _fn("cube_enumerate_devices", _S, c_int, P(DeviceId), c_size_t, P(c_size_t))
shutdown = _fn("cube_shutdown", None)

client_load = _fn("cube_client_load", _S, DeviceId, P(c_void_p))
client_clone = _fn("cube_client_clone", _S, c_void_p, P(c_void_p))
client_release = _fn("cube_client_release", None, c_void_p)
client_properties = _fn("cube_client_properties", P(DeviceProperties), c_void_p)
client_info = _fn("cube_client_info", P(BackendInfo), c_void_p)
client_set_stream = _fn("cube_client_set_stream", None, c_void_p, c_uint64)
client_unset_stream = _fn("cube_client_unset_stream", None, c_void_p)
client_stream = _fn("cube_client_stream", c_uint64, c_void_p)
stream_current = _fn("cube_stream_current", c_uint64)
stream_id_new = _fn("cube_stream_id_new", c_uint64)

client_empty = _fn("cube_client_empty", _S, c_void_p, c_size_t, P(Handle))
client_create_from_slice = _fn("cube_client_create_from_slice", _S, c_void_p, c_void_p, c_size_t,
                               P(Handle))
client_write = _fn("cube_client_write", _S, c_void_p, Handle, c_void_p, c_size_t)
client_read_into = _fn("cube_client_read_into", _S, c_void_p, Handle, c_void_p, c_size_t)
client_copy = _fn("cube_client_copy", _S, c_void_p, Handle, Handle)
client_sync = _fn("cube_client_sync", _S, c_void_p)
client_flush = _fn("cube_client_flush", _S, c_void_p)
client_memory_usage = _fn("cube_client_memory_usage", _S, c_void_p, P(MemoryUsage))
client_memory_usage_device = _fn("cube_client_memory_usage_device", _S, c_void_p, P(MemoryUsage))
client_memory_cleanup = _fn("cube_client_memory_cleanup", _S, c_void_p)
client_profile = _fn("cube_client_profile", _S, c_void_p, TASK_FN, c_void_p, c_char_p,
                     P(ProfileDuration))
client_launch = _fn("cube_client_launch", _S, c_void_p, c_void_p, Count, c_size_t, P(Arg))
client_launch_mode = _fn("cube_client_launch_mode", _S, c_void_p, c_void_p, Count, c_size_t,
                         P(Arg), c_int)
client_precompile = _fn("cube_client_precompile", _S, c_void_p, c_size_t, P(c_void_p), c_int)

handle_release = _fn("cube_handle_release", None, Handle)
handle_retain = _fn("cube_handle_retain", Handle, Handle)
handle_size = _fn("cube_handle_size", c_uint64, Handle)
handle_offset_view = _fn("cube_handle_offset_view", _S, Handle, c_uint64, c_uint64, P(Handle))

client_get_resource = _fn("cube_client_get_resource", _S, c_void_p, Handle, P(c_void_p))
resource_ptr = _fn("cube_resource_ptr", c_void_p, c_void_p)
resource_release = _fn("cube_resource_release", None, c_void_p)

kernel_desc_initialize = _fn("cube_kernel_desc_initialize", None, P(KernelDesc))
kernel_create = _fn("cube_kernel_create", _S, P(KernelDesc), P(c_void_p))
kernel_release = _fn("cube_kernel_release", None, c_void_p)
kernel_name = _fn("cube_kernel_name", c_char_p, c_void_p)
kernel_cube_dim = _fn("cube_kernel_cube_dim", Dim, c_void_p)
kernel_arg_count = _fn("cube_kernel_arg_count", c_uint32, c_void_p)
kernel_arg_kind = _fn("cube_kernel_arg_kind", c_int, c_void_p, c_uint32)

dlpack_device = _fn("cube_client_dlpack_device", _S, c_void_p, P(c_int32), P(c_int32))
dlpack_stream = _fn("cube_client_dlpack_stream", _S, c_void_p, P(c_int64))
to_dlpack = _fn("cube_client_to_dlpack", _S, c_void_p, P(DLPackExport),
                P(P(DLManagedTensorVersioned)))
to_dlpack_legacy = _fn("cube_client_to_dlpack_legacy", _S, c_void_p, P(DLPackExport),
                       P(P(DLManagedTensor)))
from_dlpack = _fn("cube_client_from_dlpack", _S, c_void_p, c_void_p, c_uint64, P(Handle))
from_dlpack_legacy = _fn("cube_client_from_dlpack_legacy", _S, c_void_p, c_void_p, c_uint64,
                         P(Handle))

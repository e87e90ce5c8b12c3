"""cube: the CubeCL compute runtime in C, from Python.

A pure-Python package over libcube (ctypes): clients of CPU, CUDA and OpenCL
devices, buffers and tensors to and from NumPy and anything with the buffer
protocol, kernels in the cube dialect compiled at their first launch, launches
checked by the C library, streams, profiling and memory usage, errors raised
as :class:`CubeError` with the status code and the library's message, and
memory shared without a copy through DLPack (``Tensor.__dlpack__``,
:func:`from_dlpack`). docs/python.md is the guide.

Example::

    import numpy as np, cube
    c = cube.Client("cpu")
    x = c.from_numpy(np.arange(8, dtype=np.float32))
    y = np.from_dlpack(x)            # the same memory, no copy
"""

from ._core import (Buffer, Client, CubeError, DeviceProperties, Kernel, MemoryUsage, StatusCode,
                    Tensor, aligned_empty, backend_available, backend_status, current_stream, default_client,
                    devices, dtype_of, new_stream, numpy_dtype, shutdown, version)
from ._dlpack import from_dlpack
from ._lib import LIBRARY_PATH

__all__ = [
    "Buffer", "Client", "CubeError", "DeviceProperties", "Kernel", "MemoryUsage", "StatusCode",
    "Tensor", "aligned_empty", "backend_available", "backend_status", "current_stream", "default_client",
    "devices", "dtype_of", "from_dlpack", "new_stream", "numpy_dtype", "shutdown", "version",
    "LIBRARY_PATH",
]

__version__ = "0.1.0"

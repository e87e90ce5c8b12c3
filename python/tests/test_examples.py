"""The examples under examples/python run and check their own results."""

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


@pytest.mark.parametrize("name", ["saxpy.py", "dlpack_numpy.py", "torch_cuda_streams.py"])
def test_example_runs(name):
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    if out.stdout.startswith("SKIP"):
        pytest.skip(out.stdout.strip())
    assert "ok" in out.stdout


def test_saxpy_example_on_opencl():
    import cube
    if not cube.backend_available("opencl") or not cube.devices("opencl"):
        pytest.skip("no OpenCL device here")
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "saxpy.py"), "opencl"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr

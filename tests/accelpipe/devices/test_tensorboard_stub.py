"""A PyTorch workload's process loads no TensorFlow, though the venv holds it (MONAI's
TensorBoard import would load it: 5+ CPU seconds and ~440 MB per process here)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

PROBE = "import sys, {module}; print([m for m in ('tensorflow', 'monai') if m in sys.modules])"


@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="no TensorFlow to keep out"
)
@pytest.mark.parametrize(
    "module",
    [
        "accelpipe.workloads.swinunetr.workload",
        "accelpipe.models.swinunetr",
        "accelpipe.inputs.volumes",
    ],
)
def test_a_module_importing_monai_loads_no_tensorflow(module: str) -> None:
    probe = PROBE.format(module=module)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['monai']"]

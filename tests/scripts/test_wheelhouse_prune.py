"""scripts/wheelhouse-prune.sh: a wheelhouse for a node leaves out the wheels of what the node
already holds (install.sh pins those), so it fits where it is carried; accelpipe's stays."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.workflow.project import REPO

PRUNE = REPO / "scripts" / "wheelhouse-prune.sh"
WHEELS = (
    "numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
    "scikit_image-0.25.2-cp312-cp312-manylinux_2_17_x86_64.whl",
    "tensorboard_data_server-0.7.2-py3-none-manylinux_2_31_x86_64.whl",
    "pytest_xdist-3.8.0-py3-none-any.whl",
    "monai-1.5.2-py3-none-any.whl",
    "accelpipe-0.1.0-py3-none-any.whl",
)


def test_the_nodes_packages_are_left_out_by_normalized_name(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    for wheel in WHEELS:
        (wheelhouse / wheel).write_bytes(b"")
    (wheelhouse / "install.sh").write_text("")
    node = tmp_path / "node.txt"  # pip list --format=freeze, and a names-only line
    node.write_text(
        "# the node\nNumPy==2.5.2\nscikit-image==0.25.2\ntensorboard.data_server\n"
        "pytest==9.0.1\naccelpipe==0.0.9\n"
    )
    proc = subprocess.run(
        ["bash", str(PRUNE), str(wheelhouse), str(node)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in wheelhouse.iterdir()) == [
        "accelpipe-0.1.0-py3-none-any.whl",  # an earlier accelpipe is what install.sh replaces
        "install.sh",
        "monai-1.5.2-py3-none-any.whl",
        "pytest_xdist-3.8.0-py3-none-any.whl",  # pytest is held, pytest-xdist is not
    ]
    assert proc.stdout == f"{wheelhouse}: left out 3 wheels of packages {node} holds\n"

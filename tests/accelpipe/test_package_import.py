"""What importing the package costs every process: the config schema's validator without the
optional format checker that takes seconds to build (accelpipe/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from accelpipe import REPO

PROBE = "import accelpipe; from accelpipe.config import schema; schema.validate({})"


def test_validating_a_config_never_imports_rfc3987_syntax(tmp_path: Path) -> None:
    """With rfc3987-syntax installed (jupyterlab brings it; ~2 CPU-s to import), a process
    that validates a config never imports it: jsonschema's iri format checker is its only
    user, and no accelpipe schema names a format. A stand-in module says if it was imported."""
    marker = tmp_path / "imported"
    (tmp_path / "rfc3987_syntax.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    subprocess.run([sys.executable, "-c", PROBE], env=env, check=True)
    assert not marker.exists()


def test_no_schema_of_the_package_names_a_format() -> None:
    for path in (REPO / "workflow/accelpipe").rglob("*.yaml"):
        assert "format:" not in path.read_text(), path

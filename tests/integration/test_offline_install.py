"""accelpipe installs offline into an environment that already holds its framework.

The environment stands in for a vendor container or an air-gapped node: a fresh venv of a
vendor-version test venv's Python 3.10 that holds that venv's framework (torch 2.6, the ROCm
and Gaudi images' release; TensorFlow 2.17, the ROCm TF image's) and its dependencies, and
nothing else. The wheelhouses are the ones `make wheelhouse PYTHON_VERSION=3.10
FRAMEWORK="torch tensorflow"` builds; no index is reachable. Without the venv or the
wheelhouse the test skips, unless ACCELPIPE_REQUIRE_OFFLINE_INSTALL=1 (CI sets it).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.workflow.project import REPO

pytestmark = pytest.mark.integration

# framework -> (the venv holding it, its distribution there, its module, the wheelhouse)
ENVIRONMENTS = {
    "torch": (".venv-torch26", "torch", "torch", "wheelhouse/py3.10-torch"),
    "tensorflow": (".venv-tf217", "tensorflow-cpu", "tensorflow", "wheelhouse/py3.10-tensorflow"),
}
# The framework's dependency closure in the source venv: each distribution's top-level entries,
# leaving out the distributions a new venv holds already (pip, setuptools: argv[2:]).
# (pip's vendored packaging: the source venv need not hold packaging itself.)
_CLOSURE = r"""
import importlib.metadata as md, json
from pip._vendor.packaging.requirements import Requirement
import sys
todo, seen, entries = [Requirement(sys.argv[1])], set(), set()
while todo:
    requirement = todo.pop()
    name = requirement.name.lower().replace("_", "-")
    if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
        continue
    seen.add(name)
    if name in sys.argv[2:]:
        continue
    dist = md.distribution(name)
    entries |= {f.parts[0] for f in dist.files or () if f.parts[0] != ".."}
    todo += [Requirement(line) for line in dist.requires or ()]
print(json.dumps({"dists": sorted(seen), "entries": sorted(entries)}))
"""


def _unavailable(reason: str) -> None:
    if os.environ.get("ACCELPIPE_REQUIRE_OFFLINE_INSTALL") == "1":
        pytest.fail(f"ACCELPIPE_REQUIRE_OFFLINE_INSTALL=1 but {reason}")
    pytest.skip(reason)


def _run(*argv: str | Path, env: dict[str, str] | None = None) -> str:
    # Bounded: a pip that waited on an index (it must not reach one) cannot hang the suite.
    proc = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, env=env, cwd="/", timeout=900
    )
    assert proc.returncode == 0, f"{argv[:3]} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc.stdout


def _site_packages(python: Path) -> Path:
    return Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    )


@pytest.mark.parametrize("framework", sorted(ENVIRONMENTS))
def test_an_environment_with_its_framework_gets_accelpipe_offline_and_keeps_it(
    framework: str, tmp_path: Path
) -> None:
    venv, dist, module, wheelhouse = ENVIRONMENTS[framework]
    source, wheelhouse_dir = REPO / venv / "bin/python", REPO / wheelhouse
    if not source.exists():
        _unavailable(f"{venv} missing (make {venv[1:]})")
    if not (wheelhouse_dir / "install.sh").exists():
        _unavailable(
            f"{wheelhouse} missing (make wheelhouse PYTHON_VERSION=3.10 FRAMEWORK={framework})"
        )
    env_dir = tmp_path / "env"
    _run(source, "-m", "venv", env_dir)  # the venv's base Python, not the venv
    python = env_dir / "bin/python"
    fresh = _run(python, "-m", "pip", "list", "--format=freeze").split()
    fresh_names = [line.split("==")[0].lower() for line in fresh]
    closure = json.loads(_run(source, "-c", _CLOSURE, dist, *fresh_names))
    source_site, site = _site_packages(source), _site_packages(python)
    for entry in closure["entries"]:
        (site / entry).symlink_to(source_site / entry)
    version_of = f"import {module}; print({module}.__version__)"
    before = _run(python, "-c", version_of).strip()

    # No index: pip is told so, and the one it would fall back to does not answer.
    offline = {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHON": str(python),
        "PIP_NO_INDEX": "1", "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }  # fmt: skip
    printed = _run("sh", wheelhouse_dir / "install.sh", env=offline)
    assert f"beside {module} {before}" in printed

    check = f"import accelpipe, {module} as m; print(m.__version__, m.__file__, accelpipe.__file__)"
    version, framework_file, accelpipe_file = _run(python, "-c", check).split()
    assert version == before
    assert Path(framework_file).resolve().is_relative_to(source_site)  # its own, untouched
    assert Path(accelpipe_file).is_relative_to(site) and "workflow" not in accelpipe_file
    assert all((site / entry).is_symlink() for entry in closure["entries"])
    # What the engine needs came from the wheelhouse; TF >= 2.16 got the Keras 2 of its release.
    engine = "monai" if framework == "torch" else "tf_keras"
    engine_file = _run(python, "-c", f"import {engine}; print({engine}.__file__)").strip()
    assert Path(engine_file).is_relative_to(site) and not Path(engine_file).is_symlink()
    if framework == "tensorflow":
        keras = _run(python, "-c", "import tf_keras; print(tf_keras.__version__)").strip()
        assert keras.rsplit(".", 1)[0] == before.rsplit(".", 1)[0]

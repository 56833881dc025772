"""The code a stage executes, read from the import graph: on a made-up package, and on ours
compared with what Python really imports when a stage's modules load."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accelpipe.core.codegraph import PACKAGE_DIR, code_key, import_graph, module_file, stage_code
from accelpipe.stages import MODULES, entry_modules


def _write(root: Path, files: dict[str, str]) -> Path:
    package = root / "accelpipe"
    for rel, text in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return package


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    return _write(
        tmp_path,
        {
            "__init__.py": "",
            "cli.py": "from accelpipe import errors\n",
            "errors.py": "import os\n",
            "lazy.py": "def f():\n    from accelpipe.sub import deep\n",
            "sub/__init__.py": "from .helper import x\n",
            "sub/helper.py": "from .. import errors\nx = 1\n",
            "sub/deep.py": "from . import sibling\n",
            "sub/sibling.py": "",
            "typed.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from accelpipe import unused\n"
                "else:\n    from accelpipe import errors\n"
            ),
            "unused.py": "",
            "dotted.py": "import accelpipe.sub.sibling\n",
        },
    )


def _names(paths: list[Path], package: Path) -> list[str]:
    return sorted(str(p.relative_to(package)) for p in paths)


def test_module_file_resolves_modules_and_packages(toy: Path) -> None:
    assert module_file("accelpipe.cli", toy) == toy / "cli.py"
    assert module_file("accelpipe.sub", toy) == toy / "sub/__init__.py"
    assert module_file("accelpipe.sub.x", toy) is None  # a name, not a module
    assert module_file("numpy", toy) is None


def test_lazy_imports_count_with_their_package_init_and_relative_imports(toy: Path) -> None:
    assert _names(stage_code(["accelpipe.lazy"], toy), toy) == [
        "__init__.py",
        "errors.py",
        "lazy.py",
        "sub/__init__.py",
        "sub/deep.py",
        "sub/helper.py",
        "sub/sibling.py",
    ]


def test_type_checking_imports_do_not_count(toy: Path) -> None:
    assert _names(stage_code(["accelpipe.typed"], toy), toy) == [
        "__init__.py",
        "errors.py",
        "typed.py",
    ]


def test_dotted_import_runs_every_parent_package(toy: Path) -> None:
    code = _names(stage_code(["accelpipe.dotted"], toy), toy)
    assert code == [
        "__init__.py",
        "dotted.py",
        "errors.py",
        "sub/__init__.py",
        "sub/helper.py",
        "sub/sibling.py",
    ]


def test_import_graph_names_each_imported_module_once(toy: Path) -> None:
    """A sibling imported through its package is an edge to the sibling, not to the package;
    the package itself only where a name that is no module is imported from it."""
    graph = {
        k.removeprefix("accelpipe."): {m.removeprefix("accelpipe.") for m in v}
        for k, v in import_graph(toy).items()
    }
    assert graph == {
        "accelpipe": set(),
        "cli": {"errors"},
        "errors": set(),
        "lazy": {"sub.deep"},  # in a function: it runs when the stage needs it
        "sub": {"sub.helper"},  # `x` is a name in sub.helper
        "sub.helper": {"errors"},
        "sub.deep": {"sub.sibling"},
        "sub.sibling": set(),
        "typed": {"errors"},  # not `unused`: under TYPE_CHECKING
        "unused": set(),
        "dotted": {"sub.sibling"},
    }


def test_an_entry_that_is_no_module_is_refused(toy: Path) -> None:
    with pytest.raises(ValueError, match=r"accelpipe\.nope"):
        stage_code(["accelpipe.nope"], toy)


def _code(stage: str, plugin: str | None = None) -> set[str]:
    return {str(p.relative_to(PACKAGE_DIR)) for p in stage_code(entry_modules(stage, plugin))}


def test_train_and_evaluate_list_what_the_old_hand_lists_missed() -> None:
    train = _code("train", "unet2d")
    assert {"engines/torch_trainer.py", "launch/torch_launch.py", "config/schema.py"} <= train
    assert {"devices/__init__.py", "devices/torch_device.py"} <= train
    assert {"workloads/unet2d/workload.py", "models/dynunet2d.py", "inputs/slices.py"} <= train
    assert "engines/torch_trainer.py" in _code("evaluate", "unet2d")


def test_a_stage_does_not_list_code_it_never_imports() -> None:
    train = _code("train", "unet2d")
    assert not any(p.startswith("traces") for p in train)
    assert "workloads/resnet50/workload.py" not in train and "results/publish.py" not in train
    raw = _code("raw", "brats")
    assert "launch/torch_launch.py" not in raw and "engines/torch_trainer.py" not in raw
    assert "datasets/nsclc.py" not in raw and "datasets/nsclc_synthetic.py" not in raw


# Each stage's modules as Python loads them in a fresh interpreter (the CLI's `handler_for`
# imports the stage module, the stage imports its dataset/workload by name).
_LOADED = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m == "accelpipe" or m.startswith("accelpipe."))))
"""

_STAGES = [
    ("raw", "brats"),
    ("prepare", "nsclc"),
    ("train", "unet2d"),
    ("train", "resnet50"),
    ("evaluate", "swinunetr"),
    ("summarize-trace", None),
    ("publish", None),
    ("aggregate", None),
]


@pytest.mark.parametrize(("stage", "plugin"), _STAGES)
def test_static_graph_covers_every_module_python_loads(stage: str, plugin: str | None) -> None:
    entries = entry_modules(stage, plugin)
    proc = subprocess.run(
        [sys.executable, "-c", _LOADED, *entries],
        check=True,
        capture_output=True,
        text=True,
        cwd=PACKAGE_DIR.parent,
    )
    loaded = {module_file(name) for name in json.loads(proc.stdout.splitlines()[-1])}
    static = set(stage_code(entries))
    assert loaded - static == set()
    assert PACKAGE_DIR / "cli.py" in static


def test_every_stage_has_a_module_with_its_handler() -> None:
    for stage, module in MODULES.items():
        assert module_file(module) is not None, stage
        text = module_file(module).read_text()
        assert f"def run_{stage.replace('-', '_')}(" in text


_MODULE = '''"""A module."""

RATE = 0.5


class Model:
    """A model."""

    def step(self, x):
        """One step."""
        return x * RATE  # scaled
'''

# edits that change nothing a stage executes
_SAME = {
    "comment": _MODULE.replace("# scaled", "# scaled by the rate"),
    "new comment line": _MODULE + "# trailing\n",
    "module docstring": _MODULE.replace("A module.", "What this module is for."),
    "method docstring": _MODULE.replace("One step.", "One training step, documented."),
    "blank lines and spacing": _MODULE.replace("return x * RATE", "\n        return  x*RATE"),
}
# edits that do
_CHANGED = {
    "constant": _MODULE.replace("0.5", "0.25"),
    "statement": _MODULE + "RATE2 = 1\n",
    "string that is no docstring": _MODULE.replace("return x * RATE", 'return x * RATE, "a"'),
    "name": _MODULE.replace("def step", "def forward"),
}


def _key_of(tmp_path: Path, text: str) -> str:
    path = tmp_path / "accelpipe" / "mod.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return code_key([path], tmp_path / "accelpipe")


@pytest.mark.parametrize("edit", sorted(_SAME))
def test_comment_docstring_and_layout_edits_keep_the_code_key(tmp_path: Path, edit: str) -> None:
    assert _key_of(tmp_path, _SAME[edit]) == _key_of(tmp_path, _MODULE)


@pytest.mark.parametrize("edit", sorted(_CHANGED))
def test_an_edit_to_what_runs_changes_the_code_key(tmp_path: Path, edit: str) -> None:
    assert _key_of(tmp_path, _CHANGED[edit]) != _key_of(tmp_path, _MODULE)


def test_code_key_is_short_and_counts_its_modules() -> None:
    files = stage_code(entry_modules("train", "unet2d"))
    key = code_key(files)
    assert key.startswith(f"{len(files)} modules, ast-sha256 ") and len(key) < 60
    assert code_key(files) == key  # the same files, the same key
    assert code_key(files[1:]) != key  # a module fewer is another key

"""The package's architecture, read from its static import graph (accelpipe.core.codegraph:
imports at module level and in functions, not those under `if TYPE_CHECKING:`): no import
circles, data prepared offline apart from what feeds training, and every import going down the
layers.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelpipe.core.codegraph import PACKAGE_DIR, import_graph, imported_names, module_file

GRAPH = import_graph()

# Import circles the package accepts, each as its set of modules. None: the type hints that
# point back up (traces.join's FileEvents from traces.collect) are under TYPE_CHECKING and
# never run, and a module importing its sibling through its package's __init__ is no circle.
ALLOWED_CYCLES: list[set[str]] = []

# Layers, lowest first: a module imports modules of its own layer or lower ones only. A key is
# a module or a package with everything in it; `pkg.*` is a package's modules apart from its
# __init__, where the two stand on different layers; a key with a `*` inside (`pkg.*.mod`) is
# a pattern, the module of that name in each of a package's folders. The package's folders are
# its layers: a top-level folder stands on one layer, and only cli and __main__ sit beside them.
BASE, CONFIG, DATASETS, DEVICES, MODELS, INPUTS, LAUNCH, ENGINES, WORKLOADS = range(9)
RESULTS, STAGE_LIST, PLAN, STAGES, CLI = range(9, 14)
LAYERS = {
    # the package's root (REPO, __version__) and core/, what every layer may use: errors and
    # files, the registry, leases and locks, FLOP counts, the Keras 2 shim, provenance,
    # redaction, the Docker Engine client, the MLPerf log, the import graph
    "accelpipe": BASE,
    "core": BASE,
    # config/: the config and what is computed from it alone (schema, typed views, grid,
    # seeds, quality targets, recipes, where stages run, the reference docs)
    "config": CONFIG,
    "datasets": DATASETS,  # offline: raw sources and preparation
    "devices": DEVICES,
    # models/ (architectures, losses, metrics, optimisers) and the weights stage: starting
    # weights fetched, checked and converted into a model's names
    "models": MODELS,
    "weights": MODELS,
    "inputs": INPUTS,  # training-time input pipelines over prepared data
    "launch": LAUNCH,
    "engines": ENGINES,
    "workloads": WORKLOADS,
    # a workload's declaration (its registry entry and settings views: no framework) is read
    # by the config's registry, so it stands on the config's layer, below its own folder
    "workloads.*.declaration": CONFIG,
    # figures, summaries and pages over finished runs: results/ (curves, the published folder,
    # benchmark tables, leaderboard, time to target) and the figure, page and trace packages
    "results": RESULTS,
    "performance": RESULTS,  # a module per figure job: steps, figures, compute, energy, ...
    "compare": RESULTS,
    "traces": RESULTS,
    # the stage list (stages/__init__: which module runs a stage, what it enters)
    "stages": STAGE_LIST,
    # plan/: what Snakemake imports to plan (targets, stage slices, preflight, image tags,
    # starting weights); it reads the stage list, and the stages read it
    "plan": PLAN,
    "stages.*": STAGES,
    "cli": CLI,
    "__main__": CLI,
}
FRAMEWORKS = (
    "torch",
    "torchvision",
    "tensorflow",
    "keras",
    "tf_keras",
    "monai",
    "habana_frameworks",
)
# Imports of package modules inside functions, each with why it is not at the top.
LAZY_IMPORTS = {
    # a framework that does not import is the doctor's finding, not a crash of the stage
    ("accelpipe.stages.doctor", "accelpipe.devices.tf_doctor"),
    ("accelpipe.stages.doctor", "accelpipe.devices.torch_doctor"),
    # TensorBoard takes a second to import: the log's readers (the figures, publish, planning
    # through the curves) need none, only its writer does
    ("accelpipe.engines.train_log", "accelpipe.engines.scalars"),
}


def _relative(module: str) -> str:
    return "accelpipe" if module == "accelpipe" else module.removeprefix("accelpipe.")


def layer(module: str) -> int:
    """The layer of `module`: its own entry or a pattern's, else its nearest package's (`pkg.*`
    first)."""
    name = _relative(module)
    if name in LAYERS:
        return LAYERS[name]
    for key, value in LAYERS.items():
        if "*" in key.rstrip("*") and fnmatch.fnmatchcase(name, key):
            return value
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        package = ".".join(parts[:i])
        for key in (f"{package}.*", package):
            if key in LAYERS:
                return LAYERS[key]
    raise KeyError(f"{module} has no layer: add it (or its package) to LAYERS")


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _lazy_imports(tree: ast.AST, inside: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements inside functions, not under `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            continue
        if inside and isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        yield from _lazy_imports(child, inside or function)


def _files() -> dict[str, Path]:
    files = {m: module_file(m) for m in GRAPH}
    return {m: f for m, f in files.items() if f is not None}


def test_the_graph_holds_every_module_of_the_package() -> None:
    on_disk = {p for p in PACKAGE_DIR.rglob("*.py")}
    assert set(_files().values()) == on_disk
    assert {"accelpipe.datasets.sources", "accelpipe.inputs.slices", "accelpipe.cli"} <= set(GRAPH)


def test_cycles_finds_a_circle_and_leaves_a_chain() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circles() -> None:
    found = [c for c in cycles(GRAPH) if c not in ALLOWED_CYCLES]
    assert found == [], "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_every_module_has_a_layer() -> None:
    missing = []
    for module in GRAPH:
        try:
            layer(module)
        except KeyError:
            missing.append(module)
    assert missing == []


def test_no_import_goes_up_a_layer() -> None:
    upward = sorted(
        f"{module} ({layer(module)}) imports {target} ({layer(target)})"
        for module, targets in GRAPH.items()
        for target in targets
        if layer(target) > layer(module)
    )
    assert upward == []


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("accelpipe", BASE),
        ("accelpipe.core.keras2", BASE),
        ("accelpipe.config.settings", CONFIG),
        ("accelpipe.models.metrics", MODELS),
        ("accelpipe.results.publish", RESULTS),
        ("accelpipe.plan.stage_config", PLAN),
        ("accelpipe.datasets.ade20k_layout", DATASETS),
        ("accelpipe.inputs.coco_input", INPUTS),
        ("accelpipe.launch.tf_launch", LAUNCH),
        ("accelpipe.stages", STAGE_LIST),
        ("accelpipe.stages.data", STAGES),
        ("accelpipe.workloads.ssd.declaration", CONFIG),
        ("accelpipe.workloads.ssd.workload", WORKLOADS),
        ("accelpipe.workloads.base", WORKLOADS),
    ],
)
def test_layer_lookup(module: str, expected: int) -> None:
    assert layer(module) == expected


def test_datasets_import_no_framework_and_nothing_that_trains() -> None:
    """Data prepared offline needs no framework, no model and no input pipeline."""
    found = []
    for module, path in _files().items():
        if not module.startswith("accelpipe.datasets"):
            continue
        for name in imported_names(path):
            top = name.split(".")[0]
            trains = name.startswith(("accelpipe.models", "accelpipe.inputs", "accelpipe.engines"))
            if top in FRAMEWORKS or trains:
                found.append(f"{module} imports {name}")
    assert found == []


def test_imports_of_package_modules_in_functions_are_the_known_ones() -> None:
    """A package module imported in a function is there for a reason LAZY_IMPORTS names;
    never to get around an import circle."""
    found = set()
    for module, path in _files().items():
        tree = ast.parse(path.read_text())
        for node in _lazy_imports(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{'.' * node.level}{node.module or ''}.{a.name}" for a in node.names]
            )
            found.update((module, n) for n in names if n.startswith(("accelpipe", ".")))
    assert found == LAZY_IMPORTS


def test_the_top_level_holds_only_the_entry_points_beside_the_layer_folders() -> None:
    """A new module goes into the folder of its layer, so the tree keeps showing the layers."""
    modules = {p.stem for p in PACKAGE_DIR.glob("*.py")}
    folders = {p.name for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").is_file()}
    assert modules == {"__init__", "__main__", "cli"}
    assert folders <= set(LAYERS)


DEVELOPMENT = PACKAGE_DIR.parents[1] / "docs" / "development.md"
# a name with its suffixed siblings, `brats (+ _layout, _synthetic)`: brats_layout, brats_synthetic
_SIBLINGS = re.compile(r"(\w+) \(\+ ([^)]*)\)")
# file names and placeholders are no module names: train_log.csv, <name>_layout, `power`
_NOT_MODULES = re.compile(r"\S+\.(?:csv|json|yaml|png|md)\b|<\w+>\w*|`[^`]*`|__init__")


def layout_entries(text: str) -> dict[str, str]:
    """docs/development.md's layout of the package: each folder's entry (`""` the package's
    own), a folder's entry running from its `  <folder>/` line to the next one."""
    block = text.split("## Layout", 1)[1].split("```")[1]
    entries: dict[str, str] = {}
    current: str | None = None
    for line in block.splitlines():
        if line.startswith("workflow/accelpipe/"):
            current = ""
        elif line and not line.startswith(" "):
            current = None
        elif re.match(r"  \w+/ ", line):
            current = line.split()[0].removesuffix("/")
            line = line.split(maxsplit=1)[1]
        if current is not None:
            entries[current] = entries.get(current, "") + " " + line
    return entries


def layout_names(entry: str) -> set[str]:
    """The module names an entry gives, siblings written out."""
    entry = _SIBLINGS.sub(
        lambda m: " ".join([m[1], *(m[1] + s.strip() for s in m[2].split(","))]), entry
    )
    return set(re.findall(r"[a-z_][a-z0-9_]*", _NOT_MODULES.sub(" ", entry)))


def test_layout_entries_read_a_folder_and_its_siblings() -> None:
    text = "## Layout\n\n```\nworkflow/accelpipe/   cli\n  data/   a (+ _b, _c), d\nx/ y\n```\n"
    entries = layout_entries(text)
    assert set(entries) == {"", "data"}
    assert {"a", "a_b", "a_c", "d"} <= layout_names(entries["data"])


def test_the_development_layout_names_every_module_and_no_other() -> None:
    """docs/development.md's layout is the package's tree: every folder and module in it, and
    no name of a module or folder that is not there (a name with an underscore is a module's)."""
    entries = layout_entries(DEVELOPMENT.read_text())
    folders = {p.name: p for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").is_file()}
    assert set(entries) - {""} == set(folders)
    problems = []
    for name, entry in entries.items():
        folder = folders.get(name, PACKAGE_DIR)
        modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
        named = layout_names(entry)
        problems += [f"{name or 'accelpipe'}/: {m} is missing" for m in sorted(modules - named)]
        unknown = {n for n in named - modules if "_" in n.strip("_")}
        problems += [f"{name or 'accelpipe'}/: no module {n}" for n in sorted(unknown)]
    assert problems == []

"""No code path of the package reads a file in a way that can run code the file carries.

Result folders are passed between people, and a planted model.pt, checkpoint, .npy or YAML
file must stay data. Read from the package's syntax trees: torch.load only with
weights_only=True, np.load never with allow_pickle=True, no pickle/marshal/dill loads, YAML
only through safe_load or yaml.load with a safe loader named literally, no eval or exec.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from accelpipe.core.codegraph import PACKAGE_DIR

# PyYAML's loaders that build no Python object beyond plain data (the C one is libyaml's)
SAFE_YAML_LOADERS = {"yaml.SafeLoader", "yaml.CSafeLoader"}
# (module or alias, attribute): calls that unpickle or execute whatever they are given
FORBIDDEN_CALLS = {
    ("pickle", "load"),
    ("pickle", "loads"),
    ("pickle", "Unpickler"),
    ("marshal", "load"),
    ("marshal", "loads"),
    ("dill", "load"),
    ("dill", "loads"),
    ("cloudpickle", "load"),
    ("cloudpickle", "loads"),
    ("yaml", "load"),
    ("yaml", "unsafe_load"),
    ("yaml", "full_load"),
    ("yaml", "load_all"),
    ("torch.jit", "load"),
    ("pd", "read_pickle"),
    ("pandas", "read_pickle"),
}
FORBIDDEN_BUILTINS = {"eval", "exec"}


def _name(node: ast.expr) -> str:
    """`a.b.c` of an attribute chain, '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def unsafe_loads(source: str, where: str) -> Iterator[str]:
    """'<where>:<line>: <why>' for each call in `source` that could run a file's code."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        module, _, attr = name.rpartition(".")
        at = f"{where}:{node.lineno}"
        if name == "yaml.load" and _name(_keyword(node, "Loader") or node) in SAFE_YAML_LOADERS:
            continue
        if (module, attr) in FORBIDDEN_CALLS:
            yield f"{at}: {name}"
        elif name in FORBIDDEN_BUILTINS:
            yield f"{at}: {name}()"
        elif name == "torch.load" and not _is_true(_keyword(node, "weights_only")):
            yield f"{at}: torch.load without weights_only=True"
        elif attr == "load" and module in ("np", "numpy") and _allows_pickle(node):
            yield f"{at}: np.load with allow_pickle"


def _allows_pickle(call: ast.Call) -> bool:
    """np.load's allow_pickle given as anything but a literal False (False is its default)."""
    value = _keyword(call, "allow_pickle")
    return value is not None and not (isinstance(value, ast.Constant) and value.value is False)


def test_the_check_finds_each_kind_of_unsafe_load() -> None:
    source = "\n".join(
        [
            "torch.load(p, weights_only=False)",
            "torch.load(p)",
            "np.load(p, allow_pickle=True)",
            "pickle.loads(b)",
            "yaml.load(t, Loader=yaml.Loader)",
            "eval(text)",
            "yaml.load(t, Loader=loader)",
            "torch.load(p, weights_only=True)",
            "np.load(p, mmap_mode='r')",
            "np.load(p, allow_pickle=False)",
            "yaml.safe_load(t)",
            "yaml.load(t, Loader=yaml.CSafeLoader)",
            "yaml.load(t, Loader=yaml.SafeLoader)",
            "model.eval()",
        ]
    )
    found = list(unsafe_loads(source, "x.py"))
    assert [f.split(":")[1] for f in found] == ["1", "2", "3", "4", "5", "6", "7"]


def test_no_module_of_the_package_loads_a_file_as_code() -> None:
    found = [
        finding
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        for finding in unsafe_loads(path.read_text(), str(path.relative_to(PACKAGE_DIR)))
    ]
    assert found == []

"""The package modules a stage executes, read from the package's own import graph.

The rules key each stage on these files' code (`code_key`: their bytecode without docstrings,
line numbers or file name, so a comment or a docstring changes nothing), so editing what a
module executes re-runs
exactly the stages that import it. The graph is read statically (no module is imported): every
`import` and `from ... import` anywhere in a module counts, inside functions too (lazy
imports run when the stage needs them), except those under `if TYPE_CHECKING:`, which
never run. A package's `__init__.py` counts wherever one of its modules is imported,
since Python runs it first.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from types import CodeType
from typing import Any, TypeGuard

PACKAGE = "accelpipe"
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def module_file(name: str, package_dir: Path = PACKAGE_DIR) -> Path | None:
    """`accelpipe.a.b` -> <package_dir>/a/b.py or a/b/__init__.py; None if not a module."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = package_dir.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path, package_dir: Path) -> str:
    rel = path.relative_to(package_dir).with_suffix("")
    parts = [PACKAGE, *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> TypeGuard[ast.If]:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


# The fields that hold statements: an import is a statement, so only these are walked.
_STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")


def _import_nodes(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if _is_type_checking(node):  # only its `else:` runs
            todo.extend(node.orelse)
            continue
        for name in _STATEMENT_LISTS:
            todo.extend(getattr(node, name, ()))


@dataclass(frozen=True)
class _Read:
    """What one parse of a module gives: its imports ((module or None, level, names): None
    for `import a, b`) and the digest of what it executes."""

    imports: tuple[tuple[str | None, int, tuple[str, ...]], ...]
    digest: str


@lru_cache(maxsize=4096)
def _read(path: Path, mtime_ns: int, size: int) -> _Read:
    """`path` parsed once (the stat values only key the cache, so an edited file is read
    again)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    imports = tuple(
        (None, 0, tuple(a.name for a in node.names))
        if isinstance(node, ast.Import)
        else (node.module or "", node.level, tuple(a.name for a in node.names))
        for node in _import_nodes(tree)
    )
    return _Read(imports, _executed_digest(tree))


def _read_file(path: Path) -> _Read:
    stat = path.stat()
    return _read(path, stat.st_mtime_ns, stat.st_size)


def _absolute(module: str, level: int, current: str, is_package: bool) -> str:
    """The module a `from X import ...` names, with relative imports resolved."""
    if not level:
        return module
    parts = current.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - level + 1]
    return ".".join([*base, module] if module else base)


def _from_imports(path: Path, package_dir: Path) -> Iterator[tuple[str | None, tuple[str, ...]]]:
    """(the absolute module of a `from` import, or None for `import a, b`; the names)."""
    current = _module_name(path, package_dir)
    for module, level, names in _read_file(path).imports:
        if module is None:
            yield None, names
        else:
            yield _absolute(module, level, current, path.name == "__init__.py"), names


def imported_names(path: Path, package_dir: Path = PACKAGE_DIR) -> set[str]:
    """Every module name `path` imports (inside the package or not)."""
    names: set[str] = set()
    for source, imported in _from_imports(path, package_dir):
        if source is None:
            names.update(imported)
            continue
        names.add(source)
        # `from pkg import sub` imports the submodule `pkg.sub` when there is one
        names.update(f"{source}.{name}" for name in imported)
    return names


def _module_imports(path: Path, package_dir: Path) -> set[str]:
    """The package modules `path` imports, each named once: `from pkg import sub` is an
    import of the module `pkg.sub`, and of `pkg` itself only for a name that is no module."""
    current = _module_name(path, package_dir)
    found: set[str] = set()
    for source, imported in _from_imports(path, package_dir):
        if source is None:
            found.update(imported)
            continue
        for name in imported:
            sub = f"{source}.{name}"
            found.add(sub if module_file(sub, package_dir) is not None else source)
    return {name for name in found if module_file(name, package_dir) is not None} - {current}


def import_graph(package_dir: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    """Every module of the package -> the package modules it imports (at module level or in
    a function; not under `if TYPE_CHECKING:`), read as `stage_code` reads them.

    Python runs a package's `__init__` before any module in it, so `stage_code` counts the
    parents of every import; this graph leaves those implicit: a module that imports its
    sibling through its package (`from pkg import sibling`) has an edge to the sibling, not to
    the package, and so no cycle through it.
    """
    return {
        _module_name(path, package_dir): _module_imports(path, package_dir)
        for path in sorted(package_dir.rglob("*.py"))
    }


def _with_parents(name: str) -> list[str]:
    """Importing `a.b.c` runs `a`, `a.b` and `a.b.c`."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@cache
def _direct_imports(path: Path, package_dir: Path) -> tuple[Path, ...]:
    found: set[Path] = set()
    for name in imported_names(path, package_dir):
        for module in _with_parents(name):
            file = module_file(module, package_dir)
            if file is not None:
                found.add(file)
    return tuple(sorted(found))


def stage_code(entries: Iterable[str], package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The files of `entries` (module names) and of everything they import in the package."""
    todo: list[Path] = []
    for entry in entries:
        for module in _with_parents(entry):
            file = module_file(module, package_dir)
            if file is None:
                raise ValueError(f"{module}: no such module in {package_dir}")
            todo.append(file)
    seen: set[Path] = set()
    while todo:
        file = todo.pop()
        if file not in seen:
            seen.add(file)
            todo.extend(_direct_imports(file, package_dir))
    return sorted(seen)


def _statements(tree: ast.Module) -> Iterator[ast.AST]:
    """`tree` and every statement in it, nested ones too (expressions are not walked)."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        yield node
        for name in _STATEMENT_LISTS:
            todo.extend(getattr(node, name, ()))


def _without_docstrings(tree: ast.Module) -> ast.Module:
    """`tree` with the docstring of the module and of every class and function dropped (a
    body left empty gets a `pass`, as a docstring-only body executes nothing)."""
    for node in _statements(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            node.body = node.body[1:] or [ast.copy_location(ast.Pass(), first)]
    return tree


def _executed_digest(tree: ast.Module) -> str:
    """sha256 of what `tree` executes: its bytecode without docstrings, with no line numbers
    or file name (a comment, a docstring or a moved line changes nothing)."""
    code = compile(_without_docstrings(tree), "<accelpipe>", "exec", dont_inherit=True)
    digest = hashlib.sha256()
    _hash_code(code, digest)
    return digest.hexdigest()


def _hash_code(code: CodeType, digest: Any) -> None:
    for part in (
        code.co_code,
        getattr(code, "co_exceptiontable", b""),  # Python >= 3.11
        repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)),
        repr((code.co_name, code.co_flags, code.co_argcount, code.co_posonlyargcount)),
        repr((code.co_kwonlyargcount, code.co_stacksize, code.co_nlocals)),
    ):
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    for const in code.co_consts:
        if isinstance(const, CodeType):
            _hash_code(const, digest)
        else:
            digest.update(_const_repr(const).encode() + b"\0")


def _const_repr(value: object) -> str:
    """A constant's repr that is the same in every process: a frozenset's order follows
    string hashing, which is salted per process."""
    if isinstance(value, frozenset):
        return "frozenset(" + repr(sorted(_const_repr(v) for v in value)) + ")"
    if isinstance(value, tuple):
        return "(" + ",".join(_const_repr(v) for v in value) + ",)"
    return f"{type(value).__name__}:{value!r}"


def executed_digest(path: Path) -> str:
    """sha256 of what the module `path` executes (`_executed_digest`)."""
    return _read_file(path).digest


def code_key(files: Iterable[Path], package_dir: Path = PACKAGE_DIR) -> str:
    """One short key over what `files` execute, with how many they are: the rules' params
    (Snakemake's rerun trigger), short enough to read in a job's printout."""
    digest = hashlib.sha256()
    count = 0
    for path in sorted(files):
        rel = path.resolve().relative_to(package_dir.resolve())
        digest.update(f"{rel}\0{executed_digest(path)}\0".encode())
        count += 1
    return f"{count} modules, ast-sha256 {digest.hexdigest()[:16]}"

"""The package layers of docs/architecture.md (README: Architecture), checked on the source.

Every ``import`` of a gravfs module, type-only ones (under TYPE_CHECKING) and
imports inside functions included, must point to the same layer or one below
it; the module graph has no circle; nothing below gravfs/fuse/ imports pyfuse3
or trio.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gravfs")

# package prefix -> layer; a module takes the longest matching prefix
LAYERS = {
    "gravfs": 0,  # base utilities: errors, hashing, faults, progress, quoting
    "gravfs.store": 1,
    "gravfs.sstable": 1,
    "gravfs.version": 2,
    "gravfs.data": 3,
    "gravfs.fs": 4,
    "gravfs.provenance": 4,  # index queries: beside the filesystem layer it reads
    "gravfs.fuse": 5,
    "gravfs.spark": 5,
    "gravfs.cli": 6,
}
# packages of one layer that must not know each other
APART = [("gravfs.store", "gravfs.sstable"), ("gravfs.fuse", "gravfs.spark")]
FUSE_ONLY = ("pyfuse3", "trio")


def _modules() -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


MODULES = _modules()


def _imports(mod: str, path: str) -> set[str]:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    pkg = mod if path.endswith("__init__.py") else mod.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            for a in node.names:  # a submodule, else a name defined by the module itself
                sub = f"{name}.{a.name}"
                found.add(sub if sub in MODULES else name)
    return found


def _internal(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


GRAPH = {m: {t for t in map(_internal, _imports(m, p)) if t and t != m}
         for m, p in MODULES.items()}


def _package(mod: str) -> str:
    best = "gravfs"
    for prefix in LAYERS:
        if (mod == prefix or mod.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return best


def test_every_import_points_down_or_across_its_own_package():
    wrong = []
    for mod, targets in GRAPH.items():
        here = _package(mod)
        for t in targets:
            there = _package(t)
            if LAYERS[there] > LAYERS[here]:
                wrong.append(f"{mod} -> {t} (layer {LAYERS[here]} imports layer {LAYERS[there]})")
            elif any({here, there} == set(pair) for pair in APART):
                wrong.append(f"{mod} -> {t} ({here} and {there} must not know each other)")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_circle():
    state: dict[str, int] = {}
    circles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(GRAPH[m]):
            if state.get(t) == 1:
                circles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [])
    assert not circles, "\n".join(circles)


@pytest.mark.parametrize("lib", FUSE_ONLY)
def test_only_the_mount_imports_the_fuse_stack(lib):
    users = [m for m, p in MODULES.items()
             if not m.startswith("gravfs.fuse") and any(
                 n == lib or n.startswith(lib + ".") for n in _imports(m, p))]
    assert not users, users


def test_the_check_sees_type_only_and_function_level_imports():
    """The checks above would pass vacuously if imports were missed."""
    assert any(GRAPH[m] for m in GRAPH)
    assert set(LAYERS) - {"gravfs.spark"} <= {_package(m) for m in MODULES}

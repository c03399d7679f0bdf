"""The house's layers, checked against the imports (docs/architecture.md, "Where things go").

Every import between top-level parts of ``gregor`` (folders and top-level modules), including
imports made only for type checking, must point down the broker's stack or stay among the
clients. A new part must be given a place here before it can import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gregor"

# The broker, bottom to top: a part may import its own layer and the layers below.
BROKER_LAYERS: list[set[str]] = [
    {"security"},
    {"config", "atomic_file"},
    {"protocol", "assignment"},
    {"log"},
    {"cluster"},
    {"replication"},
    {"coordinator"},
    {"metrics"},
    {"apis"},
    {"server"},
    {"housekeeping", "assembly", "broker"},
    {"cli", "devcluster", "__main__", "__init__"},
]
# Clients of the broker: they speak the wire formats (protocol/) and never import the broker's
# internals, so the Spark side and the CLI run without them.
CLIENTS = {"admin", "spark", "lagreport"}
CLIENT_MAY_IMPORT = {"config", "atomic_file", "protocol", "assignment", "security"} | CLIENTS


def _layer_of(part: str) -> int:
    for i, layer in enumerate(BROKER_LAYERS):
        if part in layer:
            return i
    raise KeyError(part)


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports() -> list[tuple[str, str, str, int]]:
    """(importing part, imported part, file, line) for every import between parts."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        here = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name == "gregor" or name.startswith("gregor."):
                    there = _part(name)
                    if there != here:
                        out.append((here, there, str(rel), node.lineno))
    return out


def test_every_part_has_a_place() -> None:
    parts = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
             if (p.is_file() and p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").exists())}
    placed = set().union(*BROKER_LAYERS) | CLIENTS
    assert parts - placed == set(), "give the new part a layer in tests/test_layers.py and docs/architecture.md"


def test_imports_point_down() -> None:
    wrong = []
    for here, there, where, line in _imports():
        if here in CLIENTS:
            if there not in CLIENT_MAY_IMPORT:
                wrong.append(f"{where}:{line}: client {here} imports broker part {there}")
            continue
        if there in CLIENTS:
            if here != "cli":  # the command line dispatches to the client commands
                wrong.append(f"{where}:{line}: {here} imports client {there}")
            continue
        if _layer_of(there) > _layer_of(here):
            wrong.append(f"{where}:{line}: {here} imports {there}, a layer above it")
    assert wrong == []


@pytest.mark.parametrize("package", ["log", "protocol"])
def test_lower_layers_know_nothing_of_groups_or_sockets(package: str) -> None:
    for path in (SRC / package).rglob("*.py"):
        text = path.read_text()
        assert "gregor.coordinator" not in text and "gregor.server" not in text, path


# The tests' own rule (docs/architecture.md, "Where things go"): helpers shared by test modules
# live in tests/support/, fixtures in conftest.py files; a test module imports no other test module.
TESTS = Path(__file__).resolve().parent


def _names_a_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split("."))


def _test_module_imports(path: Path) -> list[str]:
    """The imports in ``path`` (anywhere in it, function bodies too) of a module named ``test_*``:
    ``tests.….test_x`` absolutely, or relatively (``.test_x``, ``from . import test_x``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name == "tests" or a.name.startswith("tests.")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module != "tests" and not module.startswith("tests."):
                continue
            base = "." * node.level + module
            if _names_a_test_module(module):
                names = [base]
            else:  # ``from tests.cluster import test_x``, ``from . import test_x``
                names = [f"{base}.{a.name}" if module else f"{base}{a.name}" for a in node.names]
        else:
            continue
        out += [f"{path.relative_to(TESTS.parent)}:{node.lineno}: imports {name}" for name in names
                if _names_a_test_module(name)]
    return out


def test_no_test_module_imports_another() -> None:
    wrong = [line for path in sorted(TESTS.rglob("*.py")) if path.name != "conftest.py"
             for line in _test_module_imports(path)]
    assert not wrong, "move what they share to tests/support/ (fixtures: a conftest.py):\n" + "\n".join(wrong)

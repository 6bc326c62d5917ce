"""The package's shape: one installed import name, layers that import only downward, no import cycles.

Layers (``envsuite/__init__.py`` says the same): the core (everything in ``envsuite`` not named below)
<- ``envsuite.games``, ``envsuite.evals``, ``envsuite.trainers``, ``envsuite.leaderboard`` <- the CLI
(``envsuite.cli``). Imports inside functions and under ``TYPE_CHECKING`` count: a lazy upward import
is still an upward dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
MIDDLE = ("envsuite.games", "envsuite.evals", "envsuite.trainers", "envsuite.leaderboard")
TOP = ("envsuite.cli", "envsuite.__main__")
"""The command line; ``python -m envsuite`` (``envsuite/__main__.py``) is the same command."""
FOLDERS_AT_TOP_LEVEL = ("games", "evals", "trainers", "leaderboard")
ALLOWED_MIDDLE_EDGES = {("envsuite.evals", "envsuite.leaderboard")}
"""Middle-layer packages that may import each other: ``envsuite bench`` records into the store."""


def _within(module: str, packages: tuple[str, ...]) -> str | None:
    return next((p for p in packages if module == p or module.startswith(p + ".")), None)


def _layer(module: str) -> int:
    if _within(module, TOP):
        return 3
    return 2 if _within(module, MIDDLE) else 1


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("envsuite", include_external_packages=True, cache_dir=None)


def _internal_imports(graph: grimp.ImportGraph) -> Iterator[tuple[str, str]]:
    for importer in sorted(graph.modules):
        if not importer.startswith("envsuite"):
            continue
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported.startswith("envsuite"):
                yield importer, imported


def test_layers_import_only_downward(graph: grimp.ImportGraph) -> None:
    upward = [(a, b) for a, b in _internal_imports(graph) if _layer(b) > _layer(a)]
    assert upward == [], f"imports from a lower layer to a higher one: {upward}"


def test_middle_layer_packages_are_independent(graph: grimp.ImportGraph) -> None:
    cross = set()
    for importer, imported in _internal_imports(graph):
        a, b = _within(importer, MIDDLE), _within(imported, MIDDLE)
        if a and b and a != b:
            cross.add((a, b))
    assert cross <= ALLOWED_MIDDLE_EDGES, f"unexpected imports between middle-layer packages: {cross}"


def _strongly_connected(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is deep enough to hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(edges[succ])))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def test_strongly_connected_finds_a_cycle() -> None:
    edges = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}
    assert sorted(map(sorted, _strongly_connected(list(edges), edges))) == [["a", "b", "c"], ["d"]]


def test_no_import_cycles(graph: grimp.ImportGraph) -> None:
    edges: dict[str, list[str]] = {m: [] for m in graph.modules if m.startswith("envsuite")}
    for importer, imported in _internal_imports(graph):
        # A package's own __init__ importing its children (and children naming their package) is
        # how packages work, not a cycle between modules.
        if imported.startswith(importer + ".") or importer.startswith(imported + "."):
            continue
        edges[importer].append(imported)
    cycles = [sorted(c) for c in _strongly_connected(sorted(edges), edges) if len(c) > 1]
    assert cycles == [], f"import cycles: {cycles}"


def test_nothing_imports_the_folders_as_top_level_packages(graph: grimp.ImportGraph) -> None:
    external = {m.split(".")[0] for m in graph.modules if not m.startswith("envsuite")}
    assert external.isdisjoint(FOLDERS_AT_TOP_LEVEL)
    offenders = []
    for folder in ("tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FOLDERS_AT_TOP_LEVEL]
    assert offenders == []


def test_no_other_package_imports_private_core_modules(graph: grimp.ImportGraph) -> None:
    """Layers above the core use its public names (``envsuite._make`` is the core's own business)."""
    private = []
    for importer, imported in _internal_imports(graph):
        if _layer(importer) == 1:
            continue
        core_parts = imported.split(".")
        if _layer(imported) == 1 and any(part.startswith("_") and part != "__init__" for part in core_parts):
            private.append((importer, imported))
    assert private == [], f"private core modules used from above: {private}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
        ],
        check=True,
        capture_output=True,
        cwd=out,
    )
    (built,) = out.glob("envsuite-*.whl")
    return built


def test_wheel_installs_one_top_level_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert archive.read(top_level).decode().split() == ["envsuite"]
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert roots == {"envsuite"}
    for folder in FOLDERS_AT_TOP_LEVEL:
        assert f"envsuite/{folder}/__init__.py" in names


def test_wheel_installs_beside_a_package_with_a_top_level_evals(wheel: Path, tmp_path: Path) -> None:
    """OpenAI's ``evals`` (and others) install a top-level ``evals``; envsuite must not collide with it."""
    stub = tmp_path / "stub"
    (stub / "evals").mkdir(parents=True)
    (stub / "evals" / "__init__.py").write_text("WHO = 'the other evals package'\n")
    (stub / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "other-evals"\nversion = "1.0"\n'
    )
    target = tmp_path / "site"
    for source in (str(stub), str(wheel)):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "--target",
                str(target),
                source,
            ],
            check=True,
            capture_output=True,
        )
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import evals, envsuite, envsuite.evals;"
        "assert evals.WHO == 'the other evals package', evals.__file__;"
        "assert envsuite.__file__.startswith(sys.argv[1]), envsuite.__file__;"
        "assert envsuite.evals.__file__.startswith(sys.argv[1]);"
        "print(envsuite.spec('tictactoe').id, envsuite.evals.__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(target)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.stdout.split() == ["tictactoe-v0", "envsuite.evals"]

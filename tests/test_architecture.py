"""The package's shape: one installed import name, layers that import only downward, no import cycles.

The middle layer's folders sit at the top of the repository and install as subpackages of ``envsuite``
(pyproject.toml's ``package-dir`` table). The wheel, the editable install, mypy (``scripts/typecheck.py``)
and the import graph all have to see the same modules at the same files; the tests below check that.
grimp walks a package's folder on disk, so it reads the installed wheel (one ``envsuite`` folder, as
users get it), not the checkout.

Layers (``envsuite/__init__.py`` says the same): the core (everything in ``envsuite`` not named below)
<- ``envsuite.games``, ``envsuite.evals``, ``envsuite.trainers``, ``envsuite.leaderboard`` <- the CLI
(``envsuite.cli``). Imports inside functions and under ``TYPE_CHECKING`` count: a lazy upward import
is still an upward dependency.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
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


_GRAPH_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import grimp
graph = grimp.build_graph("envsuite", include_external_packages=True, cache_dir=None)
edges = [[a, b] for a in sorted(graph.modules) for b in sorted(graph.find_modules_directly_imported_by(a))]
print(json.dumps({"modules": sorted(graph.modules), "edges": edges}))
"""


@pytest.fixture(scope="module")
def graph(installed: Path) -> grimp.ImportGraph:
    """The import graph of the installed wheel (built in a fresh interpreter that imports it first)."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", _GRAPH_PROBE, str(installed)],
        check=True,
        capture_output=True,
        text=True,
        cwd=installed,
    )
    found = json.loads(done.stdout)
    built = grimp.ImportGraph()
    for module in found["modules"]:
        built.add_module(module)
    for importer, imported in found["edges"]:
        built.add_import(importer=importer, imported=imported)
    return built


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


def test_the_trainer_reaches_the_engine_only_through_the_local_backend(graph: grimp.ImportGraph) -> None:
    """``envsuite.trainers`` computes through the Tinker interface; its sampler replicas load weights
    through ``envsuite.backends.local``'s small replica API, never ``envsuite.engine`` itself."""
    reaching = [
        (importer, imported)
        for importer, imported in _internal_imports(graph)
        if importer.startswith("envsuite.trainers") and imported.startswith("envsuite.engine")
    ]
    assert reaching == [], f"the trainer imports the engine: {reaching}"


def test_no_other_package_imports_private_core_modules(graph: grimp.ImportGraph) -> None:
    """Layers above the core use its public names (``envsuite.catalog._make`` is the core's own business)."""
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
    # setuptools builds in the checkout's build/ and copies into build/lib without clearing it: a module
    # renamed or removed since the last build would still be in the wheel (seen with _http_guard.py)
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)
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


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a directory of its own (what ``pip install envsuite`` puts on sys.path)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return target


def _checked_modules() -> dict[str, Path]:
    """mypy's view: the modules ``scripts/typecheck.py`` names, with their files in the checkout."""
    loaded = importlib.util.spec_from_file_location("_typecheck", ROOT / "scripts" / "typecheck.py")
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    modules: dict[str, Path] = module.installed_modules()
    return modules


def test_no_symlinks_in_the_package_folders() -> None:
    links = [
        str(path.relative_to(ROOT))
        for folder in ("envsuite", *FOLDERS_AT_TOP_LEVEL)
        for path in (ROOT / folder).rglob("*")
        if path.is_symlink()
    ]
    assert links == []


def test_every_package_folder_is_in_the_package_table() -> None:
    """A folder with an ``__init__.py`` missing from pyproject's list would be left out of the wheel."""
    checked = _checked_modules()
    packages = {name for name, path in checked.items() if path.name == "__init__.py"}
    on_disk = {
        ("envsuite." if folder != "envsuite" else "") + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in ("envsuite", *FOLDERS_AT_TOP_LEVEL)
        for init in (ROOT / folder).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert packages == on_disk


def test_wheel_mypy_grimp_and_the_editable_install_see_the_same_modules(
    wheel: Path, graph: grimp.ImportGraph
) -> None:
    checked = _checked_modules()
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = {
            name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            for name in archive.namelist()
            if name.endswith(".py")
        }
    assert in_wheel == set(checked)
    assert {m for m in graph.modules if m == "envsuite" or m.startswith("envsuite.")} == set(checked)
    # The editable install (setuptools' finder) resolves every module to the file mypy checks.
    for name, path in checked.items():
        found = importlib.util.find_spec(name)
        assert found is not None and found.origin is not None, name
        assert Path(found.origin).resolve() == path.resolve(), name


def test_wheel_installs_one_top_level_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert archive.read(top_level).decode().split() == ["envsuite"]
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert roots == {"envsuite"}
    for folder in FOLDERS_AT_TOP_LEVEL:
        assert f"envsuite/{folder}/__init__.py" in names


def test_wheel_ships_the_native_kernels_source(wheel: Path) -> None:
    """An installed envsuite compiles ``_native*.cpp`` (each including ``_native.h``) at first use and keys
    its kernel calibration by their hash: a wheel without one of them would fail the build or key the
    calibration by a different set of files than the checkout."""
    from envsuite.engine.kernels._native import HEADERS, SOURCES

    assert len(SOURCES) >= 4 and HEADERS
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for path in (*SOURCES, *HEADERS):
        assert f"envsuite/engine/kernels/{path.name}" in names


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

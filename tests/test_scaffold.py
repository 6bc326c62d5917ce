"""``envsuite new``: generated packages conform, install, list, check, make, bench and train."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import envsuite
from envsuite.cli import main
from envsuite.registration import EnvKind
from envsuite.scaffold import ScaffoldError, create_env_package, validate_name
from envsuite.testing import check_env
from tests.conftest import TEST_MODEL

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("Bad-Name", "lower-case letters"),
        ("9lives", "starting with a letter"),
        ("x", "2-40 characters"),
        ("json", "standard-library"),
        ("class", "keyword"),
        ("pytest", "already importable"),
        ("arithmetic", "already has arithmetic-v0"),
    ],
)
def test_bad_names_are_refused_with_the_reason(name: str, why: str) -> None:
    with pytest.raises(ScaffoldError, match=why):
        validate_name(name)


def test_unknown_kind_and_existing_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ScaffoldError, match="single-turn, multi-turn, game"):
        create_env_package("scaffold_kind_probe", tmp_path, kind="puzzle")
    (tmp_path / "scaffold_taken_probe").mkdir()
    with pytest.raises(ScaffoldError, match="already exists"):
        create_env_package("scaffold_taken_probe", tmp_path)
    assert list((tmp_path / "scaffold_taken_probe").iterdir()) == []


def test_cli_new_creates_once_then_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new", "scaffold_cli_probe", "--kind", "game", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "envsuite-scaffold-cli-probe (game)" in out and "envsuite check scaffold_cli_probe" in out
    assert (tmp_path / "scaffold_cli_probe" / "src" / "scaffold_cli_probe" / "env.py").is_file()
    assert main(["new", "scaffold_cli_probe", "--dir", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err


@pytest.fixture
def generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[EnvKind, str]]:
    """One generated package per kind, importable (not installed) and registered in-process."""
    names = {kind: f"scaffold_{kind.value.replace('-', '_')}_probe" for kind in EnvKind}
    for kind, name in names.items():
        result = create_env_package(name, tmp_path, kind=kind)
        monkeypatch.syspath_prepend(str(result.package_dir.parent))
        importlib.import_module(name).register_envs()
    yield names
    for name in names.values():
        envsuite.registry.unregister(f"{name}-v0")
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]


@pytest.mark.parametrize("kind", list(EnvKind))
def test_every_kind_passes_the_conformance_checker(generated: dict[EnvKind, str], kind: EnvKind) -> None:
    env_spec = envsuite.spec(generated[kind])
    assert env_spec.kind is kind and env_spec.package == f"envsuite-{generated[kind].replace('_', '-')}"
    report = check_env(env_spec.id, model=TEST_MODEL, strict=True)
    assert report.passed, report.render()


def test_generated_code_is_lint_clean(tmp_path: Path) -> None:
    for kind in EnvKind:
        root = create_env_package(f"scaffold_lint_{kind.value.replace('-', '_')}", tmp_path, kind=kind).root
        lint = subprocess.run([str(BIN / "ruff"), "check", "-q", str(root)], capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout + lint.stderr


def _run(*args: str, cwd: Path, site: Path | None = None, timeout: int = 300) -> str:
    wide = {**os.environ, "COLUMNS": "200"}  # rich tables would wrap long ids at 80 columns
    if site is not None:
        wide["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(list(args), cwd=cwd, env=wide, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_generated_package_installs_and_works_with_every_tool(tmp_path: Path) -> None:
    """The package installed as a user installs it (a built wheel, its entry point), then listed,
    checked, made, benched, trained and its own tests run. It goes to a folder of this test's own on
    the commands' PYTHONPATH, not into the shared venv: other tests running meanwhile (pytest-xdist)
    load every installed plugin, and must never see this one come and go."""
    name = "scaffold_e2e_probe"
    result = create_env_package(name, tmp_path / "projects", kind=EnvKind.SINGLE_TURN)
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "-q"]
    envsuite_cli = str(BIN / "envsuite")
    _run(
        *pip,
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--target",
        str(site),
        str(result.root),
        cwd=tmp_path,
    )
    assert f"{name}-v0" in _run(envsuite_cli, "list", cwd=tmp_path, site=site)
    assert "=> PASS" in _run(envsuite_cli, "check", name, cwd=tmp_path, site=site)
    made = f"import envsuite; print(type(envsuite.make_env('{name}', model='{TEST_MODEL}')).__name__)"
    assert _run(sys.executable, "-c", made, cwd=tmp_path, site=site).strip() == "ScaffoldE2eProbeEnv"
    bench = _run(
        envsuite_cli, "bench", "--model", TEST_MODEL, "--envs", name, "--episodes", "2",
        "--max-tokens", "8", "--db", str(tmp_path / "lb.sqlite"), "--log-dir", str(tmp_path / "logs"),
        cwd=tmp_path, site=site,
    )  # fmt: skip
    assert f"{name}-v0" in bench
    _run(
        envsuite_cli, "train", name, "--model", TEST_MODEL, "--steps", "1", "--batch-size", "1",
        "--group-size", "2", "--max-tokens", "8", "--eval-every", "0", "--transcripts", "0",
        "--log-dir", str(tmp_path / "train"), "--no-progress",
        cwd=tmp_path, site=site,
    )  # fmt: skip
    assert (tmp_path / "train" / "metrics.jsonl").is_file()
    tests = _run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=result.root, site=site)
    assert " passed" in tests and "failed" not in tests
    # From the folder above, whose entry on sys.path (python -m) holds a folder named as the package.
    above = _run(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        name,
        cwd=result.root.parent,
        site=site,
    )
    assert " passed" in above and "failed" not in above

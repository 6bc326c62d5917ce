"""Third-party env packages: broken plugins are reported with their package name and skipped."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import envsuite
from envsuite.registration import Registry

GOOD = """
import envsuite
def register_envs():
    envsuite.register("plug/echo-v0", "tests.support.toy_envs:EchoNumberEnv", reward_range=(0.0, 1.0))
"""
# Registers one good env, then collides with a built-in id: the good one stays, the error names us.
DUPLICATE = """
import envsuite
def register_envs():
    envsuite.register("plug/first-v0", "tests.support.toy_envs:EchoNumberEnv", reward_range=(0.0, 1.0))
    envsuite.register("arithmetic-v0", "tests.support.toy_envs:EchoNumberEnv")
"""
BAD_SPEC = """
import envsuite
def register_envs():
    envsuite.register("not a valid id!", "tests.support.toy_envs:EchoNumberEnv")
"""
BAD_FIELD = """
import envsuite
def register_envs():
    envsuite.register("plug/colour-v0", "tests.support.toy_envs:EchoNumberEnv", colour="red")
"""
IMPORT_ERROR = "import no_such_module_for_envsuite_tests\n"


def _install(root: Path, name: str, target: str, source: str) -> None:
    module = name.replace("-", "_")
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    dist_info = root / f"{module}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[envsuite.envs]\n{module} = {module}{target}\n")


PLUGINS = {
    "good-plugin": (":register_envs", GOOD),
    "dup-plugin": (":register_envs", DUPLICATE),
    "badspec-plugin": (":register_envs", BAD_SPEC),
    "badfield-plugin": (":register_envs", BAD_FIELD),
    "broken-plugin": ("", IMPORT_ERROR),
}


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    for name, (target, source) in PLUGINS.items():
        _install(tmp_path, name, target, source)
    return tmp_path


@pytest.fixture
def fresh_registry(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    monkeypatch.syspath_prepend(str(plugin_dir))
    fresh = Registry()
    for env_spec in envsuite.registry.all_specs():
        fresh.register(env_spec)
    fresh._plugins_loaded = False
    monkeypatch.setattr(envsuite.catalog.registration, "registry", fresh)
    yield fresh
    for name in PLUGINS:
        sys.modules.pop(name.replace("-", "_"), None)


def test_broken_plugins_are_reported_by_package_and_skipped(fresh_registry: Registry) -> None:
    with pytest.warns(RuntimeWarning) as caught:
        fresh_registry.load_plugins()
    errors = fresh_registry.plugin_errors
    assert set(errors) == {"dup_plugin", "badspec_plugin", "badfield_plugin", "broken_plugin"}
    assert "'dup-plugin'" in errors["dup_plugin"] and "already registered by envsuite" in errors["dup_plugin"]
    assert "'badspec-plugin'" in errors["badspec_plugin"] and "malformed env id" in errors["badspec_plugin"]
    assert "colour" in errors["badfield_plugin"]
    assert "no_such_module_for_envsuite_tests" in errors["broken_plugin"]
    assert any("broken-plugin" in str(w.message) and "skipped" in str(w.message) for w in caught)


def test_good_envs_survive_broken_neighbours(fresh_registry: Registry) -> None:
    with pytest.warns(RuntimeWarning):
        fresh_registry.load_plugins()
    assert fresh_registry.spec("plug/echo").package == "good-plugin"
    # The duplicate plugin's first env registered before its failure and is credited to it.
    assert fresh_registry.spec("plug/first").package == "dup-plugin"
    # The collision did not replace the built-in env.
    assert fresh_registry.spec("arithmetic").package == "envsuite"
    assert fresh_registry.spec("arithmetic").entry_point == "envsuite.envs.arithmetic:ArithmeticEnv"


def test_envsuite_list_shows_plugin_errors_and_good_plugin_envs(plugin_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), str(Path.cwd())])}
    code = (
        "import envsuite, sys; from envsuite.cli import main; sys.exit(main(['list', '--namespace', 'plug']))"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "plug/echo-v0" in out.stdout and "plug/first-v0" in out.stdout
    assert "plugin error" in out.stdout and "broken-plugin" in out.stdout and "dup-plugin" in out.stdout


def test_import_envsuite_survives_broken_plugins(plugin_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), str(Path.cwd())])}
    code = "import envsuite; print(envsuite.make_env('arithmetic', model='tiny-random').__class__.__name__)"
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "ArithmeticEnv", out.stderr

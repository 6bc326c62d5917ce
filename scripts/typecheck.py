"""mypy over envsuite as it installs: every module checked under the name the package-dir table gives it.

mypy names a module by its file's path, and it cannot follow setuptools' editable finder, which is what
makes ``games/`` importable as ``envsuite.games`` in a development checkout (pyproject.toml maps the
top-level folders with ``[tool.setuptools] package-dir``). So this runner reads that table and the package
list next to it, names every ``.py`` file by the module it installs as, and hands mypy those
(path, module) pairs; mypy's options come from ``[tool.mypy]`` as they would for plain ``mypy``.

Usage (the Makefile's ``typecheck``): ``python scripts/typecheck.py``; exit status 0 when clean, 1 with
errors, as mypy's.
"""

from __future__ import annotations

import sys
import time
import tomllib
from pathlib import Path

from mypy import build
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parents[1]


def package_folder(package: str, package_dir: dict[str, str]) -> Path:
    """The folder ``package`` installs from: its nearest mapped ancestor's folder plus the rest of its name."""
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        mapped = package_dir.get(".".join(parts[:cut]))
        if mapped is not None:
            return ROOT / mapped / Path(*parts[cut:])
    return ROOT / Path(*parts)


def installed_modules() -> dict[str, Path]:
    """Every module the wheel installs, by name, with the file it comes from (pyproject's table)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = setuptools["package-dir"]
    modules: dict[str, Path] = {}
    for package in setuptools["packages"]:
        for path in sorted(package_folder(package, package_dir).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
    return modules


def main() -> int:
    started = time.time()
    _, options = process_options(["--config-file", str(ROOT / "pyproject.toml")], require_targets=False)
    sources = [
        BuildSource(str(path.relative_to(ROOT)), name, None) for name, path in installed_modules().items()
    ]
    try:
        result = build.build(sources, options, stdout=sys.stdout, stderr=sys.stderr)
        messages = result.errors
    except build.CompileError as exc:  # a blocking error (syntax, duplicate module): mypy's own report
        messages = exc.messages
    for line in messages:
        print(line)
    files_with_errors = {line.split(":", 1)[0] for line in messages if ": error:" in line}
    errors = sum(": error:" in line for line in messages)
    if errors:
        print(
            f"Found {errors} error{'s' * (errors != 1)} in {len(files_with_errors)} file"
            f"{'s' * (len(files_with_errors) != 1)} (checked {len(sources)} source files)"
        )
        return 1
    print(f"Success: no issues found in {len(sources)} source files ({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

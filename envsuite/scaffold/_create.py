"""Writing a new env package from the templates: name checks, per-kind spec fields, file layout."""

from __future__ import annotations

import importlib.util
import keyword
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from envsuite.catalog.registration import EnvKind, RegistryError, UnknownEnvError, registry
from envsuite.errors import UsageError

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{1,39}$")


class ScaffoldError(UsageError):
    """The package cannot be created as asked (bad name, taken name, existing directory)."""


@dataclass(frozen=True)
class KindTemplate:
    """What differs between kinds: the env and test templates, and the spec fields registered."""

    env_template: str
    tests_template: str
    description: str
    spec_fields: str
    """Source lines for ``register(...)`` (kind, description, reward range, turn budget)."""


_KINDS: dict[EnvKind, KindTemplate] = {
    EnvKind.SINGLE_TURN: KindTemplate(
        "single_turn_env.py.tmpl",
        "single_turn_tests.py.tmpl",
        "Reverse the order of a few words; graded exactly.",
        "        kind=EnvKind.SINGLE_TURN,\n"
        '        description="Reverse the order of a few words; graded exactly.",\n'
        "        reward_range=(0.0, 1.0),\n"
        '        tags=("text",),\n',
    ),
    EnvKind.MULTI_TURN: KindTemplate(
        "multi_turn_env.py.tmpl",
        "multi_turn_tests.py.tmpl",
        "Guess a secret number with higher/lower feedback.",
        "        kind=EnvKind.MULTI_TURN,\n"
        '        description="Guess a secret number with higher/lower feedback.",\n'
        "        reward_range=(0.0, 1.0),\n"
        "        max_turns=8,\n"
        '        tags=("dialogue",),\n',
    ),
    EnvKind.GAME: KindTemplate(
        "game_env.py.tmpl",
        "game_tests.py.tmpl",
        "Nim against an opponent: take 1-3 stones, whoever takes the last one wins.",
        "        kind=EnvKind.GAME,\n"
        '        description="Nim against an opponent: take 1-3 stones, whoever takes the last one wins.",\n'
        "        reward_range=(-1.0, 1.0),\n"
        "        max_turns=100,\n"
        '        partner_kwarg="opponent",\n'
        '        tags=("game", "two-player"),\n',
    ),
}


@dataclass(frozen=True)
class ScaffoldResult:
    """A created package: where it is, what it registers, and the files written."""

    root: Path
    package_dir: Path
    """The package's source folder (``root/src/<package>``: a src layout)."""
    package: str
    """The importable module name (also the entry-point name)."""
    distribution: str
    """The pip name (``envsuite-<name>``)."""
    env_id: str
    kind: EnvKind
    files: tuple[Path, ...]


def validate_name(name: str) -> str:
    """Return ``name`` if it can be a new env package; raise :class:`ScaffoldError` saying why not."""
    if not _NAME_RE.match(name):
        raise ScaffoldError(
            f"invalid name {name!r}: use 2-40 characters of lower-case letters, digits and underscores, "
            "starting with a letter (it becomes the Python package and the env id), e.g. word_reverse"
        )
    if keyword.iskeyword(name) or name in sys.stdlib_module_names:
        raise ScaffoldError(f"invalid name {name!r}: it is a Python keyword or standard-library module")
    if importlib.util.find_spec(name) is not None:
        raise ScaffoldError(f"invalid name {name!r}: a module of that name is already importable here")
    try:
        taken = registry.spec(name)
    except UnknownEnvError:
        return name
    except RegistryError as exc:  # deprecated or unavailable: the id is still taken
        raise ScaffoldError(f"invalid name {name!r}: {exc}") from None
    raise ScaffoldError(f"invalid name {name!r}: the catalog already has {taken.id} (from {taken.package})")


def parse_kind(kind: str | EnvKind) -> EnvKind:
    try:
        return EnvKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in EnvKind)
        raise ScaffoldError(f"unknown kind {kind!r}; choose one of: {known}") from None


def create_env_package(
    name: str, directory: str | Path = ".", *, kind: str | EnvKind = EnvKind.SINGLE_TURN
) -> ScaffoldResult:
    """Write a ready-to-install env package ``<directory>/<name>`` for an env of ``kind``.

    The package registers ``<name>-v0`` through the ``envsuite.envs`` entry point and ships tests that
    run the conformance checker; its code is under ``src/`` (the project folder has the package's name,
    which would shadow it for ``python -m pytest <name>`` from the folder above). An existing target
    directory is never overwritten.
    """
    name = validate_name(name)
    env_kind = parse_kind(kind)
    root = Path(directory) / name
    if root.exists():
        raise ScaffoldError(f"{root} already exists; pick another name or directory (nothing was written)")
    template = _KINDS[env_kind]
    values = {
        "__PKG__": name,
        "__DIST__": "envsuite-" + name.replace("_", "-"),
        "__ENV_ID__": f"{name}-v0",
        "__BASE_ID__": name,
        "__CLASS__": "".join(part.capitalize() for part in name.split("_") if part) + "Env",
        "__KIND__": env_kind.value,
        "__DESCRIPTION__": template.description,
        "__SPEC_FIELDS__": template.spec_fields.rstrip("\n"),
        "__KIND_TESTS__": _template(template.tests_template).rstrip("\n"),
    }
    layout = {
        Path("pyproject.toml"): "pyproject.toml.tmpl",
        Path("README.md"): "README.md.tmpl",
        Path("src") / name / "__init__.py": "package_init.py.tmpl",
        Path("src") / name / "env.py": template.env_template,
        Path("tests") / f"test_{name}.py": "test_env.py.tmpl",
    }
    written: list[Path] = []
    for relative, template_name in layout.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_fill(_template(template_name), values), encoding="utf-8")
        written.append(path)
    return ScaffoldResult(
        root=root,
        package_dir=root / "src" / name,
        package=name,
        distribution=values["__DIST__"],
        env_id=values["__ENV_ID__"],
        kind=env_kind,
        files=tuple(written),
    )


def _template(template_name: str) -> str:
    return (resources.files("envsuite.scaffold") / "templates" / template_name).read_text(encoding="utf-8")


def _fill(text: str, values: dict[str, str]) -> str:
    # Placeholders that are filled with other templates go first so their own placeholders get filled.
    for key in ("__KIND_TESTS__", "__SPEC_FIELDS__"):
        text = text.replace(key, values[key])
    for key, value in values.items():
        text = text.replace(key, value)
    return text

"""Every catalog id README.md and docs/*.md name is one the catalog has, with the version they give.

The README once told users `reasoning_gym/<name>-v0` while `envsuite show` gave `-v1` (issue 53). Three
kinds of mention are checked against the registry:

* a versioned id (``arithmetic-v0``, ``reasoning_gym/chain_sum-v1``) in a catalog namespace, or whose
  name the catalog has, is registered with exactly that version; docs may name a deprecated version
  (pages of past measurements and version histories do), the README, which tells users what to type,
  may not;
* an unversioned id in a catalog namespace (``reasoning_gym/chain_sum``) resolves;
* a pattern (``reasoning_gym/<name>-v0``) holds for every current id of its namespace.

Names of the catalog's own examples that no package registers (``mylab/puzzle-v0``, the scaffold's
``NAME-v0``) are in no catalog namespace and name no registered env, so they are left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from envsuite.registration import EnvSpec, registry

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
VERSIONED_ID = re.compile(r"(?<![\w/.<>-])((?:[A-Za-z]\w*/)?[A-Za-z0-9_]\w*-v\d+)(?![\w/<>-]|\.\w)")
"""``[ns/]name-vN`` not inside a longer word, path or pattern (``tools/x.py``, ``<name>-v0``)."""


@dataclass(frozen=True)
class Mention:
    """An id as a page writes it, and where."""

    text: str
    page: Path
    line: int

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.text}"


def _specs() -> list[EnvSpec]:
    registry.load_plugins()
    return list(registry.all_specs())


def _namespaces() -> list[str]:
    return sorted({s.namespace for s in _specs() if s.namespace})


def _mentions(pattern: re.Pattern[str]) -> list[Mention]:
    found: list[Mention] = []
    for page in DOCS:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            found += [Mention(m.group(1), page, number) for m in pattern.finditer(line)]
    return found


def _versioned() -> list[Mention]:
    return _mentions(VERSIONED_ID)


def test_the_catalog_namespaces_are_installed() -> None:
    """The checks below read the registry: without the dev extras they would check nothing."""
    assert {"reasoning_gym", "textarena"} <= set(_namespaces())


def test_every_versioned_id_in_the_docs_is_registered_with_that_version() -> None:
    specs = {s.id: s for s in _specs()}
    names = {s.base_id for s in specs.values()}
    namespaces = set(_namespaces())
    checked, wrong = 0, []
    for mention in _versioned():
        namespace, _, _ = mention.text.rpartition("/")
        base = mention.text.rsplit("-v", 1)[0]
        if namespace not in namespaces and base not in names:
            continue  # an example's id (mylab/puzzle-v0), not the catalog's
        checked += 1
        spec = specs.get(mention.text)
        if spec is None:
            versions = sorted(s.id for s in specs.values() if s.base_id == base and not s.deprecated)
            wrong.append(f"{mention}: not registered (the catalog has {versions or 'no such env'})")
        elif spec.deprecated and mention.page == README:
            wrong.append(f"{mention}: deprecated ({spec.deprecated})")
    assert checked > 20, "the pattern no longer finds the docs' ids"
    assert not wrong, "\n".join(wrong)


def test_every_unversioned_namespaced_id_in_the_docs_resolves() -> None:
    namespaces = "|".join(_namespaces())
    pattern = re.compile(rf"(?<![\w/.<>-])((?:{namespaces})/[A-Za-z0-9_]\w*)(?![\w*/<>-]|\.\w)")
    wrong = []
    for mention in _mentions(pattern):
        try:
            registry.spec(mention.text, deprecated_ok=True)
        except LookupError as exc:
            wrong.append(f"{mention}: {exc}")
    assert not wrong, "\n".join(wrong)


def test_every_id_pattern_in_the_docs_holds_for_its_whole_namespace() -> None:
    """``textarena/<Game>-v0`` says every current TextArena id is ``-v0``."""
    patterns = _mentions(re.compile(r"(?<![\w/])((?:[A-Za-z]\w*)/<[^>]+>-v\d+)"))
    assert patterns, "the docs name no id pattern any more: drop this test or its pattern"
    wrong = []
    for mention in patterns:
        namespace = mention.text.split("/")[0]
        version = int(mention.text.rsplit("-v", 1)[1])
        current = [s.id for s in _specs() if s.namespace == namespace and not s.deprecated]
        if not current:
            continue  # an example namespace
        other = [i for i in current if not i.endswith(f"-v{version}")]
        if other:
            wrong.append(f"{mention}: but {len(other)} current ids are not -v{version}, e.g. {other[:3]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("`reasoning_gym/chain_sum-v1` and arithmetic-v0.", ["reasoning_gym/chain_sum-v1", "arithmetic-v0"]),
        ("see tools/typecheck.py, runs/arithmetic-v0/x and `<name>-v0`", []),
    ],
)
def test_the_id_pattern_finds_ids_not_paths(line: str, found: list[str]) -> None:
    assert [m.group(1) for m in VERSIONED_ID.finditer(line)] == found

"""Saying which envs to run: ids, families, tags and globs, as ``envsuite list``, ``bench`` and ``train``
take them.

A selection is a list of patterns, read left to right:

* an id (``arithmetic``, ``textarena/Wordle-v0``): that env (looked up as :func:`~envsuite.spec` does,
  with close-id suggestions on a miss), whatever its status;
* ``family:NAME``: every env of that family (:func:`~envsuite.env_family`);
* ``tag:NAME``: every env with that tag (:attr:`~envsuite.EnvSpec.all_tags`: its own tags, its kind,
  ``multi-turn``, ``curriculum``);
* a glob (``textarena/*``, ``reasoning_gym/*sum*``), matched against versioned and unversioned ids;
* ``all``: every env;
* any of these after ``!`` takes its envs out again (``family:games !textarena/*``).

Names of families and tags match without regard to case, and ``-``, ``_`` and spaces are the same
(``family:twenty-questions``). Patterns other than ids leave out deprecated envs, and unavailable ones
unless the caller asks for them (``envsuite list`` shows them, with the reason). A pattern that matches
nothing is a :class:`~envsuite.UsageError` naming the families and tags there are.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from envsuite.catalog.registration import EnvSpec, env_family, family_order, registry
from envsuite.errors import UsageError

FAMILY_PREFIX = "family:"
TAG_PREFIX = "tag:"
EXCLUDE_PREFIX = "!"
ALL = "all"
_GLOB_CHARS = frozenset("*?[")


def normalized(name: str) -> str:
    """A family or tag name as selection compares it (lower case; ``-``, ``_`` and spaces alike)."""
    return " ".join(name.lower().replace("-", " ").replace("_", " ").split())


def is_env_pattern(text: str) -> bool:
    """Whether ``text`` selects by family, tag or glob (or ``all``) rather than naming one id."""
    text = text.removeprefix(EXCLUDE_PREFIX)
    return text == ALL or text.startswith((FAMILY_PREFIX, TAG_PREFIX)) or bool(_GLOB_CHARS & set(text))


def select_envs(patterns: Iterable[str], *, include_unavailable: bool = False) -> list[EnvSpec]:
    """The specs ``patterns`` select, in the order they were first selected, without repeats.

    Deprecated envs are never selected by a pattern; unavailable ones only with ``include_unavailable``.
    Named ids are taken as they are (an unavailable one then fails where it is made, saying why).
    """
    chosen: dict[str, EnvSpec] = {}
    for raw in patterns:
        text = raw.strip()
        if not text:
            continue
        excluded = text.startswith(EXCLUDE_PREFIX)
        found = _matches(text.removeprefix(EXCLUDE_PREFIX), include_unavailable)
        for env_spec in found:
            if excluded:
                chosen.pop(env_spec.id, None)
            else:
                chosen.setdefault(env_spec.id, env_spec)
    return list(chosen.values())


def _matches(pattern: str, include_unavailable: bool) -> list[EnvSpec]:
    if not is_env_pattern(pattern):
        return [registry.spec(pattern)]
    candidates = [
        s for s in registry.all_specs() if not s.deprecated and (include_unavailable or not s.unavailable)
    ]
    if pattern == ALL:
        found = candidates
    elif pattern.startswith(FAMILY_PREFIX):
        wanted = normalized(pattern.removeprefix(FAMILY_PREFIX))
        found = [s for s in candidates if normalized(env_family(s)) == wanted]
    elif pattern.startswith(TAG_PREFIX):
        wanted = normalized(pattern.removeprefix(TAG_PREFIX))
        found = [s for s in candidates if wanted in {normalized(t) for t in s.all_tags}]
    else:
        found = [
            s
            for s in candidates
            if fnmatch.fnmatchcase(s.id, pattern) or fnmatch.fnmatchcase(s.base_id, pattern)
        ]
    if not found:
        raise UsageError(
            f"no {'' if include_unavailable else 'available '}env matches {pattern!r}. {vocabulary()}"
        )
    return found


def vocabulary() -> str:
    """One line naming the catalog's families and tags (what ``family:`` and ``tag:`` can say)."""
    specs = [s for s in registry.all_specs() if not s.deprecated]
    families = family_order(env_family(s) for s in specs)
    tags = sorted({t for s in specs for t in s.all_tags})
    return (
        f"Families: {', '.join(families)}. Tags: {', '.join(tags)}. Globs match ids (textarena/*); "
        "`envsuite list` shows the catalog."
    )

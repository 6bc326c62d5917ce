"""Which checkpoints and model directories a client may name: those inside the server's own directories.

A client names checkpoints by ``tinker://`` path or by directory, and base models by name or by
directory. On a server those names must not reach the rest of its disk: a checkpoint or model
directory is used only when it lies inside ``--state-dir`` or a directory the operator listed with
``--allow-dir`` (after following symlinks, so a link cannot lead out). Anything else is answered with
the same :class:`~envsuite.serve._errors.NotFound` as a path that does not exist, so a client learns
nothing about what exists elsewhere on the machine. Every route that takes a path asks this module
first: ``create_model``, ``load_weights`` (both forms), the sampling paths, ``weights_info``,
``copy_weights``, and the OpenAI routes' ``model``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from envsuite.backends.local import resolve_checkpoint_path
from envsuite.models import KNOWN_MODELS
from envsuite.serve._errors import NotFound

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""A Hugging Face hub id (``owner/name``): tried on the hub when it is reachable, never as a path."""
_SHOWN_CHARS = 200


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0")


@dataclass(frozen=True)
class PathScope:
    """The directories client-named checkpoints and models must lie in (resolved, symlinks followed)."""

    runs_dir: Path
    """Where ``tinker://`` paths resolve (``<state-dir>/runs``)."""
    roots: tuple[Path, ...]

    @classmethod
    def create(cls, state_dir: Path, allowed: tuple[Path, ...] = ()) -> PathScope:
        """The state dir, the operator's ``allowed`` directories, and envsuite's own materialized models
        (``<envsuite cache>/models``: the directories ``get_info`` reports as tokenizer ids, so clients
        such as tinker-cookbook name those models by them)."""
        from envsuite.models import cache_dir

        dirs = (state_dir, *allowed, cache_dir() / "models")
        return cls(Path(state_dir) / "runs", tuple(Path(os.path.realpath(p.expanduser())) for p in dirs))

    def checkpoint(self, path: str) -> str:
        """``path`` as the backend should get it: a ``tinker://`` path unchanged, a directory as its real
        absolute path. Raises :class:`NotFound` for every other path: outside the roots, naming no
        directory, malformed (``tinker://../..``), too long or unreadable for the OS alike."""
        try:
            inside = self._inside(resolve_checkpoint_path(path, self.runs_dir))
        except (OSError, ValueError):
            inside = None
        if inside is None:
            raise NotFound(
                f"no checkpoint {_shown(path)} on this server (checkpoints are named by tinker:// path or "
                "by a directory inside the server's state dir or its --allow-dir directories)"
            )
        return path if path.startswith("tinker://") else str(inside)

    def model(self, name: str) -> str:
        """A base model name as the backend should get it: a known model or hub id unchanged, a
        directory inside the roots as its real absolute path. Raises :class:`NotFound` for every other
        name, existing or not (a directory elsewhere, a path, a hub id while the hub is off, a name
        the OS refuses as a path)."""
        if name in KNOWN_MODELS:
            return name
        try:
            found = self._model(name)
        except (OSError, ValueError):
            found = None
        if found is None:
            known = ", ".join(sorted(KNOWN_MODELS))
            raise NotFound(
                f"unknown model {_shown(name)} on this server: name a known model ({known}), a hub id "
                "(when the server can reach the hub), or a model or checkpoint directory inside its "
                "state dir or its --allow-dir directories"
            )
        return found

    def _model(self, name: str) -> str | None:
        local = Path(name).expanduser()
        path_like = local.is_absolute() or name.startswith((".", "~")) or local.exists()
        if not path_like and _HUB_ID.match(name) and ".." not in name and not _hub_offline():
            return name
        inside = self._inside(local)
        return None if inside is None else str(inside)

    def _inside(self, path: Path) -> Path | None:
        """The real path of an existing directory inside one of the roots; None otherwise. (May raise
        ``OSError``/``ValueError`` for names the OS refuses: callers answer those as not found.)"""
        real = Path(os.path.realpath(path.expanduser().absolute()))
        if not real.is_dir():
            return None
        for root in self.roots:
            if real == root or real.is_relative_to(root):
                return real
        return None


def _shown(name: str) -> str:
    """A client's name as an error message repeats it: cut short (a 5,000-character name is not echoed)."""
    return repr(name if len(name) <= _SHOWN_CHARS else f"{name[:_SHOWN_CHARS]}...")

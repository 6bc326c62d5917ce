"""Inspect's own log viewer, bundled into the page's folder, and links that open it at one sample.

``inspect view bundle`` (``inspect_ai.log.bundle_log_dir``) writes the viewer as a static site with a
``logs/`` folder. The logs the board refers to are staged under short unique names (their parent
folder and file name) and bundled into ``<page>/viewer/``; a result links to
``viewer/index.html#/logs/<name>/samples/sample/<sample id>/<epoch>``, the viewer's own route.

The viewer is an ES-module app that fetches its logs, so browsers run it only when the folder is
served over http(s) (any static host, or ``envsuite leaderboard --serve DIR``), not from ``file://``.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

VIEWER_DIR = "viewer"


@dataclass(frozen=True)
class ViewerBundle:
    """A bundled viewer and the name each stored log path has inside it."""

    directory: Path
    names: Mapping[str, str]
    """Stored log path -> its path under the viewer's ``logs/`` folder."""
    error: str | None = None
    """Why some or all logs could not be bundled (shown on the page)."""


def resolve_log(log_path: str) -> Path | None:
    """The file a stored log path names (relative paths are taken from the working directory)."""
    path = log_path.removeprefix("file://")
    if urllib.parse.urlparse(path).scheme not in ("", "file"):
        return None
    target = Path(path) if os.path.isabs(path) else Path.cwd() / path
    return target if target.is_file() else None


def _unique_names(paths: Mapping[str, Path]) -> dict[str, str]:
    names: dict[str, str] = {}
    taken: set[str] = set()
    for stored, path in sorted(paths.items()):
        base = f"{_safe(path.parent.name) or 'logs'}/{_safe(path.name)}"
        name, i = base, 1
        while name in taken:
            i += 1
            name = f"{_safe(path.parent.name) or 'logs'}-{i}/{_safe(path.name)}"
        taken.add(name)
        names[stored] = name
    return names


def _safe(part: str) -> str:
    # Names become URL path segments and file names: keep them plain.
    return "".join(c if c.isalnum() or c in "-_.@" else "_" for c in part)


def bundle_viewer(log_paths: Iterable[str], out_dir: Path) -> ViewerBundle | None:
    """Bundle the viewer with every readable log among ``log_paths`` into ``out_dir/viewer``.

    Returns None when no log file exists (nothing to view). Logs Inspect cannot read are left out
    and named in ``error``; the rest stay viewable.
    """
    found = {
        p: f for p in set(log_paths) if (f := resolve_log(p)) is not None and f.suffix in (".eval", ".json")
    }
    directory = out_dir / VIEWER_DIR
    if not found:
        shutil.rmtree(directory, ignore_errors=True)
        return None
    from inspect_ai.log import bundle_log_dir, read_eval_log

    names = _unique_names(found)
    unreadable = []
    with tempfile.TemporaryDirectory() as staging:
        for stored, name in names.items():
            try:
                read_eval_log(str(found[stored]), header_only=True)
            except Exception:  # any log Inspect cannot open would break the viewer's listing
                unreadable.append(stored)
                continue
            target = Path(staging) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found[stored], target)
        for stored in unreadable:
            del names[stored]
        if not names:
            shutil.rmtree(directory, ignore_errors=True)
            return None
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            bundle_log_dir(staging, str(directory), overwrite=True)
    error = f"{len(unreadable)} log(s) Inspect cannot read were left out" if unreadable else None
    return ViewerBundle(directory, names, error)


def sample_href(
    bundle: ViewerBundle | None, log_path: str | None, sample_id: str | None, epoch: int
) -> str | None:
    """A link (relative to the page folder) opening the viewer at one sample, or None."""
    name = bundle.names.get(log_path) if bundle is not None and log_path is not None else None
    if name is None or sample_id is None:
        return None
    quoted = urllib.parse.quote(name, safe="/")
    return f"{VIEWER_DIR}/index.html#/logs/{quoted}/samples/sample/{urllib.parse.quote(sample_id, safe='')}/{epoch}"


def log_href(bundle: ViewerBundle | None, log_path: str) -> str | None:
    """A link (relative to the page folder) opening the viewer at one log's sample list, or None."""
    name = bundle.names.get(log_path) if bundle is not None else None
    if name is None:
        return None
    return f"{VIEWER_DIR}/index.html#/logs/{urllib.parse.quote(name, safe='/')}"

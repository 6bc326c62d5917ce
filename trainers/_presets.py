"""Named training presets and config files: a :class:`TrainConfig` written down as TOML (or JSON).

A preset is a file ``trainers/presets/<name>.toml`` shipped with the package. Its top-level keys are
``TrainConfig`` fields (``env_kwargs`` as a table); an optional ``[preset]`` table says what the run
is for and how its result is read, and is not part of the config::

    env_id = "tictactoe_easy-v0"
    n_steps = 30
    max_tokens = 8

    [env_kwargs]
    opponent = "random"

    [preset]
    description = "tic-tac-toe as X against the random opponent"
    quantity = "win+draw"      # the held-out number the run is judged by (see compare_held_out)

``envsuite train ENV --preset NAME`` (or ``--config FILE``) starts from the file and lets any flag
given on the command line override it; ``log_dir`` defaults to ``runs/<name>``.
"""

from __future__ import annotations

import importlib.resources
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsuite.trainers._config import ConfigError, TrainConfig

_PACKAGE = "envsuite.trainers.presets"
_SUFFIX = ".toml"


@dataclass(frozen=True)
class PresetInfo:
    """The ``[preset]`` table: what a preset is for and how its result is read."""

    description: str = ""
    quantity: str = "reward"
    """Held-out quantity the run is judged by: ``reward``, a metric, or ``a+b`` (e.g. ``win+draw``)."""
    match_games: int = 0
    """Self-play presets: games the trained policy plays against the base model after training (0: none)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Other keys of the table, kept as written."""


@dataclass(frozen=True)
class Preset:
    """A config file, read: config values (no ``log_dir`` unless the file sets one) and its info."""

    name: str
    values: dict[str, Any]
    info: PresetInfo

    def config(self, log_dir: str | None = None, **overrides: object) -> TrainConfig:
        """The ``TrainConfig`` of this preset, with ``overrides`` applied."""
        values = {**self.values, **overrides}
        values["log_dir"] = log_dir or values.get("log_dir") or f"runs/{self.name}"
        if "env_id" not in values:
            raise ConfigError(f"preset {self.name!r} names no env_id")
        return TrainConfig.from_dict(values)


def list_presets() -> list[str]:
    """Names of the presets shipped with envsuite, sorted."""
    root = importlib.resources.files(_PACKAGE)
    return sorted(p.name.removesuffix(_SUFFIX) for p in root.iterdir() if p.name.endswith(_SUFFIX))


def load_preset(name: str) -> Preset:
    """The shipped preset ``name``; an unknown name is a :class:`ConfigError` listing the known ones."""
    if name not in list_presets():
        raise ConfigError(f"no preset named {name!r}; presets: {', '.join(list_presets()) or '(none)'}")
    text = importlib.resources.files(_PACKAGE).joinpath(name + _SUFFIX).read_text(encoding="utf-8")
    return parse_preset(name, text, "toml")


def load_config_file(path: str | Path) -> Preset:
    """A config file anywhere (``.toml`` or ``.json``), read like a preset named after the file."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {file} does not exist")
    kind = "json" if file.suffix == ".json" else "toml"
    return parse_preset(file.stem, file.read_text(encoding="utf-8"), kind)


def parse_preset(name: str, text: str, kind: str = "toml") -> Preset:
    """Parse a preset's text; errors name the file and what is wrong with it."""
    try:
        data = tomllib.loads(text) if kind == "toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"preset {name!r} is not valid {kind.upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"preset {name!r} must be a table of TrainConfig fields")
    table = data.pop("preset", {})
    if not isinstance(table, dict):
        raise ConfigError(f"preset {name!r}: [preset] must be a table")
    known = {"description", "quantity", "match_games"}
    info = PresetInfo(
        description=str(table.get("description", "")),
        quantity=str(table.get("quantity", "reward")),
        match_games=int(table.get("match_games", 0)),
        extra={k: v for k, v in table.items() if k not in known},
    )
    preset = Preset(name, data, info)
    preset.config().validate()  # unknown keys and bad values fail here, naming the field
    return preset

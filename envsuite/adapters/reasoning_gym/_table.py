"""What the catalog knows of each reasoning-gym dataset, as data: read from reasoning-gym once, shipped.

Importing reasoning-gym takes seconds (it imports every generator), and registering an env must not, so
the catalog registers from ``datasets.json``, written by :func:`write_table` from the installed
reasoning-gym: per dataset its category, a one-line description, the keyword arguments its config takes
(with JSON defaults), its difficulty rungs (the curriculum's global levels, as reasoning-gym's own
``generate_configuration`` turns them into configs), and whether it can run here. When the installed
reasoning-gym is not the version the file was written from, :func:`load_table` reads it live instead.

Regenerate after upgrading reasoning-gym::

    python -m envsuite.adapters.reasoning_gym._table   # probes every dataset here, offline (~1 min)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import inspect
import json
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from envsuite.catalog.registration import Rung

TABLE_PATH = Path(__file__).with_name("datasets.json")
DISTRIBUTION = "reasoning-gym"
ENV_OWNED = frozenset({"seed", "size"})
"""Config fields the env sets itself (from the episode seed), not keyword arguments."""
SHARED_SIZE = 2**31 - 1
"""Items are made on access, so the shared dataset can be as large as its config allows."""
_SIZE_STEPS = (SHARED_SIZE, 10**6, 20_000, 10_000, 1_000)
PROBE_ITEMS = 3
PROBE_TIMEOUT_S = 120
_LABEL_VALUE_CHARS = 24
_ITEM_METHODS = frozenset({"__getitem__", "__len__", "__iter__", "__next__"})
_SIZE_READ = re.compile(r"\b(self|config)\.size\b")


@dataclass(frozen=True)
class DatasetInfo:
    """One reasoning-gym dataset as the catalog registers it."""

    name: str
    category: str
    description: str
    kwargs: dict[str, Any]
    """Its config's defaults that are JSON values (what ``envsuite show`` lists)."""
    accepted: tuple[str, ...]
    """Every config field it takes as a keyword argument (the JSON ones and the others)."""
    rungs: tuple[Rung, ...] = ()
    per_episode: bool = False
    """Its constructor builds all ``size`` items up front: the env makes a small one per episode
    instead of sharing one large one."""
    shared_size: int = SHARED_SIZE
    """Size of the one dataset per config that episodes draw from (the largest its config allows)."""
    unavailable: str | None = None


@dataclass(frozen=True)
class Table:
    """The datasets of one reasoning-gym version."""

    version: str
    datasets: tuple[DatasetInfo, ...] = field(default_factory=tuple)

    def names(self) -> list[str]:
        return [d.name for d in self.datasets]

    def get(self, name: str) -> DatasetInfo | None:
        return next((d for d in self.datasets if d.name == name), None)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Table:
        data = json.loads(text)
        infos = []
        for entry in data["datasets"]:
            rungs = tuple(Rung(kwargs=r["kwargs"], label=r["label"]) for r in entry.pop("rungs"))
            infos.append(DatasetInfo(**{**entry, "accepted": tuple(entry["accepted"]), "rungs": rungs}))
        return cls(version=data["version"], datasets=tuple(infos))


def installed_version() -> str | None:
    """The installed reasoning-gym's version (read from its metadata, without importing it)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def load_table() -> Table:
    """The shipped table when it matches the installed reasoning-gym, else one read from it now."""
    if TABLE_PATH.is_file():
        shipped = Table.from_json(TABLE_PATH.read_text(encoding="utf-8"))
        if shipped.version == installed_version():
            return shipped
    return describe_datasets(probe=False)


# -- reading reasoning-gym ------------------------------------------------------------------------


def describe_datasets(*, probe: bool = False) -> Table:
    """Every dataset of the installed reasoning-gym (imports it). ``probe`` also draws items from each
    (as the shipped table was made), marking the ones that fail here unavailable with the reason."""
    importlib.import_module("reasoning_gym")
    factory = importlib.import_module("reasoning_gym.factory")
    infos = []
    for name in sorted(factory.DATASETS):
        dataset_cls, config_cls = factory.DATASETS[name]
        info = DatasetInfo(
            name=name,
            category=_category(dataset_cls),
            description=_first_line(dataset_cls.__doc__) or f"reasoning-gym {name}",
            kwargs=_json_defaults(config_cls),
            accepted=tuple(f.name for f in dataclasses.fields(config_cls) if f.name not in ENV_OWNED),
            rungs=_rungs(factory, name) if name in factory.CURRICULA else (),
            per_episode=_builds_items_up_front(dataset_cls),
            shared_size=_largest_size(config_cls),
        )
        if probe:
            info = dataclasses.replace(info, unavailable=_probe(factory, info))
        infos.append(info)
    return Table(version=installed_version() or "unknown", datasets=tuple(infos))


def _category(dataset_cls: type) -> str:
    parts = dataset_cls.__module__.split(".")
    return parts[1] if len(parts) >= 3 else "other"


def _first_line(doc: str | None) -> str:
    lines = [line.strip() for line in (doc or "").splitlines() if line.strip()]
    return lines[0].rstrip(".:") if lines else ""


def _default(config_field: dataclasses.Field[object]) -> object:
    if config_field.default is not dataclasses.MISSING:
        return config_field.default
    if config_field.default_factory is not dataclasses.MISSING:
        return config_field.default_factory()
    return dataclasses.MISSING


def as_json(value: Any) -> Any:
    """``value`` as plain JSON data (tuples as lists); raises TypeError for anything else."""
    return json.loads(json.dumps(value))


def _json_defaults(config_cls: type) -> dict[str, Any]:
    defaults = {}
    for config_field in dataclasses.fields(config_cls):
        value = _default(config_field)
        if config_field.name in ENV_OWNED or value is dataclasses.MISSING:
            continue
        try:
            defaults[config_field.name] = as_json(value)
        except (TypeError, ValueError):
            continue  # a date or an options object: accepted from Python, not listed
    return defaults


def _builds_items_up_front(dataset_cls: type) -> bool:
    """Whether a method other than item access and iteration reads ``size`` (beyond passing it on):
    such a dataset makes its ``size`` items (or item choices) up front."""
    for name, member in vars(dataset_cls).items():
        if name in _ITEM_METHODS or not callable(member):
            continue
        try:
            source = inspect.getsource(member)
        except (OSError, TypeError):
            return True
        lines = (line for line in source.splitlines() if "super().__init__" not in line)
        if any(_SIZE_READ.search(line) for line in lines):
            return True
    return False


def _largest_size(config_cls: type) -> int:
    """The largest of :data:`_SIZE_STEPS` the config's own ``validate`` accepts (some cap ``size``)."""
    for size in _SIZE_STEPS:
        try:
            config = config_cls(size=size)
            if hasattr(config, "validate"):
                config.validate()
        except Exception:
            continue
        return size
    return _SIZE_STEPS[-1]


def _rungs(factory: Any, name: str) -> tuple[Rung, ...]:
    """The curriculum's global levels 0..n-1 as rungs, each the config reasoning-gym makes of it (its
    default, inclusive ranges), keeping only the fields the curriculum sets; a level whose config does
    not validate ends the ladder."""
    curriculum = factory.create_curriculum(name)
    attributes = list(curriculum.attributes.values())
    n_levels = max((len(a.levels) for a in attributes), default=0)
    rungs = []
    for level in range(n_levels):
        curriculum.set_global_level(level)
        try:
            config = curriculum.generate_configuration({})
            if hasattr(config, "validate"):
                config.validate()
            kwargs = {key: as_json(getattr(config, key)) for key in _curriculum_fields(attributes)}
        except Exception:
            break
        rungs.append(Rung(kwargs=kwargs, label=_label(attributes, kwargs)))
    return tuple(rungs)


def _curriculum_fields(attributes: list[Any]) -> list[str]:
    fields: list[str] = []
    for attribute in attributes:
        if hasattr(attribute, "lower_field_name"):
            fields += [attribute.lower_field_name, attribute.upper_field_name]
        else:
            fields.append(attribute.field_name)
    return fields


def _label(attributes: list[Any], kwargs: dict[str, Any]) -> str:
    """``"num_terms 2-3, num_digits 1-2"``: each attribute's value or range at this rung."""
    parts = []
    for attribute in attributes:
        if hasattr(attribute, "lower_field_name"):
            low, high = kwargs[attribute.lower_field_name], kwargs[attribute.upper_field_name]
            shown = f"{_short(low)}" if low == high else f"{_short(low)}-{_short(high)}"
        else:
            shown = _short(kwargs[attribute.field_name])
        parts.append(f"{attribute.name} {shown}")
    return ", ".join(parts)


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= _LABEL_VALUE_CHARS else text[: _LABEL_VALUE_CHARS - 1] + "…"


# -- probing: does it run here? -------------------------------------------------------------------


class _ProbeTimeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise _ProbeTimeout()

    previous: Callable[..., Any] | int | None = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _probe(factory: Any, info: DatasetInfo) -> str | None:
    """None when the dataset makes and scores items here; else why not (one line)."""
    if info.name == "composite":
        return None  # a mix of other datasets: runs when they do (its default mix is probed with them)
    try:
        with _time_limit(PROBE_TIMEOUT_S):
            dataset = factory.create_dataset(info.name, seed=0, size=PROBE_ITEMS)
            for index in range(PROBE_ITEMS):
                entry = dataset[index]
                dataset.score_answer(str(entry["answer"]), entry)
    except _ProbeTimeout:
        return f"making {PROBE_ITEMS} problems took over {PROBE_TIMEOUT_S} s here"
    except Exception as exc:
        return f"fails here: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
    return None


def write_table(path: Path = TABLE_PATH) -> Table:
    """Probe the installed reasoning-gym and write its table to ``path`` (what ships is made so)."""
    table = describe_datasets(probe=True)
    path.write_text(table.to_json(), encoding="utf-8")
    return table


if __name__ == "__main__":
    written = write_table(Path(sys.argv[1]) if len(sys.argv) > 1 else TABLE_PATH)
    down = [d.name for d in written.datasets if d.unavailable]
    print(f"reasoning-gym {written.version}: {len(written.datasets)} datasets, unavailable: {down or 'none'}")

"""The catalog: env specs keyed by versioned ids, plugin loading, and lookups that explain their misses.

Ids have the form ``[namespace/]name[-vN]``. An unversioned id means the latest registered version that
is not deprecated. Third-party packages add envs through the entry-point group ``envsuite.envs``; each
entry point names a module (imported) or a callable (called) that calls :func:`register`. Plugins load
lazily, on the first lookup, and a broken plugin is reported with its package name and skipped.

A spec is data: ``entry_point`` names the env class (``"pkg.module:Class"``) whose constructor is
``__init__(self, ctx: EnvContext, **kwargs)``; ``kwargs`` are its defaults. ``make`` and friends (in
``envsuite.catalog._make``) do exactly what the spec says and nothing else.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import importlib
import inspect
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeAlias, TypedDict, Unpack

from envsuite.errors import UsageError

__all__ = [
    # specs and kinds
    "EnvFamily",
    "EnvKind",
    "EnvKwargs",
    "EnvSpec",
    "Rung",
    "RUNG_KWARG",
    "SpecFields",
    # the registry
    "ENTRY_POINT_GROUP",
    "Registry",
    "register",
    "register_scheme",
    "registry",
    "spec",
    "parse_env_id",
    "pprint_registry",
    # families and reward ranges
    "catalog_env_families",
    "catalog_reward_ranges",
    "env_family",
    "family_order",
    # errors
    "DeprecatedEnvError",
    "EnvKwargsError",
    "RegistryError",
    "UnavailableEnvError",
    "UnknownEnvError",
]

ENTRY_POINT_GROUP = "envsuite.envs"

_SCHEME_RE = re.compile(r"^(?P<scheme>[a-z][a-z0-9_]*):(?P<rest>.+)$")
"""``scheme:rest`` ids (``openenv:http://host:8000``) resolve through a registered scheme resolver."""
_ID_RE = re.compile(
    r"^(?:(?P<namespace>[A-Za-z0-9_.\-]+)/)?(?P<name>[A-Za-z0-9_.\-]+?)(?:-v(?P<version>\d+))?$"
)


class EnvKind(enum.StrEnum):
    """What shape of interaction an env has (used for docs, scaffolds and default wrappers)."""

    SINGLE_TURN = "single-turn"
    """One prompt, one reply, one reward (math problems)."""
    MULTI_TURN = "multi-turn"
    """Several turns against the env or a partner (twenty questions)."""
    GAME = "game"
    """A turn-based game with one or more seats (TextArena, chess)."""


class RegistryError(UsageError, LookupError):
    """Base class of catalog lookup errors (a user error: the message names what exists)."""


class UnknownEnvError(RegistryError):
    """No env is registered under that id."""


class DeprecatedEnvError(RegistryError):
    """The requested version exists but is deprecated."""


class UnavailableEnvError(RegistryError):
    """The env is listed but cannot run on this machine (missing key, data or Python version)."""


class EnvKwargsError(UsageError, TypeError):
    """An env was given keyword arguments its constructor does not accept."""


EnvKwargs: TypeAlias = Mapping[str, object]
"""An env constructor's keyword arguments by name. A value is whatever that constructor takes (numbers,
text, lists, a partner ``MessageCompleter``), so the catalog holds them as ``object``: it checks only
their names (:meth:`EnvSpec.resolve_kwargs`), and the constructor's own signature types each value."""

EntryPoint: TypeAlias = str | Callable[..., object]
"""``"package.module:Name"``, or the callable itself. What a loaded entry point builds is checked where it
is called (``make_env`` refuses anything that is not an ``Env``), so its result is typed ``object``."""


RUNG_KWARG = "rung"
"""The keyword argument that picks one of a spec's :attr:`EnvSpec.rungs` (its index)."""


@dataclass(frozen=True)
class Rung:
    """One step of an env's difficulty ladder: the keyword arguments that set it, and what it is."""

    kwargs: EnvKwargs
    """Merged over the spec's defaults (explicit keyword arguments still win)."""
    label: str = ""
    """What the rung asks, for people (``"terms 2-3, digits 1-2"``)."""


@dataclass(frozen=True)
class EnvSpec:
    """Everything the catalog knows about one env version."""

    id: str
    entry_point: EntryPoint
    """``"module:Class"`` or the class itself; constructed as ``Class(ctx, **kwargs)``."""
    kwargs: EnvKwargs = field(default_factory=dict)
    """Default keyword arguments for the constructor; callers may override them."""
    kind: EnvKind = EnvKind.SINGLE_TURN
    description: str = ""
    group_builder_entry_point: EntryPoint | None = None
    """Optional ``"module:Class"`` of a custom EnvGroupBuilder (multi-agent games); default: copies."""
    reward_range: tuple[float, float] = (-1.0, 1.0)
    """Bounds every per-episode return of this env falls in (checked by the conformance checker)."""
    max_turns: int | None = None
    """Upper bound on policy turns per episode (None: single-turn)."""
    context_tokens: int | None = None
    """The context window the env's prompts need, used where a caller of ``make_env`` (and the group
    and dataset builders) names none; None: ``DEFAULT_MAX_CONTEXT_TOKENS`` (4096)."""
    partner_kwarg: str | None = None
    """The constructor argument that takes a partner/opponent (a MessageCompleter), if the env has one."""
    deprecated: str | None = None
    """If set, the reason (and what to use instead); looking it up raises :class:`DeprecatedEnvError`."""
    unavailable: str | None = None
    """If set, why the env cannot run here; it is listed but not made."""
    tags: tuple[str, ...] = ()
    """Free-form labels for selection (``envsuite bench --envs tag:NAME``); see :attr:`all_tags`."""
    family: str | None = None
    """What views group it under (``math``, ``reasoning``, ``games``, ``tool-use``, ...); None: derived
    from its package, namespace, tags and kind (:func:`env_family`). Any string is a family."""
    rungs: tuple[Rung, ...] = ()
    """Its difficulty ladder, easiest first: ``rung=i`` picks ``rungs[i]`` (curricula climb it)."""
    package: str = "envsuite"
    """The distribution that registered it."""

    @property
    def namespace(self) -> str | None:
        return parse_env_id(self.id)[0]

    @property
    def name(self) -> str:
        return parse_env_id(self.id)[1]

    @property
    def version(self) -> int | None:
        return parse_env_id(self.id)[2]

    @property
    def base_id(self) -> str:
        """The id without its version suffix (a ``scheme:`` id is its own base)."""
        if _SCHEME_RE.match(self.id):
            return self.id
        namespace, name, _ = parse_env_id(self.id)
        return f"{namespace}/{name}" if namespace else name

    def load(self) -> Callable[..., object]:
        """Import and return the env class."""
        return _load_entry_point(self.entry_point)

    def load_group_builder(self) -> Callable[..., object] | None:
        if self.group_builder_entry_point is None:
            return None
        return _load_entry_point(self.group_builder_entry_point)

    @property
    def all_tags(self) -> frozenset[str]:
        """Its tags plus what its shape says: its kind (``single-turn``, ``multi-turn``, ``game``),
        ``multi-turn`` for any env of more than one turn, ``curriculum`` when it has rungs."""
        derived = {self.kind.value}
        if (self.max_turns or 1) > 1 or self.kind is not EnvKind.SINGLE_TURN:
            derived.add(EnvKind.MULTI_TURN.value)
        if self.rungs:
            derived.add("curriculum")
        return frozenset(self.tags) | derived

    def rung_kwargs(self, rung: object) -> dict[str, object]:
        """The keyword arguments of rung ``rung`` (an index, or its digits); a bad one names the range."""
        if not self.rungs:
            raise EnvKwargsError(f"{self.id} has no difficulty rungs; drop {RUNG_KWARG}=")
        index = rung if isinstance(rung, int) and not isinstance(rung, bool) else None
        if isinstance(rung, str) and rung.strip().isdigit():
            index = int(rung)
        if index is None or not 0 <= index < len(self.rungs):
            raise EnvKwargsError(
                f"{self.id}: {RUNG_KWARG}={rung!r} is not a rung; rungs are 0..{len(self.rungs) - 1} "
                "(`envsuite show` lists them)"
            )
        return dict(self.rungs[index].kwargs)

    def accepted_kwargs(self) -> list[str] | None:
        """Keyword arguments the env class accepts (None if it takes ``**kwargs``)."""
        params = list(inspect.signature(self.load()).parameters.values())[1:]
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return None
        return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]

    def resolve_kwargs(self, overrides: EnvKwargs) -> dict[str, object]:
        """The spec's defaults updated with ``overrides``; unknown names fail listing the accepted ones.

        ``rung=i`` (for specs with :attr:`rungs`) stands for that rung's keyword arguments, merged over
        the defaults and under the other overrides.
        """
        overrides = dict(overrides)
        rung = self.rung_kwargs(overrides.pop(RUNG_KWARG)) if RUNG_KWARG in overrides and self.rungs else {}
        merged = {**self.kwargs, **rung, **overrides}
        accepted = self.accepted_kwargs()
        if accepted is not None:
            unknown = sorted(set(merged) - set(accepted))
            if unknown:
                raise EnvKwargsError(
                    f"{self.id} does not accept {', '.join(unknown)}; accepted keyword arguments: "
                    f"{', '.join(accepted) or '(none)'}"
                )
        return merged


def parse_env_id(env_id: str) -> tuple[str | None, str, int | None]:
    """Split ``[namespace/]name[-vN]`` into its parts; raise ValueError on a malformed id.

    A ``scheme:rest`` id (a server URL behind a scheme such as ``openenv:``) is namespace ``scheme``,
    name ``rest``, no version.
    """
    scheme = _SCHEME_RE.match(env_id)
    if scheme:
        return scheme.group("scheme"), scheme.group("rest"), None
    match = _ID_RE.match(env_id)
    if not match:
        raise ValueError(f"malformed env id {env_id!r}: expected [namespace/]name[-vN]")
    version = match.group("version")
    return match.group("namespace"), match.group("name"), int(version) if version else None


class Registry:
    """The set of registered specs. One module-level instance, :data:`registry`, backs the API."""

    def __init__(self) -> None:
        self._specs: dict[str, EnvSpec] = {}
        self._plugins_loaded = False
        self._listeners: list[Callable[[EnvSpec], None]] = []
        self.plugin_errors: dict[str, str] = {}
        """Broken plugins: entry-point name -> what went wrong (they were skipped)."""
        self._loading_package: str | None = None
        self._schemes: dict[str, str | Callable[[str], EnvSpec]] = {}

    # -- registration -------------------------------------------------------------------------

    def register(self, env_spec: EnvSpec, *, override: bool = False) -> None:
        parse_env_id(env_spec.id)
        if self._loading_package is not None and env_spec.package == "envsuite":
            # A plugin that did not name itself is credited to the distribution being loaded.
            env_spec = dataclasses.replace(env_spec, package=self._loading_package)
        if env_spec.id in self._specs and not override:
            existing = self._specs[env_spec.id]
            raise RegistryError(
                f"env id {env_spec.id!r} is already registered by {existing.package}; "
                "pick another id or bump the version"
            )
        self._specs[env_spec.id] = env_spec
        for listener in self._listeners:
            listener(env_spec)

    def add_listener(self, listener: Callable[[EnvSpec], None]) -> None:
        """Call ``listener`` for every spec registered so far and every one registered later."""
        self._listeners.append(listener)
        for env_spec in list(self._specs.values()):
            listener(env_spec)

    def register_scheme(self, scheme: str, resolver: str | Callable[[str], EnvSpec]) -> None:
        """Resolve ids ``scheme:...`` with ``resolver(env_id) -> EnvSpec`` (or ``"module:function"``)."""
        self._schemes[scheme] = resolver

    def unregister(self, env_id: str) -> None:
        self._specs.pop(env_id, None)

    # -- lookup -------------------------------------------------------------------------------

    def all_specs(self) -> list[EnvSpec]:
        self.load_plugins()
        return sorted(self._specs.values(), key=lambda s: s.id)

    def __iter__(self) -> Iterator[EnvSpec]:
        return iter(self.all_specs())

    def __contains__(self, env_id: object) -> bool:
        self.load_plugins()
        return isinstance(env_id, str) and env_id in self._specs

    def spec(self, env_id: str, *, deprecated_ok: bool = False) -> EnvSpec:
        """Look up a spec; unversioned ids resolve to the latest non-deprecated version. A deprecated
        one raises :class:`DeprecatedEnvError` unless ``deprecated_ok`` (views of old results)."""
        self.load_plugins()
        scheme = _SCHEME_RE.match(env_id)
        if scheme and scheme.group("scheme") in self._schemes:
            resolved = _load_entry_point(self._schemes[scheme.group("scheme")])(env_id)
            if not isinstance(resolved, EnvSpec):
                raise TypeError(
                    f"the {scheme.group('scheme')!r} resolver returned {resolved!r}, not an EnvSpec"
                )
            return resolved
        namespace, name, version = parse_env_id(env_id)
        found = self._specs.get(env_id)
        if found is None and version is None:
            found = self._latest(namespace, name)
        if found is None:
            raise UnknownEnvError(self._miss_message(env_id))
        if found.deprecated and not deprecated_ok:
            raise DeprecatedEnvError(f"{found.id} is deprecated: {found.deprecated}")
        return found

    def _latest(self, namespace: str | None, name: str) -> EnvSpec | None:
        versions = [
            s
            for s in self._specs.values()
            if s.namespace == namespace and s.name == name and not s.deprecated
        ]
        if not versions:
            deprecated = [s for s in self._specs.values() if s.namespace == namespace and s.name == name]
            return max(deprecated, key=lambda s: s.version or 0) if deprecated else None
        return max(versions, key=lambda s: s.version if s.version is not None else -1)

    def _miss_message(self, env_id: str) -> str:
        candidates = sorted({s.id for s in self._specs.values()} | {s.base_id for s in self._specs.values()})
        close = difflib.get_close_matches(env_id, candidates, n=3, cutoff=0.5)
        lowered = env_id.lower()
        close += [c for c in candidates if c.lower() == lowered and c not in close]
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        return f"no env registered as {env_id!r}.{hint} Run `envsuite list` to see the catalog."

    # -- plugins ------------------------------------------------------------------------------

    def load_plugins(self) -> None:
        """Import every ``envsuite.envs`` entry point once; broken ones are reported and skipped."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            package = ep.dist.name if ep.dist is not None else ep.value
            self._loading_package = package
            try:
                loaded = ep.load()
                if callable(loaded) and not inspect.ismodule(loaded):
                    loaded()
            except Exception as exc:
                message = f"plugin {ep.name!r} from package {package!r} failed to load: {exc!r}"
                self.plugin_errors[ep.name] = message
                warnings.warn(message + " (skipped)", RuntimeWarning, stacklevel=2)
            finally:
                self._loading_package = None


registry = Registry()


class SpecFields(TypedDict, total=False):
    """The :class:`EnvSpec` fields :func:`register` takes as keywords (all but ``id``, ``entry_point`` and
    ``kwargs``; tests/test_registry.py keeps the two lists equal)."""

    kind: EnvKind
    description: str
    group_builder_entry_point: EntryPoint | None
    reward_range: tuple[float, float]
    max_turns: int | None
    context_tokens: int | None
    partner_kwarg: str | None
    deprecated: str | None
    unavailable: str | None
    tags: tuple[str, ...]
    family: str | None
    rungs: tuple[Rung, ...]
    package: str


def register(
    id: str,
    entry_point: EntryPoint,
    kwargs: EnvKwargs | None = None,
    **spec_fields: Unpack[SpecFields],
) -> EnvSpec:
    """Add an env to the catalog and return its spec.

    ``spec_fields`` are the other :class:`EnvSpec` fields (``kind``, ``description``, ``reward_range``,
    ``max_turns``, ``deprecated``, ``unavailable``, ``tags``, ``family``, ``rungs``,
    ``group_builder_entry_point``, ``package``).
    """
    field_names = {f.name for f in dataclasses.fields(EnvSpec)} - {"id", "entry_point", "kwargs"}
    unknown = sorted(set(spec_fields) - field_names)
    if unknown:
        raise TypeError(f"register() got unknown spec fields {unknown}; known: {sorted(field_names)}")
    env_spec = EnvSpec(id=id, entry_point=entry_point, kwargs=dict(kwargs or {}), **spec_fields)
    registry.register(env_spec)
    return env_spec


def register_scheme(scheme: str, resolver: str | Callable[[str], EnvSpec]) -> None:
    """Make ids ``scheme:...`` resolve through ``resolver`` (e.g. ``openenv:<server URL>``)."""
    registry.register_scheme(scheme, resolver)


def spec(env_id: str) -> EnvSpec:
    """The spec registered under ``env_id`` (unversioned: the latest version)."""
    return registry.spec(env_id)


def catalog_reward_ranges(env_ids: Iterable[str]) -> dict[str, tuple[float, float]]:
    """The declared reward range of each of ``env_ids`` that this install's catalog knows.

    Ids it does not know (results of a plugin that is not installed here) are left out, as are
    degenerate ranges; the leaderboard falls back to the observed range for those.
    """
    ranges: dict[str, tuple[float, float]] = {}
    for env_id in env_ids:
        try:
            lo, hi = registry.spec(env_id, deprecated_ok=True).reward_range
        except RegistryError:
            continue
        if hi > lo:
            ranges[env_id] = (float(lo), float(hi))
    return ranges


class EnvFamily(enum.StrEnum):
    """The families of envsuite's own catalog (a spec may declare any other in :attr:`EnvSpec.family`)."""

    MATH = "math"
    CODE = "code"
    TOOL_USE = "tool use"
    """Multi-turn envs whose policy calls the tools they declare (envsuite.envs.tool_use)."""
    REASONING = "reasoning"
    """reasoning-gym's procedural tasks."""
    TWENTY_QUESTIONS = "twenty questions"
    GAMES = "games"
    PLUGINS = "plugins"
    """Envs another distribution registered without naming a family."""
    OTHER = "other"


def env_family(env_spec: EnvSpec) -> str:
    """An env's family: the one its spec declares, else derived from its package (plugins), namespace,
    tags and kind."""
    if env_spec.family:
        return env_spec.family
    if env_spec.package != "envsuite":
        return EnvFamily.PLUGINS.value
    if env_spec.base_id.split("/")[-1] == "twenty_questions":
        return EnvFamily.TWENTY_QUESTIONS.value
    if env_spec.namespace == "reasoning_gym" or "reasoning-gym" in env_spec.tags:
        return EnvFamily.REASONING.value
    if "math" in env_spec.tags:
        return EnvFamily.MATH.value
    if "code" in env_spec.tags:
        return EnvFamily.CODE.value
    if "tool-use" in env_spec.tags:
        return EnvFamily.TOOL_USE.value
    if "game" in env_spec.tags or env_spec.kind is EnvKind.GAME:
        return EnvFamily.GAMES.value
    return EnvFamily.OTHER.value


def family_order(families: Iterable[str]) -> list[str]:
    """``families`` without repeats, in the order views list them: envsuite's own families as
    :class:`EnvFamily` orders them, any other (declared by a spec) alphabetically before ``plugins``
    and ``other``."""
    builtin = [f.value for f in EnvFamily]
    last = [EnvFamily.PLUGINS.value, EnvFamily.OTHER.value]
    given = set(families)
    first = [f for f in builtin if f in given and f not in last]
    declared = sorted(given - set(builtin))
    return first + declared + [f for f in last if f in given]


def catalog_env_families(env_ids: Iterable[str]) -> dict[str, str]:
    """The family of each of ``env_ids``; ids this install's catalog does not know come from plugins."""
    families: dict[str, str] = {}
    for env_id in env_ids:
        try:
            families[env_id] = env_family(registry.spec(env_id, deprecated_ok=True))
        except RegistryError:
            families[env_id] = EnvFamily.PLUGINS.value
    return families


def pprint_registry(*, print_fn: Callable[[str], None] = print) -> None:
    """Print the catalog grouped by namespace, with unavailable envs and their reasons."""
    by_namespace: dict[str, list[EnvSpec]] = {}
    for env_spec in registry.all_specs():
        by_namespace.setdefault(env_spec.namespace or "(core)", []).append(env_spec)
    for namespace in sorted(by_namespace):
        print_fn(f"===== {namespace} =====")
        for env_spec in by_namespace[namespace]:
            status = ""
            if env_spec.deprecated:
                status = "  [deprecated]"
            elif env_spec.unavailable:
                status = f"  [unavailable: {env_spec.unavailable}]"
            print_fn(f"{env_spec.id:40s} {env_spec.kind.value:12s}{status}")


def _load_entry_point(entry_point: EntryPoint) -> Callable[..., object]:
    if not isinstance(entry_point, str):
        return entry_point
    module_name, _, attr = entry_point.partition(":")
    if not attr:
        raise ValueError(f"entry point {entry_point!r} must look like 'package.module:Name'")
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"entry point {entry_point!r} is not callable")
    return obj

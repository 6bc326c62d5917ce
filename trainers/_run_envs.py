"""The envs of a run: one catalog env, or a weighted mix of several, and their held-out sets.

``env_id`` is a catalog id or a selection (comma-separated ids, ``family:``, ``tag:``, globs: what
``envsuite list`` reads); more than one env makes a multi-env run. Each env's share of a batch's groups
is its weight (``env_weights``, default 1); in a mix ``env_kwargs`` maps an env to its own keyword
arguments. A single env trains exactly as before (one catalog dataset); a mix draws its batches from
:func:`envsuite.make_mixture_dataset_builder`. The held-out set is every env's test groups at its own
keyword arguments, plus, with ``eval_rungs``, a set per listed rung of each env that has it; each group
carries a label (the env's unversioned id, ``@rung<k>`` for a rung's set) that names its metrics
(``by_env/<label>/...`` and ``test/by_env/<label>/...``, when a run has more than one label).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from envsuite.errors import UsageError
from envsuite.trainers._config import ConfigError, TrainConfig
from envsuite.trainers._curriculum import group_label
from envsuite.trainers._metrics import Row, episode_summary

if TYPE_CHECKING:
    from envsuite.catalog.registration import EnvSpec
    from envsuite.core import EnvGroupBuilder, RLDataset, TrajectoryGroup

BY_ENV_PREFIX = "by_env/"


@dataclass(frozen=True)
class RunEnv:
    """One env of a run: its spec, its share of each batch, and the keyword arguments given for it."""

    spec: EnvSpec
    weight: float
    kwargs: dict[str, Any]

    @property
    def label(self) -> str:
        return self.spec.base_id


def resolve_run_envs(config: TrainConfig) -> list[RunEnv]:
    """The run's envs, looked up once (a pattern matching nothing, an unknown id, a weight or keyword
    arguments for an env outside the run: a ConfigError saying which)."""
    from envsuite import select_envs

    patterns = [p.strip() for p in config.env_id.split(",") if p.strip()]
    try:
        specs = select_envs(patterns)
        for env_spec in specs:
            if env_spec.unavailable:
                raise UsageError(f"{env_spec.id} cannot run here: {env_spec.unavailable}")
    except (UsageError, ValueError) as exc:
        raise ConfigError(f"env_id: {exc}") from None
    mixed = len(specs) > 1
    weights = _per_env(config.envs.env_weights, specs, "env_weights")
    kwargs = _per_env(config.envs.env_kwargs, specs, "env_kwargs") if mixed else {}
    envs = []
    for env_spec in specs:
        weight = float(weights.get(env_spec.id, 1.0))
        if not weight > 0:
            raise ConfigError(f"env_weights: {env_spec.id} has weight {weight}; weights must be > 0")
        own = kwargs.get(env_spec.id, {}) if mixed else dict(config.envs.env_kwargs)
        if not isinstance(own, dict):
            raise ConfigError(
                f"env_kwargs of a multi-env run map each env to a table; {env_spec.id}: {own!r}"
            )
        envs.append(RunEnv(env_spec, weight, own))
    return envs


def _per_env(values: dict[str, Any], specs: Sequence[EnvSpec], field: str) -> dict[str, Any]:
    """``values`` keyed by the versioned ids of ``specs`` (given as any spelling of an env's id)."""
    from envsuite import spec

    keyed: dict[str, Any] = {}
    ids = {s.id for s in specs}
    for name, value in values.items():
        try:
            env_id = spec(name).id
        except (UsageError, ValueError):
            env_id = name
        if env_id not in ids:
            raise ConfigError(f"{field}: {name!r} is not one of the run's envs ({', '.join(sorted(ids))})")
        keyed[env_id] = value
    return keyed


class DatasetSettings(TypedDict):
    """The dataset builder arguments every env of a run shares (its own kwargs come on top)."""

    batch_size: int
    group_size: int
    seed: int
    n_batches: int
    model: str
    renderer: str | None
    max_context_tokens: int


@dataclass(frozen=True)
class EvalSet:
    """The held-out groups of a run, each with its label: the run's own sets (the targets, which the
    run's ``test/`` numbers summarize), then the per-rung sets of ``eval_rungs``."""

    dataset: RLDataset
    labels_P: tuple[str, ...]
    """Each group's env (``@rung<k>`` added for a rung's set): what its ``test/by_env/`` metrics say."""
    rungs_P: tuple[int | None, ...]
    """Each group's rung for the per-rung sets; None for the run's own."""

    def get_batch(self) -> Sequence[EnvGroupBuilder]:
        return self.dataset.get_batch(0)

    @property
    def labelled(self) -> bool:
        """Whether its groups come from more than one env or set (then rows and metrics name them)."""
        return len(set(self.labels_P)) > 1

    def env_of(self, index: int) -> str:
        """The env of group ``index`` (its label without the rung)."""
        return self.labels_P[index].split("@rung")[0]


async def build_datasets(config: TrainConfig, envs: Sequence[RunEnv]) -> tuple[RLDataset, EvalSet | None]:
    """The run's train dataset and its held-out set (None when the run never evaluates)."""
    from envsuite import make_dataset_builder, make_mixture_dataset_builder

    common: DatasetSettings = {
        "batch_size": config.steps.batch_size,
        "group_size": config.steps.group_size,
        "seed": config.steps.seed,
        "n_batches": config.steps.n_steps,
        "model": config.policy.model,
        "renderer": config.policy.renderer_name,
        "max_context_tokens": config.sampling.max_context_tokens,
    }
    if len(envs) == 1:
        only = envs[0]
        train, test = await make_dataset_builder(
            only.spec, n_test_groups=config.evaluation.n_test_groups, **common, **only.kwargs
        )()
    else:
        mix = make_mixture_dataset_builder(
            [e.spec for e in envs],
            weights=[e.weight for e in envs],
            n_test_groups=config.evaluation.n_test_groups,
            env_kwargs={e.spec.id: e.kwargs for e in envs},
            **common,
        )
        train, test = await mix()
    if config.envs.rubric is not None:
        train, test = _with_rubric(config, train, test)
    if test is None or not config.evaluation.n_test_groups:
        return train, None
    return train, await _eval_set(config, envs, test, common)


def _with_rubric(
    config: TrainConfig, train: RLDataset, test: RLDataset | None
) -> tuple[RLDataset, RLDataset | None]:
    """Both datasets scored by the run's rubric (one judge, loaded once, for train and held-out groups);
    each group's reward is the env's plus the rubric's, its ``rubric/*`` metrics say which criteria."""
    from envsuite import RendererConfig
    from envsuite.rubrics import Rubric, RubricDataset, local_judge

    rubric = Rubric.from_dict(dict(config.envs.rubric or {}))
    judge = (
        local_judge(config.envs.rubric_judge, config.envs.rubric_judge_cache) if rubric.has_judge else None
    )
    renderer = RendererConfig(config.policy.model, config.policy.renderer_name).build()
    scored_test = RubricDataset(test, rubric, judge, renderer) if test is not None else None
    return RubricDataset(train, rubric, judge, renderer), scored_test


async def _eval_set(
    config: TrainConfig, envs: Sequence[RunEnv], test: RLDataset, common: DatasetSettings
) -> EvalSet:
    """The test groups of every env, then one set per ``eval_rungs`` rung of each env that has it."""
    from envsuite import ConcatDataset, make_dataset_builder

    one_batch: DatasetSettings = {**common, "n_batches": 1}
    datasets: list[RLDataset] = [test]
    labels = [group_label(g) for g in test.get_batch(0)]
    rungs: list[int | None] = [None] * len(labels)
    for env in envs:
        for rung in config.envs.eval_rungs:
            if rung >= len(env.spec.rungs):
                continue
            builder = make_dataset_builder(
                env.spec,
                n_test_groups=config.evaluation.n_test_groups,
                **one_batch,
                **{**env.kwargs, "rung": rung},
            )
            _, rung_test = await builder()
            if rung_test is not None:
                datasets.append(rung_test)
                size = len(rung_test.get_batch(0))
                labels += [f"{env.label}@rung{rung}"] * size
                rungs += [rung] * size
    if len(datasets) == 1:
        return EvalSet(test, tuple(labels), tuple(rungs))
    return EvalSet(ConcatDataset(tuple(datasets)), tuple(labels), tuple(rungs))


def check_eval_rungs(config: TrainConfig, envs: Sequence[RunEnv]) -> None:
    """Each of ``eval_rungs`` must be a rung of at least one of the run's envs."""
    top = max((len(e.spec.rungs) for e in envs), default=0)
    bad = [r for r in config.envs.eval_rungs if r >= top]
    if bad:
        raise ConfigError(
            f"eval_rungs {bad}: the run's envs have rungs 0..{top - 1}"
            if top
            else "eval_rungs: no env of the run has difficulty rungs"
        )


def per_env_summary(groups_P: Sequence[TrajectoryGroup], labels_P: Sequence[str], prefix: str = "") -> Row:
    """``episode_summary`` of each label's groups, as ``<prefix>by_env/<label>/...`` (nothing for one label)."""
    if len(set(labels_P)) < 2:
        return {}
    row: Row = {}
    for label in sorted(set(labels_P)):
        mine = [g for g, lab in zip(groups_P, labels_P, strict=True) if lab == label]
        row.update(episode_summary(mine, prefix=f"{prefix}{BY_ENV_PREFIX}{label}/"))
    return row

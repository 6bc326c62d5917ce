"""``TrainConfig``: everything a GRPO run needs, as a small picklable, JSON-round-trippable dataclass.

The config is data only: it names the env, the model and the backend but holds no clients, keys or
tokenizers. Beside ``env_id`` and ``log_dir`` its settings sit in sections (``trainers._sections``:
``envs``, ``policy``, ``steps``, ``optimizer``, ``loss``, ``sampling``, ``replicas``, ``evaluation``,
``tracking``), each checking its own values; :meth:`TrainConfig.validate` runs those checks and the
ones across sections, and rejects bad settings before any model loads, with a message saying what to
change.

Every setting keeps its one flat name: ``TrainConfig(env_id=..., log_dir=..., n_steps=5)`` builds the
sections, ``config.n_steps`` reads ``config.steps.n_steps`` (at run time; typed code reads the section),
and ``log_dir/config.json`` (written from :meth:`TrainConfig.to_json`; it never holds a secret: the
hosted backend reads its key from the environment), presets and config files are flat tables of those
names, so configs saved before the sections load unchanged.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envsuite.errors import UsageError
from envsuite.losses import LossFn
from envsuite.trainers._curriculum import Curriculum
from envsuite.trainers._policies import RolesSection, policies_from_value
from envsuite.trainers._sections import (
    SECTIONS,
    Check,
    EnvSection,
    EvalSection,
    LossSection,
    LRSchedule,
    OptimizerSection,
    PolicySection,
    ReplicaSection,
    SamplingSection,
    Section,
    StepSection,
    TrackingSection,
)

if TYPE_CHECKING:
    from envsuite.executors import ExecutorConfig

__all__ = ["ConfigError", "LRSchedule", "PolicyLoss", "TrainConfig"]

PolicyLoss = LossFn
"""The trainer's name for :class:`envsuite.losses.LossFn` (one enum; this alias is kept public)."""

_SECTION_OF: dict[str, str] = {
    f.name: section for section, kind in SECTIONS.items() for f in dataclasses.fields(kind)
}
"""Each setting's flat name -> the section holding it."""


class ConfigError(UsageError):
    """A training setting that cannot work; the message says which field to change and how."""


@dataclass(frozen=True, init=False)
class TrainConfig:
    """A GRPO run on one catalog env: its env and log dir, and its settings by section."""

    env_id: str
    """Catalog id of the env to train on (``envsuite list`` shows them), or a selection of several:
    comma-separated ids, ``family:NAME``, ``tag:NAME``, globs (a multi-env run, ``trainers._run_envs``)."""
    log_dir: str
    """Where config, metrics, checkpoints, transcripts and plots go; rerunning into it resumes."""
    envs: EnvSection
    policy: PolicySection
    steps: StepSection
    optimizer: OptimizerSection
    loss: LossSection
    sampling: SamplingSection
    replicas: ReplicaSection
    evaluation: EvalSection
    tracking: TrackingSection
    roles: RolesSection
    """The run's policies, one per role (``[policies.<name>]``; none: one policy plays every seat)."""

    def __init__(self, env_id: str, log_dir: str, **settings: Any) -> None:
        """Sections by their names (``loss=LossSection(...)``) and settings by their flat names
        (``n_steps=5``); a flat setting overrides its section's value. Unknown names are a TypeError,
        as a dataclass's own ``__init__`` raises."""
        object.__setattr__(self, "env_id", env_id)
        object.__setattr__(self, "log_dir", log_dir)
        flat: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        for name, value in settings.items():
            if name in SECTIONS:
                continue
            section = _SECTION_OF.get(name)
            if section is None:
                raise TypeError(f"TrainConfig got an unexpected keyword argument {name!r}")
            flat[section][name] = policies_from_value(value) if name == "policies" else value
        for name, kind in SECTIONS.items():
            given = settings.get(name)
            if given is not None and not isinstance(given, kind):
                raise TypeError(f"TrainConfig's {name} must be a {kind.__name__}, got {type(given).__name__}")
            base: Section = given if given is not None else kind()
            object.__setattr__(self, name, dataclasses.replace(base, **flat[name]) if flat[name] else base)

    if not TYPE_CHECKING:  # flat reads for callers of the flat config; typed code reads the section

        def __getattr__(self, name: str) -> Any:
            section = _SECTION_OF.get(name)
            if section is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            return getattr(object.__getattribute__(self, section), name)

    # ---------------------------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the setting to change; checks only what needs no model."""
        checks: list[Check] = [
            (
                bool(self.env_id) or self.envs.captured_dir is not None,
                "env_id is empty: pass a catalog id (see `envsuite list`), or captured episodes (--captured)",
            ),
            (bool(self.log_dir), "log_dir is empty: pass a directory for metrics and checkpoints"),
        ]
        for name in SECTIONS:
            section: Section = getattr(self, name)
            checks += section.checks()
        for ok, message in [*checks, *self._across_sections(), *self._role_checks()]:
            if not ok:
                raise ConfigError(message)
        try:
            LRSchedule(self.optimizer.lr_schedule)
            LossFn(self.loss.loss_fn)
            self.replicas.executor_config()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.envs.curriculum is not None:
            try:
                self.envs.curriculum.validate()
            except UsageError as exc:
                raise ConfigError(str(exc)) from None

    def loss_config(self) -> dict[str, float] | None:
        """The ``loss_fn_config`` these settings give the loss (None: it takes none)."""
        return self.loss.loss_config()

    def _role_checks(self) -> list[Check]:
        """What a run with a policy per role does not do yet (docs/training.md, "A policy per role")."""
        if not self.roles.policies:
            return []
        steps, replicas = self.steps, self.replicas
        plain = "a run with a policy per role (policies) trains"
        return [
            (
                steps.async_max_steps_off_policy is None and steps.stream_minibatches is None,
                f"{plain} synchronously: drop async_max_steps_off_policy and stream_minibatches",
            ),
            (
                replicas.samplers == 0 and replicas.sampler == "backend" and replicas.executor == "inprocess",
                f"{plain} with each policy's own sampling client, env work in process: drop samplers, "
                "sampler 'vllm' and executor",
            ),
            (
                self.envs.captured_dir is None and self.envs.curriculum is None and self.envs.rubric is None,
                f"{plain} on a game env's own groups: drop captured_dir, curriculum and rubric",
            ),
            (self.loss.kl_penalty_coef == 0, f"{plain} without a KL penalty: drop kl_penalty_coef"),
            (steps.warm_start_steps == 0, f"{plain} without a supervised warm start: drop warm_start_steps"),
            (
                self.policy.backend == "local" and self.policy.lora_rank >= 1,
                f"{plain} a LoRA adapter per policy on the local backend: use backend 'local' and "
                "lora_rank >= 1",
            ),
        ]

    def _across_sections(self) -> list[Check]:
        """Settings of different sections, each fine alone, that contradict one another (one of them
        would silently do nothing, or cannot run)."""
        steps, envs = self.steps, self.envs
        synchronous = steps.async_max_steps_off_policy is None and steps.stream_minibatches is None
        return [
            (
                self.optimizer.warmup_steps < steps.n_steps or self.optimizer.warmup_steps == 0,
                f"warmup_steps {self.optimizer.warmup_steps} is not shorter than the run (n_steps "
                f"{steps.n_steps}): the learning rate would never reach learning_rate; pass fewer warmup "
                "steps or more steps",
            ),
            (
                not envs.eval_rungs or (self.evaluation.eval_every > 0 and self.evaluation.n_test_groups > 0),
                f"eval_rungs {envs.eval_rungs} are held-out evaluations, but the run never evaluates "
                f"(eval_every {self.evaluation.eval_every}, n_test_groups {self.evaluation.n_test_groups}): "
                "set both above 0",
            ),
            (
                envs.captured_dir is None or synchronous,
                "a run on captured episodes trains synchronously: drop async_max_steps_off_policy and "
                "stream_minibatches",
            ),
            (
                steps.warm_start_steps == 0 or (envs.captured_dir is None and synchronous),
                "the warm start imitates the env's reference replies before synchronous GRPO steps: drop "
                "warm_start_steps, or captured_dir, async_max_steps_off_policy and stream_minibatches",
            ),
            (
                envs.curriculum is None or synchronous,
                "the curriculum moves rungs between synchronous steps: drop async_max_steps_off_policy and "
                "stream_minibatches, or the curriculum",
            ),
            (
                self.replicas.samplers == 0 or self.policy.backend == "local",
                "sampler replicas (samplers >= 1) run the local engine: use backend 'local' (hosted "
                "Tinker and `envsuite serve` already scale sampling behind their URL)",
            ),
            (
                self.replicas.sampler == "backend"
                or (
                    self.policy.backend == "local"
                    and self.policy.lora_rank >= 1
                    and not self.policy.train_unembed
                ),
                "sampler 'vllm' loads each LoRA version into vLLM, which adapts no lm_head: use backend "
                "'local', a LoRA rank >= 1 and --no-unembed-lora",
            ),
            (
                not self.sampling.constrain_actions or self.replicas.sampler == "backend",
                "constrain_actions applies grammars in the local engine, not on vLLM: drop one of them",
            ),
            (
                not self.sampling.constrain_actions or self.policy.backend == "local",
                "constrain_actions samples under grammars, which only the local engine applies (the "
                "Tinker SDK would drop them): use backend 'local'",
            ),
        ]

    def executor_config(self) -> ExecutorConfig:
        """The executor these settings name (raises ``ExecutorConfigError``, a ValueError, if bad)."""
        return self.replicas.executor_config()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values by flat name (enums as their strings): the form of ``config.json``,
        presets and config files."""
        out: dict[str, Any] = {"env_id": self.env_id, "log_dir": self.log_dir}
        for name in SECTIONS:
            section = getattr(self, name)
            out |= {f.name: _plain(getattr(section, f.name)) for f in dataclasses.fields(section)}
        out["policies"] = self.roles.to_plain()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; a section may also be given as a table of its settings
        (``{"loss": {"loss_fn": "ppo"}}``). Unknown keys are an error naming them."""
        values = dict(data)
        for name in SECTIONS:
            table = values.pop(name, None)
            if isinstance(table, dict):
                values = {**table, **values}
            elif table is not None:
                raise ConfigError(f"{name} must be a table of its settings, got {table!r}")
        names = {"env_id", "log_dir", *_SECTION_OF}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"unknown config keys {unknown}; known: {sorted(names)}")
        try:
            values["curriculum"] = Curriculum.from_value(values.get("curriculum"))
            values["policies"] = policies_from_value(values.get("policies"))
        except (UsageError, TypeError) as exc:
            raise ConfigError(str(exc)) from None
        for key, kind in (("lr_schedule", LRSchedule), ("loss_fn", LossFn)):
            if key in values:
                try:
                    values[key] = kind(values[key])
                except ValueError:
                    choices = ", ".join(m.value for m in kind)
                    raise ConfigError(f"{key}={values[key]!r} is not one of: {choices}") from None
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        return cls.from_dict(json.loads(text))

    def learning_rate_at(self, step: int) -> float:
        """The schedule's rate for ``step`` (0-based), warmup included."""
        opt = self.optimizer
        if step < opt.warmup_steps:
            return opt.learning_rate * (step + 1) / (opt.warmup_steps + 1)
        decay_steps = max(self.steps.n_steps - opt.warmup_steps, 1)
        progress = min((step - opt.warmup_steps) / decay_steps, 1.0)
        if opt.lr_schedule == LRSchedule.LINEAR:
            return opt.learning_rate * (1.0 - progress)
        if opt.lr_schedule == LRSchedule.COSINE:
            return opt.learning_rate * 0.5 * (1.0 + math.cos(math.pi * progress))
        return opt.learning_rate

    def differs_from(self, other: TrainConfig) -> list[str]:
        """Names of settings whose values differ (used to refuse resuming a different run)."""
        mine, theirs = self.to_dict(), other.to_dict()
        return sorted(name for name in mine if mine[name] != theirs.get(name))


def _plain(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Curriculum):
        return dataclasses.asdict(value)
    return value

"""The sections of a :class:`~envsuite.trainers.TrainConfig`: each a small frozen dataclass of the
settings of one concern, checking its own values (:meth:`checks`).

Invariants: every setting belongs to exactly one section, and its name is unique across sections (the
flat name is what the command line, presets and saved ``config.json`` files use); a section's
``checks`` look only at its own fields (settings that contradict each other across sections are
checked by ``TrainConfig``); no section holds more than ~15 settings. Field docstrings are the
settings' documentation.
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envsuite.executors import ExecutorConfig
from envsuite.losses import LossFn
from envsuite.trainers._curriculum import Curriculum
from envsuite.trainers._policies import RolesSection

if TYPE_CHECKING:
    import tinker

Check = tuple[bool, str]
"""A condition a valid config meets, and the message naming what to change when it does not."""


class LRSchedule(enum.StrEnum):
    """How the learning rate moves over the run (after linear warmup)."""

    CONSTANT = "constant"
    """The base rate throughout."""
    LINEAR = "linear"
    """Linear decay from the base rate to 0 at the last step."""
    COSINE = "cosine"
    """Half-cosine decay from the base rate to 0 at the last step."""


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _rubric_error(data: dict[str, Any]) -> str:
    """Why ``data`` is not a rubric ("" when it is one)."""
    from envsuite.errors import UsageError
    from envsuite.rubrics import Rubric

    try:
        Rubric.from_dict(data)
    except UsageError as exc:
        return f"rubric: {exc}"
    return ""


@dataclass(frozen=True)
class EnvSection:
    """What the run trains on beside its ``env_id``: env arguments, a mix's weights, the curriculum,
    held-out rungs, or captured episodes."""

    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the env (JSON values), e.g. ``{"digits": 1}``; in a multi-env run, a table
    per env id, e.g. ``{"reasoning_gym/chain_sum": {"rung": 1}}``."""
    env_weights: dict[str, float] = field(default_factory=dict)
    """Multi-env runs: each env's share of a batch's groups, by id (default 1 each)."""
    curriculum: Curriculum | None = None
    """Move each env with difficulty rungs up and down them from its groups' running success (None:
    fixed difficulty); see ``trainers._curriculum``."""
    eval_rungs: list[int] = field(default_factory=list)
    """Also evaluate held-out on these difficulty rungs of each env that has them."""
    captured_dir: str | None = None
    """Train on the scored episodes an ``envsuite serve`` captured (a capture set's directory,
    ``<state-dir>/captures/<name>``) instead of rollouts of ``env_id``: step ``i`` trains on batch ``i`` of
    their groups, with the tokens and logprobs sampled then. ``env_id`` may then be empty, or name an env
    to evaluate on."""
    rubric: dict[str, Any] | None = None
    """A rubric scoring every episode's final reply on top of the env's own reward, train and held-out
    (``envsuite.rubrics.Rubric.to_dict()``; ``--rubric FILE`` reads a file into it), so the run's
    config records exactly which rubric scored it. None: the env's reward alone."""
    rubric_judge: str = "smollm2-135m-instruct"
    """The local model judging the rubric's judge criteria (loaded only when it has some)."""
    rubric_judge_cache: str | None = None
    """SQLite file caching the judge's verdicts by (judge, rubric, input): a rerun asks nothing twice."""

    def checks(self) -> list[Check]:
        try:
            json.dumps(self.env_kwargs)
            json.dumps(self.env_weights)
            not_json = ""
        except TypeError as exc:
            not_json = str(exc)
        rubric_error = _rubric_error(self.rubric) if self.rubric is not None else ""
        return [
            (not not_json, f"env_kwargs and env_weights must be JSON values: {not_json}"),
            (
                all(isinstance(r, int) and r >= 0 for r in self.eval_rungs),
                f"eval_rungs must be rung indexes >= 0, got {self.eval_rungs}",
            ),
            (not rubric_error, rubric_error),
            (
                self.rubric is None or self.curriculum is None,
                "a curriculum moves the env's own groups between rungs and cannot yet move rubric-scored "
                "ones: drop the curriculum (or the rubric)",
            ),
            (
                self.captured_dir is None or self.curriculum is None,
                "a run on captured episodes trains on the difficulty they were sampled at, which a "
                "curriculum cannot move: drop the curriculum (or captured_dir)",
            ),
        ]


@dataclass(frozen=True)
class PolicySection:
    """The model trained and where its compute runs."""

    model: str = "smollm2-135m-instruct"
    """Base model: an envsuite model name, a local HF directory, or (hosted backend) a Tinker model."""
    backend: str = "local"
    """``local`` (PyTorch in this process) or ``tinker`` (the Tinker API through the real SDK)."""
    base_url: str | None = None
    """``tinker`` backend: the service's URL, e.g. an ``envsuite serve`` (None: the hosted service)."""
    renderer_name: str | None = None
    """Chat format; None uses the model's own."""
    lora_rank: int = 32
    """LoRA rank; 0 trains every weight instead (full fine-tune, local backend only)."""
    train_unembed: bool = True
    """LoRA also adapts the LM head (Tinker's default); False adapts only the attention and MLP
    projections, as peft/TRL do. Under Adam every vocabulary row of the head's adapter moves by about the
    learning rate each step, sampled tokens or not: the first setting to try when a run is unstable."""

    def checks(self) -> list[Check]:
        return [
            (
                self.lora_rank >= 0,
                f"lora_rank must be >= 1 (LoRA) or 0 (full fine-tune), got {self.lora_rank}",
            ),
            (
                self.base_url is None or self.backend == "tinker",
                f"base_url is for backend 'tinker' (the Tinker API over HTTP), not {self.backend!r}",
            ),
            (
                self.lora_rank >= 1 or self.backend == "local",
                "lora_rank=0 (full fine-tune) runs on the local backend only: hosted Tinker trains LoRA",
            ),
            (
                self.train_unembed or self.lora_rank >= 1,
                "train_unembed=False chooses what LoRA adapts, but lora_rank=0 trains every weight: "
                "pass a LoRA rank or drop --no-unembed-lora",
            ),
        ]


@dataclass(frozen=True)
class StepSection:
    """The run's steps: how many, how many groups of how many rollouts each, how they are split into
    optimizer steps and seeded, when checkpoints are saved, and how asynchronous sampling may be."""

    n_steps: int = 20
    """Optimizer steps; step ``i`` trains on batch ``i`` of the dataset."""
    batch_size: int = 8
    """Groups (problems) per step."""
    group_size: int = 4
    """Rollouts per group; advantages compare members of one group (>= 2)."""
    async_max_steps_off_policy: int | None = None
    """Async off-policy training (tinker-cookbook's ``AsyncConfig.max_steps_off_policy``): sampling
    goes on while the trainer trains, and a group sampled with weights more than this many optimizer
    steps old is dropped (counted, and its problem sampled again). None: synchronous."""
    num_substeps: int = 1
    """Optimizer steps per batch: the batch is split into this many minibatches of whole groups."""
    stream_minibatches: int | None = None
    """Streaming minibatches (cookbook's ``StreamMinibatchConfig.num_minibatches``): each substep's
    groups split into this many minibatches, each trained (``forward_backward``) as soon as its groups
    have finished; one optimizer step per substep. None: train once the whole batch is in."""
    seed: int = 0
    """Seed of the data order and of the LoRA init."""
    save_every: int = 10
    """Save a resumable checkpoint every this many steps (and after the last)."""
    warm_start_steps: int = 0
    """Supervised steps on the env's reference replies before the first GRPO step, a fresh run only
    (``trainers/_warm_start.py``); 0: none."""

    def checks(self) -> list[Check]:
        per_substep = self.batch_size // max(self.num_substeps, 1)
        stream, off_policy = self.stream_minibatches, self.async_max_steps_off_policy
        return [
            (self.n_steps >= 1, f"n_steps must be >= 1, got {self.n_steps}"),
            (self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}"),
            (
                self.group_size >= 2,
                f"group_size must be >= 2 (group-centred advantages of a single rollout are always 0), "
                f"got {self.group_size}",
            ),
            (self.num_substeps >= 1, f"num_substeps must be >= 1, got {self.num_substeps}"),
            (
                self.batch_size % self.num_substeps == 0,
                f"batch_size {self.batch_size} is not divisible by num_substeps {self.num_substeps}: "
                "groups stay whole in a minibatch, so pick a divisor of batch_size",
            ),
            (self.save_every >= 1, f"save_every must be >= 1, got {self.save_every}"),
            (self.warm_start_steps >= 0, f"warm_start_steps must be >= 0, got {self.warm_start_steps}"),
            (
                off_policy is None or off_policy >= 0,
                f"async_max_steps_off_policy must be >= 0 (or None: synchronous), got {off_policy}",
            ),
            (stream is None or stream >= 1, f"stream_minibatches must be >= 1 (or None: off), got {stream}"),
            (
                stream is None or stream < 1 or per_substep % stream == 0,
                f"stream_minibatches {stream} does not divide the {per_substep} groups of a substep "
                "(batch_size / num_substeps): minibatches hold whole groups, so pick a divisor",
            ),
        ]


@dataclass(frozen=True)
class OptimizerSection:
    """Adam and its learning-rate schedule."""

    learning_rate: float = 1e-4
    """Peak Adam learning rate."""
    lr_schedule: LRSchedule = LRSchedule.CONSTANT
    warmup_steps: int = 0
    """Steps of linear warmup from 0 to ``learning_rate``."""
    beta1: float = 0.9
    """Adam's decay of its running mean of gradients."""
    beta2: float = 0.95
    """Adam's decay of its running mean of squared gradients."""
    eps: float = 1e-8
    """Added to the root of Adam's second moment before dividing by it."""
    weight_decay: float = 0.0
    """Decoupled weight decay per step (AdamW's)."""
    grad_clip_norm: float = 0.0
    """0 disables clipping."""

    def checks(self) -> list[Check]:
        return [
            (_positive(self.learning_rate), f"learning_rate must be > 0, got {self.learning_rate}"),
            (self.warmup_steps >= 0, f"warmup_steps must be >= 0, got {self.warmup_steps}"),
            (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "beta1 and beta2 must be in [0, 1)"),
            (_positive(self.eps), f"eps must be > 0, got {self.eps}"),
            (self.weight_decay >= 0 and self.grad_clip_norm >= 0, "weight_decay/grad_clip_norm must be >= 0"),
        ]

    def adam(self, learning_rate: float) -> tinker.AdamParams:
        """The ``optim_step`` parameters of these settings at ``learning_rate`` (the schedule's rate
        for a step, a policy's own, or the peak): one place builds them for every trainer."""
        import tinker  # here, not at import: reading a config needs no SDK

        return tinker.AdamParams(
            learning_rate=learning_rate,
            beta1=self.beta1,
            beta2=self.beta2,
            eps=self.eps,
            weight_decay=self.weight_decay,
            grad_clip_norm=self.grad_clip_norm,
        )


@dataclass(frozen=True)
class LossSection:
    """The loss ``forward_backward`` computes, its settings, the advantages and the KL penalty."""

    loss_fn: LossFn = LossFn.IMPORTANCE_SAMPLING
    ppo_clip: float = 0.2
    """Clip range epsilon of the ``ppo``, ``cispo`` and ``gspo`` losses."""
    dro_beta: float = 0.05
    """Weight of the ``dro`` loss's quadratic penalty."""
    scale_advantages_by_std: bool = False
    """Divide centred rewards by the group's std (GRPO); default off (Dr. GRPO: no length/std bias)."""
    kl_penalty_coef: float = 0.0
    """KL penalty against a frozen reference (cookbook's ``kl_penalty_coef``): each action token's
    advantage gains ``coef * (mean - (log p_sampler - log p_ref))``. 0 disables."""
    kl_discount_factor: float = 0.0
    """Discount of the KL penalty over later tokens (cookbook's ``kl_discount_factor``; 0: none)."""
    kl_reference_checkpoint: str | None = None
    """The KL reference: a sampler checkpoint path (``checkpoints.jsonl``'s ``sampler_path``); None:
    the base model."""

    def checks(self) -> list[Check]:
        return [
            (0 < self.ppo_clip < 1, f"ppo_clip must be in (0, 1), got {self.ppo_clip}"),
            (
                math.isfinite(self.dro_beta) and self.dro_beta >= 0,
                f"dro_beta must be >= 0, got {self.dro_beta}",
            ),
            (
                math.isfinite(self.kl_penalty_coef) and self.kl_penalty_coef >= 0,
                f"kl_penalty_coef must be >= 0, got {self.kl_penalty_coef}",
            ),
            (
                0 <= self.kl_discount_factor <= 1,
                f"kl_discount_factor must be in [0, 1], got {self.kl_discount_factor}",
            ),
            (
                self.kl_reference_checkpoint is None or self.kl_penalty_coef > 0,
                "kl_reference_checkpoint is set but kl_penalty_coef is 0: pass --kl-penalty C to use it",
            ),
            (
                self.kl_discount_factor == 0 or self.kl_penalty_coef > 0,
                "kl_discount_factor is set but kl_penalty_coef is 0 (no penalty to discount): pass "
                "--kl-penalty C to use it",
            ),
        ]

    def loss_config(self) -> dict[str, float] | None:
        """The ``loss_fn_config`` these settings give the loss (None: it takes none)."""
        if self.loss_fn in (LossFn.PPO, LossFn.CISPO, LossFn.GSPO):
            return {"clip_low_threshold": 1 - self.ppo_clip, "clip_high_threshold": 1 + self.ppo_clip}
        if self.loss_fn == LossFn.DRO:
            return {"beta": self.dro_beta}
        return None


@dataclass(frozen=True)
class SamplingSection:
    """How each episode is sampled and bounded."""

    max_tokens: int = 64
    """Sampling budget per turn."""
    temperature: float = 1.0
    max_turns: int = 64
    """Policy turns per episode before the rollout driver stops it."""
    rollout_timeout_s: float | None = None
    """Wall-clock bound per episode (a hanging env or partner ends with ``rollout_timeout``)."""
    max_context_tokens: int = 4096
    constrain_actions: bool = False
    """Sample each action under its env's action constraint (``Env.action_constraint``: legal moves,
    well-formed tool calls), by constrained decoding: local backend only. Saved with the run's config,
    so a constrained run is never mistaken for a free one."""

    def checks(self) -> list[Check]:
        return [
            (self.max_tokens >= 1, f"max_tokens must be >= 1, got {self.max_tokens}"),
            (
                math.isfinite(self.temperature) and self.temperature > 0,
                f"temperature must be > 0 (RL needs sampled, not greedy, replies), got {self.temperature}",
            ),
            (self.max_turns >= 1, f"max_turns must be >= 1, got {self.max_turns}"),
            (
                self.rollout_timeout_s is None or _positive(self.rollout_timeout_s),
                f"rollout_timeout_s must be > 0 or None, got {self.rollout_timeout_s}",
            ),
        ]


@dataclass(frozen=True)
class ReplicaSection:
    """Where env work and sampling run: the executor and the sampler replicas."""

    executor: str = "inprocess"
    """Where env work runs: ``inprocess``, ``process`` (a spawn pool) or ``ray``; sampling stays here."""
    workers: int = 2
    """Worker processes (``process``) or worker tasks (``ray``)."""
    ray_address: str | None = None
    """A running Ray cluster for ``--executor ray`` (default: start a local Ray)."""
    samplers: int = 0
    """Sampler replicas: N samplers, each with its own engine and policy copy (fed LoRA adapters by
    version after each step) and the env work of the groups it plays, of the executor's kind (in this
    process, spawn processes, or Ray actors). 0: the trainer's own sampling client (env work on the
    executor's workers)."""
    sampler: str = "backend"
    """Which engine samples the rollouts: ``backend`` (the backend's own sampler, or ``samplers``
    replicas) or ``vllm`` (a vLLM server, or ``samplers`` of them, fed each new LoRA version as a peft
    adapter: docs/vllm.md)."""
    vllm_url: str | None = None
    """``sampler`` vllm: a running vLLM server's URL, or several comma-separated (one replica each; None:
    envsuite starts ``samplers`` servers from the vLLM venv, one when 0)."""

    def checks(self) -> list[Check]:
        return [
            (
                self.samplers >= 0,
                f"samplers must be >= 0 (0: the trainer's own sampler), got {self.samplers}",
            ),
            (
                self.sampler in ("backend", "vllm"),
                f"sampler must be 'backend' or 'vllm', got {self.sampler!r}",
            ),
            (
                self.vllm_url is None or self.sampler == "vllm",
                "vllm_url names the vLLM server of sampler 'vllm': pass --sampler vllm too",
            ),
            (
                self.sampler == "backend" or not self.vllm_url or self.samplers in (0, len(self.vllm_urls())),
                f"samplers {self.samplers} but vllm_url lists {len(self.vllm_urls())} vLLM server(s): "
                "give one number of replicas (or drop samplers: one per URL)",
            ),
        ]

    def vllm_urls(self) -> list[str]:
        """The URLs ``vllm_url`` names (comma-separated for several servers; none when unset)."""
        return [url.strip() for url in (self.vllm_url or "").split(",") if url.strip()]

    def executor_config(self) -> ExecutorConfig:
        """The executor these settings name (raises ``ExecutorConfigError``, a ValueError, if bad)."""
        return ExecutorConfig.create(self.executor, self.workers, self.ray_address)


@dataclass(frozen=True)
class EvalSection:
    """Held-out evaluation and the transcripts written."""

    eval_every: int = 10
    """Evaluate on the test split every this many steps (and after the last); 0 disables."""
    n_test_groups: int = 16
    """Test problems per evaluation (one rollout each)."""
    n_transcripts: int = 4
    """Sampled episodes written to ``log_dir/transcripts`` (first and last step), and held-out episodes
    of every evaluation (``test_step*``, the first this many test problems)."""

    def checks(self) -> list[Check]:
        return [
            (self.eval_every >= 0, f"eval_every must be >= 0 (0 disables), got {self.eval_every}"),
            (self.n_test_groups >= 0, f"n_test_groups must be >= 0, got {self.n_test_groups}"),
            (self.n_transcripts >= 0, f"n_transcripts must be >= 0, got {self.n_transcripts}"),
        ]


@dataclass(frozen=True)
class TrackingSection:
    """Experiment trackers each step's metrics also go to (``metrics.jsonl`` always)."""

    wandb_project: str | None = None
    """Also log each step's metrics to this Weights & Biases project (``WANDB_MODE=offline`` logs to
    files without a network; ``wandb sync`` uploads them later)."""
    wandb_name: str | None = None
    """The tracker run's name (W&B and Trackio; default: the log dir's name)."""
    trackio_project: str | None = None
    """Also log each step's metrics to this Trackio project (local-first: a SQLite file per project;
    ``trackio show`` opens the dashboard)."""

    def checks(self) -> list[Check]:
        return [
            (
                self.wandb_name is None or bool(self.wandb_project or self.trackio_project),
                "wandb_name names a tracker run, but no tracker is on: pass --wandb-project or "
                "--trackio-project too",
            ),
        ]


Section = (
    EnvSection
    | PolicySection
    | StepSection
    | OptimizerSection
    | LossSection
    | SamplingSection
    | ReplicaSection
    | EvalSection
    | TrackingSection
    | RolesSection
)

SECTIONS: dict[str, type[Section]] = {
    "envs": EnvSection,
    "policy": PolicySection,
    "steps": StepSection,
    "optimizer": OptimizerSection,
    "loss": LossSection,
    "sampling": SamplingSection,
    "replicas": ReplicaSection,
    "evaluation": EvalSection,
    "tracking": TrackingSection,
    "roles": RolesSection,
}
"""Each section's attribute name on ``TrainConfig``, in the order the config lists them."""

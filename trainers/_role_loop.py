"""The GRPO loop of a run with a policy per role (``TrainConfig.roles.policies``).

Every policy is a LoRA adapter on the run's base model with a training client of its own (adapter and
optimizer state). Step ``i`` samples batch ``i`` with every policy's current weights, each group member
played by its seat's policy (``trainers._role_rollouts``); then each trainable policy gets its own
advantages (centred within one seat of one group), datums, ``forward_backward`` + ``optim_step`` at its
own learning rate, and a fresh sampler. A frozen policy (``trainable = false``) samples and is never
trained.

Outputs, beside the one-policy run's (``metrics.jsonl``, ``config.json``, transcripts, ``train.log``):

* ``policies/<name>/checkpoints.jsonl``: each policy's own checkpoint records (the same lines as a one-policy
  run's ``checkpoints.jsonl``: a ``state_path`` with optimizer, a ``sampler_path``);
* ``policy_checkpoints.jsonl``: one line per step at which *every* policy saved, naming each one's paths.
  A resumed run starts at its last line and restores every policy's weights and optimizer state from it,
  so a kill between two policies' saves resumes from the previous complete step;
* ``policy/<name>/...`` metrics in each step's row: the policy's episodes (reward, success, stop reasons,
  env metrics), groups used and dropped, datums, loss, optimizer numbers and learning rate.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from envsuite.trainers._batches import split_minibatches
from envsuite.trainers._checkpoints import CheckpointLog, CheckpointRecord
from envsuite.trainers._clients import NonFiniteLoss, PolicyClients, make_service
from envsuite.trainers._config import ConfigError
from envsuite.trainers._datums import loss_data
from envsuite.trainers._driver import StepDriver, drive_steps
from envsuite.trainers._heldout import append_eval_rows, eval_rows, truncate_eval_rows
from envsuite.trainers._metrics import MetricsLog, Row, episode_summary, kl_metrics, read_rows, truncate_after
from envsuite.trainers._outcome import StopCause, TrainResult
from envsuite.trainers._plots import plot_reward_curve
from envsuite.trainers._prepare import check_and_record_config, preflight
from envsuite.trainers._report import LOGGER, announce, run_log
from envsuite.trainers._role_rollouts import (
    PolicyBatch,
    PolicySamplers,
    SeatedRollouts,
    assemble_for_policy,
    check_seats,
    rollout_batch_by_seat,
    seat_of,
    seat_parts,
)
from envsuite.trainers._run_envs import EvalSet, build_datasets
from envsuite.trainers._trackers import Trackers, open_trackers
from envsuite.trainers._transcripts import write_transcripts
from envsuite.trainers.async_rl import SamplerSettings, group_seed

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from envsuite.backends import ServiceClient
    from envsuite.core import RLDataset
    from envsuite.trainers._config import TrainConfig
    from envsuite.trainers._policies import RolePolicy

POLICY_CHECKPOINTS = "policy_checkpoints.jsonl"
POLICY_PREFIX = "policy/"
"""Each policy's numbers in a step's row: ``policy/<name>/<metric>``."""


@dataclass(frozen=True)
class RoleCheckpoint:
    """One step at which every policy saved: each policy's checkpoint, by name."""

    step: int
    policies: dict[str, CheckpointRecord]


class RoleCheckpointLog:
    """``policy_checkpoints.jsonl``: a line once every policy of a step has saved (torn lines skipped)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: RoleCheckpoint) -> None:
        line = {"step": record.step, "policies": {k: asdict(v) for k, v in record.policies.items()}}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def last(self) -> RoleCheckpoint | None:
        if not self.path.exists():
            return None
        found: RoleCheckpoint | None = None
        for text in self.path.read_text(encoding="utf-8").splitlines():
            try:
                data = json.loads(text)
                records = {str(k): CheckpointRecord(**v) for k, v in data["policies"].items()}
                record = RoleCheckpoint(int(data["step"]), records)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
            if found is None or record.step >= found.step:
                found = record
        return found


@dataclass
class RolePolicyRun:
    """One policy during a run: its settings, its clients and its own checkpoint log."""

    spec: RolePolicy
    clients: PolicyClients
    checkpoints: CheckpointLog
    pool: list[PolicyClients] = field(default_factory=list)
    """The clients of ``spec.pool``'s saved states (a frozen role's opponent pool; member 0 is ``clients``)."""

    def close(self) -> None:
        for clients in (self.clients, *self.pool):
            clients.close()

    @property
    def name(self) -> str:
        return self.spec.name

    def drop_records_after(self, step: int) -> None:
        """Forget this policy's checkpoint records past ``step`` (a resumed run saves those steps again)."""
        records = self.checkpoints.records()
        if any(r.step > step for r in records):
            self.checkpoints.path.unlink()
            for record in records:
                if record.step <= step:
                    self.checkpoints.append(record)


async def open_policy(
    service: ServiceClient, config: TrainConfig, index: int, spec: RolePolicy, state: str | None
) -> RolePolicyRun:
    """Policy ``spec``'s training client: restored from ``state`` (weights, optimizer, step), started from
    ``spec.init_from``'s weights (a fresh optimizer), or a fresh LoRA adapter on the base model (seeded by
    the run's seed and the policy's place in the list)."""
    base = spec.model or config.policy.model
    if state is not None:
        training = await service.create_training_client_from_state_with_optimizer(state)
    elif spec.init_from is not None:
        # The policy's base model named: a checkpoint trained from another base is refused, not mixed in.
        training = await service.create_training_client_from_state(spec.init_from, base)
    else:
        training = await service.create_lora_training_client(
            base,
            rank=config.policy.lora_rank,
            seed=config.steps.seed + index,
            train_unembed=config.policy.train_unembed,
        )
    clients = PolicyClients(training, record_samples=config.loss.loss_fn == "stable_reinforce")
    if spec.model is not None:
        check_same_tokenizer(config, spec, clients.tokenizer())
    pool = [PolicyClients(await service.create_training_client_from_state(path, base)) for path in spec.pool]
    directory = Path(config.log_dir) / "policies" / spec.name
    directory.mkdir(parents=True, exist_ok=True)
    return RolePolicyRun(spec, clients, CheckpointLog(directory / "checkpoints.jsonl"), pool)


def check_same_tokenizer(config: TrainConfig, spec: RolePolicy, tokenizer: PreTrainedTokenizerBase) -> None:
    """Refuse a policy whose own base model tokenizes differently from the run's model: the env renders
    every seat's prompt, and parses every reply, with the run's renderer."""
    from envsuite import RendererConfig

    run_tokenizer = RendererConfig(config.policy.model, config.policy.renderer_name).build().tokenizer
    run_vocab = getattr(run_tokenizer, "get_vocab", None)  # the renderer's Tokenizer protocol lacks it
    if not callable(run_vocab) or run_vocab() != tokenizer.get_vocab():
        raise ConfigError(
            f"policies.{spec.name}.model {spec.model!r} has another tokenizer than the run's model "
            f"{config.policy.model!r}: a policy's own base model must share the run's tokenizer"
        )


def policy_learning_rate(config: TrainConfig, spec: RolePolicy, step: int) -> float:
    """The run's schedule at ``step``, scaled to the policy's own peak rate when it has one."""
    rate = config.learning_rate_at(step)
    if spec.learning_rate is None:
        return rate
    return rate * spec.learning_rate / config.optimizer.learning_rate


async def train_policy(config: TrainConfig, run: RolePolicyRun, step: int, batch: PolicyBatch) -> Row:
    """``num_substeps`` rounds of ``forward_backward`` + ``optim_step`` on one policy's datums."""
    assembled = batch.assembled
    minibatches = split_minibatches(assembled.datums_D, assembled.n_groups_used, config.steps.num_substeps)
    adam = config.optimizer.adam(policy_learning_rate(config, run.spec, step))
    row: Row = {}
    losses: list[float] = []
    kls: list[float] = []
    for minibatch in minibatches:
        try:
            data = await loss_data(minibatch, config.loss.loss_fn, run.clients.forward)
            out = await run.clients.forward_backward(data, config.loss.loss_fn.sdk_name, config.loss_config())
            optim = await run.clients.optim_step(adam)
        except FloatingPointError as exc:  # the local backend's NonFiniteError
            raise NonFiniteLoss(f"policy {run.name}: {exc}") from exc
        if not np.isfinite(out.loss_sum):
            raise NonFiniteLoss(f"policy {run.name}: {config.loss.loss_fn.value} loss is {out.loss_sum}")
        losses.append(out.loss_sum)
        kl = kl_metrics(minibatch, out.logprobs_D).get("kl_sample_train_v1")
        if kl is not None:
            kls.append(float(kl))
        row.update({f"optim/{k}": v for k, v in optim.items()})
    row["loss/sum"] = float(np.sum(losses)) if losses else 0.0
    row["optim_steps"] = len(minibatches)
    row["tokens/trained"] = sum(d.n_action_tokens for d in assembled.datums_D)
    if kls:
        row["kl_sample_train_v1"] = float(np.mean(kls))
    return row


class RolePoliciesTrainer:
    """Runs a config with policies to completion (or interruption); ``await trainer.run()``."""

    def __init__(self, config: TrainConfig, *, show_progress: bool = False) -> None:
        self.config = config
        self.log_dir = Path(config.log_dir)
        self.show_progress = show_progress
        self.metrics = MetricsLog(self.log_dir / "metrics.jsonl")
        self.checkpoints = RoleCheckpointLog(self.log_dir / POLICY_CHECKPOINTS)
        self.policies: list[RolePolicyRun] = []
        self._samplers: PolicySamplers | None = None
        self._trackers = Trackers()
        self._stop_requested = False

    def request_stop(self) -> None:
        """Finish the current step, save every policy, and return."""
        self._stop_requested = True

    async def run(self) -> TrainResult:
        config = self.config
        envs = preflight(config)
        train_data, test_data = await build_datasets(config, envs)
        await self._check_seats(train_data)  # before anything is written or loaded
        check_and_record_config(config, self.log_dir)
        resume = self.checkpoints.last()
        start = resume.step if resume is not None else 0
        truncate_after(self.metrics.path, start)
        truncate_eval_rows(self.log_dir, start)
        with run_log(self.log_dir / "train.log"):
            names = ", ".join(f"{p.name} (seats {list(p.seats)})" for p in config.roles.policies)
            where = f"resuming at step {start}" if resume else "starting"
            announce(self.show_progress, f"GRPO on {config.env_id}, a policy per role: {names}; {where}")
            service = make_service(config)
            try:
                await self._open(service, resume)
                self._trackers = open_trackers(config, self.log_dir)
                result = await self._steps(start, resume, train_data, test_data)
            finally:
                for policy in self.policies:
                    policy.close()
                self._trackers.close()
            LOGGER.info(result.message)
            return result

    async def _check_seats(self, train_data: RLDataset) -> None:
        builder = train_data.get_batch(0)[0]
        envs_G = await builder.make_envs()
        await builder.cleanup()
        check_seats([seat_of(env) for env in envs_G], self.config.roles.seat_owners(), self.config.env_id)

    async def _open(self, service: ServiceClient, resume: RoleCheckpoint | None) -> None:
        config = self.config
        for index, spec in enumerate(config.roles.policies):
            state = resume.policies[spec.name].state_path if resume is not None else None
            policy = await open_policy(service, config, index, spec, state)
            policy.drop_records_after(resume.step if resume is not None else 0)
            self.policies.append(policy)
        clients = {p.name: p.clients for p in self.policies}
        pools = {p.name: p.pool for p in self.policies}
        self._samplers = PolicySamplers(
            clients, config.roles.seat_owners(), SamplerSettings.of(config), pools
        )
        for policy in self.policies:
            await self._samplers.refresh(policy.name)

    async def _steps(
        self, start: int, last: RoleCheckpoint | None, train_data: RLDataset, test_data: EvalSet | None
    ) -> TrainResult:
        config = self.config

        async def one_step(step: int) -> Row:
            return await self._one_step(step, train_data, test_data)

        return await drive_steps(
            StepDriver(one_step, self._save, self._finish, lambda: self._stop_requested),
            title=config.env_id,
            start=start,
            n_steps=config.steps.n_steps,
            save_every=config.steps.save_every,
            last=last,
            metrics=self.metrics,
            trackers=self._trackers,
            show_progress=self.show_progress,
        )

    async def _one_step(self, step: int, train_data: RLDataset, test_data: EvalSet | None) -> Row:
        config = self.config
        row: Row = {"step": step, "lr": config.learning_rate_at(step)}
        every = config.evaluation.eval_every
        if test_data is not None and every and (step % every == 0 or step == config.steps.n_steps - 1):
            row.update(await self._evaluate(test_data, step))
        builders_P = train_data.get_batch(step)
        seeds_P = [group_seed(config.steps.seed, "sampling", step, i) for i in range(len(builders_P))]
        started = time.perf_counter()
        self._require_samplers().reset_draws()  # the pool counts of this step's train groups only
        rollouts = await rollout_batch_by_seat(builders_P, seeds_P, self._require_samplers())
        row["time/rollout"] = time.perf_counter() - started
        row.update(episode_summary(rollouts.plain_P))
        row["groups/failed"] = len(rollouts.failed_errors)
        row["groups/finished"] = len(rollouts.groups_P)
        if rollouts.failed_errors:
            row["error/first"] = rollouts.failed_errors[0][:300]
        started = time.perf_counter()
        for policy in self.policies:
            row.update(await self._policy_step(policy, step, rollouts))
        row["time/train"] = time.perf_counter() - started  # every policy's assembly, training and sampler
        if step == 0 or step == config.steps.n_steps - 1:
            tokenizer = self.policies[0].clients.tokenizer()
            out = self.log_dir / "transcripts"
            write_transcripts(rollouts.plain_P, tokenizer, out, step, config.evaluation.n_transcripts)
        row["tokens/sampled"] = sum(
            len(t.ac.tokens) for g in rollouts.plain_P for tr in g.trajectories_G for t in tr.transitions
        )
        return row

    async def _policy_step(self, policy: RolePolicyRun, step: int, rollouts: SeatedRollouts) -> Row:
        """One policy's part of a step: its advantages and datums, training (when it trains) and its
        sampler on the new weights; the row's ``policy/<name>/...`` numbers."""
        config = self.config
        batch = assemble_for_policy(
            rollouts.groups_P,
            policy.spec.seats,
            scale_by_std=config.loss.scale_advantages_by_std,
            version=step,
        )
        assembled = batch.assembled
        own: Row = episode_summary(batch.groups_P) if batch.groups_P else {}
        own |= {
            "groups/used": assembled.n_groups_used,
            "groups/constant_dropped": assembled.n_groups_constant,
            "datums": len(assembled.datums_D),
            "trainable": int(policy.spec.trainable),
        }
        for member, groups in enumerate(self._require_samplers().draws.get(policy.name, [])):
            own[f"pool/{member}/groups"] = groups  # member 0: the policy's own weights
        if policy.spec.trainable:
            own["lr"] = policy_learning_rate(config, policy.spec, step)
            if assembled.datums_D:
                own |= await train_policy(config, policy, step, batch)
                await self._require_samplers().refresh(policy.name)
        return {f"{POLICY_PREFIX}{policy.name}/{key}": value for key, value in own.items()}

    async def _evaluate(self, test_data: EvalSet, step: int) -> Row:
        """Held-out groups, each member played by its seat's policy (a role env's test split plays
        the seat it is registered with against its scripted opponent)."""
        builders_P = test_data.get_batch()
        seeds_P = [
            group_seed(self.config.steps.seed, "eval-sampling", step, i) for i in range(len(builders_P))
        ]
        rollouts = await rollout_batch_by_seat(builders_P, seeds_P, self._require_samplers())
        rows = eval_rows(rollouts.plain_P, rollouts.indices_P, step)
        owners = self.config.roles.seat_owners()
        seats = [seat for seated in rollouts.groups_P for seat in seated.seats_G]
        for episode, seat in zip(rows, seats, strict=True):
            episode |= {"seat": seat, "policy": owners[seat]}  # compare_held_out(policy=...) reads it
        append_eval_rows(self.log_dir, rows)
        row = episode_summary(rollouts.plain_P, prefix="test/")
        row["test/failed_groups"] = len(rollouts.failed_errors)
        if rollouts.failed_errors:
            row["test/error/first"] = rollouts.failed_errors[0][:300]
        for policy in self.policies:
            parts = seat_parts(rollouts.groups_P, policy.spec.seats)
            if parts:
                own = episode_summary(parts, prefix="test/")
                row |= {f"{POLICY_PREFIX}{policy.name}/{key}": value for key, value in own.items()}
        return row

    async def _save(self, done: int) -> RoleCheckpoint:
        """Every policy's state and sampler weights; the run's line is written once all have saved."""
        records: dict[str, CheckpointRecord] = {}
        for policy in self.policies:
            saved = await policy.clients.save(f"step{done:06d}")
            record = CheckpointRecord(done, saved.state_path, saved.sampler_path)
            policy.checkpoints.append(record)
            records[policy.name] = record
        checkpoint = RoleCheckpoint(done, records)
        self.checkpoints.append(checkpoint)
        return checkpoint

    def _finish(self, cause: StopCause, done: int, last: RoleCheckpoint | None, message: str) -> TrainResult:
        rows = read_rows(self.metrics.path)
        plot = None
        if rows:
            title = f"GRPO on {self.config.env_id}, a policy per role ({self.config.policy.model})"
            plot = plot_reward_curve(rows, self.log_dir / "reward_curve.png", title)
        policies = dict(last.policies) if last is not None else {}
        if last is not None:
            message += f"; last checkpoints at step {last.step}: " + ", ".join(
                f"{name} {record.state_path}" for name, record in policies.items()
            )
        return TrainResult(cause, done, self.log_dir, None, message, plot, policies)

    def _require_samplers(self) -> PolicySamplers:
        if self._samplers is None:
            raise RuntimeError("the trainer's policies are not open yet")
        return self._samplers

"""The GRPO loop, split into named phases: prepare, rollout, assemble, train, refresh, log, save.

One step ``i`` samples batch ``i`` of the env's train dataset with the current policy, turns it into
datums with group-centred advantages, runs ``num_substeps`` rounds of ``forward_backward`` +
``optim_step``, and gets a fresh sampling client on the new weights. Because the batch index is the
step, a resumed run sees exactly the data an uninterrupted one would.

It also samples exactly what an uninterrupted one would: every step gets fresh completers seeded from
(run seed, step) alone, one for its rollouts and one for its evaluation (so evaluating never moves the
training samples), and each call's seed depends on its prompt, not on the order concurrent calls
arrive in (:mod:`envsuite.completers`). A checkpoint holds the weights and the optimizer state, so the
sampling stream needs no state of its own: the step number is all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tinker

from envsuite.core import RLDataset
from envsuite.executors import ExecutorConfig, WorkerPool, open_pool
from envsuite.trainers._batches import AssembledBatch, assemble_batch, split_minibatches
from envsuite.trainers._captured import CapturedBatches
from envsuite.trainers._checkpoints import CheckpointLog, CheckpointRecord
from envsuite.trainers._clients import NonFiniteLoss, PolicyClients, TrainOutput, make_service
from envsuite.trainers._config import TrainConfig
from envsuite.trainers._curriculum import CurriculumState, group_label
from envsuite.trainers._datums import TrainingDatum, loss_data
from envsuite.trainers._driver import StepDriver, drive_steps
from envsuite.trainers._heldout import append_eval_rows, eval_rows, truncate_eval_rows
from envsuite.trainers._kl import KLPenalty
from envsuite.trainers._metrics import MetricsLog, Row, episode_summary, kl_metrics, read_rows, truncate_after
from envsuite.trainers._outcome import StopCause, TrainResult
from envsuite.trainers._plots import plot_reward_curve
from envsuite.trainers._prepare import check_and_record_config, preflight
from envsuite.trainers._report import LOGGER, announce, run_log
from envsuite.trainers._role_loop import RolePoliciesTrainer
from envsuite.trainers._run_envs import EvalSet, build_datasets, per_env_summary
from envsuite.trainers._trackers import Trackers, open_trackers
from envsuite.trainers._transcripts import write_transcripts
from envsuite.trainers._warm_start import warm_start
from envsuite.trainers.async_rl import (
    AsyncSteps,
    BusyMeter,
    NoSamplersLeftError,
    SampledGroup,
    SamplingService,
    TrainedStep,
    async_steps,
    group_seed,
    open_sampling,
    train_streaming,
)

if TYPE_CHECKING:
    from envsuite.core import EnvGroupBuilder


@dataclass
class _StepTimer:
    seconds: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def row(self) -> Row:
        return {f"time/{k}": v for k, v in self.seconds.items()}


class Trainer:
    """Runs one config to completion (or interruption); build it, then ``await trainer.run()``."""

    def __init__(self, config: TrainConfig, *, show_progress: bool = False) -> None:
        self.config = config
        self.log_dir = Path(config.log_dir)
        self.show_progress = show_progress
        self.metrics = MetricsLog(self.log_dir / "metrics.jsonl")
        self.checkpoints = CheckpointLog(self.log_dir / "checkpoints.jsonl")
        self._stop_requested = False
        self._clients: PolicyClients | None = None
        self._pool: WorkerPool | None = None
        self._trackers = Trackers()
        self._captured: CapturedBatches | None = None
        """Batches of captured episodes (``config.captured_dir``), trained on instead of rollouts."""
        self._curriculum: CurriculumState | None = None
        self._sampling: SamplingService | None = None
        self._async: AsyncSteps | None = None
        self._kl: KLPenalty | None = None
        self._learner_meter = BusyMeter()
        self._util_since = time.perf_counter()
        self._warm_row: Row = {}
        """The supervised warm start's numbers (``warm_start_steps``), logged with step 0's row."""
        self._roles: RolePoliciesTrainer | None = None
        """A run with a policy per role (``config.roles.policies``) is this trainer's to run."""

    def request_stop(self) -> None:
        """Finish the current step, save, and return (what Ctrl-C does)."""
        self._stop_requested = True
        if self._roles is not None:
            self._roles.request_stop()

    # ------------------------------------------------------------------ run

    async def run(self) -> TrainResult:
        config = self.config
        if config.roles.policies:
            self._roles = RolePoliciesTrainer(config, show_progress=self.show_progress)
            return await self._roles.run()
        envs = preflight(config)
        if config.envs.captured_dir is not None:
            self._captured = CapturedBatches.load(config)
        check_and_record_config(config, self.log_dir)
        resume = self.checkpoints.last()
        start = resume.step if resume is not None else 0
        truncate_after(self.metrics.path, start)
        truncate_eval_rows(self.log_dir, start)
        if config.envs.curriculum is not None:
            self._curriculum = CurriculumState(config.envs.curriculum, [e.spec for e in envs])
            self._curriculum.restore(self.log_dir, start)
        with run_log(self.log_dir / "train.log"):
            where = f"resuming at step {start}" if resume else "starting"
            announce(
                self.show_progress,
                f"GRPO on {self._source()} with {config.policy.model}: {where}; loading the model",
            )
            train_data, test_data = await build_datasets(config, envs) if envs else (None, None)
            service = make_service(config)
            self._clients = await PolicyClients.create(service, config, resume.state_path if resume else None)
            self._trackers = open_trackers(config, self.log_dir)
            # With sampler replicas the env work goes with them: no executor workers here.
            executor = config.executor_config() if config.replicas.samplers == 0 else ExecutorConfig()
            try:
                self._kl = await KLPenalty.create(config, service)
                async with (
                    open_pool(executor) as pool,
                    open_sampling(config, self._clients, pool) as sampling,
                ):
                    self._pool, self._sampling = pool, sampling
                    if resume is None and config.steps.warm_start_steps and train_data is not None:
                        self._warm_row = await warm_start(config, self._clients, train_data)
                        LOGGER.info("warm start: %s", self._warm_row)
                    await self._refresh_sampler(start)
                    self._util_since = time.perf_counter()
                    sampling.meter.take()  # utilisation counts from the first step on
                    self._learner_meter.take()
                    async with async_steps(
                        config, sampling, train_data, self, self.log_dir, start
                    ) as stepper:
                        self._async = stepper
                        result = await self._steps(start, resume, train_data, test_data)
            finally:
                self._pool = self._sampling = self._async = None
                if self._kl is not None:
                    self._kl.close()
                self._clients.close()
                self._trackers.close()
            LOGGER.info(result.message)
            return result

    async def _steps(
        self,
        start: int,
        last: CheckpointRecord | None,
        train_data: RLDataset | None,
        test_data: EvalSet | None,
    ) -> TrainResult:
        config = self.config

        async def one_step(step: int) -> Row:
            return await self._one_step(step, train_data, test_data)

        driver = StepDriver(
            one_step, self._save, self._finish, lambda: self._stop_requested, lost=(NoSamplersLeftError,)
        )
        return await drive_steps(
            driver,
            title=self._source(),
            start=start,
            n_steps=config.steps.n_steps,
            save_every=config.steps.save_every,
            last=last,
            metrics=self.metrics,
            trackers=self._trackers,
            show_progress=self.show_progress,
        )

    def _finish(
        self, cause: StopCause, done: int, last: CheckpointRecord | None, message: str
    ) -> TrainResult:
        rows = read_rows(self.metrics.path)
        plot = None
        if rows:
            title = f"GRPO on {self._source()} ({self.config.policy.model})"
            plot = plot_reward_curve(rows, self.log_dir / "reward_curve.png", title)
        if last is not None:
            message += f"; last checkpoint at step {last.step}: {last.state_path}"
        return TrainResult(cause, done, self.log_dir, last, message, plot)

    # ------------------------------------------------------------------ phases

    async def _one_step(self, step: int, train_data: RLDataset | None, test_data: EvalSet | None) -> Row:
        config = self.config
        timer = _StepTimer()
        started = time.perf_counter()
        row: Row = {"step": step, "lr": config.learning_rate_at(step)}
        if step == 0:
            row.update(self._warm_row)
        if (
            test_data is not None
            and config.evaluation.eval_every
            and (step % config.evaluation.eval_every == 0 or step == config.steps.n_steps - 1)
        ):
            with timer.phase("eval"):
                row.update(await self._evaluate(test_data, step))
        if self._async is not None:
            trained = await self._async.step(step, timer.seconds)
            timer.seconds["train"] = time.perf_counter() - started - sum(timer.seconds.values())
        elif config.steps.stream_minibatches:
            with timer.phase("stream"):
                trained = await self._stream_step(step, train_data)
        else:
            trained = await self._sync_step(step, train_data, timer)
        groups_P = trained.usable_P
        row.update(episode_summary(groups_P))
        row.update(_batch_counts(trained.errors, trained.assembled, len(groups_P)))
        if trained.errors:
            row["error/first"] = trained.errors[0][:300]
        row.update(trained.row)
        # A captured run without an env to evaluate on never samples: no new sampler to make.
        sampling_later = self._captured is None or test_data is not None
        if (trained.assembled.datums_D or self._async is not None) and sampling_later:
            with timer.phase("save"):
                await self._refresh_sampler(step + 1)
        if step == 0 or step == config.steps.n_steps - 1:
            write_transcripts(
                groups_P,
                self._require_clients().tokenizer(),
                self.log_dir / "transcripts",
                step,
                config.evaluation.n_transcripts,
            )
        sampled = sum(len(t.ac.tokens) for g in groups_P for tr in g.trajectories_G for t in tr.transitions)
        row["tokens/sampled"] = sampled
        if "rollout" in timer.seconds:
            row["tokens_per_s/rollout"] = sampled / max(timer.seconds["rollout"], 1e-9)
        row.update(self._utilisation())
        row.update(timer.row())
        return row

    async def _sync_step(self, step: int, train_data: RLDataset | None, timer: _StepTimer) -> TrainedStep:
        """Sample the whole batch (or take the captured one), then train on it."""
        config = self.config
        # Captured episodes come as they were played: no env batch, so no per-env rows or curriculum.
        batch = None if self._captured is not None or train_data is None else self._batch(train_data, step)
        with timer.phase("rollout"):
            if self._captured is not None:
                rollouts = self._captured.batch(step)
            else:
                assert batch is not None
                seeds_P = [group_seed(config.steps.seed, "sampling", step, i) for i in range(len(batch))]
                rollouts = await self._require_sampling().rollout_batch(batch, seeds_P)
        with timer.phase("assemble"):
            versions_P = [step] * len(rollouts.groups_P)
            assembled = assemble_batch(
                rollouts.groups_P, scale_by_std=config.loss.scale_advantages_by_std, versions_P=versions_P
            )
        trained = TrainedStep(usable_P=rollouts.groups_P, errors=rollouts.failed_errors, assembled=assembled)
        if batch is not None:
            labels_P = [group_label(batch[i]) for i in rollouts.indices_P]
            trained.row.update(per_env_summary(rollouts.groups_P, labels_P))
            if self._curriculum is not None:
                trained.row.update(self._curriculum.observe(batch, rollouts.groups_P, rollouts.indices_P))
                self._curriculum.save(self.log_dir, step)
        with timer.phase("train"):
            trained.row.update(await self._train(step, assembled))
        return trained

    async def _stream_step(self, step: int, train_data: RLDataset | None) -> TrainedStep:
        """Sample the batch and train each minibatch as soon as its groups are in (streaming)."""
        config = self.config
        assert train_data is not None, "TrainConfig.validate refuses streaming runs on captured episodes"
        sampling = self._require_sampling()
        builders_P = train_data.get_batch(step)
        tasks = [
            asyncio.ensure_future(sampling.rollout(b, group_seed(config.steps.seed, "sampling", step, i)))
            for i, b in enumerate(builders_P)
        ]
        finished = asyncio.as_completed(tasks)

        async def next_group() -> SampledGroup:
            group: SampledGroup = await next(finished)
            return SampledGroup(group.result, step, group.seconds, group.sampler)  # on-policy: this step's

        try:
            assert config.steps.stream_minibatches is not None
            return await train_streaming(
                next_group,
                self,
                step,
                batch_size=len(builders_P),
                num_substeps=config.steps.num_substeps,
                minibatches=config.steps.stream_minibatches,
                scale_by_std=config.loss.scale_advantages_by_std,
            )
        finally:
            for task in tasks:
                task.cancel()

    # ------------------------------------------------------------------ the learner (streaming, async)

    async def forward_backward(self, datums: list[TrainingDatum]) -> TrainOutput:
        """One ``forward_backward`` of the configured loss on ``datums`` (each in the form that loss
        takes); a NaN/inf loss raises :class:`NonFiniteLoss`."""
        config = self.config
        clients = self._require_clients()
        self._learner_meter.enter()
        try:
            data = await loss_data(datums, config.loss.loss_fn, clients.forward)
            out: TrainOutput = await clients.forward_backward(
                data, config.loss.loss_fn.sdk_name, config.loss_config()
            )
        except FloatingPointError as exc:  # the local backend's NonFiniteError
            raise NonFiniteLoss(str(exc)) from exc
        finally:
            self._learner_meter.leave()
        if not np.isfinite(out.loss_sum):
            raise NonFiniteLoss(f"{config.loss.loss_fn.value} loss is {out.loss_sum}")
        return out

    async def optim(self, step: int) -> dict[str, float]:
        """One optimizer step at ``step``'s learning rate."""
        self._learner_meter.enter()
        try:
            return await self._require_clients().optim_step(_adam(self.config, step))
        except FloatingPointError as exc:
            raise NonFiniteLoss(str(exc)) from exc
        finally:
            self._learner_meter.leave()

    async def kl_penalty(self, datums: list[TrainingDatum]) -> Row:
        """The KL penalty on ``datums``' advantages (nothing without one)."""
        return {} if self._kl is None else await self._kl.apply(datums)

    async def train(self, step: int, assembled: AssembledBatch) -> Row:
        return await self._train(step, assembled)

    def _utilisation(self) -> Row:
        """Shares of the wall time since the last step ended (checkpoints included) that the sampler(s)
        and the learner were busy, and the samplers' own counters."""
        sampling = self._require_sampling()
        now = time.perf_counter()
        seconds, self._util_since = now - self._util_since, now
        row: Row = {
            "util/sampler": min(sampling.meter.take() / max(seconds, 1e-9), 1.0),
            "util/trainer": min(self._learner_meter.take() / max(seconds, 1e-9), 1.0),
        }
        row.update(sampling.metrics())
        return row

    async def _train(self, step: int, assembled: AssembledBatch) -> Row:
        config = self.config
        minibatches = split_minibatches(
            assembled.datums_D, assembled.n_groups_used, config.steps.num_substeps
        )
        row: Row = await self.kl_penalty(assembled.datums_D)
        kl_rows: list[Row] = []
        losses: list[float] = []
        trained_tokens = 0
        for minibatch in minibatches:
            out = await self.forward_backward(minibatch)
            optim = await self.optim(step)
            kl_rows.append(kl_metrics(minibatch, out.logprobs_D))
            losses.append(out.loss_sum)
            trained_tokens += sum(d.n_action_tokens for d in minibatch)
            row.update({f"optim/{k}": v for k, v in optim.items()})
        for key in ("kl_sample_train_v1", "kl_sample_train_v2"):
            values = [float(r[key]) for r in kl_rows if key in r]
            if values:
                row[key] = float(np.mean(values))
        row["loss/sum"] = float(np.sum(losses)) if losses else 0.0
        row["tokens/trained"] = trained_tokens
        row["optim_steps"] = len(minibatches)
        return row

    def _batch(self, train_data: RLDataset, step: int) -> list[EnvGroupBuilder]:
        """Batch ``step`` of the train data, each curriculum env at its current rung."""
        batch = list(train_data.get_batch(step))
        return self._curriculum.apply(batch) if self._curriculum is not None else batch

    async def _evaluate(self, test_data: EvalSet, step: int) -> Row:
        sampling = self._require_sampling()
        await sampling.settle()  # the step's own weights, also when replicas load them in the background
        builders_P = test_data.get_batch()
        seeds_P = [
            group_seed(self.config.steps.seed, "eval-sampling", step, i) for i in range(len(builders_P))
        ]
        rollouts = await sampling.rollout_batch(builders_P, seeds_P)
        labels_P = [test_data.labels_P[i] for i in rollouts.indices_P]
        own_P = [test_data.rungs_P[i] is None for i in rollouts.indices_P]
        if test_data.labelled:
            envs_P = [test_data.env_of(i) for i in rollouts.indices_P]
            rungs_P = [test_data.rungs_P[i] for i in rollouts.indices_P]
            rows = eval_rows(rollouts.groups_P, rollouts.indices_P, step, envs_P, rungs_P)
        else:
            rows = eval_rows(rollouts.groups_P, rollouts.indices_P, step)
        append_eval_rows(self.log_dir, rows)
        write_transcripts(
            rollouts.groups_P,
            self._require_clients().tokenizer(),
            self.log_dir / "transcripts",
            step,
            self.config.evaluation.n_transcripts,
            prefix="test_",
            indices_P=rollouts.indices_P,
        )
        # The run's own held-out sets make its test/ numbers; per-rung sets only their by_env/ ones.
        row = episode_summary(
            [g for g, own in zip(rollouts.groups_P, own_P, strict=True) if own], prefix="test/"
        )
        row.update(per_env_summary(rollouts.groups_P, labels_P, prefix="test/"))
        row["test/failed_groups"] = len(rollouts.failed_errors)
        if rollouts.failed_errors:
            row["test/error/first"] = rollouts.failed_errors[0][:300]
        return row

    async def _refresh_sampler(self, version: int) -> None:
        """New weights to the sampler(s), as policy ``version`` (after a step that trained, and at the start).

        The trainer's own sampler lets the old client go before building the new one in synchronous
        training: each holds a copy of the model."""
        await self._require_sampling().publish(version)
        if self._async is not None:
            await self._async.notify_version()

    async def _save(self, done: int) -> CheckpointRecord:
        saved = await self._require_clients().save(f"step{done:06d}")
        record = CheckpointRecord(done, saved.state_path, saved.sampler_path)
        self.checkpoints.append(record)
        return record

    # ------------------------------------------------------------------ helpers

    def _source(self) -> str:
        """What the run trains on, for messages: the env, or the captured episodes."""
        if self.config.envs.captured_dir is not None:
            return f"captured {self.config.envs.captured_dir}"
        return self.config.env_id

    def _require_sampling(self) -> SamplingService:
        if self._sampling is None:
            raise RuntimeError("the trainer has no sampler yet")
        return self._sampling

    def _require_clients(self) -> PolicyClients:
        if self._clients is None:
            raise RuntimeError("the trainer's clients are not built yet")
        return self._clients


def _adam(config: TrainConfig, step: int) -> tinker.AdamParams:
    return config.optimizer.adam(config.learning_rate_at(step))


def _batch_counts(errors: list[str], assembled: AssembledBatch, n_finished: int) -> Row:
    return {
        "groups/failed": len(errors),
        "groups/constant_dropped": assembled.n_groups_constant,
        "groups/used": assembled.n_groups_used,
        "groups/finished": n_finished,
        "datums": len(assembled.datums_D),
    }


def run_training(config: TrainConfig, *, show_progress: bool = True) -> TrainResult:
    """Run ``config`` to the end; the first Ctrl-C stops after the current step and saves."""
    trainer = Trainer(config, show_progress=show_progress)

    async def main() -> TrainResult:
        loop = asyncio.get_running_loop()
        installed = False
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, _on_sigint, loop, trainer)
            installed = True
        try:
            return await trainer.run()
        finally:
            if installed:
                loop.remove_signal_handler(signal.SIGINT)

    return asyncio.run(main())


def _on_sigint(loop: asyncio.AbstractEventLoop, trainer: Trainer) -> None:
    print("\nstopping after this step and saving (press Ctrl-C again to abort at once)", flush=True)
    trainer.request_stop()
    loop.remove_signal_handler(signal.SIGINT)
    # A second Ctrl-C must still work: hand SIGINT back to Python's default handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)

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
import dataclasses
import enum
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tinker

from envsuite.core import RLDataset
from envsuite.executors import WorkerPool, open_pool
from envsuite.rollouts import RolloutLimits
from envsuite.trainers._captured import CapturedBatches
from envsuite.trainers._checkpoints import CheckpointLog, CheckpointRecord
from envsuite.trainers._clients import PolicyClients, TrainOutput, make_service
from envsuite.trainers._config import PolicyLoss, TrainConfig
from envsuite.trainers._curriculum import CurriculumState, group_label
from envsuite.trainers._datums import TrainingDatum, loss_datum
from envsuite.trainers._heldout import append_eval_rows, eval_rows, truncate_eval_rows
from envsuite.trainers._metrics import MetricsLog, Row, episode_summary, kl_metrics, read_rows, truncate_after
from envsuite.trainers._mixture import EvalSet, build_datasets, per_env_summary
from envsuite.trainers._plots import plot_reward_curve
from envsuite.trainers._prepare import check_and_record_config, preflight
from envsuite.trainers._report import LOGGER, announce, progress, run_log
from envsuite.trainers._rollouts import AssembledBatch, assemble_batch, rollout_batch, split_minibatches
from envsuite.trainers._trackers import Trackers, open_trackers
from envsuite.trainers._transcripts import write_transcripts

if TYPE_CHECKING:
    from envsuite.core import EnvGroupBuilder, TokenCompleter


class StopCause(enum.StrEnum):
    """Why a run ended."""

    COMPLETED = "completed"
    """All ``n_steps`` steps ran."""
    INTERRUPTED = "interrupted"
    """Ctrl-C (SIGINT) or :meth:`Trainer.request_stop`: stopped after a step and saved."""
    NON_FINITE = "non_finite"
    """A loss or gradient came out NaN/inf; the last good checkpoint is kept, nothing newer saved."""


@dataclass(frozen=True)
class TrainResult:
    """How a run ended and where its outputs are."""

    cause: StopCause
    steps_completed: int
    """Steps whose metrics are logged (the next run starts here or at the last checkpoint)."""
    log_dir: Path
    last_checkpoint: CheckpointRecord | None
    message: str = ""
    plot_path: Path | None = None


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


class NonFiniteLoss(FloatingPointError):
    """The trainer saw a NaN/inf loss."""


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
        self._sampler: Any = None
        self._pool: WorkerPool | None = None
        self._trackers = Trackers()
        self._captured: CapturedBatches | None = None
        """Batches of captured episodes (``config.captured_dir``), trained on instead of rollouts."""
        self._curriculum: CurriculumState | None = None

    def request_stop(self) -> None:
        """Finish the current step, save, and return (what Ctrl-C does)."""
        self._stop_requested = True

    # ------------------------------------------------------------------ run

    async def run(self) -> TrainResult:
        config = self.config
        envs = preflight(config)
        if config.captured_dir is not None:
            self._captured = CapturedBatches.load(config)
        check_and_record_config(config, self.log_dir)
        resume = self.checkpoints.last()
        start = resume.step if resume is not None else 0
        truncate_after(self.metrics.path, start)
        truncate_eval_rows(self.log_dir, start)
        if config.curriculum is not None:
            self._curriculum = CurriculumState(config.curriculum, [e.spec for e in envs])
            self._curriculum.restore(self.log_dir, start)
        with run_log(self.log_dir / "train.log"):
            where = f"resuming at step {start}" if resume else "starting"
            announce(
                self.show_progress,
                f"GRPO on {self._source()} with {config.model}: {where}; loading the model",
            )
            train_data, test_data = await build_datasets(config, envs) if envs else (None, None)
            self._clients = await PolicyClients.create(
                make_service(config), config, resume.state_path if resume else None
            )
            self._trackers = open_trackers(config, self.log_dir)
            try:
                async with open_pool(config.executor_config()) as pool:
                    self._pool = pool
                    await self._refresh_sampler()
                    result = await self._steps(start, resume, train_data, test_data)
            finally:
                self._pool = None
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
        done = start
        with progress(self.show_progress, self._source(), config.n_steps, start) as advance:
            for step in range(start, config.n_steps):
                if self._stop_requested:
                    break
                try:
                    row = await self._one_step(step, train_data, test_data)
                except NonFiniteLoss as exc:
                    return self._finish(StopCause.NON_FINITE, done, last, f"stopped at step {step}: {exc}")
                self.metrics.append(row)
                self._trackers.log(row)
                done = step + 1
                if done % config.save_every == 0 or done == config.n_steps:
                    last = await self._save(done)
                advance(row)
        if last is None or last.step < done:
            last = await self._save(done)
        if done < config.n_steps:
            return self._finish(StopCause.INTERRUPTED, done, last, f"interrupted after {done} steps; saved")
        return self._finish(StopCause.COMPLETED, done, last, f"completed {done} steps")

    def _finish(
        self, cause: StopCause, done: int, last: CheckpointRecord | None, message: str
    ) -> TrainResult:
        rows = read_rows(self.metrics.path)
        plot = None
        if rows:
            title = f"GRPO on {self._source()} ({self.config.model})"
            plot = plot_reward_curve(rows, self.log_dir / "reward_curve.png", title)
        if last is not None:
            message += f"; last checkpoint at step {last.step}: {last.state_path}"
        return TrainResult(cause, done, self.log_dir, last, message, plot)

    # ------------------------------------------------------------------ phases

    async def _one_step(self, step: int, train_data: RLDataset | None, test_data: EvalSet | None) -> Row:
        config = self.config
        timer = _StepTimer()
        row: Row = {"step": step, "lr": config.learning_rate_at(step)}
        if (
            test_data is not None
            and config.eval_every
            and (step % config.eval_every == 0 or step == config.n_steps - 1)
        ):
            with timer.phase("eval"):
                row.update(await self._evaluate(test_data, step))
        # Captured episodes come as they were played: no env batch, so no per-env rows or curriculum.
        batch = self._batch(train_data, step) if self._captured is None and train_data is not None else None
        with timer.phase("rollout"):
            if self._captured is not None:
                rollouts = self._captured.batch(step)
            else:
                assert batch is not None
                # No local name holds the completer: the refresh below must find the old sampler unreferenced.
                rollouts = await rollout_batch(
                    batch, self._policy(step, "sampling"), self._limits(), self._pool
                )
        with timer.phase("assemble"):
            assembled = assemble_batch(rollouts.groups_P, scale_by_std=config.scale_advantages_by_std)
        row.update(episode_summary(rollouts.groups_P))
        if batch is not None:
            labels_P = [group_label(batch[i]) for i in rollouts.indices_P]
            row.update(per_env_summary(rollouts.groups_P, labels_P))
            if self._curriculum is not None:
                row.update(self._curriculum.observe(batch, rollouts.groups_P, rollouts.indices_P))
                self._curriculum.save(self.log_dir, step)
        row.update(_batch_counts(rollouts.failed_errors, assembled, len(rollouts.groups_P)))
        if rollouts.failed_errors:
            row["error/first"] = rollouts.failed_errors[0][:300]
        with timer.phase("train"):
            row.update(await self._train(step, assembled))
        if assembled.datums_D and (self._captured is None or test_data is not None):
            with timer.phase("save"):
                await self._refresh_sampler()
        if step == 0 or step == config.n_steps - 1:
            write_transcripts(
                rollouts.groups_P,
                self._require_clients().tokenizer(),
                self.log_dir / "transcripts",
                step,
                config.n_transcripts,
            )
        sampled = sum(
            len(t.ac.tokens) for g in rollouts.groups_P for tr in g.trajectories_G for t in tr.transitions
        )
        row["tokens/sampled"] = sampled
        row["tokens_per_s/rollout"] = sampled / max(timer.seconds["rollout"], 1e-9)
        row.update(timer.row())
        return row

    async def _train(self, step: int, assembled: AssembledBatch) -> Row:
        config = self.config
        clients = self._require_clients()
        minibatches = split_minibatches(assembled.datums_D, assembled.n_groups_used, config.num_substeps)
        row: Row = {}
        kl_rows: list[Row] = []
        losses: list[float] = []
        trained_tokens = 0
        for minibatch in minibatches:
            data = [loss_datum(d, config.loss_fn) for d in minibatch]
            if config.loss_fn == PolicyLoss.DRO:
                data = await _dro_prompt_logprobs(clients, minibatch, data)
            try:
                out: TrainOutput = await clients.forward_backward(
                    data, config.loss_fn.value, config.loss_config()
                )
                if not np.isfinite(out.loss_sum):
                    raise NonFiniteLoss(f"{config.loss_fn.value} loss is {out.loss_sum}")
                optim = await clients.optim_step(_adam(config, step))
            except FloatingPointError as exc:  # the local backend's NonFiniteError
                raise NonFiniteLoss(str(exc)) from exc
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
        policy = self._policy(step, "eval-sampling")
        rollouts = await rollout_batch(test_data.get_batch(), policy, self._limits(), self._pool)
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
            self.config.n_transcripts,
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

    async def _refresh_sampler(self) -> None:
        """A sampling client on the current weights (after a step that trained, and at the start).

        The old client is let go before the new one is built: each holds a copy of the model."""
        self._sampler = None
        self._sampler = await self._require_clients().refresh_sampler()

    def _policy(self, step: int, stream: str) -> TokenCompleter:
        """A completer on the current weights whose samples depend only on (run seed, ``stream``, step)."""
        from envsuite import episode_seed
        from envsuite.completers import SamplingTokenCompleter

        if self._sampler is None:
            raise RuntimeError("the trainer has no sampler yet")
        return SamplingTokenCompleter(
            self._sampler,
            max_tokens=self.config.max_tokens,
            temperature=self.config.temperature,
            seed=episode_seed(self.config.seed, stream, step),
        )

    async def _save(self, done: int) -> CheckpointRecord:
        saved = await self._require_clients().save(f"step{done:06d}")
        record = CheckpointRecord(done, saved.state_path, saved.sampler_path)
        self.checkpoints.append(record)
        return record

    # ------------------------------------------------------------------ helpers

    def _source(self) -> str:
        """What the run trains on, for messages: the env, or the captured episodes."""
        if self.config.captured_dir is not None:
            return f"captured {self.config.captured_dir}"
        return self.config.env_id

    def _limits(self) -> RolloutLimits:
        return RolloutLimits(max_turns=self.config.max_turns, timeout_s=self.config.rollout_timeout_s)

    def _require_clients(self) -> PolicyClients:
        if self._clients is None:
            raise RuntimeError("the trainer's clients are not built yet")
        return self._clients


async def _dro_prompt_logprobs(
    clients: PolicyClients, minibatch: list[TrainingDatum], data: list[tinker.Datum]
) -> list[tinker.Datum]:
    """``dro``'s penalty ``(logp - logprobs)^2`` covers every position, and the sampler gave no logprob
    for observation tokens: there they get the learner's own (one forward pass), so the penalty pulls
    only sampled tokens towards the sampler, not the prompt towards probability 1."""
    current_D = await clients.forward(data)
    out = []
    for training, datum, current_T in zip(minibatch, data, current_D, strict=True):
        sampled_T = training.mask_T != 0
        logprobs_T = np.where(sampled_T, training.sampler_logprobs_T, current_T).astype(np.float32)
        inputs = {**datum.loss_fn_inputs, "logprobs": tinker.TensorData.from_numpy(logprobs_T)}
        out.append(dataclasses.replace(datum, loss_fn_inputs=inputs))
    return out


def _adam(config: TrainConfig, step: int) -> tinker.AdamParams:
    return tinker.AdamParams(
        learning_rate=config.learning_rate_at(step),
        beta1=config.beta1,
        beta2=config.beta2,
        eps=config.eps,
        weight_decay=config.weight_decay,
        grad_clip_norm=config.grad_clip_norm,
    )


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

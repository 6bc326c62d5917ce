"""The supervised warm start (``warm_start_steps``): reference replies imitated before GRPO, on the real
tiny model through the local backend; only the reply's tokens are weighted; a resumed run does not
warm-start again; settings that cannot go with it are refused before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from envsuite.trainers import ConfigError, TrainConfig, read_metrics, run_training

ENV = "arithmetic_easy-v0"  # single-turn, a reference probe on every problem, no sandbox


def _config(tmp_path: Path, **changes: object) -> TrainConfig:
    values: dict[str, object] = {
        "env_id": ENV,
        "log_dir": str(tmp_path / "run"),
        "model": "tiny-random",
        "n_steps": 1,
        "batch_size": 2,
        "group_size": 2,
        "max_tokens": 8,
        "learning_rate": 1e-2,
        "lora_rank": 4,
        "save_every": 1,
        "eval_every": 0,
        "n_transcripts": 0,
        "warm_start_steps": 6,
    }
    values.update(changes)
    return TrainConfig.from_dict(values)


def test_the_warm_start_imitates_the_reference_replies_before_the_first_step(tmp_path: Path) -> None:
    """Six steps over the same two batches (the dataset has one batch a step: the batches again) drive
    the references' per-token NLL down; step 0's row carries the numbers."""
    config = _config(tmp_path, n_steps=2)
    result = run_training(config, show_progress=False)
    assert result.steps_completed == 2, result.message
    rows = read_metrics(Path(config.log_dir) / "metrics.jsonl")
    first = rows[0]
    assert first["warm_start/steps"] == 6 and first["warm_start/datums"] == 12  # one per group
    assert first["warm_start/nll_last"] < 0.5 * first["warm_start/nll_first"], first
    assert not any(key.startswith("warm_start/") for key in rows[1])


def test_reference_datums_weigh_the_reply_alone() -> None:
    """Each datum is the prompt and the reference reply's tokens; the targets' weights are 1 exactly
    on the reply's tokens (the prompt is context, not imitated)."""
    import asyncio

    import envsuite
    from envsuite.core import ProbeExpectation
    from envsuite.renderers import reply_to_tokens
    from envsuite.trainers import reference_datums

    dataset = envsuite.make_dataset_builder(ENV, batch_size=2, group_size=2, n_batches=1, model="tiny-random")
    train, _ = asyncio.run(dataset())
    datums = asyncio.run(reference_datums(train, 0))
    assert len(datums) == 2
    builder = train.get_batch(0)[0]
    env = asyncio.run(builder.make_envs())[0]
    prompt, stop = asyncio.run(env.initial_observation())  # type: ignore[misc]
    reply = next(p.reply for p in env.reward_probes() if p.expect is ProbeExpectation.FULL_MARKS)
    reply_T = reply_to_tokens(env.renderer, reply, stop)  # type: ignore[attr-defined]
    weights_T = datums[0].loss_fn_inputs["weights"].to_numpy()
    targets_T = datums[0].loss_fn_inputs["target_tokens"].to_numpy().tolist()
    assert targets_T == (prompt.to_ints() + reply_T)[1:]
    assert weights_T.sum() == len(reply_T) and weights_T[-len(reply_T) :].min() == 1.0


def test_a_resumed_run_does_not_warm_start_again(tmp_path: Path) -> None:
    config = _config(tmp_path, n_steps=1)
    run_training(config, show_progress=False)
    longer = _config(tmp_path, n_steps=2)
    result = run_training(longer, show_progress=False)
    assert result.steps_completed == 2, result.message
    log = (Path(config.log_dir) / "train.log").read_text()
    assert log.count("warm start:") == 1 and "resuming at step 1" in log


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"warm_start_steps": -1}, "warm_start_steps must be >= 0"),
        ({"async_max_steps_off_policy": 1}, "the warm start imitates"),
        ({"policies": {"a": {"seats": [0]}}}, "without a supervised warm start"),
    ],
)
def test_settings_that_cannot_go_with_a_warm_start_are_refused(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, **changes).validate()


def test_the_command_line_sets_the_warm_start_over_a_preset() -> None:
    """``envsuite train --warm-start-steps N`` sets it on a plain run and overrides a preset's value."""
    import argparse

    from envsuite.cli._args import Subparsers
    from envsuite.cli._train_cmd import add_parser, config_from_args

    parser = argparse.ArgumentParser()
    sub: Subparsers = parser.add_subparsers(dest="command")
    add_parser(sub)
    plain = config_from_args(parser.parse_args(["train", "arithmetic_easy", "--warm-start-steps", "3"]))
    assert plain.steps.warm_start_steps == 3
    preset = ["train", "--preset", "workspace-shell-intro", "--log-dir", "x"]
    assert config_from_args(parser.parse_args(preset)).steps.warm_start_steps == 8
    changed = config_from_args(parser.parse_args([*preset, "--warm-start-steps", "0"]))
    assert changed.steps.warm_start_steps == 0

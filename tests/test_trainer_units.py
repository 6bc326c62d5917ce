"""The trainer's pure pieces: config, advantages, datum assembly and merging, minibatches, metrics files."""

from __future__ import annotations

import json
import pickle
import typing
from pathlib import Path

import pytest
import tinker

from envsuite.core import StopReason, TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from envsuite.trainers import (
    CheckpointLog,
    CheckpointRecord,
    ConfigError,
    LRSchedule,
    PolicyLoss,
    TrainConfig,
    assemble_batch,
    compute_advantages,
    loss_datum,
    merge_turns,
    preflight,
    read_metrics,
    trajectory_to_datums,
)


def _turn(
    ob: list[int], ac: list[int], lp: list[float], done: bool = False, reward: float = 0.0
) -> Transition:
    return Transition(
        ob=tinker.ModelInput.from_ints(ob),
        ac=TokensWithLogprobs(ac, lp),
        reward=reward,
        episode_done=done,
        stop_reason=StopReason.COMPLETED if done else None,
    )


def _traj(*turns: Transition) -> Trajectory:
    return Trajectory(list(turns), tinker.ModelInput.empty())


# ------------------------------------------------------------------------------------------ config


def test_config_round_trips_through_json_and_pickle() -> None:
    config = TrainConfig(
        env_id="arithmetic",
        log_dir="runs/x",
        env_kwargs={"digits": 1, "operations": ["+"]},
        lr_schedule=LRSchedule.COSINE,
        loss_fn=PolicyLoss.PPO,
        rollout_timeout_s=5.0,
    )
    assert TrainConfig.from_json(config.to_json()) == config
    assert pickle.loads(pickle.dumps(config)) == config
    assert json.loads(config.to_json())["loss_fn"] == "ppo"


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"group_size": 1}, "group_size must be >= 2"),
        ({"batch_size": 6, "num_substeps": 4}, "not divisible by num_substeps"),
        ({"temperature": 0.0}, "temperature"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"env_kwargs": {"x": object()}}, "JSON"),
        ({"lora_rank": -1}, "lora_rank"),
        ({"lora_rank": 0, "backend": "tinker"}, "local backend only"),
    ],
)
def test_bad_configs_say_what_to_change(changes: dict[str, object], needle: str) -> None:
    config = TrainConfig(env_id="arithmetic", log_dir="x", **changes)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=needle):
        config.validate()


def test_unknown_enum_value_in_dict_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cosine"):
        TrainConfig.from_dict({"env_id": "a", "log_dir": "b", "lr_schedule": "exp"})


def test_preflight_rejects_unknown_env_model_and_kwargs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="arithmetic"):
        preflight(TrainConfig(env_id="arithmetc", log_dir=str(tmp_path), model="tiny-random"))
    with pytest.raises(ConfigError, match="model"):
        preflight(TrainConfig(env_id="arithmetic", log_dir=str(tmp_path), model="no-such-model-xyz"))
    with pytest.raises(ConfigError, match="digits"):
        preflight(
            TrainConfig(
                env_id="arithmetic", log_dir=str(tmp_path), model="tiny-random", env_kwargs={"digits": 99}
            )
        )
    assert not (tmp_path / "metrics.jsonl").exists()


def test_preflight_reports_dataset_errors_before_materializing_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15.2: a bad dataset fails in seconds, not after the embedded model's ~20 s conversion."""
    import envsuite.models

    def no_materializing(name: str) -> None:
        raise AssertionError(f"preflight materialized {name} before checking the env")

    monkeypatch.setattr(envsuite.models, "resolve_model", no_materializing)
    good = tmp_path / "one.jsonl"
    good.write_text('{"question": "What is 1+1?", "answer": "#### 2"}\n', encoding="utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"foo": 1}\n', encoding="utf-8")
    config = TrainConfig(env_id="math", log_dir=str(tmp_path), env_kwargs={"dataset": str(bad)})
    with pytest.raises(ConfigError, match=r"bad\.jsonl:1: unknown record format"):
        preflight(config)
    # The test split is built too when the run evaluates: its errors must not surface mid-run.
    split_files = {"dataset": str(good), "test_dataset": str(bad)}
    with pytest.raises(ConfigError, match=r"test split.*bad\.jsonl:1"):
        preflight(TrainConfig(env_id="math", log_dir=str(tmp_path), env_kwargs=split_files))
    with pytest.raises(ConfigError, match=r"no problem falls in the 'test' split.*--eval-every 0"):
        preflight(TrainConfig(env_id="math", log_dir=str(tmp_path), env_kwargs={"dataset": str(good)}))


def test_learning_rate_schedules() -> None:
    base = TrainConfig(env_id="a", log_dir="b", n_steps=10, learning_rate=1.0, warmup_steps=2)
    assert base.learning_rate_at(0) == pytest.approx(1 / 3)
    assert base.learning_rate_at(5) == 1.0
    linear = TrainConfig(
        env_id="a", log_dir="b", n_steps=10, learning_rate=1.0, lr_schedule=LRSchedule.LINEAR
    )
    assert linear.learning_rate_at(0) == 1.0 and linear.learning_rate_at(5) == pytest.approx(0.5)
    cosine = TrainConfig(
        env_id="a", log_dir="b", n_steps=10, learning_rate=1.0, lr_schedule=LRSchedule.COSINE
    )
    assert cosine.learning_rate_at(5) == pytest.approx(0.5) and cosine.learning_rate_at(9) < 0.05


# ------------------------------------------------------------------------------------------ advantages


def test_advantages_are_group_centred_and_constant_groups_flagged() -> None:
    result = compute_advantages([1.0, 0.0, 0.0, 1.0])
    assert result.advantages_G == [0.5, -0.5, -0.5, 0.5] and not result.constant
    scaled = compute_advantages([1.0, 0.0, 0.0, 1.0], scale_by_std=True)
    assert scaled.advantages_G == pytest.approx([1.0, -1.0, -1.0, 1.0])
    assert compute_advantages([0.3, 0.3, 0.3]).constant


# ------------------------------------------------------------------------------------------ datums


def test_three_turn_trajectory_merges_extending_turns_and_splits_the_rest() -> None:
    trajectory = _traj(
        _turn([1, 2, 3], [4, 5], [-0.1, -0.2]),
        _turn([1, 2, 3, 4, 5, 6, 7], [8], [-0.3]),  # extends turn 0: merged
        _turn([9, 10], [11, 12], [-0.4, -0.5], done=True, reward=1.0),  # does not: new datum
    )
    sequences = merge_turns(trajectory)
    assert [s.tokens_T for s in sequences] == [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12]]
    first, second = trajectory_to_datums(trajectory, advantage=0.5, group_index=3)
    assert first.datum.model_input.to_ints() == [1, 2, 3, 4, 5, 6, 7]
    inputs = first.datum.loss_fn_inputs
    assert inputs["target_tokens"].to_numpy().tolist() == [2, 3, 4, 5, 6, 7, 8]
    assert first.mask_T.tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert inputs["logprobs"].to_numpy() == pytest.approx([0, 0, -0.1, -0.2, 0, 0, -0.3])
    assert inputs["advantages"].to_numpy() == pytest.approx([0, 0, 0.5, 0.5, 0, 0, 0.5])
    assert second.datum.model_input.to_ints() == [9, 10, 11]
    assert second.datum.loss_fn_inputs["target_tokens"].to_numpy().tolist() == [10, 11, 12]
    assert second.mask_T.tolist() == [0, 1, 1] and second.group_index == 3
    assert set(inputs) == {"target_tokens", "logprobs", "advantages"}


def test_datums_carry_cookbook_style_provenance_and_each_loss_gets_its_inputs() -> None:
    turns = [
        _turn([1, 2, 3], [4, 5], [-0.1, -0.2]),
        _turn([1, 2, 3, 4, 5, 6, 7], [8], [-0.3]),
        _turn([9, 10], [11, 12], [-0.4, -0.5], done=True, reward=1.0),
    ]
    for turn, name in zip(turns, ["a", "b", "c"], strict=True):
        turn.ac.sequence_id = name
    first, second = trajectory_to_datums(_traj(*turns), advantage=0.5, group_index=0)
    # tokens 1 2 3 | 4 5 | 6 7 | 8: a's prompt, a's reply, b's prompt positions 5-6, b's reply
    assert first.datum.model_input_spans == [
        tinker.PromptProvenanceSpan(sequence_id="a", offset=0, length=3),
        tinker.SampledProvenanceSpan(sequence_id="a", length=2),
        tinker.PromptProvenanceSpan(sequence_id="b", offset=5, length=2),
    ]
    assert first.datum.loss_fn_input_spans == [
        tinker.PromptProvenanceSpan(sequence_id="a", offset=1, length=2),
        tinker.SampledProvenanceSpan(sequence_id="a", length=2),
        tinker.PromptProvenanceSpan(sequence_id="b", offset=5, length=2),
        tinker.SampledProvenanceSpan(sequence_id="b", length=1),
    ]
    assert second.datum.loss_fn_input_spans == [
        tinker.PromptProvenanceSpan(sequence_id="c", offset=1, length=1),
        tinker.SampledProvenanceSpan(sequence_id="c", length=2),
    ]
    ce = loss_datum(first, PolicyLoss.CROSS_ENTROPY).loss_fn_inputs
    assert set(ce) == {"target_tokens", "weights"}
    assert ce["weights"].to_numpy() == pytest.approx([0, 0, 0.5, 0.5, 0, 0, 0.5])
    gspo = loss_datum(first, PolicyLoss.GSPO).loss_fn_inputs
    assert gspo["sequence_ratio_mask"].to_numpy().tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert loss_datum(first, PolicyLoss.STABLE_REINFORCE).loss_fn_input_spans is not None
    turns[1].ac.sequence_id = None  # a reply without an id: no provenance for its datum
    unnamed, _ = trajectory_to_datums(_traj(*turns), advantage=0.5, group_index=0)
    assert unnamed.datum.loss_fn_input_spans is None
    with pytest.raises(ValueError, match="sequence_id"):
        loss_datum(unnamed, PolicyLoss.STABLE_REINFORCE)


def test_every_policy_loss_has_its_sdk_name() -> None:
    """forward_backward gets the SDK's LossFnType for each loss: the enum's own value, for all of them."""
    sdk_names = set(typing.get_args(tinker.types.LossFnType))
    for loss in PolicyLoss:
        assert loss.sdk_name == loss.value
        assert loss.sdk_name in sdk_names


def test_twenty_turn_extending_game_is_one_linear_datum() -> None:
    ob: list[int] = [1]
    turns = []
    for turn in range(20):
        turns.append(_turn(list(ob), [100 + turn], [-1.0], done=turn == 19))
        ob = [*ob, 100 + turn, 7, 7]
    datums = trajectory_to_datums(_traj(*turns), 1.0, 0)
    assert len(datums) == 1
    assert datums[0].datum.model_input.length == 1 + 20 + 2 * 19 - 1
    assert datums[0].n_action_tokens == 20


def test_actions_without_logprobs_are_rejected_with_a_reason() -> None:
    bad = Trajectory(
        [Transition(tinker.ModelInput.from_ints([1]), TokensWithLogprobs([2]), 1.0, True)],
        tinker.ModelInput.empty(),
    )
    with pytest.raises(ValueError, match="logprobs"):
        trajectory_to_datums(bad, 1.0, 0)


def test_assemble_drops_constant_groups() -> None:
    def group(rewards: list[float]) -> TrajectoryGroup:
        trajs = [_traj(_turn([1, 2], [3], [-0.5], done=True, reward=r)) for r in rewards]
        return TrajectoryGroup(trajs, [0.0] * len(rewards), [{} for _ in rewards])

    batch = assemble_batch([group([1.0, 0.0]), group([1.0, 1.0]), group([0.0, 1.0, 1.0])], scale_by_std=False)
    assert batch.n_groups_used == 2 and batch.n_groups_constant == 1
    assert [d.group_index for d in batch.datums_D] == [0, 0, 1, 1, 1]
    assert batch.datums_D[0].datum.loss_fn_inputs["advantages"].to_numpy()[-1] == pytest.approx(0.5)


# ------------------------------------------------------------------------------------------ files


def test_checkpoint_log_skips_a_torn_line(tmp_path: Path) -> None:
    log = CheckpointLog(tmp_path / "checkpoints.jsonl")
    log.append(CheckpointRecord(2, "/s/2", "/p/2"))
    log.append(CheckpointRecord(4, "/s/4", "/p/4"))
    with log.path.open("a") as f:
        f.write('{"step": 6, "state_pa')
    assert log.last() == CheckpointRecord(4, "/s/4", "/p/4")
    assert read_metrics(tmp_path / "missing.jsonl") == []


def test_reward_curve_never_joins_test_points() -> None:
    """Issue 15.18: test reward is measured on evaluation steps only; a line between them would
    suggest measurements in between."""
    import matplotlib.pyplot as plt

    from envsuite.trainers import reward_curve_figure

    rows = [{"step": s, "reward/mean": 0.1 * s, "success": 0.05 * s} for s in range(6)]
    rows[0]["test/reward/mean"] = 0.2
    rows[5]["test/reward/mean"] = 0.6
    fig = reward_curve_figure(rows, "t")
    try:
        lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
        test = next(line for label, line in lines.items() if label.startswith("test reward"))
        assert list(test.get_xdata()) == [0, 5]
        assert test.get_linestyle() == "None" and test.get_marker() not in ("", "None", None)
        train = next(line for label, line in lines.items() if label.startswith("train reward"))
        assert train.get_linestyle() == "-"
    finally:
        plt.close(fig)


def test_transcripts_show_control_characters_as_escapes() -> None:
    """Issue 15.5: a reply holding an ESC sequence cannot clear the terminal of whoever cats the file."""
    import tinker

    from envsuite.core import StopReason, TokensWithLogprobs, Trajectory, Transition
    from envsuite.models import get_tokenizer
    from envsuite.trainers import render_trajectory

    tokenizer = get_tokenizer("tiny-random")
    reply = tokenizer.encode("hi \x1b[2J\x1b]0;pwned\x07 \u202eexe", add_special_tokens=False)
    ob = tinker.ModelInput.from_ints(tokenizer.encode("Question?", add_special_tokens=False))
    transition = Transition(
        ob=ob,
        ac=TokensWithLogprobs(tokens=reply, maybe_logprobs=None),
        reward=0.0,
        episode_done=True,
        logs={"reply": "hi \x1b[31mred"},
        stop_reason=StopReason.COMPLETED,
    )
    text = render_trajectory(Trajectory([transition], ob), tokenizer, "t")
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text and "\\x1b[31mred" in text and "\\u202e" in text

"""What a documented learning result needs from the trainer: presets and config files, per-episode
held-out records with bootstrap CIs, env metrics per step, and the match command."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from envsuite.registration import registry
from envsuite.trainers import (
    ConfigError,
    TrainConfig,
    compare_held_out,
    list_presets,
    load_config_file,
    load_preset,
    mean_ci,
    read_eval_rows,
    read_metrics,
    resolve_run_envs,
    run_training,
)
from tests.test_trainer_run import TOY_ID, register_toy


@pytest.fixture(autouse=True)
def _toy_env() -> Iterator[None]:
    register_toy()
    yield
    registry.unregister(TOY_ID)


def _parser() -> argparse.ArgumentParser:
    from envsuite.cli._train_cmd import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    return parser


def _config_of(*argv: str) -> TrainConfig:
    from envsuite.cli._train_cmd import config_from_args

    config: TrainConfig = config_from_args(_parser().parse_args(["train", *argv]))
    return config


def test_mean_ci_is_seeded_and_covers_the_mean() -> None:
    values = [0.0] * 30 + [1.0] * 10
    first, second = mean_ci(values), mean_ci(values)
    assert first == second and first.mean == 0.25 and first.n == 40
    assert 0.1 < first.low < 0.25 < first.high < 0.4
    assert mean_ci([1.0] * 5).low == mean_ci([1.0] * 5).high == 1.0
    wider = mean_ci(values, confidence=0.99)
    assert wider.low <= first.low and wider.high >= first.high
    with pytest.raises(ValueError):
        mean_ci([])


def test_every_shipped_preset_is_a_valid_config_for_a_catalog_env() -> None:
    names = list_presets()
    assert len(names) >= 5
    for name in names:
        preset = load_preset(name)
        config = preset.config()
        config.validate()
        assert config.log_dir == f"runs/{name}"
        for env in resolve_run_envs(config):  # one env, or a mix: each env's kwargs are checked
            env.spec.resolve_kwargs(env.kwargs)
        assert preset.info.description, name
    with pytest.raises(ConfigError, match="no preset named"):
        load_preset("no-such-preset")


def test_cli_flags_override_a_preset_and_the_env_must_match(tmp_path: Path) -> None:
    name = list_presets()[0]
    preset = load_preset(name)
    env_id = str(preset.values["env_id"])
    config = _config_of(env_id, "--preset", name, "--steps", "3", "--log-dir", str(tmp_path / "x"))
    assert config.n_steps == 3 and config.log_dir == str(tmp_path / "x")
    assert config.learning_rate == preset.config().learning_rate
    assert _config_of("--preset", name) == preset.config()
    with pytest.raises(ConfigError, match="not arithmetic"):
        _config_of("arithmetic", "--preset", name)
    with pytest.raises(ConfigError, match="ENV_ID"):
        _config_of()
    # Without a preset, flags and TrainConfig defaults work as before.
    plain = _config_of("arithmetic", "--lr", "0.001")
    assert plain == TrainConfig(env_id="arithmetic", log_dir="runs/arithmetic", learning_rate=0.001)
    assert plain.train_unembed and not _config_of("arithmetic", "--no-unembed-lora").train_unembed
    assert not plain.scale_advantages_by_std
    assert _config_of("arithmetic", "--std-advantages").scale_advantages_by_std


def test_config_files_load_from_toml_and_json_and_say_what_is_wrong(tmp_path: Path) -> None:
    toml = tmp_path / "mine.toml"
    toml.write_text(
        'env_id = "arithmetic_easy"\nn_steps = 7\n[env_kwargs]\ndigits = 1\n'
        '[preset]\ndescription = "mine"\nquantity = "correct"\n'
    )
    preset = load_config_file(toml)
    assert preset.info.quantity == "correct" and preset.config().env_kwargs == {"digits": 1}
    assert _config_of("--config", str(toml), "--env-arg", "n_terms=3").env_kwargs == {
        "digits": 1,
        "n_terms": 3,
    }
    as_json = tmp_path / "mine.json"
    as_json.write_text(json.dumps({"env_id": "arithmetic", "group_size": 1}))
    with pytest.raises(ConfigError, match="group_size"):
        load_config_file(as_json)
    broken = tmp_path / "broken.toml"
    broken.write_text("env_id = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config_file(broken)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('env_id = "arithmetic"\nlearning_rat = 0.1\n')
    with pytest.raises(ConfigError, match="learning_rat"):
        load_config_file(unknown)


def test_held_out_episodes_are_recorded_paired_and_compared(tmp_path: Path) -> None:
    config = TrainConfig(
        env_id=TOY_ID,
        log_dir=str(tmp_path / "run"),
        model="tiny-random",
        n_steps=6,
        batch_size=4,
        group_size=8,
        max_tokens=1,
        learning_rate=0.1,
        lora_rank=8,
        save_every=3,
        eval_every=3,
        n_test_groups=12,
    )
    run_training(config, show_progress=False)
    rows = read_eval_rows(Path(config.log_dir))
    assert sorted({r["step"] for r in rows}) == [0, 3, 5]  # type: ignore[type-var]
    assert sorted(r["index"] for r in rows if r["step"] == 0) == list(range(12))  # type: ignore[type-var]
    first = next(r for r in rows if r["step"] == 0)
    assert first["metrics"]["correct"] in (0.0, 1.0)  # type: ignore[index]
    metrics = read_metrics(Path(config.log_dir) / "metrics.jsonl")
    assert "test/env/correct" in metrics[0] and "env/correct" in metrics[0]
    comparison = compare_held_out(config.log_dir, "correct")
    assert (comparison.before_step, comparison.after_step) == (0, 5)
    assert comparison.before.mean == pytest.approx(float(metrics[0]["test/success"]))  # type: ignore[arg-type]
    assert comparison.change.mean == pytest.approx(comparison.after.mean - comparison.before.mean)
    assert comparison.change.low <= comparison.change.mean <= comparison.change.high
    assert "correct:" in str(comparison)
    transcripts = Path(config.log_dir) / "transcripts"
    for step in (0, 5):
        held_out = (transcripts / f"test_step{step:05d}_group00_member00.md").read_text()
        assert held_out.startswith(f"# held-out step {step}, group 0") and "Policy reply" in held_out
    # Resuming from the step-3 checkpoint redoes later evaluations without duplicating them.
    longer = TrainConfig.from_dict({**config.to_dict(), "n_steps": 7})
    (Path(config.log_dir) / "checkpoints.jsonl").write_text(
        (Path(config.log_dir) / "checkpoints.jsonl").read_text().splitlines()[0] + "\n"
    )
    run_training(longer, show_progress=False)
    steps = [r["step"] for r in read_eval_rows(Path(config.log_dir))]
    assert sorted(set(steps)) == [0, 3, 6] and len(steps) == 36  # type: ignore[type-var]


def test_match_command_plays_two_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from envsuite.cli._main import main

    out = tmp_path / "games.jsonl"
    code = main(
        ["match", "tictactoe_easy", "--a", "tiny-random", "--b", "tiny-random", "--games", "2",
         "--max-tokens", "4", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "A scores" in printed and "over 2 games" in printed
    games = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["seat_a"] for g in games] == [0, 1] and all(g["score_a"] in (0.0, 0.5, 1.0) for g in games)


def test_results_run_trains_self_play_summarizes_and_matches_the_base_model(tmp_path: Path) -> None:
    from envsuite.cli._results_cmd import run_one, summary_markdown
    from envsuite.trainers import parse_preset

    preset = parse_preset(
        "tiny-selfplay",
        'env_id = "tictactoe_selfplay"\nmodel = "tiny-random"\nn_steps = 2\nbatch_size = 1\ngroup_size = 4\n'
        "max_tokens = 3\nlora_rank = 4\nlearning_rate = 0.01\neval_every = 1\nn_test_groups = 3\n"
        'save_every = 2\n[preset]\ndescription = "tiny"\nquantity = "win+draw"\nmatch_games = 2\n',
    )
    summary = run_one(preset, tmp_path, {}, show_progress=False)
    rows = read_metrics(tmp_path / "tiny-selfplay" / "metrics.jsonl")
    # Self-play: the group holds both seats of two games, so every step plays 4 episodes.
    assert [r["episodes"] for r in rows] == [4, 4] and "test/env/win" in rows[0]
    assert summary["steps"] == 2 and set(summary["held_out"]) == {"win+draw", "reward"}
    assert summary["held_out"]["win+draw"]["before"]["n"] == 3
    assert summary["match"]["games"] == 2 and summary["match"]["b"] == "tiny-random"
    assert "--preset tiny-selfplay" in summary["command"]
    text = summary_markdown(summary)
    assert "held-out win+draw (n=3)" in text and "trained vs base model, 2 games" in text
    again = run_one(preset, tmp_path, {}, show_progress=False)
    assert again["train_seconds"] == summary["train_seconds"] and again["match"] == summary["match"]


def test_a_run_with_a_policy_per_role_compares_each_policy_on_its_own_episodes(tmp_path: Path) -> None:
    """Rows of a policy-per-role run name the policy that played them: ``compare_held_out(policy=...)``
    keeps that policy's episodes, and ``envsuite results`` reports each policy apart."""
    from envsuite.cli._results_cmd import _held_out_by_env

    rows = [
        {"step": step, "index": index, "reward": reward, "stop": "completed", "metrics": {"win": reward}}
        | {"seat": index % 2, "policy": ("describer", "picker")[index % 2]}
        for step, rewards in ((0, (0.0, 1.0, 0.0, 0.0)), (9, (1.0, 1.0, 1.0, 0.0)))
        for index, reward in enumerate(rewards)
    ]
    (tmp_path / "eval_episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    describer = compare_held_out(tmp_path, "reward", policy="describer")
    picker = compare_held_out(tmp_path, "reward", policy="picker")
    assert (describer.before.mean, describer.after.mean, describer.change.n) == (0.0, 1.0, 2)
    assert (picker.before.mean, picker.after.mean, picker.change.mean) == (0.5, 0.5, 0.0)
    assert compare_held_out(tmp_path, "reward").after.n == 4  # without a policy: every seat's episodes
    by_policy = _held_out_by_env(tmp_path, "win")
    assert sorted(by_policy) == ["policy:describer", "policy:picker"]
    assert by_policy["policy:describer"]["win"]["change"]["mean"] == 1.0

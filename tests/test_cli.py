"""The ``envsuite`` command as a user meets it: help, list, show and play (real catalog, tiny model)."""

from __future__ import annotations

import json
import sys

import pytest

from envsuite import RendererConfig, make_env
from envsuite.cli import main
from envsuite.games.multiagent import SeatEnv
from envsuite.rollouts import do_single_rollout
from tests.conftest import TEST_MODEL


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


# -- play (issue 15.10) ----------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["tictactoe", "chess"])
async def test_random_policy_plays_only_legal_moves(env_id: str) -> None:
    from envsuite.cli._policies import build_policy  # the CLI's own policy (no public home elsewhere)
    from envsuite.core import StopReason

    for seed in range(4):
        env = make_env(env_id, seed=seed, model=TEST_MODEL, max_turns=40)
        assert isinstance(env, SeatEnv)
        policy = build_policy(
            "random",
            renderer=RendererConfig(model_name=TEST_MODEL),
            max_tokens=32,
            temperature=1.0,
            seed=seed,
            legal_moves=env.legal_moves,
        )
        trajectory = await do_single_rollout(policy, env)
        assert all("invalid_reason" not in t.logs for t in trajectory.transitions), seed
        final = trajectory.transitions[-1]
        assert final.metrics["invalid_moves"] == 0
        assert final.stop_reason is not StopReason.INVALID_MOVE


def test_play_shows_messages_not_template_markers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(
        ["play", "tictactoe", "--policy", "random", "--model", TEST_MODEL, "--seed", "3"], capsys
    )
    assert code == 0
    assert "<|im_start|>" not in out and "<|im_end|>" not in out
    assert "Legal moves" in out and "episode over" in out
    assert "invalid_moves': 0.0" in out
    code, raw = _run(
        ["play", "tictactoe", "--policy", "random", "--model", TEST_MODEL, "--seed", "3", "--raw"], capsys
    )
    assert code == 0 and "<|im_start|>" in raw


def test_play_shows_control_characters_as_escapes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15.5: a reply holding an ESC sequence is shown as ``\\x1b[2J``, never sent to the terminal."""
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("7 \x1b[2J\x1b]0;pwned\x07 \u202egnp.exe\n"))
    code, out = _run(["play", "arithmetic", "--policy", "human", "--model", TEST_MODEL], capsys)
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b[2J" in out and "\\u202e" in out


# -- list (issue 15.13) ----------------------------------------------------------------------------


def test_list_never_wraps_or_cuts_ids_at_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from envsuite import registry

    monkeypatch.setenv("COLUMNS", "80")
    code, out = _run(["list"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    first_cells = {line.split()[0] for line in lines if line.strip()}
    for env_spec in registry.all_specs():
        assert env_spec.id in first_cells, env_spec.id


def test_list_json_is_complete_and_single_player_games_have_no_opponent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from envsuite import registry

    code, out = _run(["list", "--json"], capsys)
    assert code == 0
    listed = json.loads(out)
    assert [e["id"] for e in listed] == [s.id for s in registry.all_specs()]
    by_id = {e["id"]: e for e in listed}
    assert by_id["arithmetic-v0"]["status"] == "available" and by_id["arithmetic-v0"]["reason"] is None
    assert any(e["status"] == "unavailable" and e["reason"] for e in listed)
    single = by_id["textarena/2048-v0"]["description"]
    assert "opponent" not in single and "single-player" in single
    assert "opponent" in by_id["textarena/Alquerque-v0"]["description"]


def test_list_and_show_escape_control_characters(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15.5: a plugin's description or reason cannot drive the terminal through list/show."""
    import envsuite
    from envsuite import registry

    envsuite.register(
        "hostile/echo-v0",
        "tests.support.toy_envs:EchoNumberEnv",
        description="echo \x1b[2J\x1b[31mred",
        unavailable="needs \x1b]0;title\x07 a key",
    )
    try:
        for args in (["list", "--namespace", "hostile"], ["show", "hostile/echo-v0"]):
            code, out = _run(args, capsys)
            assert code == 0 and "\x1b" not in out and "\x07" not in out
            assert "\\x1b[2J" in out
    finally:
        registry.unregister("hostile/echo-v0")


def test_top_level_help_is_for_users(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15.16: `envsuite --help` explains the tool, not the module's implementation."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "dispatch" not in out and "Argument parsing" not in out
    assert "envsuite list" in out and "envsuite demo" in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_train_loss_flag_lists_every_builtin_loss(capsys: pytest.CaptureFixture[str]) -> None:
    """`envsuite train --loss` takes the SDK's seven built-in losses (and refuses anything else)."""
    import typing

    from tinker.types import LossFnType

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    builtin = [name for name in typing.get_args(LossFnType) if name != "custom"]
    assert len(builtin) == 7 and all(name in out for name in builtin)
    with pytest.raises(SystemExit):
        main(["train", "arithmetic", "--loss", "grpo"])
    assert "invalid choice" in capsys.readouterr().err

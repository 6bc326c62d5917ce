"""The ``envsuite`` command as a user meets it: help, list, show and play (real catalog, tiny model)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

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


# -- one command layer (issue 31.2) ----------------------------------------------------------------


def test_every_command_is_a_module_with_add_parser_and_run() -> None:
    import importlib

    from envsuite.cli import COMMANDS, build_parser

    for name, module_name in COMMANDS.items():
        assert module_name == f"envsuite.cli._{name.replace('-', '_')}_cmd"
        module = importlib.import_module(module_name)
        assert callable(module.add_parser) and callable(module.run), name
    parser = build_parser()
    listed = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert list(listed) == list(COMMANDS)


def test_list_loads_no_model_or_eval_library() -> None:
    """Only the command that runs is imported: `envsuite list` stays free of torch and inspect_ai."""
    code = (
        "import contextlib, io, sys\n"
        "from envsuite.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['list']) == 0\n"
        "print(sorted(m for m in ('torch', 'transformers', 'inspect_ai', 'tinker') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_flag_defaults_come_from_the_config_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's flags read BenchConfig (and the executor's config), the demo's DemoPlan: change a
    config's default and the flag follows."""
    import dataclasses

    from envsuite.cli import _demo_cmd, build_parser
    from envsuite.cli._demo_pipeline import DemoPlan
    from envsuite.evals import BenchConfig
    from envsuite.executors import ExecutorConfig

    args = build_parser().parse_args(["bench", "--model", TEST_MODEL])
    config = BenchConfig(model=TEST_MODEL)
    for name in ("episodes", "seed", "max_tokens", "temperature", "partner", "log_root", "db", "label"):
        assert getattr(args, name) == getattr(config, name), name
    assert (args.episode_timeout_s, args.runner, tuple(args.envs)) == (
        config.episode_timeout_s,
        config.runner,
        config.env_ids,
    )
    assert (args.executor, args.workers, args.ray_address) == (
        ExecutorConfig().kind.value,
        ExecutorConfig().workers,
        ExecutorConfig().ray_address,
    )
    monkeypatch.setattr(BenchConfig.__dataclass_fields__["max_tokens"], "default", 77)
    assert build_parser().parse_args(["bench", "--model", TEST_MODEL]).max_tokens == 77

    @dataclasses.dataclass(frozen=True)
    class OtherPlan(DemoPlan):
        train_steps: int = 5
        episodes: int = 3

    demo = build_parser().parse_args(["demo"])
    plan = DemoPlan()
    assert (demo.model, demo.out_dir, demo.train_steps, demo.bench_episodes, demo.seed) == (
        plan.model,
        plan.out_dir,
        plan.train_steps,
        plan.episodes,
        plan.seed,
    )
    monkeypatch.setattr(_demo_cmd, "DemoPlan", OtherPlan)
    demo = build_parser().parse_args(["demo"])
    assert (demo.train_steps, demo.bench_episodes) == (5, 3)


# -- errors: a user's mistake is one line, a fault shows its traceback (issue 32.2) -------------------


def test_a_user_mistake_is_one_line_and_a_fault_shows_its_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import envsuite
    from envsuite import registry

    code, out = _run(["show", "nosuch"], capsys)
    assert code == 2 and out.strip() == (
        "envsuite show: error: no env registered as 'nosuch'. Run `envsuite list` to see the catalog."
    )
    # A value the env refuses (its constructor's ValueError) is the user's mistake too.
    code, out = _run(["play", "tictactoe", "--env-arg", "max_turns=-1", "--model", TEST_MODEL], capsys)
    assert code == 2 and out.strip() == (
        "envsuite play: error: tictactoe-v0 refused its keyword arguments (max_turns=-1): max_turns must be >= 1"
    )
    for debug in (["show", "nosuch", "--debug"], ["--debug", "show", "nosuch"]):
        code, out = _run(debug, capsys)
        assert code == 2 and "Traceback" in out and "UnknownEnvError" in out
        assert out.strip().splitlines()[-1].startswith("envsuite show: error: no env registered")
    envsuite.register("scratch/buggy-v0", "tests.support.flaky_env:BuggyEnv")
    try:
        code, out = _run(["show", "scratch/buggy-v0"], capsys)
    finally:
        registry.unregister("scratch/buggy-v0")
    # An IndexError is a LookupError, which the command once printed as "error: pop from an empty deque".
    assert code == 1 and "Traceback (most recent call last)" in out and "flaky_env.py" in out
    assert "envsuite show: unexpected IndexError: pop from an empty deque" in out
    assert "bug in envsuite" in out


def test_user_errors_are_usage_errors_and_keep_their_old_types() -> None:
    import envsuite
    from envsuite.evals import BenchConfig
    from envsuite.leaderboard import StoreURLError, parse_url
    from envsuite.trainers import ConfigError

    with pytest.raises(envsuite.UnknownEnvError) as unknown:
        envsuite.spec("nosuch")
    assert isinstance(unknown.value, envsuite.UsageError) and isinstance(unknown.value, LookupError)
    with pytest.raises(envsuite.EnvKwargsError) as kwargs:
        make_env("arithmetic", model=TEST_MODEL, no_such_kwarg=1)
    assert isinstance(kwargs.value, envsuite.UsageError) and isinstance(kwargs.value, TypeError)
    with pytest.raises(envsuite.UsageError, match="episodes must be >= 1"):
        BenchConfig(model=TEST_MODEL, episodes=0)
    with pytest.raises(StoreURLError):
        parse_url("mysql://x/y")
    assert issubclass(ConfigError, envsuite.UsageError) and issubclass(envsuite.UsageError, ValueError)


# -- python -m envsuite (issue 32.5) -------------------------------------------------------------------

_ALLOCATOR_PROBE = """\
import atexit, os, sys


def _report() -> None:
    with open("/proc/self/maps") as maps:
        mapped = "libjemalloc" in maps.read()
    sys.stderr.write(f"allocator probe: jemalloc={mapped} restarted={os.environ.get('ENVSUITE_JEMALLOC_TRIED')}\\n")


atexit.register(_report)
"""


def test_python_dash_m_envsuite_is_the_envsuite_command(tmp_path: Path) -> None:
    """Same output and exit codes as the console script, restarted under jemalloc like it."""
    from envsuite.engine import jemalloc_path

    (tmp_path / "sitecustomize.py").write_text(_ALLOCATOR_PROBE)  # reports from the process that ends
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LD_PRELOAD", "MALLOC_CONF", "ENVSUITE_JEMALLOC_TRIED")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env.pop("ENVSUITE_ALLOCATOR", None)
    commands = {
        "script": [str(Path(sys.executable).parent / "envsuite")],
        "module": [sys.executable, "-m", "envsuite"],
    }
    runs = {}
    for how, command in commands.items():
        for args in (["list", "--json"], ["show", "nosuch"]):
            done = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=120)
            runs[how, args[0]] = done
    listed, missing = runs["module", "list"], runs["module", "show"]
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["id"]
    assert listed.stdout == runs["script", "list"].stdout
    assert missing.returncode == runs["script", "show"].returncode == 2
    assert "envsuite show: error: no env registered as 'nosuch'" in missing.stderr
    restarted = (
        "jemalloc=True restarted=1" if jemalloc_path() is not None else "jemalloc=False restarted=None"
    )
    for done in runs.values():
        assert f"allocator probe: {restarted}" in done.stderr, done.stderr


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

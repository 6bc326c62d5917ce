"""How the ``envsuite`` command meets a user's mistakes and stops (issue 53): closed input and Ctrl-C at
``play --policy human``, an unknown id at ``check``, a bad choice of any enum-valued flag, and train
settings that contradict one another. Where the finding is about the process (stdin, signals, what
the terminal shows), the real ``envsuite`` command runs as a subprocess.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envsuite.cli import main
from envsuite.trainers import ConfigError, Curriculum, TrainConfig
from tests.conftest import TEST_MODEL

ENVSUITE = str(Path(sys.executable).parent / "envsuite")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
PLAY_HUMAN = [ENVSUITE, "play", "tictactoe", "--policy", "human", "--model", TEST_MODEL]


def _envsuite(args: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVSUITE, *args], input=stdin, env=ENV, capture_output=True, text=True, timeout=300
    )


# -- play --policy human: the end of the input, and Ctrl-C --------------------------------------------


@pytest.mark.parametrize("moves", ["", "[4]\n"], ids=["no-input", "one-move-then-eof"])
def test_play_human_ends_cleanly_when_the_input_closes(moves: str) -> None:
    done = subprocess.run(PLAY_HUMAN, input=moves, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and "bug in envsuite" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "envsuite play: the input ended (end of file) before the episode did: stopped unfinished"
    ]
    assert done.stdout.count("your reply> ") == moves.count("\n") + 1  # each move read, then the end


def _read_until(stream: Any, marker: bytes, seconds: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + seconds
    while marker not in seen:
        assert time.monotonic() < deadline, f"no {marker!r} in {seen[-400:]!r}"
        ready, _, _ = select.select([stream], [], [], 1.0)
        if ready:
            chunk = os.read(stream.fileno(), 65536)
            assert chunk, f"the output ended before {marker!r}: {seen[-400:]!r}"
            seen += chunk
    return seen


def test_play_human_stops_at_the_first_ctrl_c_while_waiting_for_a_reply() -> None:
    """stdin stays open (a person who has not typed yet); one SIGINT ends the process with 130."""
    player = subprocess.Popen(
        PLAY_HUMAN, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        _read_until(player.stdout, b"your reply> ", seconds=300)
        player.send_signal(signal.SIGINT)
        # wait(), not communicate(): that would close stdin, and the end of input would end a read too.
        code = player.wait(timeout=60)  # before the fix: still waiting for a line
        assert player.stderr is not None
        err = player.stderr.read().decode()
    finally:
        if player.poll() is None:
            player.kill()
            player.wait()
        assert player.stdin is not None
        player.stdin.close()
    assert code == 130
    assert err.strip() == "interrupted"


# -- check: an unknown id is one line, exit 2, with close ids -----------------------------------------


def test_check_refuses_an_unknown_id_in_one_line_with_close_ids() -> None:
    done = _envsuite(["check", "tictactoee", "--quick"])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "envsuite check: error: no env registered as 'tictactoee'. Did you mean: tictactoe, "
        "tictactoe_easy, tictactoe-v0? Run `envsuite list` to see the catalog."
    ]
    # An unknown id among good ones is refused before any env is checked.
    done = _envsuite(["check", "arithmetic", "nosuchenv"])
    assert done.returncode == 2 and "conformance of" not in done.stdout
    assert done.stderr.startswith("envsuite check: error: no env registered as 'nosuchenv'.")


# -- enum-valued flags (and every other parse error): one line naming the choices, exit 2 -------------


def test_train_with_an_unknown_loss_is_one_line_naming_the_losses() -> None:
    done = _envsuite(["train", "arithmetic", "--loss", "unknown"])
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("envsuite train: error: argument --loss: invalid choice")
    assert all(loss in lines[0] for loss in ("importance_sampling", "gspo", "stable_reinforce"))


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["bench", "--model", TEST_MODEL, "--runner", "nope"], "'inspect'"),
        (["new", "my-env", "--kind", "nope"], "'multi-turn'"),
        (["train", "arithmetic", "--steps", "many"], "invalid int value"),
        (["bench"], "required: --model"),
        (["nosuchcommand"], "'leaderboard'"),
    ],
)
def test_every_parse_error_is_one_line_and_exit_2(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(args)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert stopped.value.code == 2 and captured.out == ""
    assert len(lines) == 1 and named in lines[0] and "usage:" not in lines[0], lines


# -- train settings that contradict one another -------------------------------------------------------


def test_train_refuses_a_warmup_longer_than_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        ["train", "arithmetic", "--warmup-steps", "100", "--steps", "1", "--log-dir", str(tmp_path / "r")]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "warmup_steps 100 is not shorter than the run" in lines[0]
    assert not (tmp_path / "r").exists()
    TrainConfig(env_id="a", log_dir="b", n_steps=10, warmup_steps=9).validate()  # ends one step early


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"n_steps": 5, "warmup_steps": 5}, "warmup_steps 5 is not shorter"),
        ({"kl_discount_factor": 0.9}, "kl_discount_factor is set but kl_penalty_coef is 0"),
        ({"eval_rungs": [1], "eval_every": 0}, "never evaluates"),
        ({"eval_rungs": [1], "n_test_groups": 0}, "never evaluates"),
        ({"wandb_name": "run-a"}, "no tracker is on"),
        ({"lora_rank": 0, "train_unembed": False}, "lora_rank=0 trains every weight"),
        ({"captured_dir": "caps", "curriculum": Curriculum()}, "curriculum cannot move"),
    ],
)
def test_contradicting_train_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainConfig(env_id="a", log_dir="b", **settings).validate()


def test_serve_env_refuses_to_bind_beyond_loopback() -> None:
    """OpenEnv's protocol carries no key, so ``serve-env`` never opens a port beyond loopback (as
    ``envsuite serve`` and ``serve-sandbox`` do without a key): one line, exit 2, nothing bound."""
    done = _envsuite(["serve-env", "arithmetic", "--host", "0.0.0.0", "--port", "1"])
    assert done.returncode == 2 and "serving" not in done.stdout
    assert done.stderr.strip().splitlines() == [
        "envsuite serve-env: error: binding 0.0.0.0 would expose the env to the network, and OpenEnv's "
        "protocol carries no key: serve on 127.0.0.1 and reach it through an authenticating proxy or an "
        "SSH tunnel"
    ]

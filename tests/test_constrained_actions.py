"""Constrained actions: an env declares the shape of a valid action (``Env.action_constraint``), and a run
with ``RolloutLimits(constrain_actions=True)`` samples each action under it, through the real local
engine and the random-weight ``tiny-random`` model (which, left free, almost never writes a legal move
or a readable call):

* a game seat's action is one of its legal moves: tic-tac-toe played to the end without an invalid move;
* a tool env's action is text or calls of its tools with valid arguments: no unreadable call;
* a policy that cannot take constraints, or a sampler that would drop them, is refused, never ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tinker

from envsuite import make_env
from envsuite.backends.local import LocalSamplingClient, load_sampling_model
from envsuite.chat import ToolCall
from envsuite.cli import main
from envsuite.completers import SamplingTokenCompleter
from envsuite.constraints import ConstraintKind
from envsuite.core import TokenCompleter, TokensWithLogprobs
from envsuite.engine.sampling import GrammarCompiler
from envsuite.envs.tool_use import ToolUseEnv
from envsuite.errors import UsageError
from envsuite.rollouts import RolloutLimits, do_single_rollout
from envsuite.trainers import TrainConfig
from tests.conftest import TEST_MODEL
from tests.support.sandbox import needs_sandbox

VOCAB = 49152
CONSTRAINED = RolloutLimits(max_turns=40, constrain_actions=True)


@pytest.fixture(scope="module")
def client() -> Iterator[LocalSamplingClient]:
    loaded = load_sampling_model(base_model=TEST_MODEL)
    sampler = LocalSamplingClient(loaded.model, loaded.tokenizer, TEST_MODEL)
    yield sampler
    sampler.close()


def _acceptor(client: LocalSamplingClient, constraint: Any) -> Any:
    grammar = GrammarCompiler(client.get_tokenizer(), VOCAB).compile(constraint)

    def accepts(text: str) -> bool:
        row = grammar.row(frozenset())
        for token in client.get_tokenizer().encode(text, add_special_tokens=False):
            row.advance(token)
            if row.failed:
                return False
        return row.accepting

    return accepts


async def test_a_game_seat_plays_only_legal_moves(client: LocalSamplingClient) -> None:
    invalid = {"constrained": 0.0, "free": 0.0}
    for seed in range(3):
        for name, limits in (("constrained", CONSTRAINED), ("free", RolloutLimits(max_turns=40))):
            env = make_env("tictactoe_easy", seed=seed, model=TEST_MODEL)
            constraint = env.action_constraint()
            assert constraint is not None and constraint.kind is ConstraintKind.CHOICE
            policy = SamplingTokenCompleter(client, max_tokens=16, seed=seed)
            trajectory = await do_single_rollout(policy, env, limits)
            invalid[name] += trajectory.transitions[-1].metrics.get("invalid_moves", 0.0)
    assert invalid["constrained"] == 0.0
    assert invalid["free"] > 0  # the same model, free, writes illegal moves


async def test_a_tool_env_allows_text_and_valid_calls_only(client: LocalSamplingClient) -> None:
    env = make_env("tools/calculator", seed=0, model=TEST_MODEL, split="test")
    assert isinstance(env, ToolUseEnv)
    await env.initial_observation()
    constraint = env.action_constraint()
    assert constraint is not None
    accepts = _acceptor(client, constraint)
    call = env.reply_with_calls([ToolCall.create("calculator", '{"expression": "2 + 3"}', "c1")])
    assert accepts(call) and accepts("The answer is 5.")
    assert not accepts(call.replace('"expression"', '"expr"'))  # an argument the schema does not have
    assert not accepts(call.replace('"calculator"', '"calculate"'))  # a tool that does not exist
    # A whole episode under the constraint: every call the model makes is readable.
    policy = SamplingTokenCompleter(client, max_tokens=96, seed=1)
    trajectory = await do_single_rollout(
        policy, make_env("tools/calculator", seed=0, model=TEST_MODEL), CONSTRAINED
    )
    assert "unparsed" not in str(trajectory.transitions[-1].logs.get("calls", ""))


@needs_sandbox
async def test_a_workspace_that_must_act_first_requires_a_call_until_its_first(
    client: LocalSamplingClient,
) -> None:
    """``act_first``: a reply without a call would end a workspace episode before anything changed, so
    until the first call the constraint admits calls only; after it, text (the closing reply) too."""
    env = make_env("workspace/shell_easy", seed=2, model=TEST_MODEL, act_first=True)
    try:
        await env.initial_observation()
        first = _acceptor(client, env.action_constraint())
        call = env.reply_with_calls([ToolCall.create("bash", {"command": "ls"}, "c1")])  # type: ignore[attr-defined]
        assert first(call) and not first("Done.")
        await env.step(client.get_tokenizer().encode(call, add_special_tokens=False))
        after = _acceptor(client, env.action_constraint())
        assert after(call) and after("Done.")
        plain = make_env("workspace/shell_easy", seed=2, model=TEST_MODEL)
        await plain.initial_observation()
        assert _acceptor(client, plain.action_constraint())("Done.")  # by default text may end it at once
        plain.close()  # type: ignore[attr-defined]
    finally:
        env.close()  # type: ignore[attr-defined]


class _Scripted(TokenCompleter):
    async def __call__(
        self, model_input: Any, stop: Any, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        return TokensWithLogprobs(tokens=[28], maybe_logprobs=[0.0])


class _RemoteLike:
    """A sampler with the SDK's ``sample`` but no way to apply a constraint (as the hosted service)."""

    def __init__(self, inner: LocalSamplingClient) -> None:
        self.inner = inner

    def sample(
        self, prompt: tinker.ModelInput, num_samples: int, sampling_params: tinker.SamplingParams
    ) -> Any:
        return self.inner.sample(prompt, num_samples, sampling_params)

    def get_base_model(self) -> str:
        return TEST_MODEL


async def test_policies_that_cannot_constrain_are_refused(client: LocalSamplingClient) -> None:
    env = make_env("tictactoe_easy", seed=0, model=TEST_MODEL)
    with pytest.raises(UsageError, match="cannot sample under a constraint"):
        await do_single_rollout(_Scripted(), env, CONSTRAINED)
    await env.initial_observation()
    with pytest.raises(UsageError, match="does not apply constraints"):
        policy = SamplingTokenCompleter(_RemoteLike(client), max_tokens=8)  # type: ignore[arg-type]
        await policy(tinker.ModelInput.from_ints([1, 2]), [], constraint=env.action_constraint())


def test_play_constrains_actions(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["play", "tictactoe_easy", "--policy", TEST_MODEL, "--constrain-actions", "--max-tokens", "16"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "'invalid_moves': 0.0" in out.replace("\n", " ")
    refused = main(
        ["play", "tictactoe_easy", "--policy", "random", "--model", TEST_MODEL, "--constrain-actions"]
    )
    assert refused == 2 and "cannot sample under a constraint" in capsys.readouterr().err


def test_train_constrains_actions(tmp_path: Path) -> None:
    """``envsuite train --constrain-actions``: the rollouts of a run sample under their envs' constraints
    (no invalid move in any training game), the setting is saved with the run, and it needs the local backend."""
    log_dir = tmp_path / "run"
    args = ["train", "tictactoe_easy", "--model", TEST_MODEL, "--steps", "1", "--batch-size", "2"]
    args += ["--group-size", "2", "--max-tokens", "16", "--constrain-actions", "--log-dir", str(log_dir)]
    assert main(args) == 0
    assert json.loads((log_dir / "config.json").read_text())["constrain_actions"] is True
    metrics = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    invalid = [v for row in metrics for k, v in row.items() if k.endswith("invalid_moves")]
    assert invalid and all(v == 0 for v in invalid)
    with pytest.raises(ValueError, match="constrain_actions"):
        TrainConfig(
            "tictactoe_easy", str(log_dir), model=TEST_MODEL, backend="tinker", constrain_actions=True
        ).validate()

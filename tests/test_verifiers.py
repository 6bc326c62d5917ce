"""verifiers 0.4 both ways (envsuite.adapters.verifiers): the real ``vf-eval`` CLI against ``envsuite serve``."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envsuite.catalog._make import RendererConfig, make_env
from envsuite.core import ProbeExpectation
from envsuite.renderers import reply_to_tokens
from tests.conftest import TEST_MODEL
from tests.test_serve import _free_port, _start_server

pytest.importorskip("verifiers.v1")

from envsuite.adapters.verifiers import EnvsuiteData, replay_return, write_environment_package

VF_EVAL = str(Path(sys.executable).with_name("vf-eval"))
pytestmark = needs_mcp2 = pytest.mark.skipif(
    importlib.util.find_spec("mcp_types") is None,
    reason="verifiers 0.4 imports mcp 2 (it pins mcp==2.0.0); the dev install has mcp<2, which openenv's "
    "fastmcp needs: tests/test_mcp2.py runs this file with make install's mcp 2.3 folder first on the path",
)
ARITHMETIC: dict[str, object] = {"digits": 2, "operations": ["+"], "n_terms": 2, "answer_format": "number"}


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    server = _start_server(port, tmp_path_factory.mktemp("serve-state"), quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.kill()
        server.wait(timeout=30)


def _vf_eval(tmp_path: Path, url: str, env_id: str, *options: str) -> list[dict]:
    """``vf-eval`` on the package written for ``env_id``; its traces (one per episode)."""
    package = write_environment_package(env_id, tmp_path / "packages")
    env = {**os.environ, "PYTHONPATH": f"{package}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    argv = [VF_EVAL, package.name, "--no-push", "-m", TEST_MODEL, "-o", str(tmp_path / "out")]
    argv += ["--client.base-url", url, "--client.api-key-var", "ENVSUITE_TEST_KEY"]
    argv += ["--env.agent.runtime.type", "subprocess", *options]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (traces,) = (tmp_path / "out").rglob("traces.jsonl")
    episodes = [json.loads(line) for line in traces.read_text().splitlines()]
    return [trace for episode in episodes for trace in episode["traces"]]


async def _env_return(env_id: str, seed: int, replies: list[str], **env_kwargs: object) -> float:
    """The env's return for ``replies``, computed here without the adapter."""
    env = make_env(env_id, seed=seed, model=TEST_MODEL, **env_kwargs)
    _observation, stop = await env.initial_observation()  # type: ignore[misc]
    renderer, total = RendererConfig(TEST_MODEL).build(), 0.0
    for reply in replies:
        result = await env.step(reply_to_tokens(renderer, reply, stop))
        total += result.reward
        if result.episode_done:
            break
        stop = result.next_stop_condition
    return total


def _replies(trace: dict) -> list[str]:
    return [node["message"]["content"] for node in trace["nodes"] if node["message"]["role"] == "assistant"]


@needs_mcp2
def test_vf_eval_scores_a_single_turn_catalog_env_with_the_envs_rewards(
    tmp_path: Path, server_url: str
) -> None:
    kwargs = ["--env.taskset.env-kwargs", json.dumps(ARITHMETIC)]
    traces = _vf_eval(tmp_path, server_url, "arithmetic", "-n", "3", "--sampling.max-tokens", "12", *kwargs)
    assert sorted(t["task"]["data"]["seed"] for t in traces) == [0, 1, 2]
    for trace in traces:
        assert not trace["errors"] and len(_replies(trace)) == 1
        seed = trace["task"]["data"]["seed"]
        expected = asyncio.run(_env_return("arithmetic", seed, _replies(trace), **ARITHMETIC))
        assert trace["rewards"]["reward"]["score"] == pytest.approx(expected)
        assert trace["info"]["envsuite"]["return"] == pytest.approx(expected)  # what the harness saw live


@needs_mcp2
def test_vf_eval_plays_a_multi_turn_catalog_env_turn_by_turn(tmp_path: Path, server_url: str) -> None:
    traces = _vf_eval(tmp_path, server_url, "twenty_questions", "-n", "1", "--sampling.max-tokens", "6")
    (trace,) = traces
    replies = _replies(trace)
    assert len(replies) == trace["info"]["envsuite"]["turns"] == 20  # one model call per question
    answers = [n["message"]["content"] for n in trace["nodes"][2::2] if n["message"]["role"] == "user"]
    assert len(answers) == 19 and all(
        re.search(r"\(\d+ questions? left\)", a) for a in answers
    )  # the env's turns went back
    expected = asyncio.run(_env_return("twenty_questions", 0, replies))
    assert trace["rewards"]["reward"]["score"] == pytest.approx(expected)


def test_the_task_reward_replays_the_replies_through_the_tasks_own_episode() -> None:
    async def reference(seed: int) -> str:
        env = make_env("arithmetic", seed=seed, model=TEST_MODEL, **ARITHMETIC)
        await env.initial_observation()
        return next(p.reply for p in env.reward_probes() if p.expect is ProbeExpectation.FULL_MARKS)

    def data(seed: int) -> EnvsuiteData:
        return EnvsuiteData(env_id="arithmetic", seed=seed, model=TEST_MODEL, env_kwargs=ARITHMETIC)

    answers = [asyncio.run(reference(seed)) for seed in (0, 1)]
    assert answers[0] != answers[1]
    assert asyncio.run(replay_return(data(0), [answers[0]])) == 1.0
    assert asyncio.run(replay_return(data(1), [answers[0]])) < 1.0  # another episode's answer
    assert asyncio.run(replay_return(data(0), [])) == 0.0  # no reply, no credit


def test_the_written_package_is_a_verifiers_environment_for_the_env(tmp_path: Path) -> None:
    import importlib

    from verifiers.v1.utils.loaders import default_harness_id, taskset_config_type

    package = write_environment_package("arithmetic", tmp_path)
    sys.path.insert(0, str(package))
    try:
        assert taskset_config_type(package.name)().env_id == "arithmetic"
        assert default_harness_id(package.name) == package.name  # its own harness, not verifiers' bash
    finally:
        sys.path.remove(str(package))
        sys.modules.pop(package.name, None)
        importlib.invalidate_caches()
    shutil.rmtree(package)


# -- installed verifiers environments as catalog envs: verifiers:<taskset id> -----------------------

VF_ENVS = Path(__file__).parent / "support" / "verifiers_envs"  # vf_tiny_sum: a verifiers env package


async def _graded(env_id: str, seed: int, reply: str) -> tuple[float, dict[str, float]]:
    env = make_env(env_id, seed=seed, model=TEST_MODEL)
    _observation, stop = await env.initial_observation()  # type: ignore[misc]
    result = await env.step(reply_to_tokens(RendererConfig(TEST_MODEL).build(), reply, stop))
    assert result.episode_done
    return result.reward, dict(result.metrics)


def test_a_verifiers_taskset_is_a_catalog_env_graded_by_its_own_rewards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(VF_ENVS))
    env = make_env("verifiers:vf_tiny_sum", seed=1, model=TEST_MODEL)
    assert "What is 10 + 25?" in str(env.conversation()[-1]["content"])
    assert asyncio.run(_graded("verifiers:vf_tiny_sum", 1, "35"))[0] == 1.0
    reward, metrics = asyncio.run(_graded("verifiers:vf_tiny_sum", 1, "36"))
    assert reward == 0.0 and metrics["verifiers/reply_chars"] == 2.0  # its @metric comes along
    assert asyncio.run(_graded("verifiers:vf_tiny_sum", 5, "35"))[0] == 1.0  # seed 5 is task 5 % 4 == 1


def test_a_verifiers_taskset_passes_the_conformance_checker(monkeypatch: pytest.MonkeyPatch) -> None:
    from envsuite.testing import check_env

    monkeypatch.syspath_prepend(str(VF_ENVS))
    report = check_env("verifiers:vf_tiny_sum", model=TEST_MODEL)
    assert report.passed, report.render()


def test_an_unknown_verifiers_taskset_is_listed_unavailable_with_the_reason() -> None:
    from envsuite.catalog._make import available_spec
    from envsuite.errors import UsageError

    with pytest.raises(UsageError, match="no_such_vf_env"):
        available_spec("verifiers:no_such_vf_env")

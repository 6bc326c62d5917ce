"""``envsuite serve`` cannot be misused (issue 53): abandoned requests stop, ``max_tokens`` is capped,
the capture grader contacts nothing it was not told to, one large body does not stall the server,
every bad model name or path is the same 404, and errors are clean and in the route's own shape.

A real server on 127.0.0.1 with the tiny test model, real HTTP clients; the disconnect tests run
``envsuite serve`` as a subprocess so its CPU time can be read from ``/proc``. Every load is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tinker
from tinker import types

from envsuite import make_env
from envsuite.serve import ServeConfig
from tests.conftest import TEST_MODEL
from tests.test_serve import _free_port, _start_server, running, sdk

KEY = "tml-abuse-key"
CHAT = {"model": TEST_MODEL, "messages": [{"role": "user", "content": "Count to a million."}]}
CAPTURE = {"X-Envsuite-Capture": "abuse"}


# -- a client that leaves: generation stops --------------------------------------------------------


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_over(pid: int, seconds: float) -> float:
    before = _cpu_s(pid)
    time.sleep(seconds)
    return _cpu_s(pid) - before


@pytest.fixture(scope="module")
def server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """``envsuite serve`` as a process (its CPU is the measure), with a token cap far above what the
    tiny model samples in the few seconds a test waits."""
    port, state = _free_port(), tmp_path_factory.mktemp("state")
    proc = _start_server(port, state, "--max-tokens", "8000", quiet=True)
    base = f"http://127.0.0.1:{port}"
    try:
        # Load the model once (and let the engine go idle) so the measured requests only sample.
        warm = httpx.post(f"{base}/v1/chat/completions", json={**CHAT, "max_tokens": 2}, timeout=600)
        assert warm.status_code == 200, warm.text
        yield base, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _abandon(base: str, body: dict[str, Any], after_s: float) -> None:
    """Send ``body`` and hang up after ``after_s`` seconds without reading the answer."""
    with contextlib.suppress(httpx.TimeoutException), httpx.Client(timeout=after_s) as client:
        if body.get("stream"):
            # httpx's timeout bounds each read, and a stream's chunks keep coming: leave by the clock
            hang_up = time.monotonic() + after_s
            with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
                for _ in response.iter_bytes():
                    if time.monotonic() >= hang_up:
                        break
        else:
            client.post(f"{base}/v1/chat/completions", json=body)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_request_whose_client_left_stops_generating(server_process: tuple[str, int], stream: bool) -> None:
    """max_tokens 100,000,000 and n=8, abandoned after 3 s: the server's CPU goes back to idle (the
    engine's rows are freed) instead of sampling up to the cap for minutes."""
    base, pid = server_process
    time.sleep(3)  # the engine thread of the warm-up has exited
    idle = _cpu_over(pid, 1.0)
    body = {**CHAT, "max_tokens": 100_000_000, "n": 8, "temperature": 1.0, "stream": stream}
    left = threading.Thread(target=_abandon, args=(base, body, 3.0))
    left.start()
    time.sleep(1.0)
    busy = _cpu_over(pid, 1.5)
    left.join()
    time.sleep(1.0)  # a decode step or two, and the cancelled rows leave the batch
    after = _cpu_over(pid, 2.0)
    print(
        f"server CPU s per wall s: idle {idle:.2f}, busy {busy / 1.5:.2f}, 1-3 s after the client left {after / 2:.2f}"
    )
    assert busy > 0.5, "the request never got going: nothing to stop"
    assert after < 0.4, f"the server kept sampling after the client left ({after:.2f} CPU s in 2 s)"
    assert httpx.get(f"{base}/api/v1/healthz", timeout=10).status_code == 200


# -- a server-side cap on max_tokens ---------------------------------------------------------------


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A keyed server whose samples stop at 3 tokens, answering the grader only for one OpenEnv URL."""
    config = ServeConfig(
        state_dir=tmp_path_factory.mktemp("state"),
        max_tokens=3,
        max_body_bytes=32 << 20,
        grader_openenv_urls=("http://127.0.0.1:9/allowed",),
    )
    with running(config, api_key=KEY) as base:
        yield base


def _auth(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}", **extra}


def test_max_tokens_over_the_cap_is_clamped_on_every_route(capped: str) -> None:
    """As vLLM clamps to its operator's max_new_tokens: the reply stops at the cap with finish 'length'."""
    chat = httpx.post(
        f"{capped}/v1/chat/completions",
        json={**CHAT, "max_tokens": 100_000_000, "temperature": 1.0, "seed": 1},
        headers=_auth(),
        timeout=600,
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["completion_tokens"] <= 3
    text = httpx.post(
        f"{capped}/v1/completions",
        json={"model": TEST_MODEL, "prompt": "1, 2, 3,", "max_tokens": 50, "stop": None},
        headers=_auth(),
        timeout=600,
    )
    assert text.status_code == 200, text.text
    assert text.json()["usage"]["completion_tokens"] <= 3
    with sdk(capped, KEY) as service:
        sampler = service.create_sampling_client(base_model=TEST_MODEL).result()
        params = types.SamplingParams(max_tokens=10_000, stop=[])
        response = sampler.sample(types.ModelInput.from_ints([1, 28, 4003]), 2, params).result(timeout=600)
        assert all(len(s.tokens) == 3 and s.stop_reason == "length" for s in response.sequences)
    # The SDK cannot send a NaN (its JSON encoder refuses); a raw client can, and is told plainly.
    raw = (
        b'{"base_model": "%s", "num_samples": 1, "prompt": {"chunks": [{"type": "encoded_text", '
        b'"tokens": [1, 28]}]}, "sampling_params": {"max_tokens": 2, "temperature": NaN}}'
        % TEST_MODEL.encode()
    )
    nan = httpx.post(f"{capped}/api/v1/asample", content=raw, headers=_auth(), timeout=60)
    assert nan.status_code == 400 and "temperature must be a finite number" in nan.json()["error"], nan.text
    # One request may not ask for a million samples (the engine admits a request's samples together).
    many = raw.replace(b'"num_samples": 1', b'"num_samples": 1000000').replace(b"NaN", b"1.0")
    refused = httpx.post(f"{capped}/api/v1/asample", content=many, headers=_auth(), timeout=60)
    assert refused.status_code == 400 and "num_samples 1000000" in refused.json()["error"], refused.text


# -- the capture grader contacts only what the operator listed -------------------------------------


class _Listener:
    """A loopback socket that counts the connections made to it (nothing may connect)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def test_the_capture_grader_refuses_every_unlisted_url_the_same_way(capped: str) -> None:
    listener = _Listener()
    closed = _free_port()
    try:
        targets = [
            f"openenv:http://127.0.0.1:{listener.port}/x",
            f"openenv:http://127.0.0.1:{closed}/x",
            "openenv:file:///etc/passwd",
            "openenv:file:///no/such/file",
            "file:///etc/passwd",
            "http://127.0.0.1:9/allowed",
        ]
        messages = set()
        for env_id in targets:
            graded = httpx.post(
                f"{capped}/v1/episodes/e1/grade",
                json={"env_id": env_id, "seed": 0},
                headers=_auth(**CAPTURE),
                timeout=60,
            )
            assert graded.status_code == 400, graded.text
            error = graded.json()["error"]
            assert error["param"] == "env_id"
            messages.add(error["message"].replace(repr(env_id), "ID"))
        assert len(messages) == 1, messages  # one answer, whatever the target: not a port scanner
        assert listener.connections == 0, "the server connected to a URL nobody listed"
    finally:
        listener.close()
    # A catalog id and the listed URL pass the check (the episode is what is missing then).
    for env_id in ("arithmetic", "openenv:http://127.0.0.1:9/allowed"):
        graded = httpx.post(
            f"{capped}/v1/episodes/e1/grade",
            json={"env_id": env_id, "seed": 0},
            headers=_auth(**CAPTURE),
            timeout=60,
        )
        assert graded.status_code == 404 and graded.json()["error"]["code"] == "episode_not_found"
    unknown = httpx.post(
        f"{capped}/v1/episodes/e1/grade",
        json={"env_id": "arithmetc", "seed": 0},
        headers=_auth(**CAPTURE),
        timeout=60,
    )
    assert unknown.status_code == 400 and "arithmetic" in unknown.json()["error"]["message"]


# -- one large body does not stall the server -------------------------------------------------------


def test_a_large_prompt_does_not_hold_up_other_requests(capped: str) -> None:
    """200,000 empty messages (7 MB) take seconds to parse, render and tokenize; health checks keep
    being answered meanwhile, each in a small fraction of that time (done on the event loop, one health
    check waited nearly the whole request). A prompt whose text cannot fit the context at all is
    refused untokenized."""
    turns = [{"role": ("user", "assistant")[i % 2], "content": ""} for i in range(200_001)]
    answered: list[float] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=300) as client:
            while not done.is_set():
                start = time.monotonic()
                assert client.get(f"{capped}/api/v1/healthz", headers=_auth()).status_code == 200
                answered.append(time.monotonic() - start)
                time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        time.sleep(0.3)
        before, start = len(answered), time.monotonic()
        chat = {**CHAT, "messages": turns}
        big = httpx.post(f"{capped}/v1/chat/completions", json=chat, headers=_auth(), timeout=300)
        took, during = time.monotonic() - start, len(answered) - before
    finally:
        done.set()
        poller.join()
    slowest = max(answered)
    print(f"7 MB conversation: {took:.1f} s; {during} health checks meanwhile, slowest {slowest:.3f} s")
    assert big.status_code == 400 and "context" in big.json()["error"]["message"], big.text[:300]
    assert during >= 3, "the server answered nothing else while it read the large conversation"
    assert slowest < took / 3, "a health check waited behind the large conversation"
    huge = {**CHAT, "messages": [{"role": "user", "content": "hello world " * (5_000_000 // 12)}]}
    refused = httpx.post(f"{capped}/v1/chat/completions", json=huge, headers=_auth(), timeout=300)
    error = _openai_error(refused, 400)
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"


# -- every bad model name or path is the same 404 ---------------------------------------------------


def test_every_bad_model_name_or_path_is_the_uniform_404(capped: str) -> None:
    names = ["m" * 5000, "/" + "d" * 5000, "tinker://../../etc/passwd", "tinker://a/b", "a\x00b", "/etc"]
    for name in names:
        reply = httpx.post(
            f"{capped}/v1/chat/completions", json={**CHAT, "model": name}, headers=_auth(), timeout=60
        )
        assert reply.status_code == 404, (name[:40], reply.text[:300])
        assert reply.json()["error"]["code"] == "model_not_found"
        assert len(reply.text) < 1500, "the name is not echoed whole"
    api = f"{capped}/api/v1"
    for path in ("tinker://../../etc/passwd", "tinker://a/b", "x" * 5000, "/etc"):
        info = httpx.post(f"{api}/weights_info", json={"tinker_path": path}, headers=_auth())
        assert info.status_code == 404 and "no checkpoint" in info.json()["error"], info.text[:300]
    run = httpx.get(f"{api}/training_runs/{'r' * 5000}", headers=_auth())
    assert run.status_code == 404, run.text[:300]
    with sdk(capped, KEY) as service, pytest.raises(tinker.NotFoundError):
        service.create_sampling_client(base_model="b" * 5000).result(timeout=60)


# -- clean messages, each route family in its own error shape --------------------------------------


def _openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error


def test_errors_are_clean_and_in_the_routes_own_shape(capped: str, tmp_path: Path) -> None:
    chat = f"{capped}/v1/chat/completions"
    broken = _openai_error(httpx.post(chat, content=b'{"model": ', headers=_auth()), 400)
    assert broken["message"].startswith("the body is not valid JSON") and "None" not in broken["message"]
    nan = httpx.post(chat, content=b'{"model": "m", "messages": [], "temperature": NaN}', headers=_auth())
    nan_error = _openai_error(nan, 400)
    assert nan_error["param"] == "temperature" and "finite number" in nan_error["message"]
    assert _openai_error(httpx.post(chat, json=CHAT), 401)["code"] == "invalid_api_key"
    assert _openai_error(httpx.get(f"{capped}/v1/no-such-route", headers=_auth()), 404)
    tinker_401 = httpx.get(f"{capped}/api/v1/healthz")
    assert tinker_401.status_code == 401 and tinker_401.json()["category"] == "user"
    orphan = [
        {"role": "user", "content": "hi"},
        {"role": "tool", "content": "4", "tool_call_id": "call_never_made"},
    ]
    tool = _openai_error(httpx.post(chat, json={**CHAT, "messages": orphan}, headers=_auth()), 400)
    assert tool["param"] == "messages[1].tool_call_id" and "call_never_made" in tool["message"]
    with running(ServeConfig(state_dir=tmp_path / "state", max_body_bytes=4096)) as small:
        too_big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
        assert _openai_error(httpx.post(f"{small}/v1/chat/completions", json=too_big), 413)
        tinker_413 = httpx.post(f"{small}/api/v1/create_session", content=b"x" * 5000)
        assert tinker_413.status_code == 413 and "over 4096 bytes" in tinker_413.json()["error"]


def test_the_grader_uses_an_openenv_server_the_operator_listed(tmp_path: Path) -> None:
    """``--grader-openenv URL`` lets the grader play ``openenv:URL``: an arithmetic episode graded
    through ``envsuite serve-env arithmetic`` scores as the catalog's own arithmetic grades it."""
    loaded = importlib.util.spec_from_file_location("openenv_load", Path("bench/openenv_load.py").resolve())
    assert loaded is not None and loaded.loader is not None
    load = importlib.util.module_from_spec(loaded)
    sys.modules.setdefault("openenv_load", load)
    loaded.loader.exec_module(load)
    with load.served("arithmetic", TEST_MODEL) as (env_url, _):
        config = ServeConfig(state_dir=tmp_path / "state", grader_openenv_urls=(env_url,))
        with running(config) as base:
            env = make_env("arithmetic", seed=7, model=TEST_MODEL)
            asyncio.run(env.initial_observation())
            body = {**CHAT, "messages": [dict(m) for m in env.conversation()], "max_tokens": 8, "n": 2}
            headers = {**CAPTURE, "X-Envsuite-Episode": "sum"}
            sampled = httpx.post(f"{base}/v1/chat/completions", json=body, headers=headers, timeout=600)
            assert sampled.status_code == 200, sampled.text
            grades = {}
            for env_id in (f"openenv:{env_url}", "arithmetic"):
                graded = httpx.post(
                    f"{base}/v1/episodes/sum/grade",
                    json={"env_id": env_id, "seed": 7},
                    headers=CAPTURE,
                    timeout=300,
                )
                assert graded.status_code == 200, graded.text
                grades[env_id] = graded.json()["rewards"]
            assert grades[f"openenv:{env_url}"] == grades["arithmetic"]

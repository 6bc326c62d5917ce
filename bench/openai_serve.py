"""Chat completions through ``envsuite serve``'s OpenAI routes against the same requests in process.

    HF_HUB_OFFLINE=1 flock -x /tmp/cpu.lock .venv/bin/python -P bench/openai_serve.py [--clients 16] [--rounds 4]

SmolLM2-135M-Instruct in fp32 on CPU. ``--clients`` concurrent chat clients each send ``--rounds``
requests one after the other (a closed loop, as agents do): a one-line user message rendered with the
model's chat template, at most ``--max-tokens`` new tokens at temperature 1, stopping at the end of the
turn, each request with its own seed. Three sides run the very same requests (same prompt tokens, same
seeds; the sampled tokens agree but for rare flips where batched float arithmetic moves a draw across a
token boundary, so the sides' token counts agree to within about 1%):

* ``in process``: ``LocalSamplingClient.sample`` in this process, ``--clients`` asyncio tasks;
* ``openai``: the ``openai`` SDK's ``AsyncOpenAI`` against ``envsuite serve`` in its own process on
  127.0.0.1 (``/v1/chat/completions``), one task per client;
* ``openai stream``: the same with ``stream=True``, also timing the first content chunk.

Per side: completion tokens per second of wall time (all clients together), p50/p99 request latency,
and for streaming p50/p99 time to first token. With ``--repeats N`` the sides run N times in ABBA
order, so a machine whose load drifts weighs on all alike; the table gives medians over repeats. The
goal: the server's throughput at least 0.9x the in-process client's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -P` leaves bench/ off the path
from _host import cpu_name

MODEL = "smollm2-135m-instruct"
TOPICS = [
    "the sea", "a bicycle", "winter", "coffee", "a library", "rain", "mountains", "a cat",
    "bread", "the moon", "trains", "music", "a garden", "snow", "the city", "a river",
]  # fmt: skip
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Request:
    client: int
    round: int
    prompt: str
    seed: int


@dataclass
class Side:
    """One side's run: per-request latencies, first-token times and completion tokens."""

    name: str
    wall_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    first_token_s: list[float] = field(default_factory=list)
    tokens: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else float("nan")


def requests(clients: int, rounds: int) -> list[list[Request]]:
    return [
        [
            Request(c, r, f"Write one sentence about {TOPICS[(c + r) % len(TOPICS)]}.", 1000 * c + r)
            for r in range(rounds)
        ]
        for c in range(clients)
    ]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


async def run_in_process(client: Any, tokenizer: Any, plan: list[list[Request]], max_tokens: int) -> Side:
    import tinker

    side = Side("in process")

    async def one_client(todo: list[Request]) -> None:
        for request in todo:
            messages = [{"role": "user", "content": request.prompt}]
            prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            tokens = tokenizer.encode(prompt, add_special_tokens=False)
            params = tinker.SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=request.seed)
            started = time.perf_counter()
            response = await client.sample(tinker.ModelInput.from_ints(tokens), 1, params)
            side.latencies_s.append(time.perf_counter() - started)
            side.tokens += len(response.sequences[0].tokens)

    started = time.perf_counter()
    await asyncio.gather(*(one_client(todo) for todo in plan))
    side.wall_s = time.perf_counter() - started
    return side


async def run_openai(url: str, plan: list[list[Request]], max_tokens: int, stream: bool) -> Side:
    import httpx
    import openai

    side = Side("openai stream" if stream else "openai")
    limits = httpx.Limits(max_connections=len(plan) + 4, max_keepalive_connections=len(plan) + 4)
    client = openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="tml-bench", max_retries=0, http_client=httpx.AsyncClient(limits=limits)
    )

    async def one_client(todo: list[Request]) -> None:
        for request in todo:
            messages: Any = [{"role": "user", "content": request.prompt}]
            args: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": max_tokens}
            args |= {"temperature": 1.0, "seed": request.seed}
            started = time.perf_counter()
            if not stream:
                reply = await client.chat.completions.create(**args)
                assert reply.usage is not None
                side.tokens += reply.usage.completion_tokens
            else:
                first = None
                chunks = await client.chat.completions.create(
                    **args, stream=True, stream_options={"include_usage": True}
                )
                async for chunk in chunks:
                    if first is None and chunk.choices and chunk.choices[0].delta.content:
                        first = time.perf_counter() - started
                    if chunk.usage is not None:
                        side.tokens += chunk.usage.completion_tokens
                side.first_token_s.append(first if first is not None else float("nan"))
            side.latencies_s.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one_client(todo) for todo in plan))
    side.wall_s = time.perf_counter() - started
    await client.close()
    return side


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(out: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [str(Path(sys.executable).parent / "envsuite"), "serve", "--port", str(port)]
    server = subprocess.Popen([*command, "--state-dir", str(out / "serve-state")], env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"envsuite serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/api/v1/healthz", timeout=2) as response:
                if response.status == 200:
                    return server, url
        except OSError:
            time.sleep(0.5)
    server.terminate()
    raise TimeoutError("envsuite serve did not start")


def print_table(runs: dict[str, list[Side]]) -> None:
    def median(name: str, pick: Any) -> float:
        return statistics.median(pick(side) for side in runs[name])

    base = median("in process", lambda s: s.tokens_per_s)
    print(
        f"{'':16s} {'tokens/s':>9s} {'x in proc':>9s} {'p50 s':>7s} {'p99 s':>7s} {'TTFT p50':>9s} {'TTFT p99':>9s}"
    )
    for name in runs:
        rate = median(name, lambda s: s.tokens_per_s)
        p50 = median(name, lambda s: _percentile(s.latencies_s, 0.5))
        p99 = median(name, lambda s: _percentile(s.latencies_s, 0.99))
        ttft = [median(name, lambda s, q=q: _percentile(s.first_token_s, q)) for q in (0.5, 0.99)]
        ttft_text = "".join(f" {t:9.3f}" if t == t else f" {'-':>9s}" for t in ttft)
        print(f"{name:16s} {rate:9.1f} {rate / base:9.3f} {p50:7.3f} {p99:7.3f}{ttft_text}")
    tokens = {name: [s.tokens for s in sides] for name, sides in runs.items()}
    print(f"completion tokens per run (the same requests and seeds on every side): {tokens}")
    print("tokens/s is completion tokens over the wall time of all clients; latencies per request")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4, help="requests per client, one after the other")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="runs per side, in ABBA order")
    parser.add_argument("--out", default="runs/openai_serve")
    return parser.parse_args()


async def main_async(args: argparse.Namespace, out: Path, url: str) -> dict[str, list[Side]]:
    from envsuite.backends.local import LocalSamplingClient

    local = LocalSamplingClient.load(base_model=MODEL)
    tokenizer = local.get_tokenizer()
    plan = requests(args.clients, args.rounds)
    warm = requests(args.clients, 1)
    await run_in_process(local, tokenizer, warm, args.max_tokens)  # model, engine thread, kernels
    await run_openai(url, warm, args.max_tokens, stream=False)
    runs: dict[str, list[Side]] = {"in process": [], "openai": [], "openai stream": []}
    sides = list(runs)
    for repeat in range(args.repeats):
        for name in sides if repeat % 2 == 0 else sides[::-1]:
            if name == "in process":
                side = await run_in_process(local, tokenizer, plan, args.max_tokens)
            else:
                side = await run_openai(url, plan, args.max_tokens, stream=name == "openai stream")
            runs[name].append(side)
            print(
                f"{name}: {side.tokens} tokens in {side.wall_s:.2f} s ({side.tokens_per_s:.1f}/s)", flush=True
            )
            (out / "summary.json").write_text(
                json.dumps({k: [asdict(s) for s in v] for k, v in runs.items()}, indent=2)
            )
    local.close()
    return runs


def main() -> None:
    args = parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(
        f"CPU: {cpu_name()} ({os.cpu_count()} logical cores); load before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    server, url = start_server(out)
    try:
        runs = asyncio.run(main_async(args, out, url))
    finally:
        server.terminate()
        server.wait(timeout=60)
    print_table(runs)


if __name__ == "__main__":
    main()

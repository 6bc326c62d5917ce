"""``envsuite serve`` speaks OpenAI: the real ``openai`` SDK (sync, async, streaming) against the server on
127.0.0.1, sampling a checkpoint saved by a training run that is still going, and compared token for
token with the same request through the in-process sampling client.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import tinker

from envsuite.backends.local import LocalSamplingClient
from envsuite.models import get_tokenizer
from envsuite.renderers import get_renderer
from envsuite.serve import ServeConfig
from tests.conftest import TEST_MODEL
from tests.test_serve import running, sdk

KEY = "tml-openai-test"
MESSAGES = [{"role": "user", "content": "What is 2+2?"}]
ADD_SPEC = {
    "name": "add",
    "description": "Add two integers.",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}
ADD_TOOL = {"type": "function", "function": ADD_SPEC}
_SNAPSHOT: list[str] = []
"""The live sampling session of an in-memory weight snapshot (``save_weights_and_get_sampling_client``)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """A keyed server, and a sampler checkpoint saved by a training run that stays open meanwhile."""
    state = tmp_path_factory.mktemp("state")
    with running(ServeConfig(state_dir=state), api_key=KEY) as url, sdk(url, KEY) as service:
        training = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
        datum = tinker.Datum(
            model_input=tinker.ModelInput.from_ints([1, 28, 4003, 17]),
            loss_fn_inputs={"target_tokens": np.array([28, 4003, 17, 2]), "weights": np.ones(4, np.float32)},
        )
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(tinker.AdamParams(learning_rate=1e-2)).result()
        path = training.save_weights_for_sampler("step1").result().path
        snapshot = training.save_weights_and_get_sampling_client().result()
        _SNAPSHOT.append(snapshot._sampling_session_id)
        yield url, path, state / "runs" / path.removeprefix("tinker://")


@pytest.fixture(scope="module")
def local(server: tuple[str, str, Path]) -> Iterator[LocalSamplingClient]:
    """The same checkpoint in this process: the reference every reply is compared with."""
    client = LocalSamplingClient.load(model_path=str(server[2]))
    yield client
    client.close()


def _client(url: str, prefix: str = "/oai/api/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}{prefix}", api_key=KEY, max_retries=0)


def _template_prompt(messages: list[dict[str, str]]) -> list[int]:
    tokenizer = get_tokenizer(TEST_MODEL)
    return list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    )


def _reference(local: LocalSamplingClient, prompt: list[int], n: int, **params: Any) -> tinker.SampleResponse:
    return local.sample(
        tinker.ModelInput.from_ints(prompt), n, tinker.SamplingParams(**params), topk_sample_logprobs=2
    ).result(timeout=120)


def test_chat_completions_sample_a_live_runs_checkpoint_exactly_as_in_process(
    server: tuple[str, str, Path], local: LocalSamplingClient
) -> None:
    url, path, _ = server
    reply = _client(url).chat.completions.create(
        model=path,
        messages=MESSAGES,
        max_tokens=8,
        temperature=1.0,
        seed=11,
        n=2,
        logprobs=True,
        top_logprobs=2,
    )
    prompt = _template_prompt(MESSAGES)
    want = _reference(local, prompt, 2, max_tokens=8, temperature=1.0, seed=11)
    tokenizer = get_tokenizer(TEST_MODEL)
    assert reply.model == path and reply.usage is not None and reply.usage.prompt_tokens == len(prompt)
    assert reply.usage.completion_tokens == sum(len(s.tokens) for s in want.sequences)
    for choice, seq in zip(reply.choices, want.sequences, strict=True):
        tokens = seq.tokens[:-1] if seq.stop_reason == "stop" else seq.tokens
        assert choice.message.content == tokenizer.decode(tokens, skip_special_tokens=True)
        assert choice.finish_reason == seq.stop_reason
        assert choice.logprobs is not None and choice.logprobs.content is not None
        got = [entry.logprob for entry in choice.logprobs.content]
        np.testing.assert_allclose(got, (seq.logprobs or [])[: len(tokens)], atol=1e-5)
        assert seq.topk_logprobs is not None
        for entry, best in zip(choice.logprobs.content, seq.topk_logprobs, strict=False):
            assert [t.token for t in entry.top_logprobs] == [tokenizer.decode([t]) for t, _ in best or []]


def test_completions_take_text_or_token_prompts_and_honour_stop(
    server: tuple[str, str, Path], local: LocalSamplingClient
) -> None:
    url, path, _ = server
    client = _client(url, "/v1")  # the same routes where most clients look
    tokenizer = get_tokenizer(TEST_MODEL)
    prompt = tokenizer.encode("The capital of France is")
    free = client.completions.create(model=path, prompt=prompt, max_tokens=10, temperature=0, logprobs=1)
    want = _reference(local, prompt, 1, max_tokens=10, temperature=0.0).sequences[0]
    assert free.choices[0].text == tokenizer.decode(want.tokens, skip_special_tokens=True)
    assert free.choices[0].logprobs is not None
    assert free.choices[0].logprobs.tokens == [tokenizer.decode([t]) for t in want.tokens]
    # Stop at a piece of what the model says anyway: the text ends just before it, finish_reason stop.
    stop = tokenizer.decode(want.tokens[4:6])
    text = free.choices[0].text
    stopped = client.completions.create(
        model=path, prompt="The capital of France is", max_tokens=10, temperature=0, stop=[stop]
    )
    assert stopped.choices[0].text == text[: text.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"
    batch = client.completions.create(
        model=path, prompt=[prompt, prompt[:3]], max_tokens=3, n=2, temperature=0
    )
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert (
        batch.choices[0].text
        == batch.choices[1].text
        == tokenizer.decode(want.tokens[:3], skip_special_tokens=True)
    )


def test_streaming_gives_the_same_text_and_a_final_usage_chunk(server: tuple[str, str, Path]) -> None:
    url, path, _ = server
    client = _client(url)
    args: dict[str, Any] = {"model": path, "messages": MESSAGES, "max_tokens": 12, "seed": 3, "n": 2}
    whole = client.chat.completions.create(**args)
    pieces: dict[int, str] = {0: "", 1: ""}
    finish: dict[int, str | None] = {}
    usage = None
    for chunk in client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}):
        for choice in chunk.choices:
            pieces[choice.index] += choice.delta.content or ""
            finish[choice.index] = choice.finish_reason or finish.get(choice.index)
        usage = chunk.usage or usage
    assert [pieces[i] for i in (0, 1)] == [c.message.content for c in whole.choices]
    assert [finish[i] for i in (0, 1)] == [c.finish_reason for c in whole.choices]
    assert usage is not None and usage.total_tokens == whole.usage.total_tokens  # type: ignore[union-attr]
    # A stop string spread over several tokens never leaks into the stream, not even in part.
    free = client.chat.completions.create(model=path, messages=MESSAGES, max_tokens=12, temperature=0)
    text = free.choices[0].message.content or ""
    stop = text[len(text) // 3 : len(text) // 3 + 6]
    stop_args: dict[str, Any] = {
        "model": path,
        "messages": MESSAGES,
        "max_tokens": 12,
        "temperature": 0,
        "stop": [stop],
    }
    deltas = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(**stop_args, stream=True)
        if c.choices
    ]
    assert (
        "".join(deltas)
        == text[: text.index(stop)]
        == client.chat.completions.create(**stop_args).choices[0].message.content
    )
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(model=path, prompt="Hi", max_tokens=6, seed=2, stream=True)
        if c.choices
    )
    assert (
        streamed == client.completions.create(model=path, prompt="Hi", max_tokens=6, seed=2).choices[0].text
    )


def test_concurrent_async_clients_share_one_engine(
    server: tuple[str, str, Path], local: LocalSamplingClient
) -> None:
    url, path, _ = server
    prompt = _template_prompt(MESSAGES)

    async def ask_all() -> list[str]:
        client = openai.AsyncOpenAI(base_url=f"{url}/oai/api/v1", api_key=KEY, max_retries=0)
        replies = await asyncio.gather(
            *(
                client.chat.completions.create(model=path, messages=MESSAGES, max_tokens=6, seed=seed)
                for seed in range(8)
            )
        )
        await client.close()
        return [r.choices[0].message.content or "" for r in replies]

    tokenizer = get_tokenizer(TEST_MODEL)
    expected = []
    for seed in range(8):
        seq = _reference(local, prompt, 1, max_tokens=6, temperature=1.0, seed=seed).sequences[0]
        expected.append(
            tokenizer.decode(
                seq.tokens[:-1] if seq.stop_reason == "stop" else seq.tokens, skip_special_tokens=True
            )
        )
    assert asyncio.run(ask_all()) == expected, "batched together, each seeded reply is unchanged"


def test_a_live_sampling_session_is_a_model_too(
    server: tuple[str, str, Path], local: LocalSamplingClient
) -> None:
    url, _, _ = server
    (session_id,) = _SNAPSHOT
    reply = _client(url).chat.completions.create(
        model=session_id, messages=MESSAGES, max_tokens=6, temperature=0
    )
    seq = _reference(local, _template_prompt(MESSAGES), 1, max_tokens=6, temperature=0.0).sequences[0]
    tokens = seq.tokens[:-1] if seq.stop_reason == "stop" else seq.tokens
    assert reply.choices[0].message.content == get_tokenizer(TEST_MODEL).decode(
        tokens, skip_special_tokens=True
    )


def test_an_envsuite_renderer_can_render_the_chat(
    server: tuple[str, str, Path], local: LocalSamplingClient
) -> None:
    url, path, _ = server
    reply = _client(url).chat.completions.create(
        model=path, messages=MESSAGES, max_tokens=6, temperature=0, extra_body={"renderer": "role_colon"}
    )
    renderer = get_renderer("role_colon", get_tokenizer(TEST_MODEL))
    prompt = renderer.build_generation_prompt(MESSAGES).to_ints()  # type: ignore[arg-type]
    assert reply.usage is not None and reply.usage.prompt_tokens == len(prompt)
    seq = _reference(
        local, prompt, 1, max_tokens=6, temperature=0.0, stop=renderer.get_stop_sequences()
    ).sequences[0]
    assert reply.choices[0].message.content == renderer.parse_response(seq.tokens).message["content"]
    with pytest.raises(openai.BadRequestError, match="unknown renderer") as caught:
        _client(url).chat.completions.create(
            model=path, messages=MESSAGES, extra_body={"renderer": "chatmll"}
        )
    assert caught.value.body["param"] == "renderer"  # type: ignore[index]


@pytest.mark.parametrize(
    "extra, param",
    [
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}, "strict": "yes"}}]},
            "tools[0].function.strict",
        ),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "sub"}}, "tools": [ADD_TOOL]},
            "tool_choice",
        ),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"logit_bias": {"17": 5}}, "logit_bias"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "s", "schema": {"type": "array", "uniqueItems": True}},
                }
            },
            "response_format",
        ),
        ({"extra_body": {"structured_outputs": {"regex": "a+", "choice": ["a"]}}}, "structured_outputs"),
        ({"extra_body": {"min_p": 0.1}}, "min_p"),
        ({"extra_body": {"repetition_penalty": 1.2}}, "repetition_penalty"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": "hi", "tool_call_id": "c"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": "hi", "name": "bob"}]}, "messages[0].name"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"n": 65}, "n"),
    ],
)
def test_unsupported_parameters_get_a_400_naming_them(
    server: tuple[str, str, Path], extra: dict[str, Any], param: str
) -> None:
    url, path, _ = server
    args: dict[str, Any] = {"model": path, "messages": MESSAGES, "max_tokens": 2} | extra
    with pytest.raises(openai.BadRequestError) as caught:
        _client(url).chat.completions.create(**args)
    assert caught.value.body["param"] == param  # type: ignore[index]
    assert param.split(".")[0].split("[")[0] in str(caught.value)


def test_neutral_values_and_auth(server: tuple[str, str, Path], tmp_path: Path) -> None:
    url, path, _ = server
    neutral = _client(url).chat.completions.create(
        model=path,
        messages=MESSAGES,
        max_tokens=2,
        frequency_penalty=0,
        presence_penalty=0,
        user="u-1",
        store=False,
    )
    assert neutral.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/oai/api/v1", api_key="tml-wrong", max_retries=0).models.list()
    ids = [m.id for m in _client(url).models.list().data]
    assert TEST_MODEL in ids and path in ids
    with pytest.raises(openai.NotFoundError) as caught:
        _client(url).chat.completions.create(model=str(tmp_path), messages=MESSAGES)
    assert caught.value.body["param"] == "model"  # type: ignore[index]
    raw = httpx.post(
        f"{url}/v1/chat/completions", json={"model": TEST_MODEL}, headers={"Authorization": f"Bearer {KEY}"}
    )
    assert raw.status_code == 400 and raw.json()["error"]["param"] == "messages"


def test_inspects_openai_api_provider_evaluates_the_checkpoint(
    server: tuple[str, str, Path], tmp_path: Path
) -> None:
    """``inspect eval envsuite/env ... --model openai-api/envsuite/<checkpoint>``, as a user runs it."""
    url, path, _ = server
    env = {
        **os.environ,
        "ENVSUITE_BASE_URL": f"{url}/oai/api/v1",
        "ENVSUITE_API_KEY": KEY,
        "HF_HUB_OFFLINE": "1",
    }
    args = ["eval", "envsuite/env", "-T", "env_id=arithmetic", "-T", "episodes=2", "-T", "max_tokens=8"]
    args += ["--model", f"openai-api/envsuite/{path}", "--log-dir", str(tmp_path), "--display", "plain"]
    # Run outside the repository: there, Inspect would take envsuite/env for a path.
    result = subprocess.run(
        [sys.executable, "-m", "inspect_ai", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    from inspect_ai.log import read_eval_log

    (log_path,) = tmp_path.glob("*.eval")
    log = read_eval_log(str(log_path))
    assert log.status == "success" and log.eval.model == f"openai-api/envsuite/{path}"
    assert log.samples and all(s.output.completion is not None for s in log.samples)
    assert all(s.scores for s in log.samples)


def test_envsuite_bench_benchmarks_the_checkpoint_through_openai_api(
    server: tuple[str, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``envsuite bench --model openai-api/envsuite/<checkpoint>``: the path of any OpenAI-compatible server."""
    from envsuite.cli import main
    from envsuite.leaderboard import ResultStore

    url, path, _ = server
    monkeypatch.setenv("ENVSUITE_BASE_URL", f"{url}/v1")
    monkeypatch.setenv("ENVSUITE_API_KEY", KEY)
    model = f"openai-api/envsuite/{path}"
    args = ["bench", "--model", model, "--envs", "arithmetic", "twenty_questions", "--episodes", "2"]
    args += [
        "--max-tokens",
        "8",
        "--log-dir",
        str(tmp_path / "bench"),
        "--db",
        str(tmp_path / "board.sqlite"),
    ]
    assert main(args) == 0
    store = ResultStore(str(tmp_path / "board.sqlite"))
    try:
        keys = store.keys(["arithmetic", "twenty_questions"])
        assert {k.model for k in keys} == {model} and len(keys) == 2
    finally:
        store.close()


def test_tools_are_rendered_and_tool_calls_parsed_by_the_models_renderer(
    server: tuple[str, str, Path], local: LocalSamplingClient
) -> None:
    """A request with tools renders with the model's envsuite renderer (its definitions in the family's
    format), a conversation with a call and its result renders as that renderer renders it, the streamed
    reply says the same, and sampled tool-call tokens come back as OpenAI tool_calls."""
    from envsuite.chat import ToolCall
    from envsuite.models import default_renderer_name
    from envsuite.serve.openai_api._chat import RendererFormat

    url, path, _ = server
    renderer = get_renderer(default_renderer_name(TEST_MODEL), get_tokenizer(TEST_MODEL))
    client = _client(url)
    reply = client.chat.completions.create(
        model=path,
        messages=MESSAGES,
        tools=[ADD_TOOL],
        max_tokens=6,
        temperature=0.0,  # type: ignore[list-item]
    )
    prompt = renderer.build_generation_prompt(MESSAGES, tools=[ADD_SPEC]).to_ints()  # type: ignore[arg-type, list-item]
    assert reply.usage is not None and reply.usage.prompt_tokens == len(prompt)
    seq = _reference(local, prompt, 1, max_tokens=6, temperature=0.0, stop=renderer.get_stop_sequences())
    assert (
        reply.choices[0].message.content
        == renderer.parse_response(seq.sequences[0].tokens).message["content"]
    )
    streamed = client.chat.completions.create(
        model=path,
        messages=MESSAGES,
        tools=[ADD_TOOL],
        max_tokens=6,
        temperature=0.0,
        stream=True,  # type: ignore[list-item]
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        == reply.choices[0].message.content
    )

    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}
    conversation = [
        *MESSAGES,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "4", "tool_call_id": "call_1", "name": "add"},
    ]
    answered = client.chat.completions.create(
        model=path, messages=conversation, tools=[ADD_TOOL], max_tokens=2
    )  # type: ignore[arg-type, list-item]
    expected = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [ToolCall.create("add", {"a": 2, "b": 2}, "call_1")],
        },
        {"role": "tool", "content": "4", "tool_call_id": "call_1", "name": "add"},
    ]
    want = renderer.build_generation_prompt(expected, tools=[ADD_SPEC]).to_ints()  # type: ignore[arg-type, list-item]
    assert answered.usage is not None and answered.usage.prompt_tokens == len(want)

    # Tokens of a call in the family's format (what a model that calls the tool samples) read back as
    # OpenAI's tool_calls; without tools offered they are plain text.
    example = renderer.build_supervised_example([expected[0], expected[1]], tools=[ADD_SPEC])  # type: ignore[list-item]
    sampled = [t for t, w in zip(example.model_input.to_ints(), example.weights_T, strict=True) if w]
    parsed = RendererFormat(renderer, [ADD_SPEC]).reply(sampled)  # type: ignore[list-item]
    assert parsed.content == "" and len(parsed.tool_calls) == 1
    (got,) = parsed.tool_calls
    assert got["type"] == "function" and got["id"].startswith("call_")
    assert got["function"]["name"] == "add" and json.loads(got["function"]["arguments"]) == {"a": 2, "b": 2}
    plain = RendererFormat(renderer).reply(sampled)
    assert plain.tool_calls == [] and "add" in plain.content

"""StableReinforce's interface: sampling records per session, provenance, refusals, expiry, persistence.

In process (``LocalServiceClient``) and through ``envsuite serve`` with the real SDK. The loss values
themselves are checked against an independent computation in ``test_loss_gradients.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tinker
from tinker import types

from envsuite.backends.local import (
    RECORD_TTL_S,
    LocalServiceClient,
    LocalTrainingClient,
    LossInputError,
    ProvenanceError,
    SequenceStore,
)
from envsuite.serve import ServeConfig
from tests.conftest import TEST_MODEL
from tests.test_serve import running, sdk

PROMPT = [1, 28, 4003, 17, 902, 311, 64]
PARAMS = types.SamplingParams(max_tokens=5, seed=7, stop=[])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServiceClient]:
    service = LocalServiceClient(log_dir=tmp_path_factory.mktemp("sr"))
    yield service
    service.close()


@pytest.fixture(scope="module")
def training(service: LocalServiceClient) -> LocalTrainingClient:
    return service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()


def _sample(sampler: Any, n: int = 2, prompt: list[int] = PROMPT) -> list[types.SampledSequence]:
    return list(sampler.sample(types.ModelInput.from_ints(prompt), n, PARAMS).result().sequences)


def _datum(
    seq: types.SampledSequence, advantage: float, *, provenance: bool = True, sequence_id: str = ""
) -> types.Datum:
    """tinker-cookbook's ``rl_loop`` layout: prompt + reply, targets 0 on the prompt, the reply's provenance."""
    ob = len(PROMPT) - 1
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(PROMPT + seq.tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": np.array([0] * ob + seq.tokens),
            "logprobs": np.array([0.0] * ob + list(seq.logprobs or []), np.float32),
            "advantages": np.array([0.0] * ob + [advantage] * len(seq.tokens), np.float32),
        },
    )
    if not provenance:
        return datum
    name = sequence_id or seq.sequence_id
    return datum.with_provenance(
        model_input=[
            types.PromptProvenanceSpan(sequence_id=name, length=len(PROMPT)),
            types.SampledProvenanceSpan(sequence_id=name, length=len(seq.tokens) - 1),
        ],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id=name, offset=1, length=ob),
            types.SampledProvenanceSpan(sequence_id=name, length=len(seq.tokens)),
        ],
    )


# -- in process --------------------------------------------------------------------------------------


def test_every_sampling_client_factory_records_and_sequences_train(
    service: LocalServiceClient, training: LocalTrainingClient
) -> None:
    saved = training.save_weights_for_sampler("sr-factories").result().path
    samplers = [
        training.save_weights_and_get_sampling_client(record_stability_info=True).result(),
        training.create_sampling_client(saved, record_stability_info=True).result(),
        service.create_sampling_client(model_path=saved, record_stability_info=True).result(),
        service.create_sampling_client(base_model=TEST_MODEL, record_stability_info=True).result(),
    ]
    store = service.sequences.store
    before = store.count(service.session_id)
    sequences = [seq for sampler in samplers for seq in _sample(sampler)]
    assert store.count(service.session_id) == before + 8
    assert len({seq.sequence_id for seq in sequences}) == 8, "ids are distinct across clients"
    data = [_datum(seq, adv) for seq, adv in zip(sequences, itertools.cycle([1.0, -1.0]))]
    out = training.forward_backward(data, "stable_reinforce").result()
    assert np.isfinite(out.metrics["loss:sum"]) and len(out.loss_fn_outputs) == 8
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    unrecorded = training.save_weights_and_get_sampling_client().result()
    with pytest.raises(ProvenanceError, match="unknown to this session"):
        training.forward([_datum(_sample(unrecorded)[0], 1.0)], "stable_reinforce").result()


def test_refusals_are_the_sdks_error_and_leave_no_gradient(training: LocalTrainingClient) -> None:
    sampler = training.save_weights_and_get_sampling_client(record_stability_info=True).result()
    seq = _sample(sampler, 1)[0]
    cases: list[tuple[types.Datum, str]] = [
        (_datum(seq, 1.0, provenance=False), "needs provenance"),
        (_datum(seq, 1.0, sequence_id="seq-never-sampled-0"), "unknown to this session"),
        (_mismatched(seq), "are not the tokens sequence"),
        (_advantage_on_prompt(seq), "only accepts nonzero advantages on sampled tokens"),
        (_past_the_end(seq), "runs past its"),
        (_not_tiling(seq), "must tile"),
    ]
    for datum, message in cases:
        with pytest.raises(ProvenanceError, match=message) as caught:
            training.forward_backward([_datum(seq, 1.0), datum], "stable_reinforce").result()
        assert isinstance(caught.value, tinker.RequestFailedError) and isinstance(
            caught.value, LossInputError
        )
        assert caught.value.category == types.RequestErrorCategory.User
    with pytest.raises(RuntimeError, match="without gradients"):
        training.optim_step(types.AdamParams(learning_rate=1e-3)).result()


def _mismatched(seq: types.SampledSequence) -> types.Datum:
    datum = _datum(seq, 1.0)
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy().copy()
    targets[-1] = (targets[-1] + 1) % 100
    return types.Datum(
        model_input=datum.model_input,
        loss_fn_inputs={**datum.loss_fn_inputs, "target_tokens": targets},
        model_input_spans=datum.model_input_spans,
        loss_fn_input_spans=datum.loss_fn_input_spans,
    )


def _advantage_on_prompt(seq: types.SampledSequence) -> types.Datum:
    datum = _datum(seq, 1.0)
    advantages = np.full(datum.model_input.length, 1.0, np.float32)
    return types.Datum(
        model_input=datum.model_input,
        loss_fn_inputs={**datum.loss_fn_inputs, "advantages": advantages},
        model_input_spans=datum.model_input_spans,
        loss_fn_input_spans=datum.loss_fn_input_spans,
    )


def _past_the_end(seq: types.SampledSequence) -> types.Datum:
    """Prompt spans claiming more prompt than the request had (the lengths still tile the datum)."""
    name, n = seq.sequence_id, len(seq.tokens)
    return _datum(seq, 1.0, provenance=False).with_provenance(
        model_input=[types.PromptProvenanceSpan(sequence_id=name, offset=2, length=len(PROMPT) + n - 1)],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id=name, offset=1, length=len(PROMPT) - 1),
            types.SampledProvenanceSpan(sequence_id=name, length=n),
        ],
    )


def _not_tiling(seq: types.SampledSequence) -> types.Datum:
    """Spans built directly (``with_provenance`` would refuse them) that cover one position too few."""
    good = _datum(seq, 1.0)
    assert good.loss_fn_input_spans is not None
    return types.Datum(
        model_input=good.model_input,
        loss_fn_inputs=good.loss_fn_inputs,
        model_input_spans=good.model_input_spans,
        loss_fn_input_spans=[
            *good.loss_fn_input_spans[:-1],
            types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=1),
        ],
    )


def test_records_belong_to_the_session_that_sampled_them(
    tmp_path: Path, training: LocalTrainingClient
) -> None:
    other = LocalServiceClient(log_dir=tmp_path)
    try:
        sampler = other.create_sampling_client(base_model=TEST_MODEL, record_stability_info=True).result()
        seq = _sample(sampler, 1)[0]
        assert other.sequences.store.count(other.session_id) == 1
        with pytest.raises(ProvenanceError, match="unknown to this session"):
            training.forward([_datum(seq, 1.0)], "stable_reinforce").result()
    finally:
        other.close()


def test_records_expire_a_day_after_their_last_use(service: LocalServiceClient) -> None:
    now = [1_000_000.0]
    store = SequenceStore(clock=lambda: now[0])
    client = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
    client.bind_sequence_records(store.scope("session-a"))
    sampler = client.save_weights_and_get_sampling_client().result()
    sampler.records = store.scope("session-a")
    kept, dropped = _sample(sampler, 2)
    for _ in range(3):  # every use restarts the day: three days later `kept` still trains
        now[0] += RECORD_TTL_S - 60
        client.forward([_datum(kept, 1.0)], "stable_reinforce").result()
    with pytest.raises(ProvenanceError, match="expired"):
        client.forward([_datum(dropped, 1.0)], "stable_reinforce").result()
    now[0] += RECORD_TTL_S + 1
    assert store.purge() == 2 and store.count() == 0
    with pytest.raises(ProvenanceError, match="unknown"):
        client.forward([_datum(kept, 1.0)], "stable_reinforce").result()
    client.close()


def test_records_on_disk_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "sequences.sqlite"
    store = SequenceStore(path)
    sequences = [
        types.SampledSequence(
            stop_reason="length",
            sequence_id=f"r:{i}",
            tokens_np=np.array([3, 4, 5 + i], np.int32),
            logprobs_np=np.array([-1.0, -2.0, -3.0], np.float32),
        )
        for i in range(2)
    ]
    store.record("sess-1", ["r:0", "r:1"], 9, sequences)
    store.close()
    reopened = SequenceStore(path)
    found = reopened.lookup("sess-1", ["r:1"])
    assert found["r:1"].prompt_length == 9 and found["r:1"].tokens_T.tolist() == [3, 4, 6]
    np.testing.assert_array_equal(found["r:1"].logprobs_T, [-1.0, -2.0, -3.0])
    with pytest.raises(ProvenanceError, match="unknown"):
        reopened.lookup("sess-2", ["r:1"])
    reopened.close()


def test_samples_report_their_sequence_id_and_prompt_cache_hits(training: LocalTrainingClient) -> None:
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = list(range(100, 130))
    first = sampler.sample(types.ModelInput.from_ints(prompt), 1, PARAMS).result()
    follow_up = prompt + first.sequences[0].tokens + [7, 8]
    second = sampler.sample(types.ModelInput.from_ints(follow_up), 1, PARAMS).result()
    assert first.prompt_cache_hit_tokens == 0
    assert second.prompt_cache_hit_tokens >= len(prompt), "the conversation so far came from the cache"
    assert first.sequences[0].sequence_id != second.sequences[0].sequence_id


# -- through envsuite serve -------------------------------------------------------------------------


def test_stable_reinforce_through_the_server_and_its_records_outlive_it(tmp_path: Path) -> None:
    config = ServeConfig(state_dir=tmp_path / "state")
    apps: list[Any] = []
    with running(config, apps=apps) as url, sdk(url) as service:
        training = service.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
        sampler = training.save_weights_and_get_sampling_client(record_stability_info=True).result()
        sequences = _sample(sampler, 2)
        data = [_datum(seq, adv) for seq, adv in zip(sequences, [1.0, -1.0], strict=True)]
        remote = training.forward_backward(data, "stable_reinforce").result().metrics["loss:sum"]
        assert training.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics["step:max"] == 1.0
        for bad, message in [
            (_datum(sequences[0], 1.0, provenance=False), "needs provenance"),
            (_datum(sequences[0], 1.0, sequence_id="nope:0"), "unknown to this session"),
        ]:
            with pytest.raises(tinker.RequestFailedError, match=message):
                training.forward_backward([bad], "stable_reinforce").result()
        unrecorded = training.save_weights_and_get_sampling_client().result()
        with pytest.raises(tinker.RequestFailedError, match="unknown to this session"):
            training.forward([_datum(_sample(unrecorded, 1)[0], 1.0)], "stable_reinforce").result()
        session_id = apps[0].serve_state.models[training.model_id].session_id
    # The same numbers in process, from the same sequences recorded there.
    local = LocalServiceClient(log_dir=tmp_path / "local")
    local_training = local.create_lora_training_client(TEST_MODEL, rank=4, seed=0).result()
    local.sequences.store.record(local.session_id, [s.sequence_id for s in sequences], len(PROMPT), sequences)
    in_process = local_training.forward(data, "stable_reinforce").result().metrics["loss:sum"]
    assert remote == pytest.approx(in_process, rel=1e-5)
    local.close()
    with running(config, apps=apps):  # a restarted server on the same state dir still has them
        records = apps[1].serve_state.sequences.lookup(session_id, [s.sequence_id for s in sequences])
        assert [records[s.sequence_id].tokens_T.tolist() for s in sequences] == [s.tokens for s in sequences]


def test_the_token_completer_reports_sequence_id_and_cache_hits(training: LocalTrainingClient) -> None:
    """``TokensWithLogprobs`` carries what tinker-cookbook 0.6.1's completer reports."""
    import asyncio

    from envsuite.completers import SamplingTokenCompleter

    sampler = training.save_weights_and_get_sampling_client(record_stability_info=True).result()
    completer = SamplingTokenCompleter(sampler, max_tokens=4, seed=5)
    prompt = list(range(200, 230))

    async def two_turns() -> tuple[Any, Any]:
        first = await completer(types.ModelInput.from_ints(prompt), [])
        second = await completer(types.ModelInput.from_ints(prompt + first.tokens + [7]), [])
        return first, second

    first, second = asyncio.run(two_turns())
    assert first.sequence_id and second.sequence_id and first.sequence_id != second.sequence_id
    assert first.prompt_cache_hit_tokens == 0 and second.prompt_cache_hit_tokens >= len(prompt)
    recorded = sampler.records.lookup([first.sequence_id])[first.sequence_id]
    assert recorded.tokens_T.tolist() == first.tokens and recorded.prompt_length == len(prompt)

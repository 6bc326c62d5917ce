"""Constrained sampling: a Constraint (JSON Schema, regex, choice, EBNF) restricts every sample to its
language, through the real engine and the tiny random Llama with SmolLM2's tokenizer.

* the contract: constraints are small values (equal, hashable, picklable, to and from dicts); malformed
  ones and specs the compiler refuses fail alone with ``ConstraintError``; ``ConstrainedSamplingParams``
  reaches the local client and is dropped by the real SDK's serialization;
* the compiler: one compiled grammar per (tokenizer, constraint); a row no token can continue is
  reported dead and ends incomplete;
* the sampler: a constrained row only takes allowed tokens; its masked logprob is the log-softmax of the
  masked logits (exp over the allowed set sums to 1) and its reported ``logprobs`` the unmasked one; free
  rows in the same batch get the tokens and logprobs they get without it, natively and through torch;
* the engine: 200 of 200 JSON-schema samples are complete and valid (``jsonschema``); a budget too short
  ends with ``stop_reason="length"`` and an incomplete outcome; the end token comes only where the
  grammar accepts; free requests sharing the batch sample exactly what they sample beside a free one;
  streamed tokens carry both logprobs;
* training on constrained rollouts: the learner's logprobs equal the reported (unmasked) sampling
  logprobs, so the importance ratio is 1 on-policy, where the masked ones would be far off.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import re
from collections.abc import Iterator

import jsonschema
import numpy as np
import pytest
import tinker
import torch
from tinker import types

from envsuite.backends.local import (
    ConstrainedSampledSequence,
    ConstrainedSamplingParams,
    LocalSamplingClient,
    LocalServiceClient,
    SampledToken,
    SamplingModel,
    load_sampling_model,
)
from envsuite.constraints import Constraint, ConstraintError, ConstraintKind, ConstraintOutcome, lark_json
from envsuite.engine.kernels import native_kernels
from envsuite.engine.sampling import (
    GrammarCompiler,
    RowSampling,
    TokenMasks,
    choose_tokens,
    make_generator,
    token_masks,
)

MODEL = "tiny-random"
VOCAB = 49152
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "role": {"type": "string", "enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "email": {"anyOf": [{"type": "string", "format": "email", "maxLength": 20}, {"type": "null"}]},
    },
    "required": ["name", "age", "role"],
    "additionalProperties": False,
}
NUMBER = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def loaded() -> SamplingModel:
    return load_sampling_model(base_model=MODEL)


@pytest.fixture(scope="module")
def client(loaded: SamplingModel) -> Iterator[LocalSamplingClient]:
    sampler = LocalSamplingClient(loaded.model, loaded.tokenizer, MODEL)
    yield sampler
    sampler.close()


def _prompt(client: LocalSamplingClient, text: str) -> tinker.ModelInput:
    return tinker.ModelInput.from_ints(client.get_tokenizer().encode(text))


def _text(client: LocalSamplingClient, tokens: list[int]) -> str:
    """The sample's text, less its final stop token."""
    if tokens and tokens[-1] in client.eos_token_ids:
        tokens = tokens[:-1]
    return str(client.get_tokenizer().decode(tokens))


# ---------------------------------------------------------------------------------------- the contract


def test_constraints_are_small_serializable_values() -> None:
    schema = Constraint.json_schema(PERSON)
    assert schema == Constraint.json_schema(json.dumps(PERSON)) and hash(schema) == hash(
        Constraint.json_schema(PERSON)
    )
    assert list(json.loads(schema.spec)["properties"]) == list(PERSON["properties"])  # key order kept
    for constraint in (
        schema,
        Constraint.regex(r"\d+"),
        Constraint.choice(["a", "b"]),
        Constraint.grammar("start: /x+/"),
    ):
        assert Constraint.from_dict(json.loads(json.dumps(constraint.to_dict()))) == constraint
        assert pickle.loads(pickle.dumps(constraint)) == constraint
    assert Constraint.choice(["yes", "no", "yes"]).choices == ("yes", "no")
    assert Constraint.json_object().schema == {"type": "object"}
    assert Constraint("regex", "a").kind is ConstraintKind.REGEX


@pytest.mark.parametrize(
    "make",
    [
        lambda: Constraint("xml", "<a/>"),
        lambda: Constraint.regex(""),
        lambda: Constraint.json_schema("{not json"),
        lambda: Constraint.json_schema("[1, 2]"),
        lambda: Constraint.choice([]),
        lambda: Constraint.choice("yes"),
        lambda: Constraint.from_dict({"kind": "regex"}),
    ],
)
def test_malformed_constraints_are_refused_when_made(make: object) -> None:
    assert callable(make)
    with pytest.raises(ConstraintError):
        make()


@pytest.mark.parametrize(
    ("constraint", "reason"),
    [
        (Constraint.regex("(unclosed"), "regex"),
        (Constraint.grammar("start: undefined_rule"), "grammar"),
        (Constraint.json_schema({"type": "array", "uniqueItems": True}), "uniqueItems"),
    ],
)
def test_a_spec_the_compiler_refuses_fails_alone_with_its_reason(
    client: LocalSamplingClient, constraint: Constraint, reason: str
) -> None:
    with pytest.raises(ConstraintError, match=reason):
        client.compile_constraint(constraint)
    params = tinker.SamplingParams(max_tokens=4, seed=0)
    with pytest.raises(ConstraintError, match=reason):
        client.sample(_prompt(client, "x"), 1, params, constraint=constraint).result()
    # A schema may opt into ignoring what a grammar cannot enforce.
    lenient = Constraint.json_schema({"type": "array", "uniqueItems": True, "x-guidance": {"lenient": True}})
    client.compile_constraint(lenient)
    # The engine goes on serving.
    assert client.sample(_prompt(client, "x"), 1, params).result().sequences[0].tokens


def test_constrained_params_reach_the_local_client_and_the_sdk_drops_them(
    client: LocalSamplingClient,
) -> None:
    params = ConstrainedSamplingParams(max_tokens=8, seed=1, constraint=Constraint.choice(["red", "green"]))
    sequence = client.sample(_prompt(client, "Color:"), 1, params).result().sequences[0]
    assert isinstance(sequence, ConstrainedSampledSequence)
    assert _text(client, sequence.tokens) in ("red", "green")
    request = types.SampleRequest(sampling_params=params, num_samples=1, prompt=_prompt(client, "Color:"))
    assert "constraint" not in request.model_dump(mode="json")["sampling_params"]
    other = Constraint.regex("x")
    with pytest.raises(ValueError, match="two different constraints"):
        client.sample(_prompt(client, "x"), 1, params, constraint=other).result()


# ---------------------------------------------------------------------------------------- the sampler


def _rows(settings: list[tuple[float, int, float]], seed: int) -> list[RowSampling]:
    return [
        RowSampling(t, k, p, None if t <= 0 else make_generator(seed * 100 + i))
        for i, (t, k, p) in enumerate(settings)
    ]


SETTINGS = [(1.0, -1, 1.0), (0.0, -1, 1.0), (0.7, -1, 1.0), (1.0, 50, 1.0), (1.3, -1, 0.9), (1.0, -1, 1.0)]


@pytest.mark.parametrize("native", [False, True])
def test_masked_logprobs_are_the_masked_distributions_and_free_rows_are_untouched(native: bool) -> None:
    if native and not native_kernels().available:
        pytest.skip(f"native kernels unavailable: {native_kernels().reason}")
    compiled = GrammarCompiler(load_sampling_model(base_model=MODEL).tokenizer, VOCAB).compile(
        Constraint.json_schema(PERSON)
    )
    generator = torch.Generator().manual_seed(0)
    for trial in range(8):
        logits = torch.randn(len(SETTINGS), VOCAB, generator=generator) * 3
        grammars = [compiled.row(frozenset({2})) if i % 2 == 0 else None for i in range(len(SETTINGS))]
        for state in grammars[::2]:  # walk each constrained row a few tokens into its document
            assert state is not None
            state.matcher.consume_tokens(state.matcher.compute_ff_tokens()[: trial % 3])
        masks = token_masks(grammars, VOCAB)
        assert masks is not None and masks.dead == []
        free = choose_tokens(logits, _rows(SETTINGS, trial), native)
        mixed = choose_tokens(logits, _rows(SETTINGS, trial), native, masks)
        assert mixed.constrained_B is not None
        allowed = masks.allowed()
        for position, i in enumerate(masks.rows):
            temperature, _, _ = SETTINGS[i]
            token = mixed.tokens_B[i]
            assert bool(allowed[position, token])
            scale = 1.0 if temperature <= 0 else temperature
            unmasked = torch.log_softmax(logits[i] / scale, dim=-1)
            assert mixed.logprobs_B[i] == pytest.approx(float(unmasked[token]), abs=1e-4)
            if SETTINGS[i][1] <= 0 and SETTINGS[i][2] >= 1.0:  # untruncated: the masked softmax itself
                masked = torch.log_softmax(
                    (logits[i] / scale).masked_fill(~allowed[position], float("-inf")), -1
                )
                assert mixed.constrained_B[i] == pytest.approx(float(masked[token]), abs=1e-4)
                assert float(masked[allowed[position]].exp().sum()) == pytest.approx(1.0, abs=1e-5)
            assert mixed.constrained_B[i] >= mixed.logprobs_B[i] - 1e-5  # renormalizing only raises it
        for i in range(1, len(SETTINGS), 2):
            assert (mixed.tokens_B[i], mixed.logprobs_B[i]) == (free.tokens_B[i], free.logprobs_B[i])


def test_the_native_masked_sampler_draws_from_the_masked_distribution() -> None:
    """Plain constrained rows take one native call that reads the mask bits (``sample_masked_rows``): the
    draws follow the masked softmax, greedy rows take the best allowed token, both logprobs are right,
    and a row whose allowed tokens all lie far below its best one is drawn the torch way instead."""
    if not native_kernels().available:
        pytest.skip(f"native kernels unavailable: {native_kernels().reason}")
    compiled = GrammarCompiler(load_sampling_model(base_model=MODEL).tokenizer, VOCAB).compile(
        Constraint.regex("[0-9]{2}")
    )
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(1, VOCAB, generator=generator) * 3
    n = 64
    masks = token_masks([compiled.row(frozenset({2})) for _ in range(n)], VOCAB)
    assert masks is not None
    allowed = masks.allowed()[0]
    target = torch.softmax(logits[0].masked_fill(~allowed, float("-inf")), -1)
    counts = torch.zeros(VOCAB)
    for call in range(40):
        rows = [RowSampling(1.0, -1, 1.0, make_generator(call * n + i)) for i in range(n)]
        chosen = choose_tokens(logits.expand(n, -1), rows, True, masks)
        assert chosen.constrained_B is not None
        for token, logprob, constrained in zip(
            chosen.tokens_B, chosen.logprobs_B, chosen.constrained_B, strict=True
        ):
            assert bool(allowed[token])
            assert logprob == pytest.approx(float(torch.log_softmax(logits[0], -1)[token]), abs=1e-4)
            assert constrained == pytest.approx(float(target[token].log()), abs=1e-4)
            counts[token] += 1
    assert float((counts / counts.sum() - target).abs().max()) < 0.03  # 2,560 draws over 10 tokens
    greedy = choose_tokens(logits, [RowSampling(0.0, -1, 1.0, None)], True, _first(masks))
    assert greedy.tokens_B[0] == int(target.argmax())
    far = logits.clone()
    far[0, allowed] -= 200.0  # every allowed token e^-200 below the best: the kernel hands it back
    drawn = choose_tokens(far, [RowSampling(1.0, -1, 1.0, make_generator(7))], True, _first(masks))
    assert drawn.constrained_B is not None and bool(allowed[drawn.tokens_B[0]])
    far_target = torch.log_softmax(far[0].masked_fill(~allowed, float("-inf")), -1)
    assert drawn.constrained_B[0] == pytest.approx(float(far_target[drawn.tokens_B[0]]), abs=1e-3)


def _first(masks: TokenMasks) -> TokenMasks:
    return TokenMasks([0], masks.bits_C_W[:1], masks.vocab_size, [])


def test_grammars_are_compiled_once_per_tokenizer_and_constraint(loaded: SamplingModel) -> None:
    first = GrammarCompiler(loaded.tokenizer, VOCAB).compile(Constraint.regex("[ab]{3}"))
    again = GrammarCompiler(loaded.tokenizer, VOCAB).compile(Constraint.regex("[ab]{3}"))
    assert again is first
    assert GrammarCompiler(loaded.tokenizer, VOCAB).compile(Constraint.regex("[ab]{4}")) is not first


def test_a_row_no_token_can_continue_is_reported_dead(loaded: SamplingModel) -> None:
    compiled = GrammarCompiler(loaded.tokenizer, VOCAB).compile(Constraint.regex("ab"))
    alive, stuck = compiled.row(frozenset({2})), compiled.row(frozenset({2}))
    stuck.matcher.consume_token(int(loaded.tokenizer.encode("zz")[0]))  # not in the language: error state
    masks = token_masks([alive, None, stuck], VOCAB)
    assert masks is not None and masks.rows == [0, 2] and masks.dead == [2]
    assert bool(masks.allowed()[1].all())  # the sampler stays well-defined; the engine ends the row
    assert not bool(masks.allowed()[0].all())
    stuck.dead_end()
    assert stuck.outcome is ConstraintOutcome.INCOMPLETE and alive.outcome is ConstraintOutcome.INCOMPLETE


# ---------------------------------------------------------------------------------------- the engine


async def test_two_hundred_json_schema_samples_are_complete_and_valid(client: LocalSamplingClient) -> None:
    validator = jsonschema.Draft202012Validator(
        PERSON, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    params = tinker.SamplingParams(max_tokens=160, temperature=1.0, seed=11)
    constraint = Constraint.json_schema(PERSON)
    responses = await asyncio.gather(
        *(
            client.sample(_prompt(client, f"Person {i} as JSON:"), 40, params, constraint=constraint)
            for i in range(5)
        )
    )
    sequences = [seq for response in responses for seq in response.sequences]
    assert len(sequences) == 200
    for seq in sequences:
        assert isinstance(seq, ConstrainedSampledSequence)
        assert (seq.stop_reason, seq.constraint_outcome) == ("stop", ConstraintOutcome.COMPLETE)
        assert seq.tokens[-1] in client.eos_token_ids and not set(seq.tokens[:-1]) & client.eos_token_ids
        validator.validate(json.loads(_text(client, seq.tokens)))
        assert len(seq.constrained_logprobs) == len(seq.tokens)


@pytest.mark.parametrize(
    ("constraint", "pattern"),
    [
        (Constraint.regex(r"[0-9]{3}-[a-z]{2,4}"), r"[0-9]{3}-[a-z]{2,4}"),
        (Constraint.choice(["north", "south", "east", "west"]), r"north|south|east|west"),
        (
            Constraint.grammar('start: "(" NUM (OP NUM)* ")"\nNUM: /[1-9][0-9]?/\nOP: "+" | "*"'),
            r"\(\d+([+*]\d+)*\)",
        ),
        (Constraint.grammar('root ::= "move " [a-h] [1-8] "-" [a-h] [1-8]'), r"move [a-h][1-8]-[a-h][1-8]"),
        (
            Constraint.grammar(f'start: "<tool_call>" {lark_json(NUMBER)} "</tool_call>"'),
            r'<tool_call>\{"n": -?\d+\}</tool_call>',
        ),
    ],
)
async def test_regex_choice_and_grammars_hold_for_every_complete_sample(
    client: LocalSamplingClient, constraint: Constraint, pattern: str
) -> None:
    params = tinker.SamplingParams(max_tokens=40, temperature=1.0, seed=5)
    response = await client.sample(_prompt(client, "Answer:"), 16, params, constraint=constraint)
    complete = [s for s in response.sequences if s.constraint_outcome is ConstraintOutcome.COMPLETE]
    assert len(complete) >= 12  # a random model may run long in a repetition; those come back incomplete
    for seq in response.sequences:
        assert isinstance(seq, ConstrainedSampledSequence)
        assert (seq.stop_reason == "stop") == (seq.constraint_outcome is ConstraintOutcome.COMPLETE)
    for seq in complete:
        assert re.fullmatch(pattern, _text(client, seq.tokens)), _text(client, seq.tokens)


async def test_streamed_tokens_carry_both_logprobs(client: LocalSamplingClient) -> None:
    streamed: list[SampledToken] = []
    params = tinker.SamplingParams(max_tokens=30, temperature=1.0, seed=4)
    constraint = Constraint.choice(["alpha", "beta"])
    response = await client.sample(
        _prompt(client, "x"), 2, params, on_token=streamed.append, constraint=constraint
    )
    for index, seq in enumerate(response.sequences):
        mine = [t for t in streamed if t.sample_index == index]
        assert isinstance(seq, ConstrainedSampledSequence)
        assert [t.token for t in mine] == seq.tokens
        assert [t.constrained_logprob for t in mine] == pytest.approx(seq.constrained_logprobs)


async def test_a_budget_too_short_ends_incomplete_never_as_a_document(client: LocalSamplingClient) -> None:
    constraint = Constraint.json_schema(
        {"type": "object", "properties": {"s": {"type": "string", "minLength": 40}}, "required": ["s"]}
    )
    params = tinker.SamplingParams(max_tokens=6, temperature=1.0, seed=2)
    for seq in (await client.sample(_prompt(client, "JSON:"), 8, params, constraint=constraint)).sequences:
        assert isinstance(seq, ConstrainedSampledSequence)
        assert (seq.stop_reason, seq.constraint_outcome, len(seq.tokens)) == (
            "length",
            ConstraintOutcome.INCOMPLETE,
            6,
        )
        assert _text(client, seq.tokens).startswith('{"s": "')


async def test_stop_strings_end_a_constrained_sample_only_at_a_complete_document(
    client: LocalSamplingClient,
) -> None:
    # "a" is inside every document, but only the whole "a;b" may end it.
    params = tinker.SamplingParams(max_tokens=12, temperature=1.0, seed=3, stop=["a"])
    response = await client.sample(_prompt(client, "x"), 4, params, constraint=Constraint.regex("a;b"))
    for seq in response.sequences:
        assert (seq.stop_reason, _text(client, seq.tokens)) == ("stop", "a;b")


async def test_free_requests_sample_the_same_beside_a_constrained_one(client: LocalSamplingClient) -> None:
    """Tokens equal; logprobs equal up to the rounding of batches the engine may group differently."""
    prompt = _prompt(client, "Tell me something")
    free = tinker.SamplingParams(max_tokens=24, temperature=1.0, stop=[], seed=21)
    greedy = tinker.SamplingParams(max_tokens=24, temperature=0.0, stop=[])
    truncated = tinker.SamplingParams(max_tokens=24, temperature=0.8, top_p=0.95, stop=[], seed=23)
    partner = tinker.SamplingParams(max_tokens=24, temperature=1.0, stop=[], seed=22)
    constraint = Constraint.regex("[a-z ]{24}")
    client.compile_constraint(constraint)

    async def beside(constrained: Constraint | None) -> list[tinker.SampledSequence]:
        results = await asyncio.gather(
            client.sample(prompt, 3, partner, constraint=constrained),
            client.sample(prompt, 2, free),
            client.sample(prompt, 1, greedy),
            client.sample(prompt, 2, truncated),
        )
        return [s for r in results[1:] for s in r.sequences]

    with_constraint, without = await beside(constraint), await beside(None)
    assert [s.tokens for s in with_constraint] == [s.tokens for s in without]
    for ours, theirs in zip(with_constraint, without, strict=True):
        assert ours.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)


# ---------------------------------------------------------------------------------------- training


def test_training_on_constrained_rollouts_sees_the_sampling_logprobs(tmp_path: object) -> None:
    """The reported logprobs are the unmasked ones, which the learner computes too: the importance ratio
    is 1 on-policy. The masked ones (what the draw came from) differ by the log of the mass the mask
    kept, far from 0 here, so a ratio against them would be biased."""
    service = LocalServiceClient(log_dir=str(tmp_path))
    trainer = service.create_lora_training_client(MODEL, rank=4, seed=0).result()
    sampler = trainer.save_weights_and_get_sampling_client().result()
    prompt = list(sampler.get_tokenizer().encode("Person as JSON:"))
    params = tinker.SamplingParams(max_tokens=60, temperature=1.0, seed=7)
    response = sampler.sample(
        tinker.ModelInput.from_ints(prompt), 4, params, constraint=Constraint.json_schema(PERSON)
    ).result()
    data, sampled, masked = [], [], []
    for seq in response.sequences:
        assert isinstance(seq, ConstrainedSampledSequence) and seq.logprobs is not None
        tokens = prompt + seq.tokens
        n = len(seq.tokens)
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": np.array(tokens[1:]),
                    "logprobs": np.array([0.0] * (len(prompt) - 1) + seq.logprobs, dtype=np.float32),
                    "advantages": np.array([0.0] * (len(prompt) - 1) + [1.0] * n, dtype=np.float32),
                },
            )
        )
        sampled.append(np.array(seq.logprobs))
        masked.append(np.array(seq.constrained_logprobs))
    out = trainer.forward(data, "importance_sampling").result()
    for output, sampling, under_mask in zip(out.loss_fn_outputs, sampled, masked, strict=True):
        learner = output["logprobs"].to_numpy()[-len(sampling) :]
        ratio = np.exp(learner - sampling)
        assert np.abs(ratio - 1).max() < 2e-3
        assert np.abs(np.exp(learner - under_mask) - 1).mean() > 0.5
    sampler.close()

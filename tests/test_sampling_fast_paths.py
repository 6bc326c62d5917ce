"""The sampling engine's fast paths change speed, never results.

* the lean decode step (Llama-family models) gives the tokens and logprobs of ``model(...)``, on base
  and on LoRA-merged weights, with its fused query/key/value weight sharing the model's memory, and
  so does the step with its products on the kernels the calibration chose (the default), on oneDNN's
  reordered weights that replace the model's own, on plain weights only and through ``F.linear``, and
  every product path gives ``F.linear``'s values for any number of rows; the re-laid-out model's own
  forward (prefill, its query/key/value projections one product) gives what the model as loaded gives,
  in any call order; weights shared with a training run and a tied LM head are left plain, and nothing
  else keeps a plain copy (tests/test_kernel_plan.py: the calibration and each path end to end);
* the prefix cache (multi-turn prompts that extend an earlier prompt + reply) prefills only the new
  tokens and gives the tokens and logprobs of a full prefill; it is bounded and least-recently-used;
  a returning turn that joins a running batch feeds its short tail through the decode steps (no
  prefill pass at all) and samples the same;
* a new sampling client (new weights) never sees another client's cached keys and values;
* the KV budget holds requests back while the running batch's padded KV would exceed it (a request
  alone always runs), and changes no token or logprob;
* token choice lands where each row's draw falls on the exactly computed distribution, through torch's
  operations and through the native ``sample_rows``; the native way samples torch's tokens (logprobs
  within 1e-5, the same draws taken) in batches mixing every kind of row, and its picks follow the
  distribution over 40,000 draws.

The engine tests run the real tiny random Llama through the public client; the token-choice tests run
random logits through the public `choose_tokens` and the native op.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tinker
import torch

from envsuite.backends.local import (
    EngineConfig,
    LocalSamplingClient,
    LocalServiceClient,
    load_sampling_model,
)
from envsuite.engine.kernels import (
    ROW_BUCKETS,
    FrozenLinear,
    FusedPart,
    FusedProjections,
    KernelPlan,
    Layout,
    PanelEmbedding,
    Product,
    ProductPath,
    ReorderReport,
    WeightUse,
    lay_out_frozen_linears,
    native_kernels,
    reorder_frozen_linears,
    usable_paths,
)
from envsuite.engine.sampling import (
    PrefixCache,
    RowSampling,
    choose_tokens,
    kv_bytes_per_position,
    llama_decoder,
    make_generator,
    prefill,
)

MODEL = "tiny-random"
NO_CACHE = EngineConfig(prefix_cache_bytes=0)


def _client(config: EngineConfig) -> tuple[LocalSamplingClient, torch.nn.Module]:
    """A client over its own copy of the model, and that model (for hooks)."""
    own = load_sampling_model(base_model=MODEL)
    return LocalSamplingClient(own.model, own.tokenizer, MODEL, config=config), own.model


def _count_prefilled(model: torch.nn.Module) -> list[int]:
    """A one-item list counting the prompt tokens run through ``model`` in prefill passes.

    Both prefill and decode passes embed their tokens first, so the input embedding sees them all."""
    count = [0]

    def hook(_module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        if args[0].shape[1] > 1:
            count[0] += int((args[0] >= 0).sum())

    embeddings = model.get_input_embeddings()
    assert isinstance(embeddings, torch.nn.Module)
    embeddings.register_forward_pre_hook(hook)
    return count


def _prompt(tokens: list[int]) -> tinker.ModelInput:
    return tinker.ModelInput.from_ints(tokens)


Outputs = list[list[tuple[list[int], list[float]]]]


async def _mixed_batch(client: LocalSamplingClient) -> Outputs:
    """Greedy and seeded rows of different lengths and settings, joining and leaving a running batch."""
    tok = client.get_tokenizer()
    texts = ["Count slowly", "One", "Two words here", "A somewhat longer fourth prompt", "Five"]
    settings = [
        tinker.SamplingParams(max_tokens=40, temperature=0.0, stop=[]),
        tinker.SamplingParams(max_tokens=7, temperature=1.0, stop=[], seed=1),
        tinker.SamplingParams(max_tokens=19, temperature=0.7, top_k=50, stop=[], seed=2),
        tinker.SamplingParams(max_tokens=25, temperature=1.0, top_p=0.9, stop=[], seed=3),
        tinker.SamplingParams(max_tokens=12, temperature=0.0, stop=[]),
    ]
    first = client.sample(_prompt(tok.encode(texts[0])), 1, settings[0])
    await asyncio.sleep(0.05)
    rest = [client.sample(_prompt(tok.encode(t)), 2, p) for t, p in zip(texts[1:], settings[1:], strict=True)]
    responses = [await first] + [await f for f in rest]
    return [[(list(s.tokens), list(s.logprobs or [])) for s in r.sequences] for r in responses]


def _assert_same(reference: Outputs, other: Outputs, atol: float) -> None:
    for ref_request, other_request in zip(reference, other, strict=True):
        for (ref_tokens, ref_logprobs), (tokens, logprobs) in zip(ref_request, other_request, strict=True):
            assert tokens == ref_tokens
            np.testing.assert_allclose(logprobs, ref_logprobs, atol=atol, rtol=0)


REORDERED = EngineConfig(prefix_cache_bytes=0, product_path=ProductPath.ONEDNN_REORDERED.value)
PLAIN_WEIGHTS = EngineConfig(prefix_cache_bytes=0, reorder_weights=False)
PLAIN = EngineConfig(prefix_cache_bytes=0, onednn_products=False)
FORWARD = EngineConfig(lean_decode=False, onednn_products=False, prefix_cache_bytes=0)
"""The reference: transformers' own forward on the model as loaded (``F.linear`` products)."""
TORCH_KERNELS = EngineConfig(prefix_cache_bytes=0, native_kernels=False)
LEAN_CONFIGS = pytest.mark.parametrize(
    "lean_config",
    [NO_CACHE, TORCH_KERNELS, REORDERED, PLAIN_WEIGHTS, PLAIN],
    ids=["calibrated", "torch-kernels", "onednn-reordered", "plain-weights", "f-linear"],
)


@LEAN_CONFIGS
async def test_lean_decode_step_gives_what_the_model_forward_gives(lean_config: EngineConfig) -> None:
    reference, reference_model = _client(FORWARD)
    lean, lean_model = _client(lean_config)
    decode_calls = {id(reference_model): 0, id(lean_model): 0}

    def count(module: torch.nn.Module, _args: tuple[object, ...], kwargs: dict[str, Any]) -> None:
        # A decode call feeds one token per row over a cache that already holds the rows' positions
        # (a one-token prompt prefilled alone also has one column, over an empty cache).
        cache = kwargs.get("past_key_values")
        cached = cache is not None and cache.get_seq_length() > 0
        decode_calls[id(module)] += int(kwargs["input_ids"].shape[1] == 1 and cached)

    for model in (reference_model, lean_model):
        model.register_forward_pre_hook(count, with_kwargs=True)
    expected = await _mixed_batch(reference)
    got = await _mixed_batch(lean)
    reference.close()
    lean.close()
    # Same arithmetic on the same tensors; SDPA may pick a different kernel for the unmasked steps,
    # which rounds differently in the last bits (measured: <= 3e-6 on logprobs near -10).
    _assert_same(expected, got, atol=1e-5)
    # The lean engine decoded without calling the model's forward (only its prefills did).
    assert decode_calls[id(reference_model)] > 0 and decode_calls[id(lean_model)] == 0


@LEAN_CONFIGS
async def test_lean_decode_gives_the_forward_on_lora_merged_weights(
    tmp_path: Path, lean_config: EngineConfig
) -> None:
    service = LocalServiceClient(log_dir=tmp_path)
    trainer = service.create_lora_training_client(MODEL, rank=4, seed=0).result()
    tok = trainer.get_tokenizer()
    tokens = tok.encode("System: learn this line well.\nUser: hello there\nA: general kenobi")
    datum = tinker.Datum(
        model_input=_prompt(tokens[:-1]), loss_fn_inputs={"target_tokens": np.array(tokens[1:])}
    )
    trainer.forward_backward([datum], "cross_entropy").result()
    trainer.optim_step(tinker.AdamParams(learning_rate=5e-2)).result()
    path = trainer.save_weights_for_sampler("lora").result().path
    trainer.close()
    clients = []
    for config in (FORWARD, lean_config):
        loaded = load_sampling_model(model_path=path)
        clients.append(
            LocalSamplingClient(loaded.model, loaded.tokenizer, MODEL, model_path=path, config=config)
        )
    expected = await _mixed_batch(clients[0])
    got = await _mixed_batch(clients[1])
    for client in clients:
        client.close()
    _assert_same(expected, got, atol=1e-5)


def _paths_here() -> list[ProductPath]:
    """Every product path this machine can run (the native ones where they built)."""
    weight = torch.zeros(2, 2)
    return list(usable_paths(weight, native=native_kernels().available))


@pytest.mark.parametrize("path", list(ProductPath), ids=[p.value for p in ProductPath])
def test_every_product_path_gives_f_linear_values_for_any_row_count(path: ProductPath) -> None:
    """The decoder's products through each path, on the layouts that replaced the model's weights
    (query/key/value and gate/up fused), give ``F.linear``'s values on the weights as loaded for every
    batch the engine decodes (and prefill-sized inputs), with a bias too. The tied LM head keeps its
    plain weight (through the path's plain counterpart) unless the path's layout is the panels, which
    the embedding then reads its rows from."""
    if path not in _paths_here():
        pytest.skip(f"{path.value} is not usable here (native kernels: {native_kernels().reason})")
    model = load_sampling_model(base_model=MODEL).model
    plain = _plain_layer_weights(model)
    report = lay_out_frozen_linears(model, KernelPlan.forced(path))
    assert report.fused_blocks == 2 * model.config.num_hidden_layers
    decoder = llama_decoder(model)
    assert decoder is not None
    generator = torch.Generator().manual_seed(0)
    layer = decoder.layers[0]
    bias = torch.randn(layer.o.out_features, generator=generator)
    biased = Product(layer.o.weight, bias, layer.o.in_features, layer.o.out_features, layer.o.paths)
    expected = ["qkv", "o", "gate_up", "down", "lm_head", "o"]
    products = (*layer.qkv, layer.o, *layer.mlp_in, layer.down, decoder.lm_head, biased)
    for product, name in zip(products, expected, strict=True):
        tied = product is decoder.lm_head
        tied_layout = path.layout if WeightUse.EMBEDDED.allows(path.layout) else Layout.PLAIN
        assert product.layout is (tied_layout if tied else path.layout)
        assert set(product.paths) == {path} or (tied and tied_layout is not path.layout)
        weight = plain[name]
        for rows in (1, 2, 3, 7, 8, 9, 16, 17, 32, 33, 64, 65, 300):
            x = torch.randn(rows, 1, weight.shape[1], generator=generator)
            wanted = torch.nn.functional.linear(x, weight, bias if product is biased else None)
            torch.testing.assert_close(product(x), wanted)


def test_a_product_runs_the_path_of_its_row_bucket() -> None:
    """A product with a different path per row bucket runs, for each row count, the path of the smallest
    bucket at least that large (the last one beyond), and every path gives the same values."""
    plain_paths = [p for p in _paths_here() if p.layout is Layout.PLAIN]
    paths = [plain_paths[i % len(plain_paths)] for i in range(len(ROW_BUCKETS))]
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(40, 24, generator=generator)
    product = Product.of_plain(weight, None, paths)
    assert [product.path_for(rows) for rows in (1, 2, 3, 5, 9, 17, 33, 65, 257, 5000)] == [
        paths[i] for i in (0, 1, 2, 3, 4, 5, 6, 7, 7, 7)
    ]
    for rows in (1, 3, 17, 100, 300):
        x = torch.randn(rows, 24, generator=generator)
        torch.testing.assert_close(product(x), torch.nn.functional.linear(x, weight))


def _plain_layer_weights(model: Any) -> dict[str, torch.Tensor]:
    """The first layer's products' weights as loaded (fused ones stacked) and the LM head's, copied."""
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    weights = {
        "qkv": torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
        "o": attn.o_proj.weight,
        "gate": mlp.gate_proj.weight,
        "up": mlp.up_proj.weight,
        "gate_up": torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
        "down": mlp.down_proj.weight,
        "lm_head": model.lm_head.weight,
    }
    return {name: w.detach().clone() for name, w in weights.items()}


PANELS = EngineConfig(prefix_cache_bytes=0, product_path=ProductPath.PANELS.value)


@pytest.mark.parametrize(
    "config", [REORDERED, PLAIN_WEIGHTS, PANELS], ids=["onednn-reordered", "plain-weights", "panels"]
)
async def test_laid_out_model_forward_gives_the_forward_of_the_model_as_loaded(config: EngineConfig) -> None:
    """With no lean step, the engine's prefill and decode run the re-laid-out model's own forward (its
    query/key/value projections one fused product, gate and up another): same tokens and logprobs as
    the model as loaded. The tied LM head keeps the embedding's plain weight, or on panels the
    embedding reads its rows from them (one copy either way); no re-laid-out layer keeps a parameter."""
    if config is PANELS and ProductPath.PANELS not in _paths_here():
        pytest.skip(f"panels are not usable here (native kernels: {native_kernels().reason})")
    reference, _ = _client(FORWARD)
    reordered, model = _client(replace(config, lean_decode=False))
    layers = model.config.num_hidden_layers
    # query/key/value and gate/up as parts of two fused products; o, down and the LM head on their own
    assert sum(isinstance(m, FusedPart) for m in model.modules()) == 5 * layers
    frozen = [m for m in model.modules() if isinstance(m, FrozenLinear)]
    assert len(frozen) == 2 * layers + 1 and not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    assert isinstance(head, FrozenLinear)
    if config is PANELS:
        assert isinstance(embedding, PanelEmbedding) and embedding.panels is head.product.weight
        assert all(m.product.layout is Layout.PANELS for m in frozen)
    else:
        assert head.product.weight is embedding.weight
        relaid = config.product_path is not None
        assert all((m.product.layout is not Layout.PLAIN) == (relaid and m is not head) for m in frozen)
    expected, got = await _mixed_batch(reference), await _mixed_batch(reordered)
    reference.close()
    reordered.close()
    _assert_same(expected, got, atol=1e-5)


def test_a_panel_embedding_reads_the_plain_embeddings_rows() -> None:
    if ProductPath.PANELS not in _paths_here():
        pytest.skip(f"panels are not usable here (native kernels: {native_kernels().reason})")
    generator = torch.Generator().manual_seed(3)
    embedding = torch.nn.Embedding(37, 24)  # 37 rows: the last panel only partly filled
    torch.nn.init.normal_(embedding.weight, generator=generator)
    product = Product.of_plain(embedding.weight.detach(), None, [ProductPath.PANELS] * len(ROW_BUCKETS))
    panel_embedding = PanelEmbedding(product.weight, 37)
    ids = torch.tensor([[0, 15, 16, 36], [31, 32, 1, 17]])
    with torch.no_grad():
        assert torch.equal(panel_embedding(ids), embedding(ids))
        assert torch.equal(panel_embedding(torch.arange(37)), embedding.weight)
        assert panel_embedding(torch.tensor([[36]], dtype=torch.int32)).shape == (1, 1, 24)
        with pytest.raises(RuntimeError, match="out of range"):
            panel_embedding(torch.tensor([37]))  # a padding column of the last panel is no row
        with pytest.raises(RuntimeError, match="out of range"):
            panel_embedding(torch.tensor([-1]))


def test_fused_projections_give_each_layers_product_in_any_call_order() -> None:
    generator = torch.Generator().manual_seed(0)
    linears = [torch.nn.Linear(16, n, bias=n != 8) for n in (16, 8, 8)]
    for linear in linears:
        torch.nn.init.normal_(linear.weight, generator=generator)
    paths = [ProductPath.ONEDNN_REORDERED] * len(ROW_BUCKETS)
    fused = FusedProjections.of(linears, paths)
    parts = [fused.part(i) for i in range(3)]
    x, y = torch.randn(5, 16, generator=generator), torch.randn(5, 16, generator=generator)
    with torch.no_grad():
        for order in ([0, 1, 2], [2, 0, 1], [1, 1, 0, 2, 2]):
            for i in order:
                torch.testing.assert_close(parts[i](x), linears[i](x))
        # Interleaved inputs: a part called on another tensor computes that tensor's product.
        torch.testing.assert_close(parts[0](x), linears[0](x))
        torch.testing.assert_close(parts[1](y), linears[1](y))
        torch.testing.assert_close(parts[2](x), linears[2](x))


def test_lean_decode_reads_the_models_own_projection_weights() -> None:
    """The fused q/k/v weight (and every other weight) shares the model's memory: a change to the model's weights
    in place reaches the lean step too, so the two never disagree (and the model holds one copy)."""
    model = load_sampling_model(base_model=MODEL).model
    decoder = llama_decoder(model)
    assert decoder is not None
    # A second decoder on the same model fuses nothing again: same memory.
    again = llama_decoder(model)
    assert again is not None
    for mine, theirs in zip(decoder.layers, again.layers, strict=True):
        assert mine.qkv[0].weight.data_ptr() == theirs.qkv[0].weight.data_ptr()
    first: Any = model.get_decoder().layers[0]
    with torch.inference_mode():
        first.self_attn.k_proj.weight.mul_(3.0)
        first.mlp.up_proj.weight.add_(0.05)
        prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]
        lean, plain = prefill(model, prompts, False).batch, prefill(model, prompts, False).batch
        for batch in (lean, plain):
            batch.pending_B = [3, 4]
        lean_logits = lean.step(model, decoder)
        plain_logits = plain.step(model, None)
    torch.testing.assert_close(lean_logits, plain_logits, rtol=0, atol=1e-4)


async def _conversation(
    client: LocalSamplingClient,
    turns: int,
    players: int,
    max_tokens: int = 10,
    samples: int = 1,
    after_turn: Callable[[int], None] = lambda _turn: None,
) -> tuple[Outputs, list[list[int]]]:
    """Multi-turn chats: each turn's prompt is the previous prompt + the (first) reply + a new user line.

    Later turns ask for ``samples`` replies (every one is recorded); ``after_turn`` runs after each turn.
    """
    tok = client.get_tokenizer()
    prompts = [
        tok.encode(f"System: you are player {i} of a guessing game; ask short questions.\nUser: start\nA:")
        for i in range(players)
    ]
    outputs: Outputs = [[] for _ in range(players)]
    for turn in range(turns):
        params = [
            tinker.SamplingParams(max_tokens=max_tokens, temperature=1.0, stop=[], seed=100 * turn + i)
            for i in range(players)
        ]
        count = samples if turn else 1
        responses = await asyncio.gather(
            *(client.sample(_prompt(p), count, sp) for p, sp in zip(prompts, params, strict=True))
        )
        for i, response in enumerate(responses):
            outputs[i].extend((list(seq.tokens), list(seq.logprobs or [])) for seq in response.sequences)
            reply = list(response.sequences[0].tokens)
            prompts[i] = prompts[i] + reply + tok.encode(f"\nUser: turn {turn}, no.\nA:")
        after_turn(turn)
    return outputs, prompts


async def test_multi_turn_prompts_prefill_only_new_tokens_and_sample_the_same() -> None:
    plain, plain_model = _client(NO_CACHE)
    cached, cached_model = _client(EngineConfig())
    plain_prefilled, cached_prefilled = _count_prefilled(plain_model), _count_prefilled(cached_model)
    expected, final_prompts = await _conversation(plain, turns=5, players=3)
    got, _ = await _conversation(cached, turns=5, players=3)
    stats = cached.prefix_cache_stats()
    plain.close()
    cached.close()
    _assert_same(expected, got, atol=1e-4)
    # Every later turn found its conversation so far in the cache...
    assert stats.hit_tokens > 0
    # ...so the tokens prefilled over the whole game grow like the conversation, not like its square.
    assert cached_prefilled[0] < sum(len(p) for p in final_prompts) < plain_prefilled[0]


async def test_a_cleared_prefix_cache_is_empty_and_changes_no_sample() -> None:
    """``clear_prefix_cache`` after every turn (the engine thread still alive: the clear goes through its
    queue) leaves nothing cached and nothing to hit, and every sample is the uncached one."""
    plain, _ = _client(NO_CACHE)
    cached, _ = _client(EngineConfig())
    expected, _ = await _conversation(plain, turns=3, players=2)
    got, _ = await _conversation(
        cached, turns=3, players=2, after_turn=lambda _turn: cached.clear_prefix_cache()
    )
    stats = cached.prefix_cache_stats()
    plain.close()
    cached.close()
    _assert_same(expected, got, atol=1e-4)
    assert stats.inserted_tokens > 0
    assert stats.hit_tokens == 0 and stats.cached_tokens == 0 and stats.cached_bytes == 0


async def _conversation_beside_a_long_request(
    client: LocalSamplingClient, after_turn: Callable[[int], None]
) -> Outputs:
    """The multi-turn chats of :func:`_conversation` while one long greedy request keeps a batch
    decoding, so every returning turn joins a running batch; its output comes last."""
    tok = client.get_tokenizer()
    long_request = client.sample(
        _prompt(tok.encode("Background: a request that outlasts the whole conversation")),
        1,
        tinker.SamplingParams(max_tokens=1200, temperature=0.0, stop=[]),
    )
    await asyncio.sleep(0.05)
    outputs, _ = await _conversation(client, turns=4, players=3, samples=2, after_turn=after_turn)
    sequence = (await long_request).sequences[0]
    return [*outputs, [(list(sequence.tokens), list(sequence.logprobs or []))]]


async def test_turns_joining_a_running_batch_feed_their_tails_through_decode_steps() -> None:
    plain, _ = _client(NO_CACHE)
    expected = await _conversation_beside_a_long_request(plain, lambda _turn: None)
    plain.close()
    prefilled_after_turn: dict[str, list[int]] = {}
    configs = {
        "fed": EngineConfig(),
        "prefilled": EngineConfig(max_fed_tail_tokens=0),
        "no lean step": EngineConfig(lean_decode=False),
    }
    for name, config in configs.items():
        client, model = _client(config)
        prefilled = _count_prefilled(model)
        seen: list[int] = []
        prefilled_after_turn[name] = seen

        def note(_turn: int, seen: list[int] = seen, prefilled: list[int] = prefilled) -> None:
            seen.append(prefilled[0])

        got = await _conversation_beside_a_long_request(client, note)
        client.close()
        # Fed or prefilled, every reply (two samples per later turn) and the long request's tokens are
        # those of full prefills without the cache.
        _assert_same(expected, got, atol=1e-4)
    # With feeding, no turn after the first ran a prefill pass: each tail went through decode steps...
    fed = prefilled_after_turn["fed"]
    assert fed[0] > 0 and fed[1:] == [fed[0]] * 3
    # ...while with max_fed_tail_tokens=0, or without the lean step (which feeds the tails), every
    # later turn prefilled its tails.
    for name in ("prefilled", "no lean step"):
        tails = prefilled_after_turn[name]
        assert all(later > earlier for earlier, later in itertools.pairwise(tails))


def test_prefix_cache_stores_shared_prefixes_once_and_evicts_least_recently_used() -> None:
    per_token = 2 * 4 * 4  # KV blocks (layers=1, 2, kv_heads=1, tokens, head_dim=4) of float32

    def kv_of(tokens: list[int]) -> Callable[[int, int], torch.Tensor]:
        # A position's "KV" is its token id, so a match can be checked value by value.
        values = torch.tensor(tokens, dtype=torch.float32)
        return lambda start, end: values[start:end].reshape(1, 1, 1, -1, 1).expand(1, 2, 1, -1, 4)

    a = list(range(100, 140))
    b = a[:30] + list(range(500, 510))
    c = list(range(900, 940))
    cache = PrefixCache(max_bytes=per_token * (len(a) + 10 + 35))
    cache.insert(a, kv_of(a))
    cache.insert(b, kv_of(b))
    assert cache.stats().cached_tokens == len(a) + 10  # b's first 30 tokens are a's, stored once
    match = cache.match([*b, 7, 8], limit=len(b) + 1)
    assert match.length == len(b)
    assert torch.cat(match.blocks, dim=3)[0, 0, 0, :, 0].tolist() == [float(t) for t in b]
    partial = cache.match([*a[:35], 1, 2, 3], limit=37)
    assert partial.length == 35
    # a was used last (just now), so c pushes out b's own tail: the least recently used leaf.
    cache.insert(c, kv_of(c))
    assert cache.stats().cached_bytes <= cache.max_bytes
    assert cache.match([*a, 1], limit=len(a)).length == len(a)
    assert cache.match([*b, 1], limit=len(b)).length == 30
    assert cache.match([*c, 1], limit=len(c)).length == len(c)


async def test_a_new_sampling_client_never_reuses_the_old_weights_cache(tmp_path: Path) -> None:
    service = LocalServiceClient(log_dir=tmp_path)
    trainer = service.create_lora_training_client(MODEL, rank=4, seed=0).result()
    before = trainer.save_weights_and_get_sampling_client().result()
    tok = before.get_tokenizer()
    prompt = tok.encode("System: a long enough shared opening for the cache to matter.\nUser: hi\nA:")
    greedy = tinker.SamplingParams(max_tokens=8, temperature=0.0, stop=[])
    first = (await before.sample(_prompt(prompt), 1, greedy)).sequences[0]
    follow_up = prompt + list(first.tokens) + tok.encode("\nUser: and then?\nA:")
    datum = tinker.Datum(
        model_input=_prompt(follow_up[:-1]), loss_fn_inputs={"target_tokens": np.array(follow_up[1:])}
    )
    trainer.forward_backward([datum], "cross_entropy").result()
    trainer.optim_step(tinker.AdamParams(learning_rate=5e-2)).result()
    after = trainer.save_weights_and_get_sampling_client("after").result()
    on_new = (await after.sample(_prompt(follow_up), 1, greedy)).sequences[0]
    on_old = (await before.sample(_prompt(follow_up), 1, greedy)).sequences[0]
    assert after.model_path is not None
    reference_model = load_sampling_model(model_path=after.model_path)
    reference = LocalSamplingClient(reference_model.model, reference_model.tokenizer, MODEL, config=NO_CACHE)
    expected = (await reference.sample(_prompt(follow_up), 1, greedy)).sequences[0]
    for client in (before, after, reference):
        client.close()
    trainer.close()
    assert list(on_new.tokens) == list(expected.tokens)
    np.testing.assert_allclose(on_new.logprobs, expected.logprobs, atol=1e-5, rtol=0)
    # The weights did change, so reusing the old client's KV would have shown.
    assert not np.allclose(on_old.logprobs, expected.logprobs, atol=1e-3)


@pytest.mark.parametrize("budget", [0, 4096])
async def test_prefix_cache_stays_within_its_budget(budget: int) -> None:
    client, _ = _client(EngineConfig(prefix_cache_bytes=budget))
    await _conversation(client, turns=3, players=2, max_tokens=6)
    stats = client.prefix_cache_stats()
    client.close()
    assert stats.cached_bytes <= budget
    if budget == 0:
        assert stats.inserted_tokens == 0


async def _uneven_requests(client: LocalSamplingClient) -> Outputs:
    """Requests of very different prompt lengths, all sent at once (seeded and greedy rows)."""
    generator = torch.Generator().manual_seed(11)
    lengths = [12, 70, 9, 64, 20, 15, 80, 10]
    futures = [
        client.sample(
            _prompt(torch.randint(5, 200, (n,), generator=generator).tolist()),
            2,
            tinker.SamplingParams(
                max_tokens=6 + i % 4, temperature=0.0 if i % 3 == 0 else 1.0, stop=[], seed=i
            ),
        )
        for i, n in enumerate(lengths)
    ]
    responses = [await f for f in futures]
    return [[(list(s.tokens), list(s.logprobs or [])) for s in r.sequences] for r in responses]


async def test_the_kv_budget_holds_requests_back_and_samples_the_same() -> None:
    unbounded, model = _client(EngineConfig(prefix_cache_bytes=0, max_kv_bytes=None))
    per_position = kv_bytes_per_position(model)
    assert per_position is not None
    budget = per_position * 4 * 90  # four rows of the longest prompt (and room for what they sample)
    bounded, _ = _client(EngineConfig(prefix_cache_bytes=0, max_kv_bytes=budget))
    expected = await _uneven_requests(unbounded)
    got = await _uneven_requests(bounded)
    free, held = unbounded.kv_stats(), bounded.kv_stats()
    unbounded.close()
    bounded.close()
    _assert_same(expected, got, atol=1e-4)
    # Without a budget all 16 rows ran together, padded to the longest prompt; with one, requests
    # waited for rows to leave, and no admission took the batch over the budget.
    assert free.peak_admitted_bytes > 3 * budget and free.budget_waits == 0
    assert 0 < held.peak_admitted_bytes <= budget and held.budget_waits > 0


async def test_a_request_alone_runs_even_over_the_kv_budget() -> None:
    client, _ = _client(EngineConfig(prefix_cache_bytes=0, max_kv_bytes=1))
    greedy = tinker.SamplingParams(max_tokens=5, temperature=0.0, stop=[])
    first, second = (client.sample(_prompt(list(range(10, 60))), 3, greedy) for _ in range(2))
    responses = [await first, await second]
    stats = client.kv_stats()
    client.close()
    assert [len(s.tokens) for r in responses for s in r.sequences] == [5] * 6
    # Each request ran alone (three rows over one prompt), the second once the first had left.
    assert stats.budget_waits > 0


def _native_or_skip(native: bool) -> None:
    if native and not native_kernels().available:
        pytest.skip(f"the native kernels are not built here: {native_kernels().reason}")


# 49152: blocked search (256 divides it); 1000: the plain scan (torch), a partial last block (native)
@pytest.mark.parametrize("vocab", [49152, 1000])
@pytest.mark.parametrize("native", [False, True], ids=["torch", "native"])
def test_token_choice_lands_where_the_draw_falls_on_the_cumulative_distribution(
    vocab: int, native: bool
) -> None:
    """Blocked inverse-CDF sampling picks, for each row's uniform draw, the token whose interval of the
    exactly (float64) computed cumulative distribution holds it, up to float32 rounding; its logprob is
    the token's log-softmax; and tokens top-k masks out are never picked. Both ways: torch's operations
    and the native ``sample_rows``."""
    _native_or_skip(native)
    logits = torch.randn(64, vocab, generator=torch.Generator().manual_seed(vocab)) * 3
    rows = [RowSampling(0.7, -1, 1.0, make_generator(i)) for i in range(64)]
    draws = [make_generator(i) for i in range(64)]  # the same streams: each row's draw, replayed
    for _ in range(20):
        choice = choose_tokens(logits, rows, native=native)
        scaled = logits.double() / 0.7
        cdf = scaled.softmax(dim=-1).cumsum(dim=-1)
        for i, token in enumerate(choice.tokens_B):
            target = 1.0 - float(torch.rand((), generator=draws[i]).item())
            below = float(cdf[i, token - 1]) if token > 0 else 0.0
            assert below - 1e-5 <= target <= float(cdf[i, token]) + 1e-5, (i, token, target)
            expected = float(scaled[i, token] - torch.logsumexp(scaled[i], dim=-1))
            assert choice.logprobs_B[i] == pytest.approx(expected, abs=1e-4)
    top_k = [RowSampling(1.0, 5, 1.0, make_generator(i)) for i in range(64)]
    allowed = logits.topk(5, dim=-1).indices
    for _ in range(20):
        picked = choose_tokens(logits, top_k, native=native).tokens_B
        assert all(token in allowed[i].tolist() for i, token in enumerate(picked))


def _exact_logprobs(logits: torch.Tensor, rows: list[RowSampling], tokens: list[int]) -> torch.Tensor:
    """Each row's float64 log-softmax at its token (greedy rows at temperature 1, as the engine scores them)."""
    temperature = torch.tensor([row.temperature if row.temperature > 0 else 1.0 for row in rows])
    scaled = logits.double() / temperature[:, None]
    return scaled.log_softmax(dim=-1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def _mixed_rows(seed: int) -> list[RowSampling]:
    """Every kind of row: plain sampled at three temperatures, greedy, greedy asking for top logprobs,
    top-k, top-p, sampled asking for top logprobs."""
    kinds = [
        (1.0, -1, 1.0, 0),
        (0.0, -1, 1.0, 0),
        (0.6, -1, 1.0, 0),
        (1.7, -1, 1.0, 0),
        (0.0, -1, 1.0, 3),
        (1.0, 40, 1.0, 0),
        (0.9, -1, 0.8, 0),
        (1.0, -1, 1.0, 5),
    ]
    return [
        RowSampling(t, k, p, make_generator(seed + i) if t > 0 else None, top_logprobs=n)
        for i, (t, k, p, n) in enumerate(kinds * 3)
    ]


UNIT_ROUNDOFF_FP32 = 2.0**-24


def _logprob_error_bounds(logits: torch.Tensor, rows: list[RowSampling], tokens: list[int]) -> torch.Tensor:
    """Per row, how far a float32 log-softmax of the row's scaled logits may be from the exact value,
    from how it is computed, not from any one CPU: one rounding (a unit roundoff ``u`` of its magnitude)
    for each of the scaled logit ``s``, its distance to the row's max ``M``, ``log`` of the sum and the
    result ``lp``, ``4 u`` for ``exp``'s and ``log``'s own error, and the relative error of the float32 sum
    of the row's V weights. That last term depends on the summation order, which follows the vector
    width (torch's log-softmax on AVX2 sums 8 lanes, on AVX-512 16): ``u sqrt(V)`` is the size of the
    accumulated rounding of V independently rounded additions in any order (Higham, Accuracy and
    Stability of Numerical Algorithms, 2nd ed., section 4.2), taken 4 times over. The native sampler's
    order (16 lanes of at most 16 terms per 256-token block, a tree, then the blocks in float64) is
    covered by it with room to spare: its rigorous worst case is ``36 u``."""
    temperature = torch.tensor([row.temperature if row.temperature > 0 else 1.0 for row in rows])
    scaled = logits.double() / temperature[:, None]
    exact = scaled.log_softmax(dim=-1)
    index = torch.tensor(tokens)[:, None]
    s, lp = scaled.gather(1, index)[:, 0], exact.gather(1, index)[:, 0]
    top = scaled.max(dim=-1).values
    log_sum = torch.logsumexp(scaled - top[:, None], dim=-1)
    magnitudes = s.abs() + (s - top).abs() + log_sum.abs() + lp.abs() + 4
    return UNIT_ROUNDOFF_FP32 * (magnitudes + 4 * math.sqrt(logits.shape[-1]))


def test_native_token_choice_samples_what_torchs_way_samples() -> None:
    """``choose_tokens(native=True)`` (the engine's default where the native kernels load) takes each
    row's one draw from the same generator and picks the same token as torch's way, with the same
    logprob (each way within the float32 error bound of its summation order of the exact float64
    log-softmax: :func:`_logprob_error_bounds`) and the same top logprobs, in a batch mixing every kind
    of row (the plain ones go to ``sample_rows``, the others stay on torch's path); greedy rows pick the
    argmax. Logits with -inf entries (a processor's mask) and a vocabulary no block width divides
    included."""
    _native_or_skip(True)
    generator = torch.Generator().manual_seed(3)
    for vocab in (49152, 1003):
        torch_rows, native_rows = _mixed_rows(vocab), _mixed_rows(vocab)
        for step in range(15):
            logits = torch.randn(len(torch_rows), vocab, generator=generator) * (1 + step % 4)
            logits[:, : vocab // 7] = float("-inf") if step % 3 == 0 else logits[:, : vocab // 7]
            ours = choose_tokens(logits, native_rows, native=True)
            theirs = choose_tokens(logits, torch_rows)
            assert ours.tokens_B == theirs.tokens_B
            # the plain rows (sample_rows' in the native way) within the bound of their summation
            # order, the others (torch's path both ways) equal
            plain = [i for i, row in enumerate(native_rows) if row.plain]
            rows, tokens = [native_rows[i] for i in plain], [ours.tokens_B[i] for i in plain]
            bounds, exact = (
                _logprob_error_bounds(logits[plain], rows, tokens),
                _exact_logprobs(logits[plain], rows, tokens),
            )
            for way in (ours, theirs):
                errors = (torch.tensor([way.logprobs_B[i] for i in plain], dtype=torch.float64) - exact).abs()
                assert (errors <= bounds).all(), (errors - bounds).max()
            others = [i for i in range(len(native_rows)) if i not in plain]
            assert [ours.logprobs_B[i] for i in others] == [theirs.logprobs_B[i] for i in others]
            assert ours.top_B == theirs.top_B
            greedy = [i for i, row in enumerate(native_rows) if row.greedy]
            assert [ours.tokens_B[i] for i in greedy] == logits[greedy].argmax(dim=-1).tolist()
        for mine, other in zip(native_rows, torch_rows, strict=True):  # the same draws were taken
            if mine.generator is not None and other.generator is not None:
                assert torch.equal(mine.generator.get_state(), other.generator.get_state())


def test_native_token_choice_follows_the_distribution() -> None:
    """Over 40,000 draws of one row over 6 tokens (temperature 0.8), each token's share of
    ``sample_rows``'s picks is within 4 standard errors of its probability."""
    _native_or_skip(True)
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0, 1.5]])
    probs = (logits[0].double() / 0.8).softmax(dim=0)
    draws = 40_000
    uniform = 1.0 - torch.rand(draws, generator=torch.Generator().manual_seed(11))
    tokens, _ = torch.ops.envsuite.sample_rows(
        logits.expand(draws, -1).contiguous(), torch.full((draws,), 0.8), uniform
    )
    counts = torch.bincount(tokens, minlength=6).double() / draws
    error = (probs * (1 - probs) / draws).sqrt()
    assert ((counts - probs).abs() <= 4 * error).all(), (counts, probs)


def test_reordering_leaves_shared_and_tied_weights_plain() -> None:
    """Weights another live model holds (a LoRA snapshot's frozen base) keep their layer and tensor: a
    reordered copy would only add memory. The tied LM head stays plain for the embedding."""
    model = load_sampling_model(base_model=MODEL).model
    gates = [layer.mlp.gate_proj for layer in model.model.layers]
    shared = {id(gate.weight) for gate in gates}
    memory_before = {name: p.data_ptr() for name, p in model.named_parameters()}
    gate_memory = [gate.weight.data_ptr() for gate in gates]
    report = reorder_frozen_linears(model, shared=shared)
    # The rest (embedding, norms) moved out of the checkpoint's memory map, so the map can go; the
    # shared weights did not move.
    moved = {name for name, p in model.named_parameters() if p.data_ptr() != memory_before[name]}
    assert moved == {name for name, p in model.named_parameters() if id(p) not in shared}
    layers = len(gates)
    # gate shared, so up (its fusion partner) stays plain with it, each its own product
    assert report == ReorderReport(reordered=5 * layers, fused_blocks=layers, kept=2 * layers + 1)
    for layer, gate in zip(model.model.layers, gates, strict=True):
        shared_gate, up = layer.mlp.gate_proj, layer.mlp.up_proj
        assert isinstance(shared_gate, FrozenLinear) and shared_gate.product.weight is gate.weight
        assert gate.weight.data_ptr() in gate_memory  # not copied
        assert isinstance(up, FrozenLinear) and up.product.layout is Layout.PLAIN
        assert isinstance(layer.self_attn.k_proj, FusedPart)
        assert isinstance(layer.mlp.down_proj, FrozenLinear)
        assert layer.mlp.down_proj.product.layout is Layout.ONEDNN_REORDERED
    decoder = llama_decoder(model)  # a decoder over the mixed model multiplies what the model holds
    assert decoder is not None and len(decoder.layers[0].mlp_in) == 2


def test_lora_snapshots_reorder_only_the_layers_they_own(tmp_path: Path) -> None:
    """A LoRA run's sampling snapshot owns its merged layers (reordered) and shares the frozen base of
    the rest with the trainer (left plain: a reordered copy would only add memory); training goes on."""
    service = LocalServiceClient(log_dir=tmp_path)
    trainer = service.create_lora_training_client(MODEL, rank=4, seed=0, train_mlp=False).result()
    tok = trainer.get_tokenizer()
    tokens = tok.encode("User: hello there\nA: general kenobi")
    datum = tinker.Datum(
        model_input=_prompt(tokens[:-1]), loss_fn_inputs={"target_tokens": np.array(tokens[1:])}
    )
    for _ in range(2):
        trainer.forward_backward([datum], "cross_entropy").result()
        trainer.optim_step(tinker.AdamParams(learning_rate=1e-2)).result()
        sampler = trainer.save_weights_and_get_sampling_client().result()
        response = sampler.sample(
            _prompt(tokens[:4]), 2, tinker.SamplingParams(max_tokens=4, seed=0)
        ).result()
        assert len(response.sequences) == 2
        layers = 2  # the tiny model's
        # attention (q/k/v fused, o) and the adapted, untied LM head are the snapshot's own (on the
        # layout the calibration chose); gate/up/down shared with the trainer, so plain
        report = sampler.reorder_report()
        assert report is not None and report.fused_blocks == layers
        assert report.reordered + report.kept == 7 * layers + 1 and report.kept >= 3 * layers
        sampler.close()
    trainer.close()

"""``torch.ops.envsuite.decode_layers`` run as a team (one parallel region for the whole step) against
the same op run op by op (``ENVSUITE_DECODE_TEAM=0``): the same residual stream and the same new cache
columns, bit for bit, for any thread count and row count, with and without padding masks.

The layer stack is random (no model needed): 3 layers, hidden 80 (not a multiple of 32: a product's
last item is one panel), 6 query heads over 2 key/value heads of 16 floats, intermediate 280 (SiLU in
spans of 256 and 24, the last 8 values past the vectors)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from envsuite.engine.kernels import CLOCK_ENV, TEAM_PHASES, native_kernels, read_team_clock
from tests.support.native import torch_threads

LAYERS, WIDTH, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 3, 80, 6, 2, 16, 280
PANELS = 3  # ProductCode.PANELS (envsuite/engine/sampling/_captured_step.py)
PANELS_BY_OP = 4  # ProductCode.PANELS_BY_OP
VOCAB = 250  # not a multiple of 16: the logits are the panels' first 250 columns


@pytest.fixture(autouse=True)
def _native() -> None:
    if not native_kernels().available:
        pytest.skip(f"the native kernels are not built here: {native_kernels().reason}")


@dataclass
class Stack:
    """A random layer stack and a step's inputs, as ``CapturedLayers.run`` passes them."""

    weights: list[torch.Tensor]
    hidden: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    mask: torch.Tensor | None
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    start: int
    end: int

    def call(
        self,
        weights: list[torch.Tensor] | None = None,
        paths: list[int] | None = None,
        head: tuple[torch.Tensor, torch.Tensor, int] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``decode_layers`` on copies of the caches (``weights`` and ``paths``: the stack's own, all on
        panels, unless given; ``head``: the final norm, the LM head and its path, or None): its result,
        and every layer's keys and values after it."""
        keys = [k.clone() for k in self.keys]
        values = [v.clone() for v in self.values]
        norm, lm_head, code = head if head is not None else (None, None, PANELS)
        out = torch.ops.envsuite.decode_layers(
            self.hidden,
            self.cos,
            self.sin,
            self.mask,
            self.weights if weights is None else weights,
            [PANELS] * (4 * LAYERS) if paths is None else paths,
            keys,
            values,
            self.start,
            self.end,
            HEADS,
            KV_HEADS,
            INTERMEDIATE,
            1e-5,
            HEAD_DIM**-0.5,
            norm,
            lm_head,
            code,
            VOCAB if head is not None else 0,
        )
        return out, keys + values

    def run(self, team: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The residual stream after the stack as a team or op by op, and the caches after it."""
        monkeypatch.setenv("ENVSUITE_DECODE_TEAM", "1" if team else "0")
        assert _runs_as_team(self.weights, [PANELS] * (4 * LAYERS)) == team
        return self.call()


def _runs_as_team(weights: list[torch.Tensor], paths: list[int]) -> bool:
    return bool(
        torch.ops.envsuite.decode_layers_team(weights, paths, WIDTH, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE)
    )


def _stack(rows: int, masked: bool, seed: int) -> Stack:
    generator = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    def panels(out_features: int, in_features: int) -> torch.Tensor:
        weight = randn(out_features, in_features) / in_features**0.5
        return torch.ops.envsuite.pack_panels(weight)

    weights: list[torch.Tensor] = []
    for _ in range(LAYERS):
        weights += [
            1 + 0.1 * randn(WIDTH),
            panels((HEADS + 2 * KV_HEADS) * HEAD_DIM, WIDTH),
            panels(WIDTH, HEADS * HEAD_DIM),
            1 + 0.1 * randn(WIDTH),
            panels(2 * INTERMEDIATE, WIDTH),
            panels(WIDTH, INTERMEDIATE),
        ]
    start, end, columns = 2, 40, 48  # positions [2, 40] attend; column 40 is the new one
    keys = [randn(rows + 1, KV_HEADS, columns, HEAD_DIM) for _ in range(LAYERS)]
    values = [randn(rows + 1, KV_HEADS, columns, HEAD_DIM) for _ in range(LAYERS)]
    mask = None
    if masked:  # left padding of different lengths, and a gap; the new position always attends
        mask = torch.ones(rows, end + 1 - start, dtype=torch.bool)
        for row in range(rows):
            mask[row, : (7 * row) % 30] = False
        mask[:, 33:36] = False
    angles = randn(rows, 1, HEAD_DIM)
    return Stack(weights, randn(rows, 1, WIDTH), angles.cos(), angles.sin(), mask, keys, values, start, end)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("rows", [1, 5, 12, 16])
def test_the_team_gives_what_the_ops_give(threads: int, rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows 1 and 5 take items of one panel, 12 and 16 of two (16 through x read k-major, each thread
    its own copy); three threads on this machine's two cores share
    uneven runs (and wait for each other through the barrier's yield)."""
    with torch_threads(threads):
        for masked in (False, True):
            stack = _stack(rows, masked, seed=rows + 10 * threads)
            by_op, cache_by_op = stack.run(team=False, monkeypatch=monkeypatch)
            team, cache_team = stack.run(team=True, monkeypatch=monkeypatch)
            assert torch.equal(by_op, team), (threads, rows, masked)
            for ours, theirs in zip(cache_team, cache_by_op, strict=True):
                assert torch.equal(ours, theirs)
            assert by_op.shape == (rows, 1, WIDTH) and torch.isfinite(by_op).all()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [1, 12, 16])
def test_with_the_lm_head_the_team_gives_the_ops_logits(
    threads: int, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Handed the final norm and the LM head, the call returns the logits (B, vocab): the team runs
    the head as its last product (on panels), op by op it runs rms_norm and the product; with the head
    as a plain weight on F.linear (ProductCode 0) the team runs the layers and then the head's ops."""
    generator = torch.Generator().manual_seed(rows)
    norm = 1 + 0.1 * torch.randn(WIDTH, generator=generator)
    weight = torch.randn(VOCAB, WIDTH, generator=generator) / WIDTH**0.5
    heads = {PANELS: torch.ops.envsuite.pack_panels(weight), 0: weight}
    with torch_threads(threads):
        stack = _stack(rows, masked=True, seed=rows)
        logits = {}
        for code, head in heads.items():
            for team in (False, True):
                monkeypatch.setenv("ENVSUITE_DECODE_TEAM", "1" if team else "0")
                logits[code, team], _ = stack.call(head=(norm, head, code))
        hidden, _ = stack.run(team=False, monkeypatch=monkeypatch)
    assert logits[PANELS, True].shape == (rows, VOCAB) and logits[PANELS, True].is_contiguous()
    assert torch.equal(logits[PANELS, True], logits[PANELS, False])
    assert torch.equal(logits[0, True], logits[0, False])
    normed = torch.ops.envsuite.rms_norm(hidden.reshape(rows, WIDTH), norm, 1e-5)
    assert torch.equal(
        logits[PANELS, True], torch.ops.envsuite.panel_linear(normed, heads[PANELS], VOCAB, None)
    )
    torch.testing.assert_close(
        logits[0, True], torch.nn.functional.linear(normed, weight), rtol=1e-5, atol=1e-5
    )


def test_the_team_writes_the_new_column_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """Column ``end`` of rows [0, B) changes in every layer's keys and values; every other entry (the
    cached positions, the spare row past the batch) stays as it was."""
    stack = _stack(rows=4, masked=True, seed=7)
    _, cache = stack.run(team=True, monkeypatch=monkeypatch)
    for before, after in zip(stack.keys + stack.values, cache, strict=True):
        changed = (before != after).any(dim=-1)  # (rows + 1, kv heads, columns)
        assert changed[:4, :, stack.end].all()
        changed[:4, :, stack.end] = False
        assert not changed.any()


def test_a_stack_the_team_does_not_cover_runs_op_by_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """A product on another path (here oneDNN's plain weight, ProductCode 1) sends the whole stack
    through the ops; the values agree with the team's up to the products' float rounding."""
    stack = _stack(rows=3, masked=False, seed=3)
    team, _ = stack.run(team=True, monkeypatch=monkeypatch)
    plain = list(stack.weights)
    for layer in range(LAYERS):  # the o product as a plain (out, in) weight
        o_panels = stack.weights[6 * layer + 2]
        plain[6 * layer + 2] = o_panels.transpose(1, 2).reshape(-1, o_panels.shape[1])[:WIDTH].contiguous()
    paths = [PANELS] * (4 * LAYERS)
    paths[1::4] = [0] * LAYERS  # F_LINEAR for every o product
    assert not _runs_as_team(plain, paths)
    out, _ = stack.call(weights=plain, paths=paths)
    torch.testing.assert_close(out, team, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 16])
def test_panels_by_op_is_the_ops_and_never_the_team(rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ProductCode.PANELS_BY_OP`` (4: the step's calibration chose the step by op at that row count)
    runs the stack op by op with the team allowed: the ops' values, the team's, bit for bit."""
    stack = _stack(rows, masked=True, seed=rows + 5)
    by_op_codes = [PANELS_BY_OP] * (4 * LAYERS)
    assert not _runs_as_team(stack.weights, by_op_codes)
    team, cache_team = stack.run(team=True, monkeypatch=monkeypatch)
    out, cache = stack.call(paths=by_op_codes)
    assert torch.equal(out, team)
    for ours, theirs in zip(cache, cache_team, strict=True):
        assert torch.equal(ours, theirs)


def test_the_team_clocks_its_phases_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ENVSUITE_DECODE_TEAM_CLOCK=1``: every team call adds each thread's time working in each phase
    and waiting at the barrier that ends it (read and reset by ``read_team_clock``); without it, or op
    by op, nothing is counted."""
    stack = _stack(rows=2, masked=False, seed=5)
    generator = torch.Generator().manual_seed(5)
    norm = 1 + 0.1 * torch.randn(WIDTH, generator=generator)
    head = (norm, torch.ops.envsuite.pack_panels(torch.randn(VOCAB, WIDTH, generator=generator)), PANELS)
    read_team_clock(reset=True)
    with torch_threads(2):
        stack.run(team=True, monkeypatch=monkeypatch)  # not asked
        monkeypatch.setenv(CLOCK_ENV, "1")
        stack.run(team=False, monkeypatch=monkeypatch)  # op by op: no barriers
        assert read_team_clock(reset=False).calls == 0
        monkeypatch.setenv("ENVSUITE_DECODE_TEAM", "1")
        for _ in range(3):
            stack.call(head=head)
    clock = read_team_clock(reset=True)
    assert clock.calls == 3 and clock.ns.dtype == torch.int64 and clock.threads >= 2
    assert clock.ns.shape[1:] == (len(TEAM_PHASES), 2) and (clock.ns >= 0).all()
    for t in range(2):  # every thread worked in the products and the LM head (a thread may find no rows)
        working = clock.working_us(t)
        assert all(working[phase] > 0 for phase in ("q/k/v", "o", "gate/up", "down", "lm head"))
        assert clock.waiting_us(t)["lm head"] == 0  # the region's end is not one of the team's barriers
    waited = sum(sum(clock.waiting_us(t).values()) for t in range(2))
    assert waited > 0  # 3 layers x 9 barriers: someone waited
    assert read_team_clock(reset=True).calls == 0  # reset


def _terms(rows: int, seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """Random LoRA terms of two adapters (4 and 3 columns a part) at every site but layer 1's o product,
    and each row's span: adapter 0, adapter 1 and the base (no term) in turn."""
    generator = torch.Generator().manual_seed(seed)
    widths, columns = (4, 3), 7
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    shapes = [
        (WIDTH, (q, kv, kv)),
        (HEADS * HEAD_DIM, (WIDTH,)),
        (WIDTH, (INTERMEDIATE,) * 2),
        (INTERMEDIATE, (WIDTH,)),
    ]
    a_sites: list[torch.Tensor] = []
    b_sites: list[torch.Tensor] = []
    for layer in range(LAYERS):
        for site, (k, parts) in enumerate(shapes):
            if (layer, site) == (1, 1):
                a_sites.append(torch.empty(0))
                b_sites.append(torch.empty(0))
                continue
            a_sites.append(torch.randn(len(parts) * columns, k, generator=generator) / k**0.5)
            b_sites.append(0.3 * torch.randn(len(parts) * columns, sum(parts), generator=generator))
    a_sites.append(torch.randn(columns, WIDTH, generator=generator) / WIDTH**0.5)
    b_sites.append(0.3 * torch.randn(columns, VOCAB, generator=generator))
    spans = [(0, widths[0]), (widths[0], widths[1]), (0, 0)]
    return a_sites, b_sites, torch.tensor([spans[row % 3] for row in range(rows)], dtype=torch.int64)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("rows", [3, 12, 16])
def test_with_adapter_terms_the_team_gives_the_ops_logits(
    threads: int, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``decode_layers_adapted`` (a multi-adapter step: each row's own adapter's low-rank terms added into
    every product) as a team and op by op: the same logits and caches, bit for bit; a base row's logits
    are the stack's without terms, an adapter row's are not."""
    generator = torch.Generator().manual_seed(rows)
    norm = 1 + 0.1 * torch.randn(WIDTH, generator=generator)
    head = torch.ops.envsuite.pack_panels(torch.randn(VOCAB, WIDTH, generator=generator) / WIDTH**0.5)
    a_sites, b_sites, spans = _terms(rows, seed=rows + threads)
    stack = _stack(rows, masked=True, seed=rows + 20 * threads)
    results = {}
    with torch_threads(threads):
        for team in (False, True):
            monkeypatch.setenv("ENVSUITE_DECODE_TEAM", "1" if team else "0")
            assert _runs_as_team(stack.weights, [PANELS] * (4 * LAYERS)) == team
            keys = [k.clone() for k in stack.keys]
            values = [v.clone() for v in stack.values]
            logits = torch.ops.envsuite.decode_layers_adapted(
                stack.hidden, stack.cos, stack.sin, stack.mask, stack.weights, [PANELS] * (4 * LAYERS), keys,
                values, stack.start, stack.end, HEADS, KV_HEADS, INTERMEDIATE, 1e-5, HEAD_DIM**-0.5, norm, head,
                PANELS, VOCAB, a_sites, b_sites, spans,
            )  # fmt: skip
            results[team] = logits, keys + values
        plain, _ = stack.call(head=(norm, head, PANELS))
    (by_op, cache_by_op), (team_logits, cache_team) = results[False], results[True]
    assert team_logits.shape == (rows, VOCAB) and torch.isfinite(team_logits).all()
    assert torch.equal(team_logits, by_op)
    for ours, theirs in zip(cache_team, cache_by_op, strict=True):
        assert torch.equal(ours, theirs)
    base_rows = spans[:, 1] == 0
    assert torch.equal(team_logits[base_rows], plain[base_rows])
    assert (team_logits[~base_rows] - plain[~base_rows]).abs().amax(dim=-1).min() > 1e-3

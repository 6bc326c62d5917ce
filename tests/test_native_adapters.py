"""``torch.ops.envsuite.low_rank_add_``, a multi-adapter step's LoRA terms at one product site in one
native call, against torch's path (``x @ A.T``, masked to each row's adapter's columns, ``@ B``) and
against each row's own adapter's factors in float64.

Sites are random (no model needed): a fused site of three parts (output widths 40, 24, 24: the parts'
last columns past the vectors; input 83 floats, past them too) and a one-part site of 250 outputs;
adapters of ranks 3, 16 and 20 (odd and partial column pairs), one of them without one of the fused
modules (its columns there are zeros). Rows of the base (variant 0) get no term and keep their values bit
for bit."""

from __future__ import annotations

import pytest
import torch

from envsuite.engine.kernels import native_kernels
from envsuite.engine.sampling._adapters import _site, _step_rows
from envsuite.engine.weights import LoraFactors, LoraModule
from tests.support.native import torch_threads

K = 83
FUSED = {"q": 40, "k": 24, "v": 24}
HEAD = {"head": 250}
RANKS = {1: 3, 2: 16, 5: 20}
"""Variant id to the adapter's rank."""
MISSING = {(2, "k")}
"""(variant, module) pairs the adapter does not adapt."""
TOLERANCE = {"rtol": 1e-5, "atol": 1e-4}
"""A term sums ~100 float32 products of values up to ~10 in another order than torch's (one that depends
on the vector width): 1.07e-5 apart once in the portable build, for terms of magnitude ~1-10."""


@pytest.fixture(autouse=True)
def _native() -> None:
    if not native_kernels().available:
        pytest.skip(f"the native kernels are not built here: {native_kernels().reason}")


def _adapters(outputs: dict[str, int]) -> dict[int, LoraFactors]:
    generator = torch.Generator().manual_seed(7)
    adapters = {}
    for variant, rank in RANKS.items():
        modules = {}
        for name, out in outputs.items():
            if (variant, name) in MISSING:
                continue
            modules[name] = LoraModule(
                a=torch.randn(rank, K, generator=generator),
                b=torch.randn(out, rank, generator=generator),
                scale=2.0 / rank,
                base_weight=torch.zeros(out, K),
            )
        adapters[variant] = LoraFactors(modules)
    return adapters


def _reference(
    out: torch.Tensor,
    x: torch.Tensor,
    row_variants: list[int],
    adapters: dict[int, LoraFactors],
    names: list[str],
) -> torch.Tensor:
    """Each row's own adapter's terms in float64, part by part."""
    expected = out.double().clone()
    for r, variant in enumerate(row_variants):
        if variant == 0:
            continue
        column = 0
        for name in names:
            width = FUSED.get(name) or HEAD[name]
            module = adapters[variant].modules.get(name)
            if module is not None:
                low = x[r].double() @ module.a.double().T
                expected[r, column : column + width] += module.scale * (low @ module.b.double().T)
            column += width
    return expected


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [1, 2, 5, 16, 64])
@pytest.mark.parametrize("outputs", [FUSED, HEAD], ids=["fused", "one-part"])
def test_the_native_terms_are_torchs_and_each_rows_own_adapters(
    outputs: dict[str, int], rows: int, threads: int
) -> None:
    adapters = _adapters(outputs)
    variants = list(adapters)
    widths = list(RANKS.values())
    names = list(outputs)
    site = _site(names, list(adapters.values()), widths)
    assert site is not None and site.part_outputs == tuple(outputs.values())
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 1, K, generator=generator)
    out = torch.randn(rows, 1, sum(outputs.values()), generator=generator)
    mixes = [
        [int(v) for v in torch.tensor([0, *variants])[torch.randint(0, 4, (rows,), generator=generator)]],
        [variants[r % 3] for r in range(rows)],  # no base rows
        [0] * rows,  # no terms at all
    ]
    for row_variants in mixes:
        spans, masks = (
            _step_rows(variants, widths, row_variants, x.device, native) for native in (True, False)
        )
        by_torch = site.add(out.clone(), x, masks)
        with torch_threads(threads):
            native = site.add(out.clone(), x, spans)
        assert native.shape == out.shape
        torch.testing.assert_close(native, by_torch, **TOLERANCE)
        expected = _reference(out[:, 0], x[:, 0], row_variants, adapters, names)
        torch.testing.assert_close(native[:, 0].double(), expected, **TOLERANCE)
        base = torch.tensor([v == 0 for v in row_variants])
        assert torch.equal(native[base], out[base])


def test_the_native_terms_of_the_first_rows_skip_the_tail_rows() -> None:
    """The LM head's terms: the step's batch rows only (``_StepRows.first``), not its prompt-tail rows."""
    adapters = _adapters(HEAD)
    variants, widths = list(adapters), list(RANKS.values())
    site = _site(["head"], list(adapters.values()), widths)
    assert site is not None
    row_variants = [1, 2, 5, 0, 1, 1]
    x = torch.randn(4, 1, K)
    out = torch.randn(4, 1, HEAD["head"])
    for native in (False, True):
        rows = _step_rows(variants, widths, row_variants, x.device, native).first(4)
        got = site.add(out.clone(), x, rows)
        expected = _reference(out[:, 0], x[:, 0], row_variants[:4], adapters, ["head"])
        torch.testing.assert_close(got[:, 0].double(), expected, **TOLERANCE)


@pytest.mark.parametrize(
    "span",
    [(0, -2), (-1, 3), (5, 4), (0, 9)],
    ids=["negative width", "negative start", "past R", "wider than R"],
)
def test_a_span_outside_a_parts_columns_is_refused(span: tuple[int, int]) -> None:
    """Spans index the factors' rows: one that does not lie within a part's R columns (here 8) raises
    rather than reading another part's or past the tensor's rows."""
    a, b = torch.randn(2 * 8, 12), torch.randn(2 * 8, 10)
    out, x = torch.zeros(2, 10), torch.randn(2, 12)
    spans = torch.tensor([(0, 8), span])
    with pytest.raises(RuntimeError, match="outside"):
        torch.ops.envsuite.low_rank_add_(out, x, a, b, spans, [4, 6])

"""BFCL's single-turn categories as catalog envs: listed with BFCL's own item counts, and scored exactly as
BFCL's own evaluation scores the same replies (its Qwen function-calling handler decodes the text, its
file runners score it), wrong replies included."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import envsuite
from envsuite import EnvContext, RendererConfig
from envsuite.renderers import get_renderer
from tests.conftest import TEST_MODEL
from tests.support.family_tokenizers import family_tokenizer

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (pip install --no-deps bfcl-eval)")

from envsuite.envs.bfcl import CATEGORIES, MULTI_TURN_CATEGORIES, TIED, BfclEnv, Scoring, env_id, load_entries

N_PER_CATEGORY = 6
"""Entries per category in the comparison (the first ones, and a spread: see ``_sample``)."""


def test_every_single_turn_category_is_listed_with_bfcls_item_count() -> None:
    listed = {s.id: s for s in envsuite.registry.all_specs() if s.namespace == "bfcl"}
    multi_turn = {env_id(name) for name in MULTI_TURN_CATEGORIES}  # tests/test_bfcl_multi_turn.py
    assert set(listed) - multi_turn == {env_id(c.name) for c in CATEGORIES}
    for category in CATEGORIES:
        assert len(load_entries(category.bfcl_name)) == category.n_items, category.name
        spec = listed[env_id(category.name)]
        assert envsuite.env_family(spec) == "bfcl" and "eval-only" in spec.tags
        expected = TIED if category.scoring is Scoring.IRRELEVANCE else None
        assert spec.unavailable == expected, category.name


def _hermes(calls: list[dict[str, Any]]) -> str:
    """Calls as Qwen's function-calling format writes them (BFCL's QwenFCHandler reads this)."""
    blocks = [
        "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
        for call in calls
        for name, args in call.items()
    ]
    return "\n".join(blocks)


def _spoiled(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls with the first argument of the first call given a wrong value."""
    if not calls:
        return calls
    ((name, args),) = calls[0].items()
    if not args:
        return [{name: {"unexpected": 1}}, *calls[1:]]
    key = next(iter(args))
    value = args[key]
    wrong: Any = value + 7 if isinstance(value, int | float) and not isinstance(value, bool) else f"{value}zz"
    return [{name: {**args, key: wrong}}, *calls[1:]]


def _replies(env: BfclEnv) -> dict[str, str]:
    """Right and wrong replies to one entry, as Qwen-format text."""
    reference = [{c.function.name: json.loads(c.function.arguments)} for c in env.reference_calls()]
    functions = env.entry["function"]
    every = [{f["name"]: {}} for f in functions]
    first = functions[0]["name"]
    return {
        "reference": _hermes(reference) or "I cannot help with that using these functions.",
        "wrong value": _hermes(_spoiled(reference)),
        "wrong function": _hermes([{"not_offered": {}}]),
        "no call": "Let me think about it. The answer is 42.",
        "every function": _hermes(reference + every),
        "first function, no arguments": _hermes([{first: {}}]),
        "unreadable block": "<tool_call>\n{name: oops}\n</tool_call>",
        "unreadable block after the reference": _hermes(reference) + "\n<tool_call>\n{bad\n</tool_call>",
        "empty": "",
    }


def _sample(n_items: int) -> list[int]:
    spread = {0, 1, 2, n_items // 3, n_items // 2, n_items - 1}
    return sorted(spread)[:N_PER_CATEGORY]


def _envsuite_reward(env: BfclEnv, text: str) -> float:
    asyncio.run(env.initial_observation())
    tokens = env.renderer.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
    return asyncio.run(env.step(tokens)).reward


def _bfcl_scores(category: str, replies: dict[str, str], tmp_path: Path) -> dict[str, bool]:
    """BFCL's own evaluation of ``replies`` (entry id -> text): its Qwen FC handler and file runner."""
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    handler = QwenFCHandler("Qwen/Qwen3-8B", 0, "Qwen_Qwen3-8B-FC", True)
    entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
    by_id = {e["id"]: i for i, e in enumerate(entries)}
    ids = list(replies)
    model_result = [{"id": i, "result": replies[i]} for i in ids]
    prompt = [entries[by_id[i]] for i in ids]
    model = "Qwen_Qwen3-8B-FC"
    if "relevance" in category:
        eval_runner.relevance_file_runner(handler, model_result, prompt, model, category, tmp_path)
    else:
        answers = load_ground_truth_entry(category)
        possible = [answers[by_id[i]] for i in ids]
        eval_runner.ast_file_runner(handler, model_result, prompt, possible, category, model, tmp_path)
    (score_file,) = tmp_path.rglob(f"*_{category}_score.json")
    failed = {json.loads(line)["id"] for line in score_file.read_text().splitlines()[1:]}
    return {i: i not in failed for i in ids}


@pytest.mark.parametrize("category", CATEGORIES, ids=lambda c: c.name)
def test_envsuite_scores_equal_bfcls_own_evaluation_on_the_same_replies(
    category: Any, tmp_path: Path
) -> None:
    renderer = get_renderer("qwen3", family_tokenizer("qwen3"))
    entries = load_entries(category.bfcl_name)
    texts: dict[str, str] = {}
    ours: dict[str, float] = {}
    for index in _sample(len(entries)):
        env = BfclEnv(EnvContext(seed=0, renderer=renderer), category=category.name, item=index)
        for name, text in _replies(env).items():
            key = f"{env.entry['id']}"
            texts[f"{key}|{name}"] = text
            fresh = BfclEnv(EnvContext(seed=0, renderer=renderer), category=category.name, item=index)
            ours[f"{key}|{name}"] = _envsuite_reward(fresh, text)
    # BFCL scores one reply per entry id and file: one run per kind of reply.
    kinds = sorted({k.split("|")[1] for k in texts})
    theirs: dict[str, bool] = {}
    for n, kind in enumerate(kinds):
        batch = {k.split("|")[0]: t for k, t in texts.items() if k.split("|")[1] == kind}
        scored = _bfcl_scores(category.bfcl_name, batch, tmp_path / str(n))
        theirs.update({f"{i}|{kind}": ok for i, ok in scored.items()})
    differing = {k: (ours[k], theirs[k]) for k in texts if ours[k] != float(theirs[k])}
    assert not differing, differing
    # The comparison covers both verdicts (a test of equality on all-zero scores would prove little).
    assert 0 < sum(ours.values()) < len(ours), ours


def test_the_default_renderer_reads_the_calls_bfcl_scores() -> None:
    """SmolLM2's format (a JSON list in one block): the reference earns 1, a wrong value 0."""
    env = envsuite.make_env("bfcl/multiple", seed=3, renderer=RendererConfig(model_name=TEST_MODEL))
    assert isinstance(env, BfclEnv)
    probes = {p.name: p.reply for p in env.reward_probes()}
    assert set(probes) == {"reference", "no call", "a function not offered", "every function called"}
    assert _envsuite_reward(env, probes["reference"]) == 1.0
    again = envsuite.make_env("bfcl/multiple", seed=3, renderer=RendererConfig(model_name=TEST_MODEL))
    assert isinstance(again, BfclEnv)
    assert _envsuite_reward(again, probes["every function called"]) == 0.0


# The categories' conformance, their reward probes included, is tests/test_conformance.py's (every
# available catalog id, the same model): this file checks what is BFCL's own.


def test_bench_rows_record_the_bfcl_release_and_the_categorys_content_hash() -> None:
    """What ``envsuite bench`` stores as a row's dataset revision (the env class's
    ``dataset_revision_of``): the installed bfcl-eval release and a hash of the category's entries,
    stable from call to call and different between categories (single- and multi-turn alike)."""
    import importlib.metadata

    revisions = {}
    for name in ("bfcl/simple", "bfcl/multiple", "bfcl/multi_turn_base"):
        env_spec = envsuite.spec(name)
        revisions[name] = env_spec.load().dataset_revision_of(dict(env_spec.kwargs))  # type: ignore[attr-defined]
    release = f"bfcl-eval=={importlib.metadata.version('bfcl-eval')} sha256:"
    assert all(r.startswith(release) and len(r) == len(release) + 16 for r in revisions.values()), revisions
    assert len(set(revisions.values())) == 3
    again = envsuite.spec("bfcl/simple")
    assert again.load().dataset_revision_of(dict(again.kwargs)) == revisions["bfcl/simple"]  # type: ignore[attr-defined]

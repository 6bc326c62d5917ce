"""``envsuite judge-check``: how far a judge model agrees with labels, and how much order sways it.

It runs the judge (a local model, greedy) over the shipped labelled sets in ``envsuite/rubrics/data``
(or ``--pointwise``/``--pairwise`` files of the same shape) and prints accuracy and Cohen's kappa with
95% bootstrap intervals, the malformed-verdict rate, the pairwise flip rate under swapped order, and with
``--self-preference`` the judge's YES rate on replies its own model wrote. Judgments are cached in
``--cache`` (SQLite), so a second run makes no judge calls.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from envsuite.cli._args import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("judge-check", help="measure a judge model against labelled items (agreement, bias)")
    p.add_argument("--judge", default="smollm2-135m-instruct", help="the judge's model (a local model name)")
    p.add_argument("--max-tokens", type=int, default=48, help="the judge's reply budget")
    p.add_argument("--pointwise", type=Path, default=None, help="a JSONL of labelled pointwise items")
    p.add_argument("--pairwise", type=Path, default=None, help="a JSONL of labelled pairwise items")
    p.add_argument("--cache", type=Path, default=None, help="a SQLite file caching the judge's verdicts")
    p.add_argument(
        "--self-preference", action="store_true", help="also judge replies the judge's model wrote"
    )


def _interval(label: str, mean: float, lo: float, hi: float) -> str:
    return f"  {label:<22} {mean:6.3f}  [95% CI {lo:6.3f}, {hi:6.3f}]"


def run(args: argparse.Namespace) -> int:
    import asyncio

    from envsuite import RendererConfig
    from envsuite.backends.local import LocalSamplingClient, load_sampling_model
    from envsuite.completers import SamplingMessageCompleter
    from envsuite.rubrics import JudgeModel, JudgmentCache, load_pairwise, load_pointwise, run_judge_check

    loaded = load_sampling_model(base_model=args.judge)
    client = LocalSamplingClient(loaded.model, loaded.tokenizer, args.judge)
    renderer = RendererConfig(model_name=args.judge).build()
    completer = SamplingMessageCompleter(client, renderer, max_tokens=args.max_tokens, temperature=0.0)
    judge = JudgeModel(completer, JudgmentCache(args.cache) if args.cache else None)
    own = completer if args.self_preference else None
    report = asyncio.run(
        run_judge_check(judge, load_pointwise(args.pointwise), load_pairwise(args.pairwise), own_model=own)
    )
    a, p = report.agreement, report.position
    print(f"judge: {report.judge}")
    print(f"pointwise items: {a.accuracy.n}")
    print(_interval("accuracy", a.accuracy.mean, a.accuracy.lo, a.accuracy.hi))
    if a.kappa is None:
        print("  Cohen's kappa          (fewer than two decided verdicts)")
    else:
        k = a.kappa
        print(_interval(f"Cohen's kappa (n={k.n})", k.mean, k.lo, k.hi))
    print(f"  malformed verdicts     {a.malformed_rate:6.3f}   said YES {a.predicted_yes_rate:6.3f}")
    print(f"pairwise items: {p.flip_rate.n} (each judged in both orders)")
    print(_interval("flip rate (swapped)", p.flip_rate.mean, p.flip_rate.lo, p.flip_rate.hi))
    print(_interval("picks the better", p.pair_accuracy.mean, p.pair_accuracy.lo, p.pair_accuracy.hi))
    print(f"  names the first shown  {p.first_rate:6.3f}   malformed {p.malformed_rate:6.3f}")
    if report.self_preference:
        s = report.self_preference
        print(
            f"self-preference: YES on its own replies {s.own_yes_rate:.3f} (n={s.n}) vs {s.labelled_yes_rate:.3f} overall"
        )
    print(f"judge calls: {judge.stats.calls} sent, {judge.stats.cached} from the cache")
    return 0

"""One page per model: its score in every env against a baseline model (paired differences with CIs)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from envsuite.leaderboard._compare import EnvComparison
from envsuite.leaderboard._html_parts import (
    ci_text,
    esc,
    est_cell,
    fmt,
    page,
    score_bar,
    settings_block,
    table,
)
from envsuite.leaderboard._page_index import (
    PASS_NOTE,
    PageContext,
    key_field,
    pass_cells,
    pass_ks_of,
    split_settings,
    transcripts_cell,
)
from envsuite.leaderboard._stats import Estimate

MODELS_DIR = "models"


def model_page_name(model: str) -> str:
    """A file name per model: readable, and unique through a digest of the full name."""
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)[:48].strip("._") or "model"
    return f"{slug}-{hashlib.sha256(model.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}.html"


def _diff_cell(comparison: EnvComparison | None, span: float) -> str:
    if comparison is None or comparison.comparison is None:
        return '<td class="num" data-sort="-1e9">-</td>'
    c = comparison.comparison
    d = c.difference
    bar = score_bar(Estimate(d.mean, d.lo, d.hi, d.n), -span, span, diff=True)
    return (
        f'<td class="num" data-sort="{d.mean:.6f}">{bar}{d.mean:+.3f} <span class="ci">{ci_text(d)}</span>'
        f' <span class="muted">n={c.n_pairs}</span></td>'
    )


def render_model_page(ctx: PageContext, model: str) -> str:
    """The page of one model (links are relative to ``models/``)."""
    board = ctx.board
    entries = [e for e in board.entries if e.key.model == model]
    baseline = board.baselines.get(model)
    comparisons = {c.env: c for c in board.comparisons if c.model == model}
    shared, varying = split_settings([e.key for e in entries])
    rank = next((o for o in board.overall if o.entrant.model == model), None)
    ks = pass_ks_of(entries)
    rows = []
    for entry in entries:
        env = entry.key.versioned_env_id
        lo, hi = entry.reward_range
        extra = "".join(f'<td class="id">{esc(key_field(entry.key, v))}</td>' for v in varying)
        rows.append(
            f'<tr data-filter-row data-family="{esc(ctx.family(env))}"><td class="id">{esc(env)}</td>'
            f"<td>{esc(ctx.family(env))}</td>{extra}"
            f"{est_cell(entry.normalized, bar=(0.0, 1.0))}{est_cell(entry.reward)}{est_cell(entry.success)}"
            f"{pass_cells(entry, ks)}{_diff_cell(comparisons.get(env), hi - lo)}"
            f"{transcripts_cell(ctx, entry, root='../')}</tr>"
        )
    vs = f"vs {baseline}" if baseline else "vs (no other model)"
    headers = [("env", ""), ("family", ""), *((v, "") for v in varying)]
    headers += [
        ("normalized", "num"),
        ("reward", "num"),
        ("success", "num"),
        *((f"pass@{k}", "num") for k in ks),
        (f"Δ reward {vs}", "num"),
        ("transcripts", ""),
    ]
    summary = (
        f"Overall rank {rank.rank} of {len(board.overall)}: score {fmt(rank.score.mean)} "
        f'<span class="ci">{ci_text(rank.score)}</span>'
        if rank
        else "Not ranked overall (it lacks an env every other model has)."
    )
    others = _other_models(ctx, model)
    body = f"""<p><a href="../index.html">&larr; leaderboard</a></p>
<h1><span class="id">{esc(model)}</span></h1>
<p>{summary}</p>
{settings_block(shared)}
<h2>Per env, against {esc(baseline or "no baseline")}</h2>
<p class="muted">&Delta; reward: this model minus the baseline on the samples (env version + seed) both were scored
on, with a {round(board.confidence * 100)}% paired-bootstrap interval (pairs resampled together; B={board.n_boot}).
The bar spans the env's whole reward range either way. Choose the baseline with
<code>envsuite leaderboard --baseline MODEL</code>.{" " + PASS_NOTE if ks else ""}</p>
{table("model-results", headers, rows)}
<p>Other models: {others}</p>"""
    return page(f"{model} - envsuite leaderboard", body, root="../")


def _other_models(ctx: PageContext, model: str) -> str:
    links: Iterable[str] = (
        f'<a href="{esc(model_page_name(m))}"><span class="id">{esc(m)}</span></a>'
        for m in ctx.board.models
        if m != model
    )
    return ", ".join(links) or "none"

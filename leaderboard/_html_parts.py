"""Pieces shared by the leaderboard's pages: escaping, number cells, score bars, colours, the page shell.

Every piece of stored text reaches HTML through :func:`esc` (control characters made visible, then
HTML-escaped, quotes included); JSON embedded in a page goes through :func:`json_script`, which
escapes ``<``, ``>`` and ``&`` so no stored string can close the script element.
"""

from __future__ import annotations

import base64
import hashlib
import html
import itertools
import json
from collections.abc import Iterable, Sequence
from importlib import resources

from envsuite.leaderboard._stats import Estimate
from envsuite.leaderboard._text import display_text

# A sequential blue ramp (light = low score, dark = high): distinguishable in print and for the
# common colour-vision deficiencies, since it varies in lightness.
_RAMP = (
    (0.0, (247, 251, 255)),
    (0.25, (198, 219, 239)),
    (0.5, (107, 174, 214)),
    (0.75, (33, 113, 181)),
    (1.0, (8, 48, 107)),
)


def esc(text: object) -> str:
    """Stored text as HTML text or attribute value."""
    return html.escape(display_text(text), quote=True)


def tip_attr(lines: Iterable[object]) -> str:
    """A multi-line tooltip as an attribute value: each line made safe, joined by newlines."""
    return html.escape("\n".join(display_text(line) for line in lines), quote=True)


def static_text(name: str) -> str:
    """A file shipped in ``leaderboard/static`` (the page's JavaScript and CSS)."""
    return resources.files("envsuite.leaderboard").joinpath("static", name).read_text(encoding="utf-8")


def json_script(element_id: str, value: object) -> str:
    """A non-executed JSON block that stored text cannot break out of (``value``: a JSON value; anything
    else is refused by ``json.dumps``)."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script id="{element_id}" type="application/json">{text}</script>'


def colour(value: float) -> tuple[str, str]:
    """Background and text colour for a normalized score in [0, 1]."""
    v = min(1.0, max(0.0, value))
    for (x0, c0), (x1, c1) in itertools.pairwise(_RAMP):
        if v <= x1:
            t = (v - x0) / (x1 - x0)
            rgb = tuple(round(a + (b - a) * t) for a, b in zip(c0, c1, strict=True))
            return "#{:02x}{:02x}{:02x}".format(*rgb), "#fff" if v > 0.55 else "#1b1f24"
    raise AssertionError("unreachable: the ramp covers [0, 1]")


def ramp_css() -> str:
    stops = ", ".join(f"rgb{c} {x * 100:.0f}%" for x, c in _RAMP)
    return f"background:linear-gradient(90deg, {stops})"


def fmt(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}f}"


def ci_text(est: Estimate, digits: int = 3) -> str:
    return f"[{est.lo:.{digits}f}, {est.hi:.{digits}f}]"


def est_cell(est: Estimate | None, digits: int = 3, *, bar: tuple[float, float] | None = None) -> str:
    """A numeric cell: the mean, its CI, and optionally a bar on the range ``bar`` (lo, hi)."""
    if est is None:
        return '<td class="num" data-sort="-1e9">-</td>'
    drawn = score_bar(est, *bar) if bar is not None else ""
    return (
        f'<td class="num" data-sort="{est.mean:.6f}">{drawn}{fmt(est.mean, digits)} '
        f'<span class="ci">{ci_text(est, digits)}</span></td>'
    )


def score_bar(est: Estimate, lo: float, hi: float, *, diff: bool = False) -> str:
    """The point and its interval drawn on [lo, hi] (clamped, so nothing leaves the bar)."""
    span = hi - lo

    def pos(x: float) -> float:
        return min(100.0, max(0.0, (x - lo) / span * 100.0)) if span > 0 else 50.0

    left, right, point = pos(est.lo), pos(est.hi), pos(est.mean)
    zero = '<span class="zero"></span>' if diff else ""
    return (
        f'<span class="bar{" diff" if diff else ""}" aria-hidden="true">{zero}'
        f'<span class="range" style="left:{left:.1f}%;width:{max(right - left, 0.5):.1f}%"></span>'
        f'<span class="point" style="left:{point:.1f}%"></span></span>'
    )


def table(
    table_id: str,
    headers: Sequence[tuple[str, str]],
    rows: Iterable[str],
    *,
    head_extra: str = "",
    classes: str = "sortable",
) -> str:
    """A table in a horizontal scroller; ``headers`` are (label, css class) pairs."""
    head = "".join(
        f'<th class="{cls}">{esc(label)}</th>' if cls else f"<th>{esc(label)}</th>" for label, cls in headers
    )
    return (
        f'<div class="scroll"><table id="{table_id}" class="{classes}"><thead>{head_extra}<tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def settings_block(settings: Sequence[tuple[str, str]]) -> str:
    """Settings every row shares, shown once."""
    if not settings:
        return ""
    items = "".join(f"<div><dt>{esc(name)}</dt><dd>{esc(value)}</dd></div>" for name, value in settings)
    return f'<dl class="settings" aria-label="settings shared by every row">{items}</dl>'


def page(title: str, body: str, *, root: str = "") -> str:
    """A whole page with the shipped CSS and JS inlined; the CSP admits only that script (by hash)."""
    script = static_text("board.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    csp = (
        "default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>{esc(title)}</title><style>{static_text("board.css")}</style></head>
<body data-ready="0" data-root="{esc(root)}">
{body}
<div id="tip" role="tooltip" hidden></div>
<script>{script}</script>
</body></html>
"""

"""Terminal, JSON, chart and CLI views of the leaderboard: widths, hostile text, where the store is."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from envsuite.cli import main
from envsuite.leaderboard import (
    EpisodeResult,
    MatchResult,
    ResultKey,
    ResultStore,
    RunRecord,
    board_dict,
    build_leaderboard,
    display_text,
    render_overall,
    render_ratings,
    render_terminal,
    write_html,
)

ESC_NAME = "evil\x1b[2J\x1b[31mred\x07\x00nul\u202eright"
LONG_ENVS = (
    "reasoning_gym/caesar_cipher-v0",
    "textarena/WordChain-v0",
    "twenty_questions-v0",
    "tictactoe-v0",
)
MODELS = ("smollm2-135m-instruct", "smollm2-135m-instruct+grpo")


def _key(model: str, env_id: str, partner: str = "") -> ResultKey:
    return ResultKey.create(
        model=model,
        env_id=env_id,
        partner=partner,
        renderer="chatml-smollm2",
        sampling={"max_tokens": 64, "seed": 0, "temperature": 0.7},
        seeds=range(6),
        package_version="0.1.0",
    )


def _fill(store: ResultStore, models: tuple[str, ...], envs: tuple[str, ...]) -> None:
    for m, model in enumerate(models):
        for e, env in enumerate(envs):
            partner = "random" if env.startswith("tictactoe") else ""
            rewards = [(-1.0 if (s + m + e) % 3 == 0 else 1.0) for s in range(6)]
            eps = [EpisodeResult(seed=s, reward=r, success=r > 0) for s, r in enumerate(rewards)]
            store.add_run(RunRecord(_key(model, env, partner), f"run-{m}-{e}", reward_range=(-1.0, 1.0)), eps)
    store.add_matches(
        MatchResult.from_scores(f"g{i}", "tictactoe-v0", {models[0]: float(i % 2), "random": 0.5})
        for i in range(4)
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultStore]:
    with ResultStore(tmp_path / "lb.sqlite") as opened:
        yield opened


def _lines(renderable: object, width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 200])
def test_ids_never_wrap_or_truncate(store: ResultStore, width: int) -> None:
    """Issue 15.13: at 80 columns every id is whole on one line and no line is wider than the terminal."""
    _fill(store, MODELS, LONG_ENVS)
    board = build_leaderboard(store, n_boot=50)
    for view, ids in (
        (render_terminal(board), LONG_ENVS + MODELS),
        (render_overall(board), MODELS),
        (render_ratings(board), (MODELS[0], "random")),
    ):
        lines = _lines(view, width)
        assert all(len(line) <= width for line in lines), "\n".join(lines)
        for name in ids:
            assert any(name in line for line in lines), (name, "\n".join(lines))
        assert not any("…" in line for line in lines)
    wide = _lines(render_terminal(board), 200)
    assert any(LONG_ENVS[0] in line and MODELS[1] in line for line in wide)  # a table when it fits


def test_json_for_scripts(store: ResultStore, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(store, (*MODELS, ESC_NAME), ("arithmetic-v0", "tictactoe-v0"))
    assert main(["leaderboard", "--db", store.url, "--boot", "30", "--json"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x00" not in out  # JSON escapes control characters
    doc = json.loads(out)
    assert doc["store"] == store.url and doc["n_boot"] == 30
    assert {e["model"] for e in doc["entries"]} == {*MODELS, ESC_NAME}  # raw values for scripts
    assert doc == json.loads(json.dumps(board_dict(build_leaderboard(store, n_boot=30), store=store.url)))
    entry = doc["entries"][0]
    assert set(entry["reward"]) == {"mean", "lo", "hi", "n"} and entry["seeds"] == list(range(6))
    assert doc["ratings"] and doc["overall"][0]["rank"] == 1


def test_control_characters_never_reach_terminal_svg_or_page(
    store: ResultStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15.5: an ESC sequence in a model name is shown escaped, and chart.svg stays well-formed."""
    _fill(store, (ESC_NAME, "plain"), ("arithmetic-v0", "tictactoe-v0"))
    board = build_leaderboard(store, n_boot=30)
    shown = display_text(ESC_NAME)
    assert shown == "evil\\x1b[2J\\x1b[31mred\\x07\\x00nul\\u202eright"
    assert display_text("lone \ud800 surrogate") == "lone \\ud800 surrogate"
    console = Console(width=120, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    for view in (render_terminal(board), render_overall(board), render_ratings(board)):
        console.print(view)
    raw = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[2J" not in raw and "\x07" not in raw and "\x00" not in raw and "\u202e" not in raw
    assert "\\x1b[2J" in raw
    assert main(["leaderboard", "--db", store.url, "--boot", "30"]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\\x1b[2J\\x1b[31mred" in printed
    report = write_html(tmp_path / "site", board)
    assert report.chart_svg is not None
    ET.fromstring(report.chart_svg.read_text(encoding="utf-8"))  # well-formed XML
    page = report.index.read_text(encoding="utf-8")
    assert not any(c in page for c in "\x1b\x07\x00\u202e")
    assert "\\x1b[2J" in page


def test_chart_uses_one_scale_and_clips_nothing(store: ResultStore, tmp_path: Path) -> None:
    """Issue 15.18: envs with different reward ranges share the normalized [0, 1] axis with margins."""
    from envsuite.leaderboard._chart import X_LIMITS, draw_chart

    store.add_run(RunRecord(_key("a", "tictactoe-v0"), "r1", reward_range=(-1.0, 1.0)), _eps([-1.0] * 4))
    store.add_run(RunRecord(_key("a", "twenty_questions-v0"), "r2", reward_range=(0.0, 1.0)), _eps([0.0] * 4))
    store.add_run(RunRecord(_key("a", "arithmetic-v0"), "r3", reward_range=(-1.0, 1.0)), _eps([1.0] * 4))
    board = build_leaderboard(store, n_boot=20)
    fig = draw_chart(board)
    axes = fig.axes
    assert len(axes) == 3
    assert {ax.get_xlim() for ax in axes} == {X_LIMITS}
    fig.draw_without_rendering()
    points = 0
    for ax in axes:
        box = ax.get_window_extent()
        for line in ax.lines:
            for x, y in line.get_xydata():  # type: ignore[union-attr]
                px, py = ax.transData.transform((x, y))
                # The whole marker (6 px across) lies inside the axes, at -1 and 0 rewards too.
                assert box.x0 + 3 <= px <= box.x1 - 3 and box.y0 + 3 <= py <= box.y1 - 3, (
                    ax.get_title(),
                    x,
                    y,
                )
                points += 1
    assert points >= 3


def _eps(rewards: list[float]) -> list[EpisodeResult]:
    return [EpisodeResult(seed=s, reward=r) for s, r in enumerate(rewards)]


def test_cli_says_where_results_are_and_never_creates_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15.15: no --db after `make demo` reads runs/demo/leaderboard.sqlite and says so."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENVSUITE_LEADERBOARD_DB", raising=False)
    assert main(["leaderboard"]) == 1
    err = capsys.readouterr().err
    assert "no leaderboard store at runs/leaderboard.sqlite" in err and "make demo" in err
    assert not (tmp_path / "runs").exists()  # reading created nothing
    assert main(["leaderboard", "--db", "elsewhere.sqlite"]) == 1
    assert "no leaderboard store at elsewhere.sqlite" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere.sqlite").exists()

    with ResultStore("runs/demo/leaderboard.sqlite") as demo:
        _fill(demo, MODELS, ("arithmetic-v0",))
    assert main(["leaderboard", "--boot", "20"]) == 0
    out = capsys.readouterr().out
    assert "reading runs/demo/leaderboard.sqlite" in out and MODELS[1] in out
    assert not (tmp_path / "runs" / "leaderboard.sqlite").exists()

    with ResultStore("runs/other/leaderboard.sqlite"):
        pass
    assert main(["leaderboard"]) == 1
    err = capsys.readouterr().err
    assert "--db runs/demo/leaderboard.sqlite" in err and "--db runs/other/leaderboard.sqlite" in err

    monkeypatch.setenv("ENVSUITE_LEADERBOARD_DB", "runs/demo/leaderboard.sqlite")
    assert main(["leaderboard", "--boot", "20"]) == 0
    assert "reading" not in capsys.readouterr().out

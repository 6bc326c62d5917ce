"""Saying which envs to run, the same way in ``list``, ``bench`` and ``train``: ids, ``family:``,
``tag:``, globs, ``all`` and ``!`` exclusions; families and tags as data a plugin declares."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator

import pytest

import envsuite
from envsuite import UsageError, catalog_env_families, env_family, family_order, select_envs
from envsuite.cli import main
from envsuite.evals import BenchConfig
from envsuite.trainers import TrainConfig, resolve_run_envs

AVAILABLE = [s for s in envsuite.registry.all_specs() if not s.unavailable and not s.deprecated]


@pytest.fixture
def tool_env() -> Iterator[str]:
    """An env of a family envsuite does not know, as another package would register it."""
    env_id = "scratch/calculator-v0"
    envsuite.register(
        env_id,
        "tests.support.toy_envs:EchoNumberEnv",
        reward_range=(0.0, 1.0),
        family="web-agents",
        tags=("web-agents", "sandboxed"),
        max_turns=4,
        package="scratch-tools",
    )
    yield env_id
    envsuite.registry.unregister(env_id)


def _ids(*patterns: str, **options: bool) -> list[str]:
    return [s.id for s in select_envs(patterns, **options)]


def test_families_tags_and_globs_select_envs() -> None:
    reasoning = _ids("family:reasoning")
    assert len(reasoning) >= 100 and all(i.startswith("reasoning_gym/") for i in reasoning)
    assert _ids("family:math") == ["arithmetic-v0", "arithmetic_easy-v0", "math-v0", "math_easy-v0"]
    assert _ids("family:twenty-questions") == _ids("family:Twenty_Questions") == ["twenty_questions-v0"]
    textarena = _ids("textarena/*")
    assert textarena == [s.id for s in AVAILABLE if s.namespace == "textarena"] and len(textarena) > 50
    multi = set(_ids("tag:multi-turn"))
    assert "twenty_questions-v0" in multi and set(textarena) <= multi and "arithmetic-v0" not in multi
    assert _ids("reasoning_gym/chain_sum*") == ["reasoning_gym/chain_sum-v1"]
    assert set(_ids("all")) == {s.id for s in AVAILABLE}
    # Exclusions, order and repeats: first selection wins the order, nothing twice.
    assert _ids("arithmetic", "family:math", "!math*") == ["arithmetic-v0", "arithmetic_easy-v0"]
    # Patterns leave out unavailable and deprecated envs (named ids are taken as they are).
    assert "textarena/Chess-v0" not in textarena
    assert "textarena/Chess-v0" in _ids("textarena/*", include_unavailable=True)
    assert "reasoning_gym/gcd-v0" not in _ids("reasoning_gym/gcd*", include_unavailable=True)
    assert _ids("textarena/Chess-v0") == ["textarena/Chess-v0"]


def test_a_selection_that_matches_nothing_says_what_there_is() -> None:
    with pytest.raises(
        UsageError, match=r"no available env matches 'tag:nope'.*Families: math, code, tool use, reasoning"
    ):
        select_envs(["tag:nope"])
    with pytest.raises(UsageError, match="Did you mean: arithmetic"):
        select_envs(["arithmetc"])


def test_a_plugin_declares_its_family_and_tags(tool_env: str) -> None:
    assert _ids("family:web-agents") == [tool_env] == _ids("tag:web-agents")
    spec = envsuite.spec(tool_env)
    assert env_family(spec) == "web-agents" and {"multi-turn", "sandboxed"} <= spec.all_tags
    assert catalog_env_families([tool_env, "arithmetic-v0", "not-installed-v3"]) == {
        tool_env: "web-agents",
        "arithmetic-v0": "math",
        "not-installed-v3": "plugins",
    }
    # Views list a declared family after envsuite's own, before plugins and other.
    assert family_order(["other", "web-agents", "plugins", "games", "math", "code"]) == [
        "math",
        "code",
        "games",
        "web-agents",
        "plugins",
        "other",
    ]


def _cli(argv: list[str]) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(argv) == 0
    return buffer.getvalue()


def test_list_takes_patterns_families_and_tags(tool_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    listed = json.loads(_cli(["list", "family:math", "--json"]))
    assert [e["id"] for e in listed] == _ids("family:math") and listed[0]["family"] == "math"
    assert {e["id"] for e in json.loads(_cli(["list", "--family", "web-agents", "--json"]))} == {tool_env}
    narrowed = json.loads(_cli(["list", "textarena/*", "--tag", "game", "--json"]))
    assert narrowed and all(e["id"].startswith("textarena/") and "game" in e["tags"] for e in narrowed)
    assert json.loads(_cli(["list", "textarena/*", "--family", "math", "--json"])) == [], (
        "flags narrow patterns"
    )
    shown = json.loads(_cli(["list", "textarena/*", "--json"]))
    assert any(e["status"] == "unavailable" and e["reason"] for e in shown), "listed with the reason"
    chain = json.loads(_cli(["list", "reasoning_gym/chain_sum", "--json"]))[0]
    assert len(chain["rungs"]) == 11 and "curriculum" in chain["tags"]
    table = _cli(["list", "--families"])
    assert "family:web-agents" in table and "tag:multi-turn" in table
    assert main(["list", "family:nope"]) == 2


def test_bench_and_train_read_the_same_selection() -> None:
    config = BenchConfig(model="tiny-random", env_ids=("family:math", "!math_easy"))
    assert config.resolved_env_ids() == ["arithmetic-v0", "arithmetic_easy-v0", "math-v0"]
    assert BenchConfig(model="tiny-random").resolved_env_ids() == [s.id for s in AVAILABLE]
    with pytest.raises(UsageError, match="no available env matches"):
        BenchConfig(model="tiny-random", env_ids=("tag:nope",)).resolved_env_ids()
    envs = resolve_run_envs(TrainConfig(env_id="family:math,!math_easy", log_dir="x"))
    assert [e.spec.id for e in envs] == config.resolved_env_ids()

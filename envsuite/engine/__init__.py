"""The PyTorch compute behind the local backend (``envsuite.backends.local``), CPU or GPU.

* ``envsuite.engine.sampling``: the sampling engine (continuous batching over one KV cache, per-row RNG,
  stop detection) that every local SamplingClient submits to;
* ``envsuite.engine.training``: datums to model inputs (token trees for shared prefixes) and the losses;
* ``envsuite.engine.weights``: base models, LoRA adapters, merging, and checkpoint directories;
* ``envsuite.engine.kernels``: matrix products through oneDNN for both (faster than ``F.linear`` on CPU).

Nothing here knows the Tinker client interface; the clients in ``envsuite.backends.local`` do. Importing
a subpackage loads torch (this package itself does not).
"""

from envsuite.engine._host import CpuIdentity, cpu_identity
from envsuite.engine._memory import (
    JEMALLOC_CONF,
    jemalloc_loaded,
    jemalloc_path,
    limit_heap_fragmentation,
    reexec_under_jemalloc,
    release_free_memory,
)

__all__ = [
    # this machine's CPU (keys for built kernels and measured speeds; how benches name it)
    "CpuIdentity",
    "cpu_identity",
    # glibc's heap (any process that builds a local client)
    "limit_heap_fragmentation",
    "release_free_memory",
    # jemalloc for the envsuite command
    "JEMALLOC_CONF",
    "jemalloc_loaded",
    "jemalloc_path",
    "reexec_under_jemalloc",
]

"""tinker-cookbook 0.6.1's ``rl.train`` with ``loss_fn="gspo"`` against a real ``envsuite serve``.

``rl.train`` sends gspo datums without ``sequence_ratio_mask`` (its ``rl_loop`` sends one); the hosted
service trains them, so ``envsuite serve`` must too (``envsuite.engine.training.default_ratio_mask``).
The server is the ``envsuite`` command in a subprocess on 127.0.0.1; the recipe is math_rl's own entry
point, unchanged but for its ``base_url``, on the tiny test model.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from envsuite.models import resolve_model
from tests.conftest import TEST_MODEL
from tests.test_serve import served_command


def test_cookbook_math_rl_trains_with_gspo_throughserved_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tinker_cookbook.recipes.math_rl import train as math_rl

    monkeypatch.setenv("TINKER_API_KEY", "tml-loopback")  # the SDK wants a key; loopback takes any
    log_path = tmp_path / "math_rl"
    with served_command(tmp_path / "state") as url:
        config = math_rl.CLIConfig(
            model_name=str(resolve_model(TEST_MODEL).path),
            renderer_name="role_colon",
            env="arithmetic",
            lora_rank=8,
            group_size=4,
            groups_per_batch=2,
            learning_rate=1e-4,
            max_tokens=5,
            log_path=str(log_path),
            eval_every=0,
            save_every=2,
            max_steps=2,
            loss_fn="gspo",
            base_url=url,
        )
        asyncio.run(math_rl.cli_main(config))
    rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    rows = [row for row in rows if "progress/batch" in row]  # 0.6.1 ends with a row of token totals
    assert [row["progress/batch"] for row in rows] == [0, 1]
    kl = [row["optim/kl_sample_train_v1"] for row in rows if "optim/kl_sample_train_v1" in row]
    assert kl and all(abs(value) < 1e-3 for value in kl), kl  # trained on what it sampled

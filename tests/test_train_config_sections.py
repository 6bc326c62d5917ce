"""``TrainConfig`` in sections: each section small and checking itself, every setting under one flat
name, and configs saved before the sections (flat ``config.json``, presets) loading unchanged."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pytest

from envsuite.trainers import (
    SECTIONS,
    ConfigError,
    LossSection,
    PolicyLoss,
    StepSection,
    TrainConfig,
    list_presets,
    load_preset,
)

# A run's config.json as the trainer wrote it before the sections (main at 71db6c5: one flat class of
# 51 fields), for `TrainConfig(env_id="arithmetic", log_dir="runs/x", n_steps=3, loss_fn="ppo",
# samplers=2, env_kwargs={"digits": 1}, wandb_project="p")`.
FLAT_CONFIG_JSON = """{"async_max_steps_off_policy": null, "backend": "local", "base_url": null, "batch_size": 8,
"beta1": 0.9, "beta2": 0.95, "captured_dir": null, "curriculum": null, "dro_beta": 0.05, "env_id": "arithmetic",
"env_kwargs": {"digits": 1}, "env_weights": {}, "eps": 1e-08, "eval_every": 10, "eval_rungs": [],
"executor": "inprocess", "grad_clip_norm": 0.0, "group_size": 4, "kl_discount_factor": 0.0,
"kl_penalty_coef": 0.0, "kl_reference_checkpoint": null, "learning_rate": 0.0001, "log_dir": "runs/x",
"lora_rank": 32, "loss_fn": "ppo", "lr_schedule": "constant", "max_context_tokens": 4096, "max_tokens": 64,
"max_turns": 64, "model": "smollm2-135m-instruct", "n_steps": 3, "n_test_groups": 16, "n_transcripts": 4,
"num_substeps": 1, "ppo_clip": 0.2, "ray_address": null, "renderer_name": null, "rollout_timeout_s": null,
"samplers": 2, "save_every": 10, "scale_advantages_by_std": false, "seed": 0, "stream_minibatches": null,
"temperature": 1.0, "trackio_project": null, "train_unembed": true, "wandb_name": null, "wandb_project": "p",
"warmup_steps": 0, "weight_decay": 0.0, "workers": 2}"""


def test_no_section_is_large_and_every_setting_has_one_home() -> None:
    names = [f.name for kind in SECTIONS.values() for f in dataclasses.fields(kind)]
    assert all(len(dataclasses.fields(kind)) <= 15 for kind in SECTIONS.values())
    # with env_id and log_dir: the 51 settings of before, and constrain_actions, sampler, vllm_url,
    # rubric, rubric_judge, rubric_judge_cache, policies since
    assert len(names) == len(set(names)) == 57
    assert not set(names) & set(SECTIONS)


def test_a_config_saved_before_the_sections_loads_and_writes_back_the_same() -> None:
    flat = json.loads(FLAT_CONFIG_JSON)
    config = TrainConfig.from_json(FLAT_CONFIG_JSON)
    config.validate()
    assert config.steps.n_steps == 3 and config.replicas.samplers == 2
    assert config.loss.loss_fn is PolicyLoss.PPO and config.loss_config() == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.2,
    }
    assert config.envs.env_kwargs == {"digits": 1} and config.tracking.wandb_project == "p"
    later = {  # settings added since, at their defaults
        "constrain_actions": False,
        "sampler": "backend",
        "vllm_url": None,
        "rubric": None,
        "rubric_judge": "smollm2-135m-instruct",
        "rubric_judge_cache": None,
        "policies": {},
        "warm_start_steps": 0,
    }
    assert config.to_dict() == {**flat, **later}
    assert config.differs_from(TrainConfig.from_dict(flat)) == []


def test_flat_names_sections_and_section_tables_build_the_same_config(tmp_path: Path) -> None:
    flat = TrainConfig(env_id="arithmetic", log_dir=str(tmp_path), n_steps=3, loss_fn=PolicyLoss.DRO, seed=7)
    by_section = TrainConfig(
        env_id="arithmetic",
        log_dir=str(tmp_path),
        steps=StepSection(n_steps=3, seed=7),
        loss=LossSection(loss_fn=PolicyLoss.DRO),
    )
    tables = TrainConfig.from_dict(
        {
            "env_id": "arithmetic",
            "log_dir": str(tmp_path),
            "steps": {"n_steps": 3, "seed": 7},
            "loss_fn": "dro",
        }
    )
    assert flat == by_section == tables
    assert flat.n_steps == flat.steps.n_steps == 3  # the flat read of callers written before the sections
    assert dataclasses.replace(flat, n_steps=4).steps == StepSection(n_steps=4, seed=7)
    assert pickle.loads(pickle.dumps(flat)) == flat
    with pytest.raises(AttributeError, match="n_stepz"):
        _ = flat.n_stepz  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="n_stepz"):
        TrainConfig(env_id="arithmetic", log_dir="x", n_stepz=3)
    with pytest.raises(ConfigError, match="n_stepz"):
        TrainConfig.from_dict({"env_id": "arithmetic", "log_dir": "x", "n_stepz": 3})


def test_each_section_checks_its_own_settings() -> None:
    assert LossSection().checks() and all(ok for ok, _ in LossSection().checks())
    failing = [message for ok, message in LossSection(ppo_clip=1.5).checks() if not ok]
    assert failing == ["ppo_clip must be in (0, 1), got 1.5"]
    with pytest.raises(ConfigError, match="ppo_clip must be in"):
        TrainConfig(env_id="arithmetic", log_dir="x", ppo_clip=1.5).validate()


def test_every_shipped_preset_still_loads() -> None:
    names = list_presets()
    assert names
    for name in names:
        load_preset(name).config("runs/x").validate()

"""The catalog: versioned ids, deprecation, suggestions, kwargs checking and entry-point plugins."""

from __future__ import annotations

import pickle
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import envsuite
from envsuite import registry


@pytest.fixture
def scratch_ids() -> Iterator[list[str]]:
    """Ids registered by a test are removed afterwards."""
    ids: list[str] = []
    yield ids
    for env_id in ids:
        registry.unregister(env_id)


def _register(scratch_ids: list[str], env_id: str, **fields: object) -> envsuite.EnvSpec:
    scratch_ids.append(env_id)
    return envsuite.register(env_id, "tests.support.toy_envs:EchoNumberEnv", **fields)  # type: ignore[arg-type]


def test_unversioned_id_resolves_to_latest_version(scratch_ids: list[str]) -> None:
    _register(scratch_ids, "scratch/echo-v0")
    _register(scratch_ids, "scratch/echo-v2")
    _register(scratch_ids, "scratch/echo-v1")
    assert envsuite.spec("scratch/echo").id == "scratch/echo-v2"
    assert envsuite.spec("scratch/echo-v1").id == "scratch/echo-v1"


def test_deprecated_version_fails_clearly_and_is_skipped_for_latest(scratch_ids: list[str]) -> None:
    _register(scratch_ids, "scratch/old-v0")
    _register(scratch_ids, "scratch/old-v1", deprecated="use scratch/old-v0; v1 graded wrongly")
    with pytest.raises(envsuite.DeprecatedEnvError, match="v1 graded wrongly"):
        envsuite.spec("scratch/old-v1")
    assert envsuite.spec("scratch/old").id == "scratch/old-v0"


def test_unknown_id_suggests_close_matches() -> None:
    with pytest.raises(envsuite.UnknownEnvError) as err:
        envsuite.spec("arithmetc")
    assert "arithmetic" in str(err.value)
    with pytest.raises(envsuite.UnknownEnvError, match="twenty_questions"):
        envsuite.make_env("twenty_question")


def test_malformed_id_and_duplicate_registration(scratch_ids: list[str]) -> None:
    with pytest.raises(ValueError, match="malformed"):
        envsuite.spec("a b c")
    _register(scratch_ids, "scratch/dup-v0")
    with pytest.raises(envsuite.RegistryError, match="already registered"):
        envsuite.register("scratch/dup-v0", "tests.support.toy_envs:EchoNumberEnv")


def test_unknown_kwargs_fail_listing_accepted_ones(scratch_ids: list[str]) -> None:
    _register(scratch_ids, "scratch/kw-v0", kwargs={"low": 5})
    with pytest.raises(envsuite.EnvKwargsError) as err:
        envsuite.make_env("scratch/kw", bogus=1)
    assert "bogus" in str(err.value) and "low, high" in str(err.value)
    with pytest.raises(TypeError, match="unknown spec fields"):
        envsuite.register("scratch/kw-v1", "tests.support.toy_envs:EchoNumberEnv", colour="red")


async def test_make_env_group_and_dataset_from_one_id(scratch_ids: list[str]) -> None:
    _register(scratch_ids, "scratch/trio-v0", kwargs={"low": 10, "high": 10_000})
    env = envsuite.make_env("scratch/trio", seed=3, model="tiny-random")
    assert isinstance(env, envsuite.Env)
    builder = envsuite.make_group_builder("scratch/trio", group_size=4, seed=3, model="tiny-random")
    envs = await builder.make_envs()
    numbers = {e.number for e in envs}  # type: ignore[attr-defined]
    assert len(envs) == 4 and numbers == {env.number}  # type: ignore[attr-defined]
    dataset_builder = envsuite.make_dataset_builder(
        "scratch/trio", batch_size=3, group_size=2, seed=1, n_batches=5, model="tiny-random"
    )
    train, test = await pickle.loads(pickle.dumps(dataset_builder))()
    assert len(train) == 5 and test is not None
    batch = train.get_batch(0)
    assert len(batch) == 3 and batch[0].logging_tags() == ["scratch/trio"]
    again = (await dataset_builder())[0].get_batch(0)
    assert [b.seed for b in batch] == [b.seed for b in again]  # type: ignore[attr-defined]
    train_seeds = {b.seed for i in range(5) for b in train.get_batch(i)}  # type: ignore[attr-defined]
    test_seeds = {b.seed for b in test.get_batch(0)}  # type: ignore[attr-defined]
    assert not train_seeds & test_seeds
    with pytest.raises(IndexError):
        train.get_batch(5)


def test_pprint_registry_shows_unavailable_reason(scratch_ids: list[str]) -> None:
    _register(scratch_ids, "scratch/blocked-v0", unavailable="needs an API key")
    lines: list[str] = []
    envsuite.pprint_registry(print_fn=lines.append)
    assert any("scratch/blocked-v0" in line and "needs an API key" in line for line in lines)


def _install_fake_distribution(root: Path, name: str, entry_points: str, module_source: str) -> None:
    module = name.replace("-", "_")
    (root / f"{module}.py").write_text(textwrap.dedent(module_source))
    dist_info = root / f"{module}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def test_entry_point_plugins_load_lazily_and_broken_ones_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_fake_distribution(
        tmp_path,
        "good-plugin",
        "[envsuite.envs]\ngood = good_plugin:register_envs\n",
        """
        import envsuite
        def register_envs():
            envsuite.register("goodns/echo-v0", "tests.support.toy_envs:EchoNumberEnv", package="good-plugin")
        """,
    )
    _install_fake_distribution(
        tmp_path, "bad-plugin", "[envsuite.envs]\nbad = bad_plugin\n", "raise ImportError('boom')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh = envsuite.catalog.registration.Registry()
    monkeypatch.setattr(envsuite.catalog.registration, "registry", fresh)
    assert not fresh._plugins_loaded
    with pytest.warns(RuntimeWarning, match="bad-plugin"):
        found = envsuite.catalog.registration.registry.spec("goodns/echo")
    assert found.package == "good-plugin"
    assert "bad" in fresh.plugin_errors and "boom" in fresh.plugin_errors["bad"]
    sys.modules.pop("good_plugin", None)


def test_import_envsuite_stays_light() -> None:
    import subprocess

    code = "import sys, envsuite; print(sorted(m for m in ('torch','transformers','textarena','inspect_ai','tinker') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_register_keywords_are_every_other_spec_field() -> None:
    """``register(**spec_fields)`` is typed by SpecFields, which must name exactly the EnvSpec fields that
    are not register's own parameters, each with the field's type."""
    import dataclasses
    import typing

    from envsuite.registration import EnvSpec, SpecFields

    spec_types = typing.get_type_hints(EnvSpec)
    own = {"id", "entry_point", "kwargs"}
    keyword_types = typing.get_type_hints(SpecFields)
    assert set(keyword_types) == {f.name for f in dataclasses.fields(EnvSpec)} - own
    assert keyword_types == {name: spec_types[name] for name in keyword_types}


def test_a_scheme_resolver_must_return_a_spec() -> None:
    registry.register_scheme("brokenscheme", lambda env_id: {"id": env_id})
    try:
        with pytest.raises(TypeError, match="not an EnvSpec"):
            envsuite.spec("brokenscheme:x")
    finally:
        registry._schemes.pop("brokenscheme")

"""``LocalRestClient``: Tinker's RestClient over a local log dir (runs, checkpoints, capabilities).

Every public method of the installed SDK's ``RestClient`` is here, sync (a future) and ``_async`` (the
value). Runs and checkpoints are read from the directories the local training clients write (see
``_runs.py``); checkpoint paths may be directories or ``tinker://`` paths. Accounts, billing, projects,
sessions, publishing and external storage belong to the hosted service: those calls raise
:class:`NotImplementedError` naming the method and why.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from tinker import types

from envsuite.backends.local._futures import LocalFuture, completed_future, failed_future
from envsuite.backends.local._runs import (
    TINKER_SCHEME,
    RunRecord,
    UnknownRunError,
    delete_checkpoint_dir,
    list_checkpoints,
    resolve_checkpoint_path,
    run_dir_of_checkpoint,
    run_dirs,
    tinker_path_of,
    training_run_of,
)
from envsuite.backends.local._unsupported import not_local
from envsuite.engine import weights as ckpt

if TYPE_CHECKING:
    from tinker.lib.telemetry import Telemetry

T = TypeVar("T")
AccessScope = Literal["owned", "accessible"]
_HOSTED_ONLY = "{} belong to the hosted service's accounts; the local backend has none"


def _settle(fn: Callable[[], T]) -> LocalFuture[T]:
    try:
        return completed_future(fn())
    except Exception as exc:
        return failed_future(exc)


class LocalRestClient:
    """Lists and manages the training runs and checkpoints under ``log_dir``.

    ``tinker_paths=True`` reports checkpoints by ``tinker://`` path (what ``envsuite serve`` hands
    out); by default they are reported by directory, as the local training clients return them.
    """

    def __init__(
        self,
        _holder: object | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        tinker_paths: bool = False,
    ) -> None:
        from envsuite.models import cache_dir

        self.log_dir = Path(log_dir) if log_dir is not None else cache_dir() / "checkpoints"
        self.tinker_paths = tinker_paths

    def get_telemetry(self) -> Telemetry | None:
        return None

    # ------------------------------------------------------------------------------------------
    # Capabilities
    # ------------------------------------------------------------------------------------------

    def get_server_capabilities(self) -> LocalFuture[types.GetServerCapabilitiesResponse]:
        """The named models (any local HF directory works too), all trainable and sampleable."""
        from envsuite.models import KNOWN_MODELS

        models = [
            types.SupportedModel(model_name=name, trainable=True, sampleable=True)
            for name in sorted(KNOWN_MODELS)
        ]
        return completed_future(types.GetServerCapabilitiesResponse(supported_models=models))

    def get_weights_info_by_tinker_path(self, tinker_path: str) -> LocalFuture[types.WeightsInfoResponse]:
        def info() -> types.WeightsInfoResponse:
            meta = ckpt.read_meta(self._resolve(tinker_path))
            lora = meta.lora
            return types.WeightsInfoResponse(
                base_model=meta.base_model,
                is_lora=lora is not None,
                lora_rank=None if lora is None else lora.rank,
                train_unembed=None if lora is None else lora.train_unembed,
                train_mlp=None if lora is None else lora.train_mlp,
                train_attn=None if lora is None else lora.train_attn,
            )

        return _settle(info)

    # ------------------------------------------------------------------------------------------
    # Training runs
    # ------------------------------------------------------------------------------------------

    def get_training_run(
        self, training_run_id: types.ModelID, access_scope: AccessScope = "owned"
    ) -> LocalFuture[types.TrainingRun]:
        return _settle(
            lambda: training_run_of(self._run_dir(training_run_id), tinker_paths=self.tinker_paths)
        )

    async def get_training_run_async(
        self, training_run_id: types.ModelID, access_scope: AccessScope = "owned"
    ) -> types.TrainingRun:
        return await self.get_training_run(training_run_id, access_scope)

    def get_training_run_by_tinker_path(
        self, tinker_path: str, access_scope: AccessScope = "owned"
    ) -> LocalFuture[types.TrainingRun]:
        """The run a checkpoint path (directory or ``tinker://``) belongs to, with its ``user_metadata``."""

        def find() -> types.TrainingRun:
            run_dir = run_dir_of_checkpoint(self._resolve(tinker_path))
            return training_run_of(run_dir, tinker_paths=self.tinker_paths)

        return _settle(find)

    async def get_training_run_by_tinker_path_async(
        self, tinker_path: str, access_scope: AccessScope = "owned"
    ) -> types.TrainingRun:
        return await self.get_training_run_by_tinker_path(tinker_path, access_scope)

    def list_training_runs(
        self,
        limit: int = 20,
        offset: int = 0,
        access_scope: AccessScope = "owned",
        project_id: str | None = None,
    ) -> LocalFuture[types.TrainingRunsResponse]:
        """Runs under ``log_dir``, newest first (``project_id`` is ignored: there are no projects)."""

        def page() -> types.TrainingRunsResponse:
            dirs = run_dirs(self.log_dir)
            runs = [training_run_of(d, tinker_paths=self.tinker_paths) for d in dirs[offset : offset + limit]]
            cursor = types.Cursor(offset=offset, limit=limit, total_count=len(dirs))
            return types.TrainingRunsResponse(training_runs=runs, cursor=cursor)

        return _settle(page)

    async def list_training_runs_async(
        self,
        limit: int = 20,
        offset: int = 0,
        access_scope: AccessScope = "owned",
        project_id: str | None = None,
    ) -> types.TrainingRunsResponse:
        return await self.list_training_runs(limit, offset, access_scope, project_id)

    # ------------------------------------------------------------------------------------------
    # Checkpoints
    # ------------------------------------------------------------------------------------------

    def list_checkpoints(self, training_run_id: types.ModelID) -> LocalFuture[types.CheckpointsListResponse]:
        def listing() -> types.CheckpointsListResponse:
            found = list_checkpoints(self._run_dir(training_run_id), tinker_paths=self.tinker_paths)
            return types.CheckpointsListResponse(checkpoints=found)

        return _settle(listing)

    async def list_checkpoints_async(self, training_run_id: types.ModelID) -> types.CheckpointsListResponse:
        return await self.list_checkpoints(training_run_id)

    def list_user_checkpoints(
        self, limit: int = 100, offset: int = 0
    ) -> LocalFuture[types.CheckpointsListResponse]:
        """Every checkpoint under ``log_dir``, newest first."""

        def listing() -> types.CheckpointsListResponse:
            found = [
                c for d in run_dirs(self.log_dir) for c in list_checkpoints(d, tinker_paths=self.tinker_paths)
            ]
            found.sort(key=lambda c: c.time, reverse=True)
            cursor = types.Cursor(offset=offset, limit=limit, total_count=len(found))
            return types.CheckpointsListResponse(checkpoints=found[offset : offset + limit], cursor=cursor)

        return _settle(listing)

    async def list_user_checkpoints_async(
        self, limit: int = 100, offset: int = 0
    ) -> types.CheckpointsListResponse:
        return await self.list_user_checkpoints(limit, offset)

    def delete_checkpoint(self, training_run_id: types.ModelID, checkpoint_id: str) -> LocalFuture[None]:
        """Delete ``<run>/<checkpoint_id>`` (ids look like ``weights/<name>`` or ``sampler_weights/<name>``)."""
        return _settle(lambda: delete_checkpoint_dir(self._checkpoint_dir(training_run_id, checkpoint_id)))

    async def delete_checkpoint_async(self, training_run_id: types.ModelID, checkpoint_id: str) -> None:
        return await self.delete_checkpoint(training_run_id, checkpoint_id)

    def delete_checkpoint_from_tinker_path(self, tinker_path: str) -> LocalFuture[None]:
        return _settle(lambda: delete_checkpoint_dir(self._resolve(tinker_path)))

    async def delete_checkpoint_from_tinker_path_async(self, tinker_path: str) -> None:
        return await self.delete_checkpoint_from_tinker_path(tinker_path)

    def set_checkpoint_ttl_from_tinker_path(
        self, tinker_path: str, ttl_seconds: int | None
    ) -> LocalFuture[None]:
        """Record a new ``expires_at`` (local checkpoints are never deleted on their own)."""

        def set_ttl() -> None:
            directory = self._resolve(tinker_path)
            meta = ckpt.read_meta(directory)
            expires = None if ttl_seconds is None else datetime.now(UTC) + timedelta(seconds=ttl_seconds)
            ckpt.rewrite_meta(directory, meta.with_expiry(expires))

        return _settle(set_ttl)

    async def set_checkpoint_ttl_from_tinker_path_async(
        self, tinker_path: str, ttl_seconds: int | None
    ) -> None:
        return await self.set_checkpoint_ttl_from_tinker_path(tinker_path, ttl_seconds)

    def copy_weights(
        self,
        path: str,
        destination_project_id: str | None = None,
        *,
        ttl_seconds: int | None = None,
        weights_access_token: str | None = None,
    ) -> LocalFuture[str]:
        """Copy a checkpoint into a new run of its own (a real copy on disk); returns the copy's path."""
        return _settle(lambda: self._copy(path, ttl_seconds))

    async def copy_weights_async(
        self,
        path: str,
        destination_project_id: str | None = None,
        *,
        ttl_seconds: int | None = None,
        weights_access_token: str | None = None,
    ) -> str:
        return await self.copy_weights(path, destination_project_id, ttl_seconds=ttl_seconds)

    # ------------------------------------------------------------------------------------------
    # Hosted-only
    # ------------------------------------------------------------------------------------------

    def whoami(self) -> LocalFuture[types.WhoamiResponse]:
        raise not_local("RestClient.whoami", _HOSTED_ONLY.format("users and organizations"))

    def get_sampler(self, sampler_id: str) -> LocalFuture[types.GetSamplerResponse]:
        raise not_local("RestClient.get_sampler", "samplers are in-process objects, not server records")

    async def get_sampler_async(self, sampler_id: str) -> types.GetSamplerResponse:
        return await self.get_sampler(sampler_id)

    def get_session(
        self, session_id: str, access_scope: AccessScope = "owned"
    ) -> LocalFuture[types.GetSessionResponse]:
        raise not_local("RestClient.get_session", "the local backend keeps no session records")

    async def get_session_async(
        self, session_id: str, access_scope: AccessScope = "owned"
    ) -> types.GetSessionResponse:
        return await self.get_session(session_id, access_scope)

    def list_sessions(
        self, limit: int = 20, offset: int = 0, access_scope: AccessScope = "owned"
    ) -> LocalFuture[types.ListSessionsResponse]:
        raise not_local("RestClient.list_sessions", "the local backend keeps no session records")

    async def list_sessions_async(
        self, limit: int = 20, offset: int = 0, access_scope: AccessScope = "owned"
    ) -> types.ListSessionsResponse:
        return await self.list_sessions(limit, offset, access_scope)

    def search_sessions(
        self, request: types.SessionSearchRequest
    ) -> LocalFuture[types.SessionSearchResponse]:
        raise not_local("RestClient.search_sessions", "the local backend keeps no session records")

    def export_session_trace(self, session_id: str) -> LocalFuture[str]:
        raise not_local("RestClient.export_session_trace", "the local backend keeps no session records")

    async def export_session_trace_async(self, session_id: str) -> str:
        return await self.export_session_trace(session_id)

    def assign_session_project(self, session_id: str, project_id: str) -> LocalFuture[None]:
        raise not_local("RestClient.assign_session_project", _HOSTED_ONLY.format("projects"))

    async def assign_session_project_async(self, session_id: str, project_id: str) -> None:
        return await self.assign_session_project(session_id, project_id)

    def get_audit_log(
        self,
        event_type: Literal["all", "checkpoints", "projects", "teams", "organizations"] = "all",
        day: date | None = None,
    ) -> LocalFuture[types.AuditLogResponse]:
        raise not_local("RestClient.get_audit_log", _HOSTED_ONLY.format("audit logs"))

    async def get_audit_log_async(
        self,
        event_type: Literal["all", "checkpoints", "projects", "teams", "organizations"] = "all",
        day: date | None = None,
    ) -> types.AuditLogResponse:
        return await self.get_audit_log(event_type, day)

    def get_billing_usage(
        self, starting_on: datetime | str, ending_before: datetime | str
    ) -> LocalFuture[types.BillingUsageResponse]:
        raise not_local("RestClient.get_billing_usage", _HOSTED_ONLY.format("billing records"))

    async def get_billing_usage_async(
        self, starting_on: datetime | str, ending_before: datetime | str
    ) -> types.BillingUsageResponse:
        return await self.get_billing_usage(starting_on, ending_before)

    def get_current_checkpoint_storage_usage(
        self, project_id: str | None = None
    ) -> LocalFuture[types.CurrentCheckpointStorageUsageResponse]:
        """Checkpoint count and bytes under ``log_dir`` (one item; no projects, owners or prices)."""

        def usage() -> types.CurrentCheckpointStorageUsageResponse:
            found = [c for d in run_dirs(self.log_dir) for c in list_checkpoints(d, tinker_paths=True)]
            size = sum(c.size_bytes or 0 for c in found)
            item = types.CurrentCheckpointStorageUsageItem(
                checkpoint_count=len(found), size_bytes=size, size_gigabytes=size / 1e9
            )
            return types.CurrentCheckpointStorageUsageResponse(data=[item])

        return _settle(usage)

    async def get_current_checkpoint_storage_usage_async(
        self, project_id: str | None = None
    ) -> types.CurrentCheckpointStorageUsageResponse:
        return await self.get_current_checkpoint_storage_usage(project_id)

    def get_external_weights_urls(self, tinker_path: str) -> LocalFuture[types.ExternalWeightsUrlsResponse]:
        raise not_local(
            "RestClient.get_external_weights_urls", "there is no external weights storage locally"
        )

    async def get_external_weights_urls_async(self, tinker_path: str) -> types.ExternalWeightsUrlsResponse:
        return await self.get_external_weights_urls(tinker_path)

    def publish_checkpoint_from_tinker_path(self, tinker_path: str) -> LocalFuture[None]:
        raise not_local(
            "RestClient.publish_checkpoint_from_tinker_path", _HOSTED_ONLY.format("published checkpoints")
        )

    async def publish_checkpoint_from_tinker_path_async(self, tinker_path: str) -> None:
        return await self.publish_checkpoint_from_tinker_path(tinker_path)

    def unpublish_checkpoint_from_tinker_path(self, tinker_path: str) -> LocalFuture[None]:
        raise not_local(
            "RestClient.unpublish_checkpoint_from_tinker_path", _HOSTED_ONLY.format("published checkpoints")
        )

    async def unpublish_checkpoint_from_tinker_path_async(self, tinker_path: str) -> None:
        return await self.unpublish_checkpoint_from_tinker_path(tinker_path)

    # ------------------------------------------------------------------------------------------

    def _resolve(self, path: str) -> Path:
        return resolve_checkpoint_path(path, self.log_dir)

    def _run_dir(self, training_run_id: str) -> Path:
        if not training_run_id or "/" in training_run_id or training_run_id in (".", ".."):
            raise UnknownRunError(f"invalid training run id {training_run_id!r}")
        run_dir = self.log_dir / training_run_id
        RunRecord.read(run_dir)
        return run_dir

    def _checkpoint_dir(self, training_run_id: str, checkpoint_id: str) -> Path:
        return self._resolve(f"{TINKER_SCHEME}{training_run_id}/{checkpoint_id}")

    def _copy(self, path: str, ttl_seconds: int | None) -> str:
        source = self._resolve(path)
        meta = ckpt.read_meta(source)
        source_run = RunRecord.read(run_dir_of_checkpoint(source))
        run_id = f"copy-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{time.monotonic_ns() % 10**6}"
        rank = None if meta.lora is None else meta.lora.rank
        RunRecord(run_id, meta.base_model, rank, dict(source_run.user_metadata)).write(self.log_dir)
        dest = self.log_dir / run_id / source.parent.name / source.name
        ckpt.write_checkpoint(dest, meta, lambda tmp: _copy_payload(source, tmp))
        if ttl_seconds is not None:
            ckpt.rewrite_meta(dest, meta.with_expiry(datetime.now(UTC) + timedelta(seconds=ttl_seconds)))
        return tinker_path_of(dest) if path.startswith(TINKER_SCHEME) else str(dest)


def _copy_payload(source: Path, dest: Path) -> None:
    from envsuite.models import CHECKPOINT_META_FILE

    for item in source.iterdir():
        if item.name != CHECKPOINT_META_FILE:
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, dest / item.name)

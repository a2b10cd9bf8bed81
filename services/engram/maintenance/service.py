"""MaintenanceService's use cases: the record of job runs, on-demand runs and each space's
maintenance settings, each authorized first (the Authorizer decides each action)."""

from __future__ import annotations

from engram.backends.sqlite import to_micros
from engram.domain.errors import InvalidArgument, PermissionDenied
from engram.domain.maintenance import JobRun, SpaceSettings
from engram.domain.pagination import PageSize, decode_page_token, encode_page_token
from engram.domain.policy import PLATFORM_ADMIN_REQUIRED, Target
from engram.domain.ports import AuditRecord, AuditSink, Authorizer
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.maintenance.ports import JobRunStore, SpaceSettingsStore
from engram.maintenance.worker import MaintenanceWorker

RUN_PAGES = PageSize(default=50, maximum=1000)
MAX_JOB_NAME = 64
SETTINGS_AUDIT_ACTION = "maintenance.settings"


class MaintenanceService:
    def __init__(
        self,
        worker: MaintenanceWorker,
        runs: JobRunStore,
        settings: SpaceSettingsStore,
        audit: AuditSink,
        authorizer: Authorizer,
    ) -> None:
        self._authorizer = authorizer
        self._worker = worker
        self._runs = runs
        self._settings = settings
        self._audit = audit

    async def list_runs(
        self,
        principal: Principal,
        space: SpaceRef | None,
        *,
        job: str,
        page_size: int,
        page_token: str,
    ) -> tuple[list[JobRun], str]:
        """Runs newest first, of one space (its tenant's members) or of every space
        (platform admins); the next page's token ("" on the last page)."""
        if space is None:
            if not await self._authorizer.permits(principal, Action.LIST_JOB_RUNS, Target.INSTANCE):
                raise PermissionDenied(
                    "listing every space's job runs needs a platform admin; name a space",
                    rule=PLATFORM_ADMIN_REQUIRED,
                )
            space_id = None
        else:
            space_id = (await self._authorize(principal, Action.LIST_JOB_RUNS, space)).id
        if len(job) > MAX_JOB_NAME:
            raise InvalidArgument(f"job must be at most {MAX_JOB_NAME} characters", field="job")
        limit = RUN_PAGES.resolve(page_size)
        scope = ("job_runs", space_id or "*", job)
        position = decode_page_token(page_token, scope)
        before = None if position is None else (int(position["t"]), str(position["r"]))
        runs = await self._runs.page(space_id=space_id, job=job, before=before, limit=limit + 1)
        if len(runs) <= limit:
            return runs, ""
        runs = runs[:limit]
        last = runs[-1]
        position = {"t": to_micros(last.started_at), "r": last.run_id}
        return runs, encode_page_token(scope, position)

    async def run_job(self, principal: Principal, job: str, space: SpaceRef) -> JobRun:
        """Runs the job on the space now and returns its finished run (ABORTED while a run
        of it holds the lease)."""
        stamped = await self._authorize(principal, Action.RUN_JOB, space)
        if not job:
            names = ", ".join(self._worker.job_names) or "none configured"
            raise InvalidArgument(f"job is required: one of {names}", field="job")
        return await self._worker.run_now(job, stamped)

    async def get_settings(self, principal: Principal, space: SpaceRef) -> SpaceSettings:
        stamped = await self._authorize(principal, Action.GET_SPACE_MAINTENANCE, space)
        return await self._worker.settings_of(stamped.id)

    async def set_settings(
        self, principal: Principal, space: SpaceRef, settings: SpaceSettings
    ) -> SpaceSettings:
        """Replaces the space's settings (audited: who changed which space's maintenance)."""
        stamped = await self._authorize(principal, Action.SET_SPACE_MAINTENANCE, space)
        await self._settings.put(stamped.id, settings)
        await self._audit.record(
            AuditRecord(
                action=SETTINGS_AUDIT_ACTION,
                subject=principal.subject,
                tenant=stamped.tenant,
                space_id=stamped.id,
                path="",
                bytes_delta=0,
            )
        )
        return settings

    async def _authorize(self, principal: Principal, action: Action, space: SpaceRef) -> SpaceRef:
        return (await self._authorizer.authorize(principal, action, space)).space

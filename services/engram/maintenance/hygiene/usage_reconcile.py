"""usage_reconcile: recomputes the quota counters of the space's tenant from its stored
documents (QuotaService.reconcile) and reports the drift it corrected, also as metrics."""

from __future__ import annotations

from typing import ClassVar

from prometheus_client import Counter

from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.quotas import aggregate_owner
from engram.domain.spaces import SpaceRef
from engram.maintenance.hygiene.common import Details, HygieneJob

DRIFTED_COUNTERS = Counter(
    "engram_maintenance_usage_drift_counters_total",
    "Quota counters usage_reconcile found wrong and corrected.",
)
DRIFT_BYTES = Counter(
    "engram_maintenance_usage_drift_bytes_total",
    "Bytes by which corrected quota counters were off (absolute), summed.",
)


class UsageReconcileJob(HygieneJob):
    name: ClassVar[str] = "usage_reconcile"

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        owner = aggregate_owner(space)
        report = await self._deps.quota.reconcile(owner)
        drift = sum(abs(d.actual_bytes - d.recorded_bytes) for d in report.drifts)
        DRIFTED_COUNTERS.inc(len(report.drifts))
        DRIFT_BYTES.inc(drift)
        details = Details()
        for d in report.drifts:
            details.add(f"{d.counter}: recorded {d.recorded_bytes} bytes, stored {d.actual_bytes}")
        return JobReport(
            counts={
                "spaces_checked": report.spaces_checked,
                "counters_corrected": len(report.drifts),
                "drift_bytes": drift,
            },
            message=(
                f"{len(report.drifts)} counters of {owner} corrected ({drift} bytes of drift)"
                if report.drifts
                else f"the counters of {owner} match its documents"
            ),
            details=details.lines(),
        )

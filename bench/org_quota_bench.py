"""What an org costs a charge (issue 34, part 5): QuotaService.charge in process, on SQLite
and on FerretDB, for a tenant in no org (space + tenant counters), a tenant in an org with a
ceiling (space + tenant + org counters, the org's ceiling and membership read through the
2 s cache), a global space (space + instance) and a global space with the writer's
attribution (space + instance + the tenant's attribution counter).

    .venv/bin/python bench/org_quota_bench.py [--backend sqlite|mongo|both]
                                               [--count 1000] [--concurrency 16]

Two rounds; each phase runs `--count` growing charges of 10 bytes at `--concurrency`, spread over 16
spaces of the tenant; prints charges/s and latency p50/p99 per phase. FerretDB is started
through deploy/local/backends.py. Figures go to bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "services"), str(ROOT / "bench")]

from benchlib import closed_loop, load_launcher, percentile  # noqa: E402

from engram.authz.enforcement import PolicyAuthorizer  # noqa: E402
from engram.backends.mongo import connect  # noqa: E402
from engram.backends.sqlite import SqliteDatabase  # noqa: E402
from engram.domain.documents import SpaceUsage  # noqa: E402
from engram.domain.principals import LOCAL_ADMIN  # noqa: E402
from engram.domain.quotas import QuotaDefaults  # noqa: E402
from engram.domain.spaces import SpaceRef, Visibility  # noqa: E402
from engram.quota.mongo_ledger import MongoUsageLedger  # noqa: E402
from engram.quota.ports import UsageLedger  # noqa: E402
from engram.quota.service import QuotaService  # noqa: E402
from engram.quota.sqlite_ledger import SCHEMA, SqliteUsageLedger  # noqa: E402

GIB = 1 << 30
DEFAULTS = QuotaDefaults(
    subcaps=dict.fromkeys(Visibility, GIB), tenant_total=GIB, instance_total=GIB
)


class NoStoredUsage:
    """Reconcile's view of the documents: no documents (charges never read it)."""

    async def usage_by_space(self, aggregate_owner: str) -> dict[str, int]:
        return {}

    async def space_usage(self, space_id: str) -> SpaceUsage:
        return SpaceUsage(used_bytes=0, document_count=0)


@asynccontextmanager
async def ledger_on(backend: str, workdir: Path) -> AsyncIterator[UsageLedger]:
    if backend == "sqlite":
        database = SqliteDatabase(workdir / "ledger.db")
        await database.open([SCHEMA])
        try:
            yield SqliteUsageLedger(database)
        finally:
            await database.close()
        return
    launcher = load_launcher()
    launcher.provision(["mongo"])
    mongo = launcher.start_mongo(workdir / "mongo")
    client, database = connect(mongo.url, f"bench_{uuid.uuid4().hex[:8]}")
    try:
        ledger = MongoUsageLedger(database)
        await ledger.ensure_indexes()
        yield ledger
    finally:
        await client.close()
        mongo.stop()


async def phase(
    service: QuotaService, spaces: list[SpaceRef], attributed: str, count: int, concurrency: int
) -> tuple[float, float, float]:
    async def one(i: int) -> None:
        await service.charge(spaces[i % len(spaces)], 10, "", attributed_tenant=attributed)

    latencies, elapsed = await closed_loop(one, count=count, concurrency=concurrency, cap=300)
    return len(latencies) / elapsed, percentile(latencies, 50), percentile(latencies, 99)


async def bench(backend: str, count: int, concurrency: int) -> None:
    with tempfile.TemporaryDirectory(prefix="org-quota-bench-") as tmp:
        async with ledger_on(backend, Path(tmp)) as ledger:
            service = QuotaService(ledger, DEFAULTS, NoStoredUsage(), authorizer=PolicyAuthorizer())
            await service.orgs.set_membership(LOCAL_ADMIN, "member", "initech")
            await service.orgs.set_ceiling(LOCAL_ADMIN, "initech", GIB)

            def tenant_spaces(tenant: str) -> list[SpaceRef]:
                return [
                    SpaceRef.create(Visibility.PRIVATE, tenant=tenant, name=f"s{i}")
                    for i in range(16)
                ]

            globals_ = [
                SpaceRef.create(Visibility.GLOBAL, tenant="", name=f"g{i}") for i in range(16)
            ]
            phases = [
                ("tenant in no org", tenant_spaces("loner"), ""),
                ("tenant in an org (ceiling)", tenant_spaces("member"), ""),
                ("global space", globals_, ""),
                ("global space, attributed", globals_, "loner"),
            ]
            # Two rounds through the phases: the first warms caches and connections, and a
            # machine's load drifting during a run shows as the rounds disagreeing.
            for round_ in (1, 2):
                for name, spaces, attributed in phases:
                    rate, p50, p99 = await phase(service, spaces, attributed, count, concurrency)
                    print(
                        f"{backend:6} round {round_} {name:28} {rate:8.0f} charges/s"
                        f"  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms",
                        flush=True,
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "mongo", "both"], default="both")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    backends = ["sqlite", "mongo"] if args.backend == "both" else [args.backend]
    for backend in backends:
        asyncio.run(bench(backend, args.count, args.concurrency))


if __name__ == "__main__":
    main()

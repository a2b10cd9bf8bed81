"""A quota charge as QuotaService makes it (in process or behind its Charge RPC), on FerretDB.

    PYTHONPATH=$PWD/services:$PWD .venv/bin/python bench/quota_charge_bench.py \
        [--count 300] [--tenants 5] [--cache-seconds 0] [--rounds 2]

FerretDB (PostgreSQL handler) from deploy/local, one database; QuotaService over
MongoUsageLedger, charges of 600 bytes one at a time over `--tenants` tenants of 4 spaces
each. `--cache-seconds` is the override and org cache's lifetime: 0 makes every charge read
the tenant's org and override, as a tenant that writes less often than the cache lasts (the
chart's 2 s) does on most of its charges. Prints the charge's p50/p99 and the MongoDB
commands per charge; then the two lookups of a cold charge, one after the other and
together (as QuotaService makes them), interleaved in one process so that both meet the
same machine. Figures go to bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pymongo import monitoring

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for entry in (str(ROOT / "services"), str(ROOT), str(BENCH)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from benchlib import load_average, percentile  # noqa: E402
from loadlib import deploy  # noqa: E402
from mongo_command_counter import COUNTS, Counting  # noqa: E402

from engram.authz.enforcement import PolicyAuthorizer  # noqa: E402
from engram.backends.mongo import connect  # noqa: E402
from engram.domain.documents import SpaceUsage  # noqa: E402
from engram.domain.quotas import QuotaDefaults  # noqa: E402
from engram.domain.spaces import SpaceRef, Visibility  # noqa: E402
from engram.quota.mongo_ledger import MongoUsageLedger  # noqa: E402
from engram.quota.service import QuotaService  # noqa: E402

GIB = 1 << 30


class NoStoredUsage:
    """Charges never read what the documents hold (only Reconcile does)."""

    async def usage_by_space(self, aggregate_owner: str) -> dict[str, int]:
        raise AssertionError("a charge does not read stored usage")

    async def space_usage(self, space_id: str) -> SpaceUsage:
        raise AssertionError("a charge does not read stored usage")


async def phase(quota: QuotaService, spaces: list[SpaceRef], count: int) -> list[float]:
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        await quota.charge(spaces[i % len(spaces)], 600, f"k{i}")
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def bench(args: argparse.Namespace, mongo: Any) -> None:
    monitoring.register(Counting())
    client, database = connect(mongo.url, "quota_charge_bench")
    defaults = QuotaDefaults(
        subcaps={v: 100 * GIB for v in Visibility}, tenant_total=1000 * GIB, instance_total=0
    )
    ledger = MongoUsageLedger(database)
    await ledger.ensure_indexes()
    quota = QuotaService(
        ledger,
        defaults,
        NoStoredUsage(),
        authorizer=PolicyAuthorizer(),
        override_cache_seconds=args.cache_seconds,
    )
    spaces = [
        SpaceRef.create(Visibility.PRIVATE, tenant=f"team{t}", name=f"s{s}")
        for s in range(4)
        for t in range(args.tenants)
    ]
    await phase(quota, spaces, 40)  # warm-up: heads written, connections open
    for round_ in range(1, args.rounds + 1):
        COUNTS.clear()
        latencies = await phase(quota, spaces, args.count)
        per = ", ".join(f"{name} {n / args.count:.2f}" for name, n in COUNTS.most_common())
        print(
            f"round {round_}: charge p50 {percentile(latencies, 50):.2f} ms, "
            f"p99 {percentile(latencies, 99):.2f} ms (n {len(latencies)}, load {load_average()})"
            f"\n   commands per charge: {per}",
            flush=True,
        )
    sequential, together = await lookups(ledger, args.count)
    print(
        f"a cold charge's org and override reads: one after the other p50 "
        f"{percentile(sequential, 50):.2f} ms (p90 {percentile(sequential, 90):.2f}), together "
        f"p50 {percentile(together, 50):.2f} ms (p90 {percentile(together, 90):.2f}) "
        f"(n {args.count} each, interleaved, load {load_average()})",
        flush=True,
    )
    await client.close()


async def lookups(ledger: MongoUsageLedger, count: int) -> tuple[list[float], list[float]]:
    sequential: list[float] = []
    together: list[float] = []
    for i in range(count):
        tenant = f"team{i % 5}"
        for apart in (True, False) if i % 2 else (False, True):
            started = time.perf_counter()
            if apart:
                await ledger.org_of(tenant)
                await ledger.get_override(tenant)
                sequential.append((time.perf_counter() - started) * 1000)
            else:
                await asyncio.gather(ledger.org_of(tenant), ledger.get_override(tenant))
                together.append((time.perf_counter() - started) * 1000)
    return sequential, together


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--tenants", type=int, default=5)
    parser.add_argument("--cache-seconds", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    launcher = deploy.launcher_module()
    launcher.bind_to_this_process()
    launcher.require_provisioned(["mongo"])
    with tempfile.TemporaryDirectory(prefix="quota-charge-") as tmp:
        mongo = launcher.start_mongo(Path(tmp) / "mongo")
        try:
            asyncio.run(bench(args, mongo))
        finally:
            mongo.stop()


if __name__ == "__main__":
    main()

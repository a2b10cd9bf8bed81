"""Open-loop load harness: engram under an agent-like mix at a constant arrival rate.

    python bench/load.py --target dev                    # pre-load, knee search, 10-min soak
    python bench/load.py --target real                   # the same on the real backends
    python bench/load.py --target dev --rate 5 --duration 30 --chunks 300   # one fixed-rate run

The system under test runs as processes the harness starts (bench/loadlib/deploy.py): `dev`
is `engram dev`; `real` is NATS, FerretDB and OpenSearch from deploy/local with every engram
service its own process, configured by the rendered Helm chart (`--plan serve`: `engram
serve` processes configured by the harness, for a machine without helm). The generator runs
in its own process (bench/loadlib/generator.py): request i is sent at start + i/rate whatever
is outstanding, its latency counted from that time.

Population: `--tenants` × `--agents-per-tenant` agents, each with its own workspace space,
pre-loaded with `--chunks` chunks of synthetic markdown (ImportSpace, then the index backlog
drained). The state after the pre-load is cached per target and corpus
(`--corpus-cache`, default ~/.cache/engram/load-corpus) and copied in on the next run.

Mix (`--mix`, percentages): search 30, memory_search 30, append 25 (daily-log appends),
replace 10, read 5. The knee is the last rate of the steps (×`--step-factor` every
`--step-seconds`) at which p99 of searches and of writes stay within `--target-ms` with no
error; the soak runs `--soak-seconds` at `--soak-fraction` of it. Every acknowledged write is
read back at the end (the ledger); a lost one fails the run (exit code 1).

Output (`--out`, default bench/out/load-<target>-<UTC time>/): result.json, table.txt,
latency_vs_rate.png, latency_over_time.png, runs/ (each run's raw rows), ledger.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for entry in (str(ROOT), str(BENCH)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from loadlib import corpus, deploy, ledger, report  # noqa: E402
from loadlib import faults as faultlib  # noqa: E402
from loadlib.hooks import Fault  # noqa: E402
from loadlib.runner import Harness, Run  # noqa: E402

DEFAULT_MIX = "search=30,memory_search=30,append=25,replace=10,read=5"
CACHE = Path.home() / ".cache" / "engram" / "load-corpus"


def parse_mix(text: str) -> dict[str, float]:
    mix: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in ("search", "memory_search", "append", "replace", "read"):
            raise argparse.ArgumentTypeError(f"unknown operation {name!r} in --mix")
        mix[name] = float(value)
    if sum(mix.values()) <= 0:
        raise argparse.ArgumentTypeError("--mix: the weights add up to nothing")
    return mix


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=("dev", "real"), default="dev")
    p.add_argument(
        "--plan",
        choices=("auto", "chart", "serve"),
        default="auto",
        help="real target: processes from the rendered chart, or `engram serve`",
    )
    p.add_argument(
        "--topology",
        choices=("remote", "in-process"),
        default="remote",
        help="real target, chart plan: storage charges quota through QuotaService (remote, "
        "the chart's default) or in its own process (in-process: one hop less)",
    )
    p.add_argument("--out", type=Path, help="output directory")
    p.add_argument("--chunks", type=int, default=100_000, help="pre-loaded corpus size")
    p.add_argument("--tenants", type=int, default=20)
    p.add_argument("--agents-per-tenant", type=int, default=10)
    p.add_argument(
        "--corpus-cache",
        type=Path,
        default=CACHE,
        help="where the pre-loaded state is kept per target and corpus",
    )
    p.add_argument("--no-corpus-cache", action="store_true")
    p.add_argument(
        "--preload-cap",
        type=float,
        default=4 * 3600.0,
        help="seconds the pre-load (import and indexing) may take",
    )
    p.add_argument(
        "--model-embeddings",
        action="store_true",
        help="embed the corpus with the model (slow) instead of pre-filling the "
        "embedding cache with synthetic vectors",
    )
    p.add_argument(
        "--preload-only",
        action="store_true",
        help="pre-load the corpus into the cache (--corpus-cache) and stop",
    )
    p.add_argument("--mix", type=parse_mix, default=parse_mix(DEFAULT_MIX))
    p.add_argument("--rate", type=float, help="one fixed-rate run at this rate (no knee, no soak)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of the fixed-rate run")
    p.add_argument("--warmup-seconds", type=float, default=5.0)
    p.add_argument("--start-rate", type=float, default=5.0)
    p.add_argument("--step-factor", type=float, default=1.5)
    # 60 s: a step's p99 needs a few hundred requests (at 20 s it was the slowest one).
    p.add_argument("--step-seconds", type=float, default=60.0)
    p.add_argument("--max-rate", type=float, default=2000.0)
    p.add_argument("--max-steps", type=int, default=15)
    p.add_argument("--target-ms", type=float, default=50.0, help="p99 bound of search and writes")
    p.add_argument("--soak-seconds", type=float, default=600.0, help="0 = no soak")
    p.add_argument("--soak-fraction", type=float, default=0.7)
    p.add_argument("--timeout", type=float, default=5.0, help="per-request deadline (s)")
    p.add_argument("--max-outstanding", type=int, default=256)
    p.add_argument(
        "--freshness-every",
        type=float,
        default=1.0,
        help="seconds between freshness probes (0 = none)",
    )
    p.add_argument("--freshness-timeout", type=float, default=30.0)
    faultlib.add_arguments(p)
    return p.parse_args(argv)


def faults_from(args: argparse.Namespace) -> list[Fault]:
    """The faults of the run (bench/loadlib/faults.py adds its flags and builds them)."""
    return list(faultlib.build(args))


def channel_factory(d: deploy.Deployment) -> Any:
    channels: dict[str, grpc.aio.Channel] = {}

    def channel_for(service: str) -> grpc.aio.Channel:
        address = d.addresses[service]
        if address not in channels:
            if d.tls is None:
                channels[address] = grpc.aio.insecure_channel(address)
            else:
                credentials = grpc.ssl_channel_credentials(
                    d.tls.ca.read_bytes(),
                    d.tls.key.read_bytes() if d.tls.key else None,
                    d.tls.cert.read_bytes() if d.tls.cert else None,
                )
                channels[address] = grpc.aio.secure_channel(address, credentials)
        return channels[address]

    channel_for.channels = channels  # type: ignore[attr-defined]
    return channel_for


async def _close(channel_for: Any) -> None:
    for channel in channel_for.channels.values():
        await channel.close()


async def preload(
    d: deploy.Deployment,
    spec: corpus.CorpusSpec,
    tokens: dict[str, str],
    cap: float,
    *,
    prefill: bool,
) -> dict[str, Any]:
    channel_for = channel_factory(d)
    try:
        loaded: dict[str, Any] = {"synthetic_corpus_vectors": prefill}
        if prefill:
            loaded |= await corpus.prefill_embeddings(d.target, spec, d.store)
            print(
                f"  embedding cache: {loaded['prefilled_vectors']} synthetic vectors in "
                f"{loaded['prefill_seconds']} s",
                flush=True,
            )
        loaded |= await corpus.preload(channel_for, spec, tokens, time_cap=cap)
        print(
            f"  imported {loaded['documents']} documents in {loaded['import_seconds']} s; "
            "waiting for the index",
            flush=True,
        )
        any_token = next(iter(tokens.values()))
        loaded |= await corpus.wait_indexed(channel_for, any_token, time_cap=cap)
        loaded |= await settle_maintenance(d, time_cap=cap)
        return loaded
    finally:
        await _close(channel_for)


# The maintenance worker's tick during the pre-load (60 s by default): its first sweep over a
# new corpus runs every job on every space, so the pre-load waits for it to end and caches its
# runs; a measurement started from the cache then finds nothing due for a day.
PRELOAD_MAINTENANCE_TICK_SECONDS = 5.0
# The processes that read the pre-load's settings (ENGRAM_INDEXING_NICE: the embedder and the
# embedded keyword index's writer; the maintenance tick): started again at the defaults when
# the pre-load's deployment is the measured one.
PRELOAD_SETTINGS_READERS = ("dev", "indexer", "maintenance")


async def settle_maintenance(d: deploy.Deployment, *, time_cap: float) -> dict[str, Any]:
    """Waits until the maintenance worker's first sweep is over: its run counter has not
    moved for three ticks. {} when the deployment runs no maintenance worker."""
    names = [n for n in ("maintenance", "dev") if n in d.cluster.plan.specs]
    if not names:
        return {}
    url = f"http://127.0.0.1:{d.cluster.plan.specs[names[0]].metrics_port}/metrics"
    started = time.monotonic()
    quiet_for = 3 * PRELOAD_MAINTENANCE_TICK_SECONDS
    last, last_change = -1.0, time.monotonic()
    print("  waiting for the maintenance worker's first sweep", flush=True)
    while time.monotonic() - started < time_cap:
        runs = await asyncio.to_thread(_maintenance_runs, url)
        if runs != last:
            last, last_change = runs, time.monotonic()
        elif time.monotonic() - last_change >= quiet_for:
            return {
                "maintenance_runs": int(runs),
                "maintenance_settle_seconds": round(time.monotonic() - started, 1),
            }
        await asyncio.sleep(1.0)
    raise TimeoutError(f"the maintenance worker's first sweep did not end in {time_cap:.0f} s")


def _maintenance_runs(url: str) -> float:
    """The sum of engram_maintenance_runs_total on one process's /metrics."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("engram_maintenance_runs_total{")
    )


def state_dirs(target: str, workdir: Path) -> list[str]:
    """What holds the pre-loaded state, relative to the deployment's workdir."""
    if target == "dev":
        return ["engram"]
    return ["backends/nats", "backends/mongo", "backends/opensearch", "vectors"]


@contextlib.contextmanager
def loaded_deployment(
    args: argparse.Namespace, spec: corpus.CorpusSpec, workdir: Path, *, start: bool = True
) -> Iterator[tuple[deploy.Deployment | None, dict[str, Any]]]:
    """The deployment with the corpus in it: copied from the cache, or pre-loaded (and then
    cached: stopped, copied, started again). Without a cache the pre-load's deployment is the
    one measured: only the processes that read the pre-load's settings start again."""
    vectors = "model" if args.model_embeddings else "synthetic"
    # The real target's state is the backends' data: a FerretDB on SQLite and one on
    # PostgreSQL keep it in different files, so each handler has a cache of its own.
    target = args.target
    if target == "real":
        target = f"real-{deploy.launcher_module().mongo_handler()}"
    cached = args.corpus_cache / f"{target}-{spec.key()}-{vectors}"
    use_cache = not args.no_corpus_cache
    info: dict[str, Any] = {"corpus": spec.__dict__, "cache": str(cached) if use_cache else None}
    if use_cache and (cached / "complete").exists():
        started = time.monotonic()
        for relative in state_dirs(args.target, workdir):
            if (cached / relative).exists():
                deploy.tree_copy(cached / relative, workdir / relative)
        info["preload"] = json.loads((cached / "complete").read_text())
        info["preload"]["copied_from_cache_seconds"] = round(time.monotonic() - started, 1)
        print(f"corpus: copied from {cached}", flush=True)
    else:
        # The indexer at the server's priority while nothing else is measured: at its
        # default (19 steps nicer) it gets almost no CPU on a busy shared machine.
        preload_settings = {
            "ENGRAM_INDEXING_NICE": "0",
            "ENGRAM_MAINTENANCE_TICK_SECONDS": str(PRELOAD_MAINTENANCE_TICK_SECONDS),
        }
        keep = start and not use_cache
        with deploy.deployed(
            args.target,
            workdir,
            plan=args.plan,
            settings=preload_settings,
            storage_replicas=faultlib.storage_replicas(args) if keep else 1,
            topology=args.topology,
        ) as d:
            tokens = corpus.mint_tokens(corpus.agents(spec), d.secret)
            print(f"corpus: pre-loading {spec.chunks} chunks over {len(tokens)} spaces", flush=True)
            info["preload"] = asyncio.run(
                preload(d, spec, tokens, args.preload_cap, prefill=not args.model_embeddings)
            )
            print(f"  {info['preload']}", flush=True)
            if keep:
                # Nothing to copy: the same deployment is measured, at its defaults again.
                restarted = d.restart_without(preload_settings, PRELOAD_SETTINGS_READERS)
                print(f"  restarted without the pre-load's settings: {restarted}", flush=True)
                yield d, info
                return
    if use_cache and "copied_from_cache_seconds" not in info["preload"]:
        partial = cached.with_name(cached.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        for relative in state_dirs(args.target, workdir):
            if (workdir / relative).exists():
                deploy.tree_copy(workdir / relative, partial / relative)
        (partial / "complete").write_text(json.dumps(info["preload"]))
        shutil.rmtree(cached, ignore_errors=True)
        partial.rename(cached)
    if not start:
        yield None, info
        return
    replicas = faultlib.storage_replicas(args)  # the faults' second storage replica
    with deploy.deployed(
        args.target, workdir, plan=args.plan, storage_replicas=replicas, topology=args.topology
    ) as d:
        yield d, info


def population(spec: corpus.CorpusSpec, secret: str) -> list[dict[str, Any]]:
    people = corpus.agents(spec)
    tokens = corpus.mint_tokens(people, secret)
    reads = corpus.read_targets(spec)
    return [
        {
            "tenant": a.tenant,
            "sub": a.sub,
            "space": a.space_name,
            "token": tokens[a.sub],
            "reads": reads[a.sub],
        }
        for a in people
    ]


def _header(args: argparse.Namespace, argv: list[str] | None, stamp: str) -> dict[str, Any]:
    """result.json's opening keys: the command, when, against what, the machine's load."""
    return {
        "command": " ".join(
            ["python", "bench/load.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "date_utc": stamp,
        "target": args.target,
        "topology": args.topology if args.target == "real" else "in-process",
        "loadavg_before": Path("/proc/loadavg").read_text().strip(),
        "mix": args.mix,
        "target_ms": args.target_ms,
        "environment": deploy.environment_note(),
    }


def _measure(
    harness: Harness, args: argparse.Namespace, faults: list[Fault], document: dict[str, Any]
) -> Run:
    """The warm-up, then the fixed-rate run or the knee search and the soak; each run's
    summary goes into `document`. Returns the run whose timeline is plotted."""
    rate0 = args.rate or args.start_rate
    if args.warmup_seconds > 0:
        print(f"warm-up: {args.warmup_seconds:.0f} s at {rate0}/s", flush=True)
        harness.run("warmup", rate0, args.warmup_seconds, record=False)
    if args.rate:
        print(f"fixed run: {args.rate}/s for {args.duration:.0f} s", flush=True)
        run = harness.run("fixed", args.rate, args.duration, faults=faults)
        document["fixed"] = run.summary
        return run
    print("knee search:", flush=True)
    knee, steps = harness.knee(
        start=args.start_rate,
        factor=args.step_factor,
        step_seconds=args.step_seconds,
        max_rate=args.max_rate,
        max_steps=args.max_steps,
    )
    document["knee"] = knee
    document["steps"] = [s.summary for s in steps]
    timeline = steps[-1]
    if knee and args.soak_seconds > 0:
        rate = round(knee * args.soak_fraction, 2)
        print(f"soak: {args.soak_seconds:.0f} s at {rate}/s", flush=True)
        soak = harness.run("soak", rate, args.soak_seconds)
        soak.summary.update(report.rss_bound(soak.summary["rss_over_time"]))
        document["soak"] = soak.summary
        timeline = soak
    return timeline


def _loss_check(d: deploy.Deployment, harness: Harness) -> dict[str, Any]:
    """Reads back every write the ledger says was acknowledged (ledger.check)."""
    print("loss check: reading back every acknowledged write", flush=True)
    channel_for = channel_factory(d)
    agents = {a["sub"]: a for a in harness.agents}

    async def check() -> dict[str, Any]:
        try:
            return await ledger.check(
                channel_for("storage"), ledger.read_ledger(harness.ledger), agents
            )
        finally:
            await _close(channel_for)

    return asyncio.run(check())


def _run_text(key: str, s: dict[str, Any]) -> list[str]:
    """table.txt's lines for one measured run (`fixed` or `soak`)."""
    text = [
        "",
        f"{key}: {s['rate']}/s for {s['duration']:.0f} s, "
        f"{s['completed']} requests, {s['errors']} errors",
        report.rpc_table(s),
    ]
    if s.get("faults"):
        text.append(faultlib.table(s["faults"]))
    if "rss_growth_percent" in s:
        text.append(
            f"RSS growth over the soak: engram's processes together "
            f"{s['rss_growth_percent']:+.1f}%, most {s['rss_most_grown']} "
            f"{s['rss_most_grown_percent']:+.1f}% (bound: 10 %; backends not counted)"
        )
    if s.get("rss_over_time"):
        text += ["", f"RSS over the {key} (MiB)", report.rss_table(s["rss_over_time"])]
    return text


def _report(
    args: argparse.Namespace,
    spec: corpus.CorpusSpec,
    document: dict[str, Any],
    timeline: Run,
    out: Path,
    stamp: str,
) -> list[str]:
    """Draws the plots and returns table.txt's lines."""
    title = f"engram {args.target}, {spec.chunks} chunks"
    text = [f"{document['command']}\n{stamp}  loadavg before: {document['loadavg_before']}"]
    if "steps" in document:
        report.plot_rates(
            document["steps"],
            out / "latency_vs_rate.png",
            target_ms=args.target_ms,
            title=f"{title}: latency vs arrival rate",
        )
        text += ["", f"knee: {document['knee']}/s", report.step_table(document["steps"])]
    for key in ("fixed", "soak"):
        if key in document:
            text += _run_text(key, document[key])
    report.plot_time(
        timeline.result,
        timeline.summary["rss_over_time"],
        out / "latency_over_time.png",
        target_ms=args.target_ms,
        title=f"{title}: {timeline.name}",
    )
    loss = document["loss"]
    text += [
        "",
        f"ledger: {loss['attempted']} writes attempted, {loss['acknowledged']} "
        f"acknowledged, {loss['lost']} lost ({loss['checked_documents']} documents read "
        f"back, {loss['version_reads']} kept versions read, {loss['pruned']} pruned)",
    ]
    return text


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    # SIGTERM stops everything the way Ctrl-C does (the deployment's processes included).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = (args.out or BENCH / "out" / f"load-{args.target}-{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    spec = corpus.CorpusSpec(args.chunks, args.tenants, args.agents_per_tenant)
    faults = faults_from(args)
    document = _header(args, argv, stamp)
    print(f"load: target {args.target}, output {out}", flush=True)
    if args.preload_only:
        if args.no_corpus_cache:
            raise SystemExit("--preload-only fills the corpus cache: drop --no-corpus-cache")
        with loaded_deployment(args, spec, out / "deploy", start=False) as (_, info):
            print(f"corpus cached: {json.dumps(info)}", flush=True)
        return 0
    with loaded_deployment(args, spec, out / "deploy") as (started, info):
        assert started is not None
        d = started
        document |= info
        document["processes"] = d.pids()
        harness = Harness(
            d,
            population(spec, d.secret),
            out,
            args.mix,
            spec.seed,
            target_ms=args.target_ms,
            timeout=args.timeout,
            max_outstanding=args.max_outstanding,
            freshness_every=args.freshness_every,
            freshness_timeout=args.freshness_timeout,
        )
        for fault in faults:
            fault.attach(harness)  # type: ignore[attr-defined]
        timeline = _measure(harness, args, faults, document)
        document["loss"] = _loss_check(d, harness)
        document["loadavg_after"] = Path("/proc/loadavg").read_text().strip()

    text = _report(args, spec, document, timeline, out, stamp)
    loss = document["loss"]
    (out / "table.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    (out / "result.json").write_text(json.dumps(document, indent=1, default=str), encoding="utf-8")
    print("\n".join(text), flush=True)
    print(f"\nwritten: {out}", flush=True)
    return 1 if loss["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())

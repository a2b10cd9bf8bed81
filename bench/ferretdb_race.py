"""Are FerretDB's single-document updates atomic under concurrency? (issue 16, part A)

Starts FerretDB through deploy/local/backends.py on the chosen handler (PostgreSQL by default,
``--handler sqlite`` for the other one), then, ``--rounds`` times, fires ``--concurrency``
racing ``$inc`` updates at one document (``update_one`` and ``find_one_and_update``, each from
its own client connection, released together by a barrier) and reports how many increments
were lost and how many ``find_one_and_update`` callers saw the same counter value. MongoDB
loses none: a single-document update is atomic there.

    .venv/bin/python bench/ferretdb_race.py [--handler postgresql|sqlite] [--rounds 5]
                                            [--concurrency 50] [--uri mongodb://...]

Prints one line per round and a summary; exit code 0 either way (this measures, it does not
judge).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymongo
from pymongo import ReturnDocument

ROOT = Path(__file__).resolve().parents[1]


def _launcher() -> Any:
    spec = importlib.util.spec_from_file_location("backends", ROOT / "deploy/local/backends.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["backends"] = module
    spec.loader.exec_module(module)
    return module


def _race(clients: list[Any], action: Callable[[Any], Any], timeout: float) -> list[Any]:
    """Run ``action(client)`` once per client, all released at the same instant."""
    barrier = threading.Barrier(len(clients))
    results: list[Any] = [None] * len(clients)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout)
            results[i] = action(clients[i])
        except (pymongo.errors.PyMongoError, threading.BrokenBarrierError) as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if errors:
        print(f"  {len(errors)} calls failed, first: {errors[0]!r}")
    return results


def measure(uri: str, rounds: int, concurrency: int) -> dict[str, int]:
    clients = [pymongo.MongoClient(uri, maxPoolSize=1) for _ in range(concurrency)]
    totals = {"update_one_lost": 0, "fam_lost": 0, "fam_duplicates": 0, "calls": 0}
    try:
        for c in clients:
            c.admin.command("ping")  # connect every client before the race
        coll = clients[0].engram_race.counters
        for r in range(rounds):
            key = f"round-{r}-{time.time_ns()}"
            coll.insert_one({"_id": key, "n": 0})

            def inc(client: Any, key: str = key) -> Any:
                return client.engram_race.counters.update_one({"_id": key}, {"$inc": {"n": 1}})

            t0 = time.perf_counter()
            _race(clients, inc, 60.0)
            after_update = coll.find_one({"_id": key})["n"]

            def fam(client: Any, key: str = key) -> Any:
                return client.engram_race.counters.find_one_and_update(
                    {"_id": key}, {"$inc": {"n": 1}}, return_document=ReturnDocument.AFTER
                )

            seen = _race(clients, fam, 60.0)
            elapsed = time.perf_counter() - t0
            final = coll.find_one({"_id": key})["n"]
            values = [doc["n"] for doc in seen if doc is not None]
            lost_update = concurrency - after_update
            lost_fam = concurrency - (final - after_update)
            duplicates = len(values) - len(set(values))
            totals["update_one_lost"] += lost_update
            totals["fam_lost"] += lost_fam
            totals["fam_duplicates"] += duplicates
            totals["calls"] += concurrency
            print(
                f"round {r}: update_one $inc x{concurrency} -> n={after_update} "
                f"(lost {lost_update}); find_one_and_update $inc x{concurrency} -> "
                f"+{final - after_update} (lost {lost_fam}, {duplicates} callers saw a value "
                f"another also saw) [{elapsed:.2f}s]"
            )
    finally:
        for c in clients:
            c.close()
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--handler", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--uri", help="an already running MongoDB/FerretDB (skips the launcher)")
    args = parser.parse_args()
    if args.uri:
        totals = measure(args.uri, args.rounds, args.concurrency)
    else:
        launcher = _launcher()
        launcher.bind_to_this_process()
        launcher.provision(["mongo"])
        with tempfile.TemporaryDirectory(prefix="engram-race-") as tmp:
            mongo = launcher.start_mongo(Path(tmp) / "mongo", handler=args.handler)
            try:
                print(f"FerretDB {launcher.FERRETDB_VERSION}, handler {args.handler}: {mongo.url}")
                totals = measure(mongo.url, args.rounds, args.concurrency)
            finally:
                mongo.stop()
    print(
        f"summary: {totals['calls']} update_one $inc -> {totals['update_one_lost']} lost; "
        f"{totals['calls']} find_one_and_update $inc -> {totals['fam_lost']} lost, "
        f"{totals['fam_duplicates']} duplicate returned values"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""deploy/local/backends.py's FerretDB: on its own PostgreSQL by default (one process group,
one stop), the SQLite handler still selectable, the CLI's start/status/stop and a restart on
the same port keeping the data, and per-service databases and roles."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pymongo
import pytest

from tests.support.backends import ROOT, load_launcher
from tests.support.processes import processes_mentioning

pytestmark = pytest.mark.real_backend

REQUIRE = os.environ.get("ENGRAM_REQUIRE_REAL_BACKENDS") == "1"


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.delenv("ENGRAM_LOCAL_MONGO_HANDLER", raising=False)
    module = load_launcher()
    module.bind_to_this_process()
    try:
        module.require_provisioned(["mongo"])
    except module.ProvisionError as error:
        if REQUIRE:
            pytest.fail(str(error))
        pytest.skip(str(error))
    return module


def _postmaster_pid(pg_dir: Path) -> int:
    return int((pg_dir / "postmaster.pid").read_text().splitlines()[0])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


@pytest.fixture
def client_of() -> Iterator[Any]:
    opened: list[pymongo.MongoClient[dict[str, Any]]] = []

    def connect(url: str) -> pymongo.MongoClient[dict[str, Any]]:
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            url, serverSelectionTimeoutMS=20_000
        )
        opened.append(client)
        return client

    yield connect
    for client in opened:
        client.close()


def _psql(launcher: ModuleType, url: str, sql: str) -> str:
    psql = launcher.postgresql_bin_dir() / "psql"
    result = subprocess.run(
        [str(psql), url, "-At", "-c", sql], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout


def test_ferretdb_stores_in_its_own_postgresql(
    launcher: ModuleType, tmp_path: Path, client_of: Any
) -> None:
    mongo = launcher.start_mongo(tmp_path / "mongo")
    try:
        assert mongo.extra["handler"] == "postgresql"
        assert mongo.healthy()
        client = client_of(mongo.url)
        client.engram_launcher_test.things.insert_one({"_id": "a", "n": 1})
        # The document is a row of PostgreSQL: one schema per MongoDB database.
        pg_url = mongo.extra["postgresql_url"]
        assert pg_url.startswith("postgres://engram@127.0.0.1:")
        schemas = _psql(launcher, pg_url, "select schema_name from information_schema.schemata")
        assert "engram_launcher_test" in schemas.split()
        # Each of FerretDB's btree indexes got a GIN companion its `@>` filters can use.
        indexes = _psql(
            launcher,
            pg_url,
            "select indexdef from pg_indexes where schemaname = 'engram_launcher_test'",
        )
        assert "USING btree" in indexes and "USING gin" in indexes, indexes
        table = _psql(
            launcher,
            pg_url,
            "select tablename from pg_tables where schemaname = 'engram_launcher_test'",
        ).split()[0]
        plan = _psql(
            launcher,
            pg_url,
            f"PREPARE q(text, jsonb) AS SELECT _jsonb FROM engram_launcher_test.{table}"
            " WHERE _jsonb->$1 @> $2; SET enable_seqscan = off;"
            " EXPLAIN EXECUTE q('_id', '\"a\"')",
        )
        assert "Bitmap Index Scan" in plan, plan
        # The same server on its unix socket; FerretDB itself reaches PostgreSQL over
        # PostgreSQL's unix socket (its sessions have no client address).
        over_socket = client_of(mongo.extra["unix_url"])
        assert over_socket.engram_launcher_test.things.find_one({"_id": "a"}) == {
            "_id": "a",
            "n": 1,
        }
        sessions = _psql(
            launcher,
            pg_url,
            "select coalesce(host(client_addr), 'unix') from pg_stat_activity"
            " where datname = 'postgres' and pid <> pg_backend_pid()"
            " and backend_type = 'client backend'",
        ).split()
        assert sessions and set(sessions) == {"unix"}, sessions
        # PostgreSQL listens on 127.0.0.1 only and keeps its data in data_dir/pg.
        assert _psql(launcher, pg_url, "show listen_addresses").strip() == "127.0.0.1"
        assert _psql(launcher, pg_url, "show data_directory").strip() == str(
            (tmp_path / "mongo" / "pg").resolve()
        )
        postmaster = _postmaster_pid(tmp_path / "mongo" / "pg")
        assert _alive(postmaster)
        assert os.getpgid(postmaster) == mongo.pid, "PostgreSQL must be in FerretDB's group"
        if os.geteuid() == 0:
            assert Path(f"/proc/{postmaster}").stat().st_uid != 0, "PostgreSQL runs as root"
    finally:
        mongo.stop()
    assert not _alive(postmaster), "stop() left PostgreSQL running"
    assert not mongo.alive()
    assert processes_mentioning(str(tmp_path)) == []

    # Same data dir and port: same URL, the document is still there.
    again = launcher.start_mongo(tmp_path / "mongo", port=mongo.port)
    try:
        assert again.url == mongo.url
        assert again.extra["unix_url"] == mongo.extra["unix_url"]
        client = client_of(again.extra["unix_url"])
        assert client.engram_launcher_test.things.find_one({"_id": "a"}) == {"_id": "a", "n": 1}
    finally:
        again.stop()
    assert processes_mentioning(str(tmp_path)) == []


def test_a_data_dir_copied_as_root_starts_with_its_data(
    launcher: ModuleType, tmp_path: Path, client_of: Any
) -> None:
    """A stopped mongo data dir copied elsewhere (the load harness's cached pre-loaded
    corpus, a restored backup) starts there with its documents: as root the copy belongs to
    root, and PostgreSQL, which runs as an unprivileged user, could not read it."""
    import shutil

    mongo = launcher.start_mongo(tmp_path / "mongo")
    try:
        client_of(mongo.url).engram_launcher_test.things.insert_one({"_id": "kept"})
    finally:
        mongo.stop()
    shutil.copytree(tmp_path / "mongo", tmp_path / "copy", symlinks=True)
    copy = launcher.start_mongo(tmp_path / "copy")
    try:
        found = client_of(copy.url).engram_launcher_test.things.find_one({"_id": "kept"})
        assert found == {"_id": "kept"}
    finally:
        copy.stop()


def test_service_databases_keep_their_data_across_a_restart_with_new_passwords(
    launcher: ModuleType, tmp_path: Path, client_of: Any
) -> None:
    """provision_service_databases again after a restart (as `make cluster-local` does on
    its --dir): the data stays, the new passwords work and the old ones no longer do, and
    each role still reaches only its own database."""
    mongo = launcher.start_mongo(tmp_path / "mongo")
    try:
        first = launcher.provision_service_databases(mongo, "iso", ["storage", "quota"])
        storage = first["storage"]
        client_of(storage.uri)[storage.database].documents.insert_one({"_id": "kept"})
    finally:
        mongo.stop()
    mongo = launcher.start_mongo(tmp_path / "mongo", port=mongo.port)
    try:
        again = launcher.provision_service_databases(mongo, "iso", ["storage", "quota"])
        assert again["storage"].password != storage.password
        own = client_of(again["storage"].uri)[storage.database]
        assert own.documents.find_one({"_id": "kept"}) == {"_id": "kept"}
        with pytest.raises(pymongo.errors.OperationFailure, match="password authentication"):
            client_of(storage.uri)[storage.database].documents.find_one({})
        quota = client_of(again["quota"].uri)
        with pytest.raises(pymongo.errors.OperationFailure, match="permission denied"):
            quota[storage.database].documents.find_one({})
        # The superuser (no credentials) still reaches every database.
        assert client_of(mongo.url)[storage.database].documents.find_one({}) == {"_id": "kept"}
    finally:
        mongo.stop()


def test_sqlite_handler_stays_selectable(
    launcher: ModuleType, tmp_path: Path, client_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_LOCAL_MONGO_HANDLER", "sqlite")
    with launcher.start_mongo(tmp_path / "mongo") as mongo:
        assert mongo.extra["handler"] == "sqlite"
        client_of(mongo.url).engram_launcher_sqlite.things.insert_one({"_id": 1})
        assert (tmp_path / "mongo" / "sqlite" / "engram_launcher_sqlite.sqlite").is_file()
        assert not (tmp_path / "mongo" / "pg").exists()
    with pytest.raises(ValueError, match="unknown FerretDB handler"):
        launcher.start_mongo(tmp_path / "other", handler="mysql")


def test_cli_start_status_stop_covers_postgresql(launcher: ModuleType, tmp_path: Path) -> None:
    state = tmp_path / "state"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "deploy/local/backends.py", *args, "--dir", str(state)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    started = cli("start", "--only", "mongo", "--no-provision")
    try:
        assert started.returncode == 0, started.stderr
        assert "ENGRAM_TEST_MONGO_URI=mongodb://127.0.0.1:" in started.stdout
        postmaster = _postmaster_pid(state / "mongo" / "pg")
        assert _alive(postmaster)
        status = cli("status")
        assert status.returncode == 0 and "mongo: running" in status.stdout, status.stdout
    finally:
        stopped = cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not _alive(postmaster), "`backends.py stop` left PostgreSQL running"
    assert processes_mentioning(str(state)) == []


def test_many_concurrent_updates_do_not_starve_ferretdbs_postgresql_pool(
    launcher: ModuleType, tmp_path: Path, client_of: Any
) -> None:
    # Each update holds one pooled PostgreSQL connection for its read and takes a second for
    # its write: at FerretDB's default pool size (50) this many concurrent updates can all
    # wait for a second connection and hang FerretDB for good. The launcher sizes the pool.
    concurrency = 100
    with launcher.start_mongo(tmp_path / "mongo") as mongo:
        clients = [client_of(mongo.url) for _ in range(concurrency)]
        for client in clients:
            client.admin.command("ping")
        clients[0].engram_pool.counters.insert_one({"_id": "c", "n": 0})
        barrier = threading.Barrier(concurrency)
        done: list[int] = []

        def update(client: Any) -> None:
            barrier.wait(60)
            client.engram_pool.counters.update_one({"_id": "c"}, {"$inc": {"n": 1}})
            done.append(1)

        threads = [threading.Thread(target=update, args=(c,), daemon=True) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)  # a hang bound, not a speed check
        assert len(done) == concurrency, f"{concurrency - len(done)} updates never returned"
        # Not asserted: the counter's value. FerretDB v1 loses concurrent $inc updates on
        # PostgreSQL too (bench/ferretdb_race.py); engram never relies on them.
        assert clients[0].engram_pool.counters.find_one({"_id": "c"})["n"] >= 1

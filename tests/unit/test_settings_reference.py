"""README.md's settings reference is generated from the settings model and cannot go stale:
every setting has a description, the table in README.md is the one the model gives, and the
"read by" column follows the code that wires each process."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from engram.runtime.settings import Settings
from tests.support.scripts import ROOT, load_script

pytestmark = pytest.mark.unit

reference = load_script("deploy/settings_reference.py")
SERVE = ["storage", "quota", "authz", "indexer", "search", "workspace", "maintenance"]


def test_every_setting_has_a_description() -> None:
    missing = [name for name, info in Settings.model_fields.items() if not info.description]
    assert missing == [], "give these settings a docstring in runtime/settings.py"


def test_the_readme_holds_the_current_reference() -> None:
    readme = (ROOT / "README.md").read_text()
    assert reference.render(readme) == readme, "README.md is stale: run `make settings-doc`"


def test_a_changed_setting_makes_the_readme_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (ROOT / "README.md").read_text()
    field = Settings.model_fields["chunk_size"]
    monkeypatch.setattr(field, "description", "Characters per chunk, now said differently.")
    rendered = reference.render(readme)
    assert rendered != readme and "now said differently" in rendered
    assert reference.render(rendered) == rendered


def test_every_setting_is_a_row_with_its_default_type_and_readers() -> None:
    cells = [
        [c.strip() for c in re.split(r"(?<!\\)\|", line)]
        for line in reference.table().splitlines()[2:]
    ]
    rows = {row[1].split()[0].strip("`"): row for row in cells}
    assert set(rows) == {f"ENGRAM_{name.upper()}" for name in Settings.model_fields}
    assert rows["ENGRAM_MAX_MESSAGE_BYTES"][2:4] == ["16.0 MiB", "size"]
    assert rows["ENGRAM_LOG_FORMAT"][3] == "`json` \\| `text`"
    assert "ENGRAM_MONGO_URI_FILE" in rows["ENGRAM_MONGO_URI"][1]
    assert rows["ENGRAM_MONGO_URI"][3] == "secret"
    assert rows["ENGRAM_NATS_URL"][4] == "storage, indexer, maintenance"


def test_readers_follow_the_wiring() -> None:
    read = reference.readers()
    # What every server reads, and what only `engram dev` does.
    assert read["grpc_port"] == [*SERVE, "dev"]
    assert read["data_dir"] == ["dev"]
    assert read["tantivy_dir"] == ["dev"]
    # Backends: only the processes that open them.
    assert read["nats_url"] == ["storage", "indexer", "maintenance"]
    assert read["opensearch_url"] == ["indexer", "search", "maintenance"]
    assert read["mongo_uri"] == SERVE
    # The vector index is required by indexer, search and maintenance only (a flag of
    # `require`); `engram dev` has its own embedded one.
    assert read["qdrant_url"] == ["indexer", "search", "maintenance"]
    # Peers and the service principal: the callers only.
    # Quota and maintenance reach storage's documents through its RPCs (issue 34).
    assert read["storage_addr"] == ["quota", "indexer", "workspace", "maintenance"]
    assert read["search_addr"] == ["workspace"]
    assert read["quota_addr"] == ["storage", "maintenance"]
    assert read["service_token"] == [
        "storage",
        "quota",
        "indexer",
        "search",
        "workspace",
        "maintenance",
    ]
    # Search asks the indexer for index progress (issue 34).
    assert read["indexer_addr"] == ["search"]
    # Maintenance builds no StorageService or QuotaService of its own any more.
    assert "maintenance" not in read["max_doc_bytes"]
    assert "maintenance" not in read["quota_tenant_total"]
    # Every service but authz looks personal tokens up at authz, over (m)TLS when it is on.
    callers_of_authz = [name for name in SERVE if name != "authz"]
    assert read["authz_addr"] == callers_of_authz
    assert read["tls_client_cert_file"] == callers_of_authz
    # One service's tuning, through the component built from it.
    assert read["workspace_writes_per_minute"] == ["workspace", "dev"]
    assert read["search_candidate_depth"] == ["search", "dev"]
    # Maintenance too: backfill asks the indexer's consumer what is still pending.
    assert read["indexer_durable"] == ["indexer", "maintenance"]
    assert read["maintenance_tick_seconds"] == ["maintenance", "dev"]


def _settings_reads(path: Path) -> list[str]:
    fields = set(Settings.model_fields)
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.attr}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr in fields
        and "settings" in reference._terminal(node.value)
    ]


def test_no_code_outside_the_scanned_modules_reads_the_settings() -> None:
    """The reference sees reads in the composition root only; anything else must take a
    typed config built there (STYLE.md), or the "read by" column would miss it."""
    scanned = {path.resolve() for path in reference.SCANNED}
    package = ROOT / "services" / "engram"
    outside = [
        read
        for path in sorted(package.rglob("*.py"))
        if path.resolve() not in scanned and path.name != "settings.py"
        for read in _settings_reads(path)
    ]
    assert outside == []


def test_the_cli_s_environment_variables_are_listed_with_their_options() -> None:
    cells = [
        [c.strip() for c in re.split(r"(?<!\\)\|", line)]
        for line in reference.client_table().splitlines()[2:]
    ]
    rows = {row[1].strip("`"): row for row in cells}
    assert {"ENGRAM_ADDR", "ENGRAM_TOKEN", "ENGRAM_TLS_CA_FILE"} <= set(rows)
    assert rows["ENGRAM_ADDR"][2] == "`--addr`"
    # Per command (each client command has the option) or global (before the command).
    assert rows["ENGRAM_ADDR"][3] in (
        "every command that calls a server",
        "global, before the command (`engram --addr ... COMMAND`)",
    )
    assert rows["ENGRAM_TLS"][3] == "global, before the command (`engram --tls ... COMMAND`)"
    assert "`memory write`" in rows["ENGRAM_TIME_ZONE"][3]
    # Every variable a CLI option reads is a row: none is left to be found by reading code.
    assert set(rows) == set(reference.client_variables())
    assert all(name.startswith("ENGRAM_") for name in rows)

"""Settings for a cluster: secrets from files (`ENGRAM_<NAME>_FILE`, ENGRAM_SECRETS_DIR),
claim paths and role maps, TLS settings that do not fit together, server options."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.app.config import Components, channel_config
from engram.authz.tokens import ClaimMapping, claim_at, principal_from_claims, role_from_claim
from engram.cli.app import app
from engram.domain.errors import Misconfigured, MissingSetting, Unauthenticated
from engram.domain.principals import Role
from engram.runtime.server import server_options, server_tls
from engram.runtime.settings import Settings, SettingsFileError

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_JWT_SECRET", "ENGRAM_MONGO_URI", "ENGRAM_SECRETS_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)


def test_a_secret_from_its_file_loses_the_trailing_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mongo").write_text("mongodb://user:pw@db:27017/\n")
    monkeypatch.setenv("ENGRAM_MONGO_URI_FILE", str(tmp_path / "mongo"))
    settings = Settings()
    assert settings.mongo_uri is not None
    assert settings.mongo_uri.get_secret_value() == "mongodb://user:pw@db:27017/"


def test_a_missing_secret_file_names_the_variable_and_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nope"
    monkeypatch.setenv("ENGRAM_JWT_SECRET_FILE", str(missing))
    with pytest.raises(SettingsFileError, match=rf"ENGRAM_JWT_SECRET_FILE: cannot read {missing}"):
        Settings()
    # The CLI says it in one line, without a traceback.
    result = CliRunner().invoke(app, ["serve", "storage"])
    assert result.exit_code == 2
    assert "ENGRAM_JWT_SECRET_FILE" in result.output and str(missing) in result.output
    assert "Traceback" not in result.output


def test_a_variable_and_its_file_together_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secret").write_text("from-file")
    monkeypatch.setenv("ENGRAM_JWT_SECRET", "from-env")
    monkeypatch.setenv("ENGRAM_JWT_SECRET_FILE", str(tmp_path / "secret"))
    with pytest.raises(SettingsFileError, match="ENGRAM_JWT_SECRET or ENGRAM_JWT_SECRET_FILE"):
        Settings()


def test_only_secrets_have_a_file_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "db").write_text("elsewhere")
    monkeypatch.setenv("ENGRAM_MONGO_DB_FILE", str(tmp_path / "db"))
    assert Settings().mongo_db == "engram"


def test_a_mounted_secrets_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes mounts a Secret as one file per key, through symlinks into `..data`."""
    data = tmp_path / "..2026_12_01"
    data.mkdir()
    (data / "ENGRAM_JWT_SECRET").write_text("s3cret\n")
    (data / "engram_mongo_uri").write_text("mongodb://db/\n")
    (tmp_path / "..data").symlink_to(data.name)
    for name in ("ENGRAM_JWT_SECRET", "engram_mongo_uri"):
        (tmp_path / name).symlink_to(f"..data/{name}")
    monkeypatch.setenv("ENGRAM_SECRETS_DIR", str(tmp_path))
    settings = Settings()
    assert settings.jwt_secret is not None and settings.mongo_uri is not None
    assert settings.jwt_secret.get_secret_value() == "s3cret"
    assert settings.mongo_uri.get_secret_value() == "mongodb://db/"
    # The environment wins over the directory.
    monkeypatch.setenv("ENGRAM_JWT_SECRET", "from-env")
    assert Settings().jwt_secret.get_secret_value() == "from-env"  # type: ignore[union-attr]


def test_a_secrets_directory_that_does_not_exist_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_SECRETS_DIR", str(tmp_path / "absent"))
    with pytest.raises(SettingsFileError, match="ENGRAM_SECRETS_DIR"):
        Settings()


def test_role_map_from_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_JWT_ROLE_MAP", '{"engram-admin": "admin", "reader": "viewer"}')
    monkeypatch.setenv("ENGRAM_JWT_CLAIM_ROLE", "realm_access.roles")
    jwt = Components.from_settings(Settings()).jwt
    assert jwt.claims.role == "realm_access.roles"
    assert jwt.claims.role_map == {"engram-admin": Role.ADMIN, "reader": Role.VIEWER}
    monkeypatch.setenv("ENGRAM_JWT_ROLE_MAP", '{"x": "superuser"}')
    with pytest.raises(ValueError, match="jwt_role_map"):
        Settings()


def test_claim_paths() -> None:
    claims = {
        "https://example.com/claims": {"tenant": "acme"},
        "https://example.com/org": "whole-name",
        "realm_access": {"roles": ["a", "b"]},
        "flat.with.dots": 1,
    }
    assert claim_at(claims, "https://example.com/claims.tenant") == "acme"
    assert claim_at(claims, "https://example.com/org") == "whole-name"
    assert claim_at(claims, "realm_access.roles") == ["a", "b"]
    assert claim_at(claims, "flat.with.dots") == 1
    assert claim_at(claims, "realm_access.missing") is None
    assert claim_at(claims, "nope") is None


def test_roles_from_a_list_take_the_most_powerful_known_one() -> None:
    mapping = {"idp-admin": Role.ADMIN, "idp-read": Role.VIEWER}
    assert role_from_claim(["offline", "idp-read", "member"], mapping) == Role.MEMBER
    assert role_from_claim(["idp-read", "idp-admin"], mapping) == Role.ADMIN
    assert role_from_claim("Viewer", {}) == Role.VIEWER
    assert role_from_claim(["offline"], mapping) is None
    assert role_from_claim(None, mapping) is None


def test_default_mapping_reads_todays_claims() -> None:
    claims = {"sub": "ann", "tenant": "acme", "role": "admin", "platform_admin": True}
    principal = principal_from_claims(claims)
    assert (principal.subject, principal.tenant, principal.role) == ("ann", "acme", Role.ADMIN)
    assert principal.platform_admin


def test_mapped_claims_and_the_errors_name_the_path() -> None:
    mapping = ClaimMapping(
        subject="email",
        tenant="org.id",
        role="groups",
        platform_admin="engram.platform",
        role_map={"ops": Role.ADMIN},
    )
    claims = {"email": "ann@x", "org": {"id": "acme"}, "groups": ["ops"], "engram": {}}
    principal = principal_from_claims(claims, mapping)
    assert (principal.subject, principal.tenant, principal.role) == ("ann@x", "acme", Role.ADMIN)
    assert not principal.platform_admin
    with pytest.raises(Unauthenticated, match=r"org\.id"):
        principal_from_claims({**claims, "org": {}}, mapping)
    with pytest.raises(Unauthenticated, match="groups"):
        principal_from_claims({**claims, "groups": ["dev"]}, mapping)


def test_tls_settings_that_do_not_fit_together(tmp_path: Path) -> None:
    cert = tmp_path / "tls.crt"
    with pytest.raises(Misconfigured, match="ENGRAM_TLS_KEY_FILE"):
        server_tls(Settings(tls_cert_file=cert))
    with pytest.raises(Misconfigured, match="ENGRAM_TLS_CERT_FILE"):
        server_tls(Settings(tls_client_ca_file=cert))
    assert server_tls(Settings()) is None
    with pytest.raises(MissingSetting, match="ENGRAM_TLS_CLIENT_KEY_FILE"):
        channel_config(Settings(tls_client_cert_file=cert))
    assert channel_config(Settings()).tls is None
    assert channel_config(Settings(tls_internal=True)).tls is not None
    assert channel_config(Settings(tls_ca_file=cert)).tls is not None


def test_server_options_recycle_connections_and_ping() -> None:
    options = dict(server_options(Settings()))
    assert options["grpc.max_connection_age_ms"] == 300_000
    assert options["grpc.max_connection_age_grace_ms"] == 30_000
    assert options["grpc.keepalive_time_ms"] == 60_000
    assert options["grpc.keepalive_timeout_ms"] == 20_000
    off = dict(
        server_options(Settings(grpc_max_connection_age_seconds=0, grpc_keepalive_seconds=0))
    )
    assert "grpc.max_connection_age_ms" not in off and "grpc.keepalive_time_ms" not in off

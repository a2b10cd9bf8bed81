"""When tracing turns on: only with an OTLP endpoint, never when the SDK is disabled, and a
protocol the exporter does not speak is a startup error that says what to set."""

from __future__ import annotations

import pytest

from engram.domain.errors import Misconfigured
from engram.runtime import tracing


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": ""},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_SDK_DISABLED": "true"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_TRACES_EXPORTER": "none"},
    ],
)
def test_tracing_stays_off(environ: dict[str, str]) -> None:
    assert tracing.configure_tracing("storage", environ) is False
    assert not tracing.enabled()
    assert tracing.tracing_client_interceptors() == []


def test_an_unknown_protocol_is_refused_with_the_choices() -> None:
    with pytest.raises(Misconfigured) as refused:
        tracing.configure_tracing(
            "storage",
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            },
        )
    assert "grpc or http/protobuf" in refused.value.message
    assert not tracing.enabled()

"""Fixtures of the deploy suite: helm (built by `make helm-install`) and rendered charts."""

from __future__ import annotations

import os

import pytest

from tests.deploy.chart import Helm, Manifest, helm_binary


@pytest.fixture(scope="session")
def helm() -> Helm:
    binary = helm_binary()
    if binary is None:
        message = "helm is not installed: run `make helm-install`"
        if os.environ.get("CI") or os.environ.get("ENGRAM_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return Helm(binary)


@pytest.fixture(scope="session")
def default_docs(helm: Helm) -> list[Manifest]:
    return helm.render()


@pytest.fixture(scope="session")
def production_docs(helm: Helm) -> list[Manifest]:
    from tests.deploy.chart import PRODUCTION_VALUES

    return helm.render([PRODUCTION_VALUES])

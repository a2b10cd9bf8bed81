# engram - run `make help` for the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
STAMP := $(VENV)/.installed
# protoc plugins (protoc-gen-mypy) and tools run from the virtualenv.
export PATH := $(BIN):$(PATH)
CACHE ?= $(or $(ENGRAM_CACHE_DIR),$(HOME)/.cache/engram)
BUF_VERSION := 1.75.0
BUF := $(CACHE)/buf-$(BUF_VERSION)/node_modules/.bin/buf
# Built from the Go module proxy (tests/deploy reads this version to find the binary).
HELM_VERSION := 3.22.0
HELM := $(CACHE)/bin/helm-v$(HELM_VERSION)/helm
# What helm's own Makefile sets at link time: its version, and the Kubernetes version of its
# client-go (v0.37 in helm 3.22.0's go.mod) that `helm template` and `lint` assume.
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=v$(HELM_VERSION) \
  $(foreach pkg,pkg/lint/rules pkg/chartutil,-X helm.sh/helm/v3/$(pkg).k8sVersionMajor=1 \
  -X helm.sh/helm/v3/$(pkg).k8sVersionMinor=37)
# The Go and TypeScript clients' code generators (make clients), pinned and cached like buf:
# protoc-gen-go and protoc-gen-go-grpc from the Go module proxy, protoc-gen-es (and google.rpc's
# .proto files, for the error details) from npm. buf runs them as local plugins.
PROTOC_GEN_GO_VERSION := 1.36.12
PROTOC_GEN_GO_GRPC_VERSION := 1.6.2
PROTOC_GEN_ES_VERSION := 2.17.0
GOOGLE_PROTO_FILES_VERSION := 6.0.1
PROTOC_GEN_GO := $(CACHE)/bin/protoc-gen-go-v$(PROTOC_GEN_GO_VERSION)/protoc-gen-go
PROTOC_GEN_GO_GRPC := $(CACHE)/bin/protoc-gen-go-grpc-v$(PROTOC_GEN_GO_GRPC_VERSION)/protoc-gen-go-grpc
PROTOC_GEN_ES_DIR := $(CACHE)/protoc-gen-es-$(PROTOC_GEN_ES_VERSION)
PROTOC_GEN_ES := $(PROTOC_GEN_ES_DIR)/node_modules/.bin/protoc-gen-es
CLIENT_GENERATORS := $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) $(PROTOC_GEN_ES)
CLIENT_GENERATE := BUF=$(BUF) PROTOC_GEN_GO=$(PROTOC_GEN_GO) \
  PROTOC_GEN_GO_GRPC=$(PROTOC_GEN_GO_GRPC) PROTOC_GEN_ES=$(PROTOC_GEN_ES) clients/generate.sh
# The Go client's modules live in the module cache the backends' builds share; its compiled
# packages in a build cache of their own (the backends' is dropped after each build), so the
# conformance test builds offline, in seconds (tests/e2e/test_polyglot_clients.py reads these).
GO_ENV := GOMODCACHE=$(CACHE)/go/mod GOCACHE=$(CACHE)/go/clients-build GOTOOLCHAIN=local \
  GOFLAGS='-modcacherw -buildvcs=false' CGO_ENABLED=0
GO_CLIENT_STAMP := $(CACHE)/go/clients-build/.engram-go-client
TS_CLIENT_STAMP := clients/ts/node_modules/.engram-installed
PYTEST_ARGS ?=

.DEFAULT_GOAL := help

help: ## Show the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## Create the virtualenv and install engram with its dev tools

$(BUF):
	mkdir -p $(CACHE)/buf-$(BUF_VERSION)
	cd $(CACHE)/buf-$(BUF_VERSION) && npm install --silent --no-audit --no-fund @bufbuild/buf@$(BUF_VERSION)

protos: $(STAMP) ## Regenerate the Python code for protos/engram/v1
	PYTHON=$(BIN)/python protos/generate.sh services

protos-check: $(STAMP) $(BUF) ## Fail if the committed generated code is stale; buf lint and breaking
	cd protos && $(BUF) lint
	@# Wire/JSON compatibility with the previous commit (additions only; renames are breaking).
	if git rev-parse -q --verify HEAD~1 >/dev/null; then \
	  cd protos && $(BUF) breaking --against "../.git#ref=HEAD~1,subdir=protos"; fi
	rm -rf $(CACHE)/protos-check && mkdir -p $(CACHE)/protos-check
	PYTHON=$(BIN)/python protos/generate.sh $(CACHE)/protos-check
	diff -r -x __pycache__ $(CACHE)/protos-check/engram/v1 services/engram/v1 \
	  || (echo "generated code is stale: run 'make protos' and commit" && exit 1)

$(PROTOC_GEN_GO):
	@command -v go >/dev/null || { echo "the Go client's generators are built with Go: install Go first"; exit 1; }
	$(GO_ENV) GOBIN=$(dir $@) go install google.golang.org/protobuf/cmd/protoc-gen-go@v$(PROTOC_GEN_GO_VERSION)

$(PROTOC_GEN_GO_GRPC):
	@command -v go >/dev/null || { echo "the Go client's generators are built with Go: install Go first"; exit 1; }
	$(GO_ENV) GOBIN=$(dir $@) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v$(PROTOC_GEN_GO_GRPC_VERSION)

$(PROTOC_GEN_ES):
	mkdir -p $(PROTOC_GEN_ES_DIR)
	cd $(PROTOC_GEN_ES_DIR) && npm install --silent --no-audit --no-fund \
	  @bufbuild/protoc-gen-es@$(PROTOC_GEN_ES_VERSION) google-proto-files@$(GOOGLE_PROTO_FILES_VERSION)

# The Go module's dependencies into the module cache and its packages compiled once, so that
# `go build` runs offline afterwards (GOPROXY=off in the tests): a cache, not a vendor/ tree,
# keeps 15 MB (700 files) of third-party Go source out of the repository.
$(GO_CLIENT_STAMP): clients/go/go.mod clients/go/go.sum
	cd clients/go && $(GO_ENV) go mod download && $(GO_ENV) go build ./...
	touch $@

$(TS_CLIENT_STAMP): clients/ts/package.json clients/ts/package-lock.json
	cd clients/ts && npm ci --silent --no-audit --no-fund
	touch $@

clients-install: $(CLIENT_GENERATORS) $(GO_CLIENT_STAMP) $(TS_CLIENT_STAMP) ## Code generators and dependencies of the Go and TypeScript clients (cached)

clients: $(CLIENT_GENERATORS) ## Regenerate the Go and TypeScript clients' code (clients/go/gen, clients/ts/src/gen)
	$(CLIENT_GENERATE) clients

clients-check: $(CLIENT_GENERATORS) ## Fail if the Go or TypeScript clients' generated code is stale
	rm -rf $(CACHE)/clients-check && mkdir -p $(CACHE)/clients-check
	$(CLIENT_GENERATE) $(CACHE)/clients-check
	diff -r $(CACHE)/clients-check/go/gen clients/go/gen \
	  && diff -r $(CACHE)/clients-check/ts/src/gen clients/ts/src/gen \
	  || (echo "generated client code is stale: run 'make clients' and commit" && exit 1)

clients-lint: $(GO_CLIENT_STAMP) ## gofmt and go vet on the Go client (offline; tsc runs in its test)
	@test -z "$$(gofmt -l clients/go)" || { gofmt -l clients/go; echo "run gofmt -w clients/go"; exit 1; }
	cd clients/go && $(GO_ENV) GOPROXY=off go vet ./...

format: $(STAMP) ## Format the code
	$(BIN)/ruff format services tests bench
	$(BIN)/ruff check --fix services tests bench

lint: $(STAMP) ## ruff (with complexity limits), function length, import-linter (layers, no cycles)
	$(BIN)/ruff check services tests bench
	$(BIN)/ruff format --check services tests bench
	$(BIN)/pytest --noconftest -q -p no:cacheprovider tests/unit/test_function_size.py
	$(BIN)/lint-imports

typecheck: $(STAMP) ## mypy --strict on services/
	$(BIN)/mypy

$(HELM):
	@command -v go >/dev/null || { echo "helm is built with Go (go install from the Go module proxy): install Go first"; exit 1; }
	CGO_ENABLED=0 GOBIN=$(dir $(HELM)) go install -trimpath -ldflags '$(HELM_LDFLAGS)' \
	  helm.sh/helm/v3/cmd/helm@v$(HELM_VERSION)

helm-install: $(HELM) ## Build helm from the Go module proxy into ~/.cache/engram/bin (cached)

helm-lint: $(HELM) ## helm lint --strict on helm/engram, default and production-like values
	$(HELM) lint --strict helm/engram
	$(HELM) lint --strict helm/engram --values helm/engram/ci/production-values.yaml

backends-install: backends-build clients-install ## Build NATS, FerretDB, OpenSearch and the Go/TypeScript clients' pieces (cached; tests never build)

backends-build: ## Download and build NATS, FerretDB and OpenSearch (cached)
	$(PYTHON) deploy/local/backends.py provision --check-npm

# Setup steps share nothing (pip, Go/Maven, npm), so they overlap; then the static checks run
# beside the suites. The clean-venv install check runs inside the suites (tests/deploy, the
# image's stages without a container engine), so it is not started a second time here.
test: ## Install, build the backends and helm, then run the checks and every suite
	$(MAKE) --no-print-directory -j3 $(STAMP) backends-install $(BUF) $(HELM)
	$(MAKE) --no-print-directory -j2 suites checks

checks: protos-check clients-check clients-lint lint typecheck ## buf lint/breaking, generated code fresh, ruff, gofmt/vet, mypy --strict

# Four pytest sessions side by side (each with its own real backends): most of a suite's
# time is waiting on servers, indexes and child processes, not CPU. Two sessions took ~26 min
# for the longer one (unit+contract+e2e: a long tail of ~1,600 tests), so e2e runs apart;
# with three, each took 29-33 min and the two cores were busy 64 % of the time (3 Dec), so
# e2e is split in two. PYTEST_ARGS runs one session.
SUITES_CONTRACT := tests/unit tests/contract
SUITES_E2E := tests/e2e
SUITES_SYSTEM := tests/deploy tests/load tests/fuzz
# e2e files run in the contract session instead, to balance the sessions (measured 3 Dec:
# unit+contract 22.4 min, e2e 28.0, system 24.4; these three took ~3.2 min of e2e's).
E2E_IN_CONTRACT := tests/e2e/test_read_your_writes.py tests/e2e/test_read_your_writes_backends.py \
	tests/e2e/test_mcp_hosted.py
# The e2e files of the second e2e session: half of e2e's time, as measured on 3 Dec.
E2E_SECOND := tests/e2e/test_cli.py tests/e2e/test_cli_files.py tests/e2e/test_cli_spaces.py \
	tests/e2e/test_client_services.py tests/e2e/test_defence_in_depth.py tests/e2e/test_demo.py \
	tests/e2e/test_dev_for_humans.py tests/e2e/test_dev_server.py tests/e2e/test_erase_indexes.py \
	tests/e2e/test_error_model.py tests/e2e/test_events_jetstream.py \
	tests/e2e/test_hygiene_backfill_backends.py tests/e2e/test_indexer_jetstream.py \
	tests/e2e/test_integrations_anthropic.py tests/e2e/test_jwks_url.py tests/e2e/test_maintenance.py \
	tests/e2e/test_maintenance_production.py tests/e2e/test_mcp.py tests/e2e/test_polyglot_clients.py \
	tests/e2e/test_readme_clients.py tests/e2e/test_search_degradation.py \
	tests/e2e/test_search_indexer_own_data.py tests/e2e/test_search_workers.py tests/e2e/test_tls.py \
	tests/e2e/test_tracing.py tests/e2e/test_workspace_processes.py
# Where a session's time goes, printed at its end, for keeping the sessions balanced.
DURATIONS := --durations=15

suites: $(STAMP) ## pytest: unit, contract, e2e, load, fuzz and deploy suites (needs `make backends-install helm-install`)
ifeq ($(strip $(PYTEST_ARGS)),)
	$(MAKE) --no-print-directory -j4 --output-sync=line suites-contract suites-e2e \
		suites-e2e-second suites-system
else
	$(BIN)/pytest $(PYTEST_ARGS)
endif

suites-contract: $(STAMP)
	$(BIN)/pytest $(SUITES_CONTRACT) $(E2E_IN_CONTRACT) $(DURATIONS)

suites-e2e: $(STAMP)
	$(BIN)/pytest $(SUITES_E2E) $(addprefix --ignore=,$(E2E_IN_CONTRACT) $(E2E_SECOND)) $(DURATIONS)

suites-e2e-second: $(STAMP)
	$(BIN)/pytest $(E2E_SECOND) $(DURATIONS)

suites-system: $(STAMP)
	$(BIN)/pytest $(SUITES_SYSTEM) $(DURATIONS)

test-fresh: ## `make test` from a clean clone on an empty HOME (FRESH_ARGS="--busy 2" adds CPU hogs)
	deploy/local/fresh-check.sh $(FRESH_ARGS)

install-check: ## The image's stages without Docker: wheel, clean venv, run as nobody, engram dev ready
	PYTHON=$(PYTHON) deploy/local/install-check.sh

run: $(STAMP) ## Install, start `engram dev` with a short demo (Ctrl-C stops it)
	$(BIN)/engram dev --demo

backends: $(STAMP) ## Start NATS, FerretDB and OpenSearch on loopback (deploy/local)
	$(BIN)/python deploy/local/backends.py start

settings-doc: $(STAMP) ## Regenerate README.md's settings reference from the settings model
	$(BIN)/python deploy/settings_reference.py

cluster-local: $(STAMP) $(HELM) ## Every service as its own process on loopback, configured by the rendered chart (Ctrl-C stops all)
	$(BIN)/python deploy/local/cluster.py $(CLUSTER_ARGS)

backends-stop: ## Stop what `make backends` started
	$(PYTHON) deploy/local/backends.py stop

bench: $(STAMP) ## Run the benchmarks (figures go to bench/RESULTS.md by hand)
	$(BIN)/python bench/storage_bench.py

all: protos format lint typecheck test ## Everything

.PHONY: clients clients-check clients-install clients-lint backends-build suites-contract suites-e2e suites-system help install install-check helm-install helm-lint protos protos-check format lint typecheck backends-install checks suites test test-fresh run backends backends-stop cluster-local settings-doc bench all

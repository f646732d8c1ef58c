# nodehotfix: provisioning-time hotfixes for the node bootstrap agent.
# `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

# VERSION stamps the node agent (aks-node-controller version), YYYYMM.DD.PATCH.
VERSION ?= dev
BIN := bin
TOOLS := $(CURDIR)/.tools/bin

# Tool versions, pinned here and installed into .tools/bin by `make tools`.
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
STATICCHECK_VERSION := v0.8.2

BINARIES := aks-node-controller lpsd lpsctl imds-emulator
FUZZTIME ?= 10s

.PHONY: help
help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: build
build: ## build every binary into bin/ (VERSION=YYYYMM.DD.PATCH stamps the agent)
	@mkdir -p $(BIN)
	@for b in $(BINARIES); do \
		if [ -d cmd/$$b ]; then \
			CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "-X main.version=$(VERSION)" -o $(BIN)/$$b ./cmd/$$b; \
		fi; \
	done

.PHONY: embed-hotfix
embed-hotfix: ## put script hotfix payloads (PAYLOADS=DIR: the reference's generated directory of rendered_nodecustomdata_<platform>.yml) into the agent for the next build; PAYLOADS= clears them
	@if [ -n "$(PAYLOADS)" ]; then go run ./cmd/embed-hotfix -from "$(PAYLOADS)"; else go run ./cmd/embed-hotfix -clear; fi

.PHONY: install-node
install-node: ## install the node's files as an image bakes them (the agent from BIN, the launcher, the hotfix flow helper, the units and the report-resend timer) under DESTDIR (DESTDIR=/ on the image)
	@test -n "$(DESTDIR)" || { echo "install-node: set DESTDIR (DESTDIR=/ when baking an image)" >&2; exit 2; }
	install -D -m 0755 $(BIN)/aks-node-controller $(DESTDIR)/opt/azure/containers/aks-node-controller
	install -D -m 0755 deploy/node/aks-node-controller-launcher.sh $(DESTDIR)/opt/azure/containers/aks-node-controller-launcher.sh
	install -D -m 0755 deploy/node/aks-node-controller-hotfix.sh $(DESTDIR)/opt/azure/containers/aks-node-controller-hotfix.sh
	install -D -m 0644 deploy/node/aks-node-controller.service $(DESTDIR)/etc/systemd/system/aks-node-controller.service
	install -D -m 0644 deploy/node/aks-node-controller-report-resend.service $(DESTDIR)/etc/systemd/system/aks-node-controller-report-resend.service
	install -D -m 0644 deploy/node/aks-node-controller-report-resend.timer $(DESTDIR)/etc/systemd/system/aks-node-controller-report-resend.timer

.PHONY: test
test: tools check-generate lint shellcheck bats test-go fuzz ## everything CI runs

.PHONY: test-go
test-go: ## all Go tests (unit, integration, end-to-end) under the race detector
	go test -race -count=1 -timeout 20m ./...

.PHONY: test-short
test-short: ## fast Go tests only (skips integration tests)
	go test -short -count=1 ./...

.PHONY: fuzz
fuzz: ## run every fuzz target briefly (FUZZTIME=10s each; test/fuzz.sh)
	FUZZTIME=$(FUZZTIME) test/fuzz.sh

.PHONY: lint
lint: tools ## go vet, staticcheck, gofmt, go.mod tidiness, buf lint and buf format
	go mod tidy -diff
	go vet ./...
	$(TOOLS)/staticcheck ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	cd proto && $(TOOLS)/buf lint && $(TOOLS)/buf format -d --exit-code

.PHONY: shellcheck
shellcheck: ## shellcheck every shell script
	shellcheck -x $$(git ls-files '*.sh' '*.bats' '.ci/run')

.PHONY: bats
bats: ## launcher and fuzz-runner tests
	bats test/launcher test/fuzz.bats

.PHONY: generate
generate: tools ## regenerate protobuf and gRPC code
	cd proto && $(TOOLS)/buf format -w && $(TOOLS)/buf generate

.PHONY: check-generate
check-generate: generate ## fail if generated code is stale
	@if [ -n "$$(git status --porcelain -- internal/gen proto)" ]; then \
		echo "generated code is stale: run make generate and commit"; git status --porcelain -- internal/gen proto; exit 1; fi

.PHONY: tools
tools: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/staticcheck ## install pinned tools into .tools/bin

$(TOOLS)/buf:
	GOBIN=$(TOOLS) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: demo
demo: ## run the whole flow locally (imds-emulator, lpsd, launcher, agent); DEMO_FLAGS=--keep keeps the work dir
	go run ./test/demo $(DEMO_FLAGS)

.PHONY: clean
clean: ## remove build output
	rm -rf $(BIN)

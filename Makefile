# Kollect — see README.md. Every target installs what it needs; nothing must be running.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

ROOT    := $(CURDIR)
BIN     := $(ROOT)/bin
TOOLS   := go tool -modfile=$(ROOT)/hack/tools/go.mod
MODULES := api proto expr earlyinit agent hub e2e testenv
# Packages of every workspace module, for go test/vet from the root.
PKGS    := $(foreach m,$(MODULES),./$(m)/...)
# The packages that take longest, named first so that go test starts them first (it runs
# packages in the order given, -p at a time): the long ones overlap each other and the short
# ones fill in around them, instead of one long package running alone at the end. Order from
# the test report's slowest-package table; go test lists each package once.
SLOW_PKGS := ./agent/internal/agent ./e2e/fleet ./e2e/sinks ./e2e/node ./hub/internal/server ./e2e/apiserver ./e2e/charts
# -p 3 on two cores: most packages wait on servers, control planes and timers more than they
# compute, and a third package at a time fills those waits (the slowest-package table of the
# test report shows each package's own time).
# -ldflags=-w: test binaries without DWARF link about a quarter faster (some 70 links a run);
# stack traces keep their symbols.
GOTEST_FLAGS ?= -count=1 -timeout 30m -p 3 -ldflags=-w
# The version every binary is stamped with (kollect-agent --version, kollect version, the hub's
# version-skew view); see hack/version.sh.
VERSION ?= $(shell hack/version.sh)
LDFLAGS := -s -w -X kollect.dev/api/version.stamped=$(VERSION)

export GOFLAGS := -buildvcs=false
# Tests and scripts never wait on a prompt: git asks for credentials on /dev/tty even with
# stdin closed, and a test run from a terminal would hang there.
export GIT_TERMINAL_PROMPT := 0
export GIT_ASKPASS := /bin/false
export SSH_ASKPASS := /bin/false
export DEBIAN_FRONTEND := noninteractive

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

##@ The two commands a newcomer runs

.PHONY: demo
demo: ## A local fleet: a hub, two clusters with agents, rows exported to git and PostgreSQL.
	@hack/ensure-k8s.sh >/dev/null & k8s=$$!; $(MAKE) --no-print-directory build; wait $$k8s
	@hack/demo.sh

.PHONY: test
# After the generated files are checked, the independent checks overlap (the build scripts'
# dry run, vet, the images, the dashboard's unit tests after its build); each one's output is
# printed whole when it ends.
test: deps verify-generated ## Run every test of every module against real servers.
	@$(MAKE) --no-print-directory -j3 --output-sync=target verify-build-scripts lint images web-test
	@mkdir -p $(BIN) && cd hack/testreport && GOWORK=off go build -o $(BIN)/testreport .
	k8s="$$(hack/ensure-k8s.sh)"; servers="$$(hack/ensure-servers.sh)"; tools="$$(hack/ensure-tools.sh)"; node="$$(hack/ensure-node.sh)"; \
	export KUBEBUILDER_ASSETS="$$k8s" KOLLECT_SERVERS="$$servers" KOLLECT_TOOLS="$$tools" KOLLECT_NODE="$$node" KOLLECT_IMAGES="$(IMAGES)"; \
	KOLLECT_BUILD_CACHE="$$(mktemp -d "$${TMPDIR:-/tmp}/kollect-build.XXXXXX")"; export KOLLECT_BUILD_CACHE; trap 'rm -rf "$$KOLLECT_BUILD_CACHE"' EXIT; \
		go test -json $(GOTEST_FLAGS) $(SLOW_PKGS) $(PKGS) | tee $(BIN)/test.json | $(BIN)/testreport

.PHONY: test-fleet
test-fleet: deps ## Run the 50-agent fleet on shared sinks (e2e/sinks, build tag fleet; about 3 minutes).
	k8s="$$(hack/ensure-k8s.sh)"; servers="$$(hack/ensure-servers.sh)"; \
	export KUBEBUILDER_ASSETS="$$k8s" KOLLECT_SERVERS="$$servers"; \
		go test -tags fleet -count=1 -timeout 20m -v ./e2e/sinks/ -run TestFleetOfFiftyAgents

##@ Development

# IMAGES: where `make images` writes the OCI layout, the archives and images.txt.
IMAGES ?= $(BIN)/images

.PHONY: web-test
web-test: web ## Run the dashboard's unit tests (vitest).
	cd web && npm run --silent test

.PHONY: images
images: web ## Build the agent and hub images (OCI, linux/amd64+arm64, SBOMs) into bin/images, no Docker needed.
	@hack/images.sh $(IMAGES)

.PHONY: build
build: web ## Build the binaries into bin/ (the hub embeds the dashboard).
	@mkdir -p $(BIN)
	go build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./agent/cmd/... ./hub/cmd/...

# The dashboard's inputs: make rebuilds it only when one of them is newer than its output.
WEB_INPUTS := $(shell find web/src web/public web/scripts -type f 2>/dev/null) web/index.html \
	web/package.json web/package-lock.json web/vite.config.ts web/tsconfig.json
WEB_OUTPUT := hub/internal/webui/dist/index.html

.PHONY: web
web: $(WEB_OUTPUT) ## Build the dashboard (web/) into hub/internal/webui/dist, checking its JavaScript budget.

$(WEB_OUTPUT): $(WEB_INPUTS)
	@hack/ensure-web.sh
	cd web && npm run --silent build

.PHONY: screenshots
screenshots: ## Refresh docs/images/*.png: the dashboard e2e against a real hub and simulated fleet.
	@hack/ensure-web.sh --browser
	KOLLECT_SCREENSHOTS=1 go test -count=1 -run 'TestDashboard$$' ./e2e/dashboard/

.PHONY: generate
generate: ## Regenerate deepcopy code and CRDs from the API types.
	cd api && GOWORK=off $(TOOLS) controller-gen object paths=./...
	cd api && rm -f crds/*.yaml && GOWORK=off $(TOOLS) controller-gen crd paths=./... output:crd:artifacts:config=crds
	@hack/generate-proto.sh # first: the other generators build code that uses it
	@for gen in hack/generate-*.sh; do [ "$$gen" = hack/generate-proto.sh ] || [ ! -x "$$gen" ] || "$$gen" || exit 1; done

.PHONY: verify-build-scripts
verify-build-scripts: ## Fail when a build script would break on a cold machine (a dry run; compiles nothing).
	@hack/verify-build-scripts.sh

.PHONY: verify-generated
verify-generated: ## Fail when generated files are stale.
	@hack/verify-generated.sh

.PHONY: lint
lint: ## gofmt and go vet over every module.
	@bad=$$(gofmt -l api proto expr earlyinit agent hub e2e testenv hack); if [ -n "$$bad" ]; then echo "not gofmt-clean:"; echo "$$bad"; exit 1; fi
	go vet $(PKGS)

.PHONY: bench
# The timeout is go test's per package: e2e/agentbench's opt-in sizes (KOLLECT_BENCH_LARGE,
# KOLLECT_BENCH_TENANTS) take several minutes each, past go test's default of 10.
bench: k8s-bins servers ## Run the benchmarks.
	KUBEBUILDER_ASSETS="$$(hack/ensure-k8s.sh)" KOLLECT_SERVERS="$$(hack/ensure-servers.sh)" go test -run '^$$' -bench . -benchmem -timeout 60m $(PKGS)

# FUZZ_TARGETS are "package FuzzName" pairs; `make test` runs their seed corpora as tests.
FUZZ_TARGETS := ./agent/internal/profile/:FuzzCompileAndExtract ./agent/internal/inventory/rollup/:FuzzFields ./agent/internal/webhook/:FuzzAdmissionDecoding \
	./agent/internal/sink/eventbuf/:FuzzEncodeMatchesEncodingJSON ./agent/internal/sink/snapshot/:FuzzRenderEveryFormat \
	./agent/internal/sink/gitrepo/:FuzzRemoteCheckedAsDialled ./hub/internal/bundle/:FuzzValidate ./hub/internal/server/:FuzzConnectRequestBodies \
	./hub/internal/server/:FuzzConnectAuth ./agent/internal/sink/egress/:FuzzGuardJudgesDialledHost \
	./agent/internal/sink/:FuzzCredentialChecksAsClientsRead ./agent/internal/sink/:FuzzURIChecksAsDriverReads \
	./agent/internal/helmrelease/:FuzzDecode ./agent/internal/hubclient/manifests/:FuzzAdmittedObjects
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: k8s-bins ## Fuzz every target for FUZZTIME each (default 30s), one worker.
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; echo "== $$name ($$pkg)"; \
		KUBEBUILDER_ASSETS="$$(hack/ensure-k8s.sh)" go test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -parallel 1 || exit 1; done

.PHONY: deps
deps: ## Install and build everything the tests need, concurrently (cached by version).
	@hack/ensure-all.sh

.PHONY: k8s-bins
k8s-bins: ## Build etcd, kube-apiserver and kubectl from pinned modules (cached by version).
	@hack/ensure-k8s.sh >/dev/null

.PHONY: servers
servers: ## Install and build the sink servers the tests start (cached by version).
	@hack/ensure-servers.sh >/dev/null

.PHONY: node
node: ## Build kubelet, kube-scheduler, kube-controller-manager and kube-proxy, install containerd (cached by version).
	@hack/ensure-node.sh >/dev/null

.PHONY: tools
tools: ## Build helm, kubeconform and actionlint from pinned modules (cached by version).
	@hack/ensure-tools.sh >/dev/null

.PHONY: clean
clean: ## Remove build output (the version-keyed caches stay).
	rm -rf $(BIN)

# kube-sandbox. The targets delegate to hack/ scripts; `make help` lists them.
SHELL := /usr/bin/env bash
# One set of build flags for binaries and tests, so that they share the Go build cache (a
# cold CI run compiles k8s.io/apiserver once, not twice). Everything is static: binaries run in
# a busybox image and execd is copied into arbitrary sandbox images.
export GOFLAGS := -buildvcs=false -trimpath
export CGO_ENABLED := 0

OUT ?= $(CURDIR)/_output
BIN := $(OUT)/bin
GO_BUILD := go build -ldflags '-s -w'

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build all binaries into _output/bin.
	@mkdir -p $(BIN)
	$(GO_BUILD) -o $(BIN)/ ./apiserver/cmd/sandbox-apiserver ./controller/cmd/sandbox-controller \
		./sidecars/cmd/sandbox-execd ./sidecars/cmd/sandbox-node \
		./plugin/cmd/kubectl-sandbox

.PHONY: up
up: build ## Bring up a real local cluster with kube-sandbox installed (needs root).
	hack/up.sh

.PHONY: install
install: build ## Rebuild the image and (re)install kube-sandbox on the running local cluster.
	hack/install.sh

.PHONY: down
down: ## Stop the local cluster and everything it started.
	hack/cluster/down.sh

.PHONY: test
test: test-unit test-integration test-e2e ## Run every test: unit, integration, end-to-end.

.PHONY: test-unit
test-unit: test-python-unit ## Unit tests.
	go test -short -count=1 ./...

.PHONY: test-python-unit
test-python-unit: ## Unit tests of the Python SDK (sdk/python; Debian's python3 with python3-kubernetes).
	PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m unittest discover -s sdk/python/tests/unit -t sdk/python

.PHONY: test-integration
test-integration: ## Integration tests against a real etcd + kube-apiserver.
	hack/build-cluster.sh kube-apiserver etcd
	go test -count=1 -timeout 15m ./test/integration/...

.PHONY: test-e2e
test-e2e: ## End-to-end tests on the real local cluster (brings it up when it is not).
	hack/e2e.sh

.PHONY: bench
bench: build ## Benchmarks on the local cluster (a markdown table; figures, not assertions).
	hack/bench.sh

.PHONY: bench-scale
bench-scale: ## 10,000 sandboxes and a 2,000-pod pool on simulated nodes (own control plane; ARGS= passes flags).
	hack/bench-scale.sh $(ARGS)

.PHONY: verify
verify: ## Check formatting, vet, go.mod tidiness and that generated code is up to date.
	hack/verify.sh

.PHONY: update
update: ## Regenerate generated code (deepcopy, CRDs, OpenAPI, clientset).
	hack/update-codegen.sh

.PHONY: clean
clean: ## Remove build outputs (not the cluster state: make down first).
	rm -rf $(BIN) $(OUT)/images

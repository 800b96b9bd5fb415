# paddock — see README.md. `make test` is what CI runs (via .ci/run);
# `make demo` runs the main job on real input.
SHELL := /bin/bash
GO ?= go
BIN := bin
HOOKS_DIR := $(BIN)/hooks

# Example hooks (examples/hooks/<name>/): command-ABI modules are plain
# wasip1 programs; reactor-ABI modules are built with -buildmode=c-shared.
# -trimpath makes a module, and so the sha256 a config may pin, the same in
# every checkout.
COMMAND_HOOKS := denylist minimal
REACTOR_HOOKS := tighten minimal-reactor

.PHONY: all build hooks bwrap wabt postgresql test test-unprivileged vet demo clean bench soak

all: build hooks

# paddock is built static (CGO_ENABLED=0): it uses no C library (the
# SQLite driver is pure Go), and without the dynamic loader every paddock
# process starts ~4 ms sooner (16 against 20 ms for `paddock --help`,
# median of 30, on the 2-core machine of docs/performance.md).
# -buildvcs=auto stamps the commit into the binary (paddock version) when
# git can tell it, whatever GOFLAGS says.
build:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o $(BIN)/paddock ./cmd/paddock

hooks: $(addprefix $(HOOKS_DIR)/,$(addsuffix .wasm,$(COMMAND_HOOKS) $(REACTOR_HOOKS)))

$(addprefix $(HOOKS_DIR)/,$(addsuffix .wasm,$(COMMAND_HOOKS))): $(HOOKS_DIR)/%.wasm: FORCE
	@mkdir -p $(HOOKS_DIR)
	GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -o $@ ./examples/hooks/$*

$(addprefix $(HOOKS_DIR)/,$(addsuffix .wasm,$(REACTOR_HOOKS))): $(HOOKS_DIR)/%.wasm: FORCE
	@mkdir -p $(HOOKS_DIR)
	GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -buildmode=c-shared -o $@ ./examples/hooks/$*

FORCE:

# $(call apt_install,CMD,PACKAGE[,TEST]) installs PACKAGE through the system
# package manager when CMD is missing (or, given TEST, when that shell
# command fails): directly as root, through sudo otherwise. It
# never fails the build by itself; tests decide (under
# PADDOCK_REQUIRE_BWRAP=1 a missing tool fails the tests that need it).
define apt_install
	@if $(or $(3),command -v $(1)) >/dev/null 2>&1; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then echo "make: $(1) missing and no apt-get; install $(2) by hand" >&2; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo; else echo "make: $(1) missing; run as root or with sudo to install $(2)" >&2; exit 0; fi; \
	echo "make: installing $(2)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$SUDO apt-get install -y -qq $(2) >/dev/null 2>&1 || { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $(2); }; \
	if $(or $(3),command -v $(1)) >/dev/null 2>&1; then echo "make: $(2) installed"; else echo "make: $(2) did not install; install it by hand (apt-get install $(2))" >&2; fi
endef

# bwrap: bubblewrap, the sandbox.
bwrap:
	$(call apt_install,bwrap,bubblewrap)

# wabt: wat2wasm, which assembles the hand-written hostile hook modules of
# hooks/testdata/wat for the tests.
wabt:
	$(call apt_install,wat2wasm,wabt)

# postgresql: the server the PostgreSQL store's tests start throw-away
# clusters of (internal/pgtest). Debian keeps initdb off PATH, in
# /usr/lib/postgresql/VERSION/bin.
postgresql:
	$(call apt_install,initdb,postgresql,ls /usr/lib/postgresql/*/bin/initdb)

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

# test runs the suite with a TMPDIR of its own (mode 1777, as /tmp: some
# tests run as nobody) and fails when a test left anything in it: every
# test cleans up after itself.
test: bwrap wabt postgresql hooks vet
	@tmp=$$(mktemp -d /tmp/paddock-test.XXXXXX) && chmod 1777 $$tmp && \
	TMPDIR=$$tmp $(GO) test -count=1 -timeout 9m ./...; status=$$?; \
	left=$$(ls -A $$tmp); rm -rf $$tmp; \
	if [ -n "$$left" ]; then echo "make: the tests left files in TMPDIR: $$left" >&2; exit 1; fi; \
	exit $$status
	@$(MAKE) --no-print-directory test-unprivileged

# test-unprivileged runs the escape suites again as an unprivileged user
# (nobody) when make runs as root, as CI does: the fence must hold for
# both, and root's run alone cannot show the unprivileged one. The test
# binary and paddock are built first and copied where nobody can read them.
ESCAPE_TESTS := TestEscape|TestE2E(SystemDirs|StateDir|DeviceNodes|LoaderEnv|InheritedFDs|ProcSys|RaceIntoStateDir|OtherJobsWorkspace|QueueCannotBeLocked|Layers|BwrapLibraries|WorkspaceRootsRace|HiddenSecrets|SecretsCreatedLater|Protected)
test-unprivileged: build
	@if [ "$$(id -u)" != 0 ]; then echo "make: test-unprivileged: not root; make test already ran unprivileged"; exit 0; fi; \
	set -e; dir=$$(mktemp -d /tmp/paddock-unpriv-XXXXXX); trap 'rm -rf "$$dir"' EXIT; \
	$(GO) test -c -o "$$dir/e2etest.test" ./internal/e2etest; \
	cp $(BIN)/paddock "$$dir/paddock"; chmod 755 "$$dir" "$$dir/paddock" "$$dir/e2etest.test"; \
	echo "runuser -u nobody -- e2etest.test -test.run '$(ESCAPE_TESTS)'"; \
	cd "$$dir" && runuser -u nobody -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$$dir" TMPDIR=/tmp \
		PADDOCK_REQUIRE_BWRAP=$${PADDOCK_REQUIRE_BWRAP:-} PADDOCK_E2E_BIN="$$dir/paddock" \
		./e2etest.test -test.count=1 -test.timeout 5m -test.run '$(ESCAPE_TESTS)'

demo: bwrap build hooks
	./examples/demo.sh

# bench measures paddock side by side with xargs -P, GNU parallel and tsp
# (see docs/performance.md). BENCH_FLAGS passes flags, e.g.
# BENCH_FLAGS="--runs 3 --scenarios throughput" or "--json".
bench: bwrap build hooks
	$(GO) build -o $(BIN)/paddock-bench ./cmd/paddock-bench
	$(BIN)/paddock-bench --paddock $(BIN)/paddock --hooks-dir $(HOOKS_DIR) $(BENCH_FLAGS)

# soak runs the long reliability suites (the 300-job crash suite) on top
# of the quick ones in `make test`.
soak: bwrap hooks
	PADDOCK_SOAK=1 $(GO) test -count=1 -timeout 30m -v -run 'TestCrash|TestEscape|TestBad|TestHostile' ./internal/e2etest

clean:
	rm -rf $(BIN)

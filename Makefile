# tunnelsvc — build, run and test. `make run` and `make test` are the two
# commands the README starts with; both work on a fresh Debian 12 as root.
SHELL := /bin/bash
GO ?= go
# The version of this build: the packages', the daemon's and the machine
# bundle's (the fleet orders bundles by it). It must start with a digit and
# always increase (dpkg, rpm and the fleet's updates compare them): a tag
# without its "v"; after a tag, the tag plus "+git<commits since the
# tag>.<hash>"; with no tag, 0.1.0+git<commit count>.<hash>. The commit
# count, compared as a number, orders the builds; the hash only names them.
VERSION ?= $(shell scripts/pkg-version.sh)
PKG_VERSION ?= $(VERSION)
# -s -w: no symbol table or DWARF in what we build and ship (about a third
# smaller); panics still print file:line stacks.
LDFLAGS := -s -w -X main.version=$(VERSION)
GOBIN := $(shell $(GO) env GOPATH)/bin
# Flags for `make run`.
RUN_LISTEN ?= 127.0.0.1:7380
RUN_DATA ?= ./data

.PHONY: all build daemon ui frp pebble zitadel-op static run test test-ui test-go test-fuzz test-system deps package pkg-version bench docs clean

all: build

## build: the UI, then the daemon with the UI embedded, the tunnel engine,
## and the files machines download (bin/static).
build: ui daemon frp static

## frp: frps and frpc, built from the one pinned version in tools/frp/go.mod
## (bump it there with `go get github.com/fatedier/frp@vX.Y.Z`), with the
## patched yamux of third_party/yamux. Rebuilt only when either changes; Go's
## build cache makes a rebuild cheap.
FRP_DIR := tools/frp
YAMUX_SRC := $(filter-out %_test.go,$(wildcard third_party/yamux/*.go)) third_party/yamux/go.mod
frp: bin/frps bin/frpc
## Static (no cgo, no libc needed) and stripped. noweb: without frp's own
## web pages (its module ships none to embed); the APIs the daemon reads
## (frps's /api/proxy, frpc's /api/reload) are there.
FRP_TAGS := noweb
bin/frp%: $(FRP_DIR)/go.mod $(FRP_DIR)/go.sum $(YAMUX_SRC) Makefile
	cd $(FRP_DIR) && CGO_ENABLED=0 $(GO) build -tags $(FRP_TAGS) -trimpath -ldflags '-s -w' -o $(CURDIR)/$@ github.com/fatedier/frp/cmd/frp$*

## bin/frps-previous, bin/frpc-previous: the frp the package carried before
## (pinned in tools/frp-previous/go.mod), only for the tests that prove an
## upgrade from it: a machine not yet updated keeps its tunnels against the
## new frps.
bin/frp%-previous: tools/frp-previous/go.mod tools/frp-previous/go.sum $(YAMUX_SRC)
	cd tools/frp-previous && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(CURDIR)/$@ github.com/fatedier/frp/cmd/frp$*

## pebble: Let's Encrypt's ACME test server, only for the tests that prove
## the HTTPS path (never packaged), from the version pinned in
## tools/pebble/go.mod. The tests build it when it is missing.
PEBBLE_DIR := tools/pebble
## pebble-challtestsrv (its DNS) comes from the same module: the two-edge
## test has it answer each name with the other edge's address.
pebble: bin/pebble bin/pebble-challtestsrv
bin/pebble bin/pebble-challtestsrv: bin/%: $(PEBBLE_DIR)/go.mod $(PEBBLE_DIR)/go.sum
	cd $(PEBBLE_DIR) && $(GO) build -trimpath -o $(CURDIR)/$@ github.com/letsencrypt/pebble/v2/cmd/$*

## zitadel-op: zitadel/oidc's example OpenID provider (the version pinned in
## tools/zitadel-op/go.mod), a second provider for the SSO tests only (never
## packaged). The tests build it when it is missing or older than its sources.
ZITADEL_OP_DIR := tools/zitadel-op
zitadel-op: bin/zitadel-op
bin/zitadel-op: $(ZITADEL_OP_DIR)/go.mod $(ZITADEL_OP_DIR)/go.sum $(wildcard $(ZITADEL_OP_DIR)/*.go)
	@mkdir -p $(@D)
	cd $(ZITADEL_OP_DIR) && $(GO) build -trimpath -o $(CURDIR)/$@ .

## static: what the daemon serves machines under /static (--static-dir):
## tunnel-agent for linux amd64/arm64 and frpc (as revtunnel-client) for
## amd64/arm64/arm (GOARM=7), static binaries, each with a .sha256 beside it,
## and VERSION, the version of the machine bundle built from them.
## Each file is rebuilt only when its sources change.
STATIC := bin/static
AGENT_ARCHS := amd64 arm64
CLIENT_ARCHS := amd64 arm64 arm
STATIC_BINS := $(foreach a,$(AGENT_ARCHS),$(STATIC)/agents/tunnel-agent-linux-$(a)) \
	$(foreach a,$(CLIENT_ARCHS),$(STATIC)/revtunnel/revtunnel-client-linux-$(a))
AGENT_SRC := $(shell find daemon/agent daemon/cmd/tunnel-agent -name '*.go' ! -name '*_test.go' 2>/dev/null) go.mod go.sum
static: $(addsuffix .sha256,$(STATIC_BINS)) $(STATIC)/VERSION
AGENT_BINS := $(foreach a,$(AGENT_ARCHS),$(STATIC)/agents/tunnel-agent-linux-$(a))
CLIENT_BINS := $(foreach a,$(CLIENT_ARCHS),$(STATIC)/revtunnel/revtunnel-client-linux-$(a))
$(AGENT_BINS): $(STATIC)/agents/tunnel-agent-linux-%: $(AGENT_SRC) Makefile
	@mkdir -p $(@D)
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./daemon/cmd/tunnel-agent
$(CLIENT_BINS): $(STATIC)/revtunnel/revtunnel-client-linux-%: $(FRP_DIR)/go.mod $(FRP_DIR)/go.sum $(YAMUX_SRC) Makefile
	@mkdir -p $(@D)
	cd $(FRP_DIR) && CGO_ENABLED=0 GOOS=linux GOARCH=$* GOARM=7 $(GO) build -tags $(FRP_TAGS) -trimpath -ldflags '-s -w' -o $(CURDIR)/$@ github.com/fatedier/frp/cmd/frpc
$(addsuffix .sha256,$(STATIC_BINS)): %.sha256: %
	cd $(@D) && sha256sum $(<F) > $(@F)
## VERSION is the machine bundle's version (the one the agent binaries
## carry): the daemon serves it and compares machines against it. Checked at
## every make, rewritten only when it changes, so its mtime (the bundle
## cache's key) moves only with the version.
$(STATIC)/VERSION: FORCE
	@mkdir -p $(@D)
	@if [ "$$(cat $@ 2>/dev/null)" != '$(VERSION)' ]; then printf '%s\n' '$(VERSION)' > $@; fi
FORCE:

daemon:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/tunnelsvc ./daemon/cmd/tunnelsvc

## ui: the dashboard (skipped until ui/package.json exists), built again
## only when one of its sources is newer than ui/dist/index.html: make test
## asks for it twice (build, then test-ui), and a second type check and
## bundle found nothing new.
UI_SRC := $(shell find ui/src ui/public -type f 2>/dev/null) $(wildcard ui/index.html ui/package.json ui/package-lock.json ui/vite.config.ts ui/tsconfig.json)
ui: $(if $(wildcard ui/package.json),ui/dist/index.html)
	@[ -f ui/package.json ] || echo "ui: no ui/package.json; serving the placeholder page"
ui/dist/index.html: $(UI_SRC)
	@if [ ui/package-lock.json -nt ui/node_modules/.package-lock.json ]; then (cd ui && npm ci --no-audit --no-fund --loglevel=error); fi
	cd ui && npm run build
	@touch $@

## run: build and serve the dashboard on 127.0.0.1 with data in ./data.
run: build
	@mkdir -p $(RUN_DATA)
	./bin/tunnelsvc serve --listen $(RUN_LISTEN) --data-dir $(RUN_DATA) --system-root $(RUN_DATA)/root --bin-dir ./bin --static-dir ./bin/static

## deps: install what the tests need, only what is missing.
deps:
	bash scripts/install-deps.sh

## test: every test. The system tests (one package, whose tests run two
## at a time and mostly wait for hosts to boot and timers to fire) start
## first, in the background; beside them run the brief fuzzing, the UI's
## tests, then every other Go test (unit, black-box, real tools), one after
## the other. The system tests' output and gotestsum's summary of them come
## last. Run after the rest, they left the processors a third idle in the
## suite's last minutes; the rest side by side with each other took about
## as long in all and their timing tests flaked.
SYSTEM_LOG := bin/test-system.log
test: deps build
	@$(GOBIN)/gotestsum --format testname -- -count=1 -timeout 20m $(TEST_BUILD) ./daemon/systemtest/... >$(SYSTEM_LOG) 2>&1 & sys=$$!; \
	echo "make test: the system tests run in the background (their output comes last)"; \
	rest=0; $(MAKE) --no-print-directory test-fuzz test-ui test-go GO_TEST_EXCLUDE=/daemon/systemtest || rest=$$?; \
	echo "make test: waiting for the system tests"; \
	system=0; wait $$sys || system=$$?; \
	cat $(SYSTEM_LOG); \
	[ $$rest -eq 0 ] && [ $$system -eq 0 ]

## test-ui: the dashboard's unit tests and its browser test (Debian's
## chromium-headless-shell driving the real daemon with this UI embedded);
## node's test runner runs two files at a time and prints a summary.
## (test:built is npm test without its build: the ui target just built.)
## The daemon is bin/test/tunnelsvc: the same code built with the tag
## tunnelsvc_uitest, which hashes passwords at a low cost (the browser
## tests log in about a hundred times; at the real cost that was 47 of the
## suite's processor seconds). The package ships bin/tunnelsvc, which
## TestShippedBinaryIsNotTheTestBuild checks.
test-ui: ui daemon
	$(GO) build -trimpath -tags tunnelsvc_uitest -ldflags '$(LDFLAGS)' -o bin/test/tunnelsvc ./daemon/cmd/tunnelsvc
	@if [ -f ui/package.json ]; then cd ui && UI_DAEMON_BIN=$(CURDIR)/bin/test/tunnelsvc npm run --silent test:built; else echo "test-ui: no ui/package.json"; fi

# The longest packages first: go test starts packages in the order they are
# named, so the system tests (when test-go runs them: make test runs them
# itself, in the background) run beside all the others instead of after
# most of them. Then the packages whose tests mostly wait (a database
# stopped for a minute, a slow client cut off, an edge back after a
# pause): run last, they left one processor idle for about two minutes
# while only they were left. The ban tool's (16 s of tests) came last in the
# alphabet and ended the run alone, and so did the tunnel engine's (28 s,
# much of it waiting on real frps and frpc), now among the first: its UDP
# test keeps at most 100 datagrams in flight, so a busy machine delays them
# and loses none (beside the heavy packages, 5,000 a second unpaced lost 2 %).
# Four packages at once (go test's default is one per processor): the API's
# database outage, localsetup's timers and the bench's waits hold a slot
# each while they wait; with three, the machine was 86-91 % busy while only
# these packages ran.
GO_TEST_P := 4
GO_TEST_FIRST := ./daemon/systemtest/... ./daemon/api/... ./daemon/internal/bench/... \
	./daemon/localsetup/... ./daemon/cmd/tunnelsvc/... ./daemon/app/... ./daemon/store/... \
	./daemon/banner/... ./daemon/revtunnel/...
# Vet and the test binaries are built with -trimpath: without it Go keys
# each package's compiled code and vet result by its directory, so a new
# clone recompiled the whole project although the build cache held it.
# (Only on these commands, not through GOFLAGS: with -trimpath in GOFLAGS,
# go build stamps the main module with a pseudo-version instead of
# (devel), which the packages' copyright file would then look for.) Test
# binaries are linked without DWARF and symbol table (-s -w), which halves
# their link time; a failing test still prints file:line.
TEST_BUILD := -trimpath -ldflags '-s -w'
# GO_TEST_ALONE: tests that hold a measurement to a link's limits (the
# speed test through a link shaped to 50 Mbit/s and 40 ms) run alone, after
# the rest: beside four test packages on 2 processors the hosts' own waits
# for a processor took up to 17 % off the rates and added 6-16 ms to each
# round trip, which is the machine, not the link.
GO_TEST_ALONE := ^TestSpeedThroughShapedLink$$
# GO_TEST_EXCLUDE: packages left out (a regular expression; make test runs
# the system tests itself).
GO_TEST_EXCLUDE ?= ^$$
test-go:
	$(GO) vet -trimpath ./...
	cd third_party/yamux && $(GO) vet -trimpath . && $(GO) test -count=1 -timeout 2m $(TEST_BUILD) -run 'TestSendLoop|TestSendData_Small|TestGoAway|TestCorker|TestLargeFramesAreCorked' .
	cd tools/fleetsim && CGO_ENABLED=0 $(GO) vet -tags $(FRP_TAGS) -trimpath .
	pkgs=$$($(GO) list $(GO_TEST_FIRST) ./... | awk '!seen[$$0]++' | grep -vE '$(GO_TEST_EXCLUDE)'); \
	$(GOBIN)/gotestsum --format testname -- -count=1 -timeout 20m -p $(GO_TEST_P) $(TEST_BUILD) -skip '$(GO_TEST_ALONE)' $$pkgs
	$(GOBIN)/gotestsum --format testname -- -count=1 -timeout 5m $(TEST_BUILD) -run '$(GO_TEST_ALONE)' ./daemon/speedtest/

## test-system: only the system tests and the testbed's own test (root: a real systemd).
test-system:
	$(GO) test -count=1 -v -timeout 10m $(TEST_BUILD) ./daemon/internal/testbed/... ./daemon/systemtest/...

# Each fuzz target runs briefly (scripts/fuzz-brief.sh: one instrumented
# binary per package); the committed seed corpus runs in test-go too.
# Each runs for a number of executions, about half a second of it on 2
# processors with the suite's other work (fuzzing is a small share of what the suite
# must do in its 12 minutes; FUZZ_TIME is for a longer search), not
# for a time: with a time, Go 1.26's fuzz coordinator can fail a target with
# a bare "context deadline exceeded" when the time runs out while a worker
# is mid-input (go.dev/issue/75804, fixed in Go 1.27), which failed `make
# test` with nothing found. FUZZ_TIME=1m (or 1000000x) sets one budget for
# every target instead, and keeps the inputs it finds in Go's fuzz cache
# for the next such run (a brief pass throws its own away: replaying a
# cache that grew with every run made each pass longer than the last).
FUZZ_TIME ?=
FUZZ_TARGETS := ./daemon/api:FuzzAuthBodies:500x ./daemon/api:FuzzTwoFABodies:2500x ./daemon/api:FuzzSSHKeyBodies:1000x \
	./daemon/api:FuzzJoinCommand:400x ./daemon/api:FuzzAuthorizationHeader:300x ./daemon/api:FuzzBootstrapRequest:400x \
	./daemon/api:FuzzSSOCallbackQuery:400x
# Generated files: every accepted value renders a file the real tool accepts
# (and the frps plugin's answers, next to its package's other targets).
FUZZ_TARGETS += ./daemon/validate:FuzzValidators:12500x ./daemon/webproxy:FuzzCaddyfile:4000x \
	./daemon/firewall:FuzzFirewallRuleset:6000x ./daemon/banner:FuzzJailFile:7500x \
	./daemon/revtunnel:FuzzFrpsConfig:2000x ./daemon/revtunnel:FuzzFrpcConfig:2500x ./daemon/revtunnel:FuzzPluginRequest:750x \
	./daemon/gate:FuzzCheck:5000x ./daemon/gate:FuzzCallback:5000x ./daemon/gate:FuzzLogin:250x
test-fuzz:
	GO=$(GO) FUZZ_TIME=$(FUZZ_TIME) bash scripts/fuzz-brief.sh $(FUZZ_TARGETS)

## package: .deb and .rpm in dist/ (nfpm, pinned; newer nfpm releases need
## modules the Go module proxy does not serve). bin/copyright gathers the
## licence of every module compiled into the shipped binaries.
NFPM_VERSION := v2.44.0
package: build bin/copyright
	@$(GO) version -m $(GOBIN)/nfpm 2>/dev/null | grep -qE '^\s+mod\s+github.com/goreleaser/nfpm/v2\s+$(NFPM_VERSION)\s' || $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	@mkdir -p dist
	VERSION=$(PKG_VERSION) GOARCH=$$($(GO) env GOARCH) $(GOBIN)/nfpm package -f nfpm.yaml -p deb -t dist/
	VERSION=$(PKG_VERSION) GOARCH=$$($(GO) env GOARCH) $(GOBIN)/nfpm package -f nfpm.yaml -p rpm -t dist/

## pkg-version: the version `make package` gives the packages.
pkg-version:
	@echo $(PKG_VERSION)

bin/copyright: packaging/copyright scripts/copyright.sh bin/tunnelsvc bin/frps $(addsuffix .sha256,$(STATIC_BINS))
	bash scripts/copyright.sh packaging/copyright bin/tunnelsvc bin/frps $(STATIC_BINS) >$@.tmp && mv $@.tmp $@

## bench: the performance table (BENCH.md) against the real daemon, frps,
## frpc and Caddy on loopback, median of BENCH_RUNS runs, then the Go
## micro-benchmarks (bench.txt, for benchstat). Not part of `make test`,
## which runs a short smoke pass of every figure instead.
BENCH_RUNS ?= 5
BENCH_DURATION ?= 10s
bench: build
	$(GO) run ./daemon/cmd/tunnelsvc-bench -runs $(BENCH_RUNS) -duration $(BENCH_DURATION) -out BENCH.md
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./... | tee bench.txt

## docs: regenerate docs/configuration.md from the flags the binary parses
## (a test fails when it is out of date).
docs:
	$(GO) run ./daemon/cmd/tunnelsvc config-reference > docs/configuration.md
	$(GO) run ./daemon/internal/apidocs docs
	cp daemon/site/schema.json docs/site.schema.json

clean:
	rm -rf bin dist ui/dist/assets ui/dist/index.html

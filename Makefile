# tsdht — common tasks. `make demo` and `make test` need nothing but Go.
GO      ?= go
BIN     ?= bin/tsdht
PKGS    := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
# urfave/cli's man-page and Markdown generators: tsdht never calls them, and they
# would go onto every board.
TAGS    ?= urfave_cli_no_docs
# The board build leaves out the PromQL engine (Prometheus' query API and remote read:
# docs/http.md), which would take the stripped ARMv7 binary past 30 MB; PROMQL=1 keeps it.
PROMQL  ?= 0
ARM_TAGS = $(TAGS)$(if $(filter 1,$(PROMQL)),,$(comma)nopromql)
comma   := ,

.PHONY: build test test-short race arm demo bench bench-report fuzz vet clean test-arm ansible-test

# bin/tsdht, the node and its CLI, and bin/tsdht-bench, the benchmarks (docs/bench).
build:
	$(GO) build -tags $(TAGS) -ldflags="-X main.version=$(VERSION)" -o $(BIN) ./cmd/tsdht
	$(GO) build -o bin/tsdht-bench ./cmd/tsdht-bench

# The test command README and CI use: vet, race-enabled tests, and the ARMv7 build.
test: vet
	$(GO) test -race -timeout 20m $(PKGS)
	GOARCH=arm GOARM=7 CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/tsdht ./cmd/tsdht-bench
	GOARCH=arm GOARM=7 CGO_ENABLED=0 $(GO) build -tags $(TAGS),nopromql -o /dev/null ./cmd/tsdht

vet:
	$(GO) vet $(PKGS)

test-short:
	$(GO) test -short $(PKGS)

# A static ARMv7 binary for BeagleBone Black class boards.
arm:
	GOARCH=arm GOARM=7 CGO_ENABLED=0 $(GO) build -tags $(ARM_TAGS) -trimpath -ldflags="-s -w -X main.version=$(VERSION)" -o bin/tsdht-armv7 ./cmd/tsdht

demo:
	$(GO) run ./cmd/tsdht demo

# Go micro-benchmarks of the lower packages; the cluster benchmarks are bin/tsdht-bench
# and scripts/bench-* (docs/bench/README.md).
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s ./rpc/ ./dht/ ./tsdb/...

# docs/bench/RESULTS.md from the results files docs/bench/*.jsonl (runs no benchmark).
bench-report:
	scripts/bench-report

clean:
	rm -rf bin

# ---- ARMv7 under emulation (docs/deployment.md) --------------------------------------
# make test-arm: every package's tests, cross-compiled for ARMv7 (GOARCH=arm GOARM=7
# CGO_ENABLED=0), each run under qemu-arm-static in its package's directory, pinned to
# one host core (ARM_CPUS; GOMAXPROCS is then 1, as on a BeagleBone). End-to-end tests
# spawn the ARMv7 tsdht through TSDHT_TEST_BINARY, a wrapper that runs it under qemu.
# Installs qemu-user-static with apt-get when it is missing. ARM_SHORT lists packages
# (as ./dir) run with -test.short; ARM_RUN passes -test.run to every package;
# ARM_BUILDFLAGS go to `go test -c` (e.g. -overlay FILE).
ARM_TEST_DIR ?= bin/arm-test
ARM_TIMEOUT  ?= 20m
ARM_CPUS     ?= 0
ARM_SHORT    ?=
ARM_RUN      ?=
ARM_BUILDFLAGS ?=
QEMU_ARM     ?= qemu-arm-static

test-arm: SHELL := /bin/bash
test-arm:
	@set -uo pipefail; t0=$$SECONDS; \
	if ! command -v $(QEMU_ARM) >/dev/null; then \
		echo "test-arm: installing qemu-user-static…"; \
		{ apt-get install -y qemu-user-static || { apt-get update && apt-get install -y qemu-user-static; }; } >/dev/null || \
			{ echo "test-arm: $(QEMU_ARM) is missing and apt-get could not install qemu-user-static" >&2; exit 1; }; \
	fi; \
	pin=(); [[ -n "$(ARM_CPUS)" ]] && command -v taskset >/dev/null && pin=(taskset -c $(ARM_CPUS)); \
	dir=$$(mkdir -p $(ARM_TEST_DIR) && cd $(ARM_TEST_DIR) && pwd); rm -f "$$dir"/*.test "$$dir"/*.log "$$dir/tsdht.used"; \
	echo "test-arm: cross-compiling for linux/arm (ARMv7)…"; \
	GOARCH=arm GOARM=7 CGO_ENABLED=0 $(GO) build -o "$$dir/tsdht-armv7" ./cmd/tsdht || exit 1; \
	printf '#!/bin/sh\n# tsdht for ARMv7 under user-mode emulation (make test-arm)\n: >>%s\nexec %s %s "$$@"\n' "$$dir/tsdht.used" "$$(command -v $(QEMU_ARM))" "$$dir/tsdht-armv7" >"$$dir/tsdht"; \
	chmod +x "$$dir/tsdht"; \
	pkgs=$$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}={{.Dir}}{{end}}' $(PKGS)) || exit 1; \
	for pd in $$pkgs; do \
		pkg=$${pd%%=*}; name=$${pkg//\//_}; \
		GOARCH=arm GOARM=7 CGO_ENABLED=0 $(GO) test -c $(ARM_BUILDFLAGS) -o "$$dir/$$name.test" "$$pkg" || exit 1; \
	done; \
	echo "test-arm: compiled in $$((SECONDS - t0)) s; running under $$($(QEMU_ARM) --version | head -1)$${pin:+, $${pin[*]}}"; \
	failed=(); \
	for pd in $$pkgs; do \
		pkg=$${pd%%=*}; pdir=$${pd#*=}; name=$${pkg//\//_}; rel=./$${pdir#$(CURDIR)/}; \
		flags=(-test.v -test.timeout $(ARM_TIMEOUT)); mode=full; \
		for s in $(ARM_SHORT); do [[ $$s == "$$rel" ]] && { flags+=(-test.short); mode=short; }; done; \
		[[ -n "$(ARM_RUN)" ]] && flags+=(-test.run '$(ARM_RUN)'); \
		s0=$$SECONDS; \
		if (cd "$$pdir" && TSDHT_TEST_BINARY="$$dir/tsdht" "$${pin[@]}" $(QEMU_ARM) "$$dir/$$name.test" "$${flags[@]}" >"$$dir/$$name.log" 2>&1); then \
			printf 'ok   \t%s\t%ds (%s: %d tests passed, %d skipped)\n' "$$pkg" $$((SECONDS - s0)) "$$mode" \
				"$$(grep -c '^--- PASS' "$$dir/$$name.log")" "$$(grep -c -- '--- SKIP' "$$dir/$$name.log")"; \
		else \
			printf 'FAIL \t%s\t%ds (%s); the end of %s:\n' "$$pkg" $$((SECONDS - s0)) "$$mode" "$$dir/$$name.log"; \
			scripts/test-failures "$$dir/$$name.log" | head -120; echo "  … the log ends:"; tail -n 8 "$$dir/$$name.log"; \
			failed+=("$$pkg"); \
		fi; \
	done; \
	[[ -e "$$dir/tsdht.used" ]] || [[ -n "$(ARM_RUN)" ]] || \
		echo "test-arm: WARNING: no test ran the ARMv7 tsdht: the end-to-end tests of cmd/tsdht ignore TSDHT_TEST_BINARY and ran a host build"; \
	echo "test-arm: $$(( (SECONDS - t0) / 60 ))m$$(( (SECONDS - t0) % 60 ))s in all; logs in $(ARM_TEST_DIR)"; \
	if [[ $${#failed[@]} -gt 0 ]]; then echo "test-arm: FAILED: $${failed[*]}"; exit 1; fi

# make ansible-test: ansible-lint over ansible/, then scripts/ansible-test (needs root;
# skips with a message otherwise). Installs ansible and ansible-lint with apt-get when
# they are missing.
ansible-test:
	@command -v ansible-playbook >/dev/null && command -v ansible-lint >/dev/null || \
		{ apt-get install -y ansible ansible-lint || { apt-get update && apt-get install -y ansible ansible-lint; }; } >/dev/null
	ansible-lint --nocolor ansible/
	@scripts/ansible-test; rc=$$?; if [ $$rc = 77 ]; then echo "ansible-test: skipped (see above)"; else exit $$rc; fi

# tsdht — common tasks. `make demo` and `make test` need nothing but Go.
GO      ?= go
BIN     ?= bin/tsdht
PKGS    := ./...

.PHONY: build test test-short race arm demo bench fuzz vet clean

build:
	$(GO) build -o $(BIN) ./cmd/tsdht

# The test command README and CI use: vet, race-enabled tests, and the ARMv7 build.
test: vet
	$(GO) test -race -timeout 20m $(PKGS)
	GOARCH=arm GOARM=7 CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/tsdht

vet:
	$(GO) vet $(PKGS)

test-short:
	$(GO) test -short $(PKGS)

# A static ARMv7 binary for BeagleBone Black class boards.
arm:
	GOARCH=arm GOARM=7 CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/tsdht-armv7 ./cmd/tsdht

demo:
	$(GO) run ./cmd/tsdht demo

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./rpc/ ./dht/ ./tsdb/...

clean:
	rm -rf bin

# fencelock — see README.md.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: setup test demo lint bench

# Install the real test servers (redis, postgres) from Debian packages.
setup:
	./scripts/setup.sh

# Every test, against real servers, under the race detector.
test: setup
	$(GO) test -race -count=1 -timeout 25m ./...
	if [ -f bench/go.mod ]; then cd bench && $(GO) test -race -count=1 -timeout 10m ./...; fi

# The seed story on the embedded default store.
demo:
	$(GO) run ./cmd/fencelock demo

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

bench:
	$(GO) test -run XXX -bench . -benchtime 2s ./...

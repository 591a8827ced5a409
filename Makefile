# fencelock — see README.md.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: setup test crossbuild demo lint bench bench-peers

# Install the real test servers: redis, postgres, zookeeper, etcd (Debian), dynalite (npm).
setup:
	./scripts/setup.sh

# Every test, against real servers, under the race detector; first, the
# whole repo must build for macOS and Windows too.
test: setup crossbuild
	$(GO) test -race -count=1 -timeout 25m ./...
	$(GO) test -count=1 -timeout 5m -run '^TestTortureEnsemble$$' ./backends/zookeeper/
	if [ -f bench/go.mod ]; then cd bench && $(GO) test -race -count=1 -timeout 10m ./...; fi

# Build every package for darwin and windows (test servers, the freeze
# check and the CLI keep their Linux-only parts behind build tags).
crossbuild:
	GOOS=darwin GOARCH=amd64 $(GO) build ./...
	GOOS=windows GOARCH=amd64 $(GO) build ./...

# The seed story on the embedded default store.
demo:
	$(GO) run ./cmd/fencelock demo

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

bench:
	$(GO) test -run XXX -bench . -benchtime 2s ./...

# fencelock next to the peer lock libraries on real servers it starts
# (fsync on), interleaved rounds; writes docs/bench/peers.json and .md and
# prints the table. About 8 minutes; add ARGS=-quick for 1–2 minutes.
bench-peers:
	cd bench && $(GO) run ./cmd/benchpeers -out ../docs/bench/peers.json $(ARGS)

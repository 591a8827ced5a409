package conformance

import (
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance/netfault"
)

// Faults is the set of fault proxies between one client and its store:
// one per store address, in the order the client's URL lists them (so on
// Redlock, node i is the i-th primary).
type Faults struct {
	proxies []*netfault.Proxy
}

// ProxyURL starts a fault proxy in front of every store address of rawURL
// (through its opener's fencelock.AddrRewriter) and returns the URL that
// reaches the store through them, with the Faults that control them. A
// Harness implements Partitioner by opening a Client on that URL. Close
// the Faults after the Client.
func ProxyURL(rawURL string) (string, *Faults, error) {
	f := &Faults{}
	u, err := fencelock.RewriteStoreAddrs(rawURL, func(addr string) (string, error) {
		p, err := netfault.Listen(addr)
		if err != nil {
			return "", fmt.Errorf("fault proxy for %s: %w", addr, err)
		}
		f.proxies = append(f.proxies, p)
		return p.Addr(), nil
	})
	if err != nil {
		f.Close()
		return "", nil, err
	}
	return u, f, nil
}

// Nodes is the number of proxies (store addresses).
func (f *Faults) Nodes() int { return len(f.proxies) }

// Cut applies mode m to the given nodes' proxies (every node if none is
// given); delay is for netfault.Latency.
func (f *Faults) Cut(m netfault.Mode, delay time.Duration, nodes ...int) {
	if len(nodes) == 0 {
		for i := range f.proxies {
			nodes = append(nodes, i)
		}
	}
	for _, i := range nodes {
		f.proxies[i].Set(m, delay)
	}
}

// Heal lets everything through again (bytes a blackhole held are
// delivered).
func (f *Faults) Heal() {
	for _, p := range f.proxies {
		p.Heal()
	}
}

// Accepted is how many connections the proxies accepted in all: 0 means
// the client never went through them.
func (f *Faults) Accepted() int {
	n := 0
	for _, p := range f.proxies {
		n += p.Accepted()
	}
	return n
}

// Close stops the proxies and closes every connection through them.
func (f *Faults) Close() {
	for _, p := range f.proxies {
		_ = p.Close()
	}
}

// Package election is leader election over any fencelock store, in the
// shape of etcd's concurrency.Election and client-go's leaderelection,
// with one difference that matters: every term is a fence.
//
// A candidate Campaigns on an election name and blocks until it leads; it
// then holds a Term, which is a fencelock lease on that name. Term.Fence
// is the term number: greater than every earlier term on that name (as
// strongly as the backend's Capabilities.Fence promises). A leader that
// stalls past its TTL (a GC pause, a frozen VM) loses the term before the
// store can elect another, and the resource refuses its late writes if
// it checks the term with package guard — which neither client-go's
// leaderelection nor etcd's Election can do, since they hand out no
// fence (client-go documents that it "does not guarantee that only one
// client is acting as a leader (a.k.a. fencing)").
//
// # What is published
//
// The leader's value is the lease's label (fencelock.AcquireOptions.Label):
// Proclaim changes it in place (Lease.SetLabel) where the backend can
// (Capabilities.Inspect.Relabel), and Leader and Observe read it with
// Client.Inspect, so the backend must report labels
// (Capabilities.Inspect.Label). Each backend's package doc says where it
// keeps the label and what its native clients see.
//
// # Observe
//
// Observe polls Client.Inspect every Options.PollInterval (default
// 100 ms): a leader who holds for at least two intervals is seen, and a
// reader who reads promptly sees every leader change in order. A slow
// reader is never blocked on and never sees stale history: changes made
// while it was not reading are coalesced, and it receives the latest
// leader. Vacancies (no leader) are not sent.
//
// # Run
//
// Run is the controller shape (client-go's LeaderElector.Run): campaign,
// call OnStartedLeading with a context that ends when leadership ends,
// and return when it ends. Leadership lasts while the lease's
// auto-renewal succeeds and at most Options.MaxHold.
package election

package etcdstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/internal/store/storetest"
)

// TestIntegrationFeedAheadOfTheListKeepsServing: while another replica
// keeps writing (reports, and keys outside the prefix that move the
// store's revision, as in any live fleet), the feed is often past the
// revision a list read a moment before; that is no other history, and the
// list answers from the feed without a scan. A first build took it for a
// restore and scanned, restarting the feed, in 9 of 30 such lists.
func TestIntegrationFeedAheadOfTheListKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	ctx := t.Context()
	eps := etcdtest.Start(t)
	reader, writer := openOn(t, eps), openOn(t, eps)
	storetest.MustPutReports(t, writer, storetest.Report("vm-seed", "b"))
	if _, err := reader.Reports(ctx); err != nil { // scan 1, starts the feed
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; wctx.Err() == nil; i++ {
			// Another key, outside the reports prefix (a heartbeat, a
			// seat, an audit entry, ...): bumps the store's revision.
			writer.cli.Put(wctx, writer.prefix+"attack/other", fmt.Sprint(i))
			if i%4 == 0 {
				writer.PutReports(wctx, []store.Report{storetest.Report(fmt.Sprintf("vm-%d", i%50), "b")})
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	reader.reports.mu.Lock()
	before := reader.reports.scans
	reader.reports.mu.Unlock()
	const lists = 30
	start := time.Now()
	for range lists {
		if _, err := reader.Reports(ctx); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	stop()
	wg.Wait()
	reader.reports.mu.Lock()
	scans := reader.reports.scans - before
	reader.reports.mu.Unlock()
	if scans != 0 {
		t.Errorf("%d of %d lists under write load scanned the prefix (%v) though the feed was healthy", scans, lists, took)
	}
}

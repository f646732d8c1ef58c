package report

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	nodev1 "nodehotfix/internal/gen/nodehotfix/node/v1"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/lpsclient/lpstest"
)

// service is an in-process report service whose answers the test scripts:
// each call takes the next answer (nil: acknowledge; the last repeats).
type service struct {
	mu       sync.Mutex
	answers  []error
	outcomes []*nodev1.ReportOutcomeRequest
	started  []*nodev1.ReportStartedRequest
	calls    int
	hang     bool // the first call hangs until it is cancelled
	srv      *lpstest.Server
}

func (s *service) answer(ctx context.Context) error {
	s.mu.Lock()
	s.calls++
	n, hang := s.calls, s.hang
	var err error
	if len(s.answers) > 0 {
		err = s.answers[min(n, len(s.answers))-1]
	}
	s.mu.Unlock()
	if hang && n == 1 {
		<-ctx.Done()
		return status.Error(codes.DeadlineExceeded, "hung")
	}
	return err
}

func (s *service) start(t *testing.T, ca *lpstest.CA) string {
	t.Helper()
	s.srv = lpstest.Start(t, ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), lpsclient.ServerName), lpstest.Config("{}"), lpstest.Options{
		Outcome: func(ctx context.Context, r *nodev1.ReportOutcomeRequest) (*nodev1.ReportOutcomeResponse, error) {
			if err := s.answer(ctx); err != nil {
				return nil, err
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			s.outcomes = append(s.outcomes, r)
			return &nodev1.ReportOutcomeResponse{First: true}, nil
		},
		Started: func(ctx context.Context, r *nodev1.ReportStartedRequest) (*nodev1.ReportStartedResponse, error) {
			if err := s.answer(ctx); err != nil {
				return nil, err
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			s.started = append(s.started, r)
			return &nodev1.ReportStartedResponse{First: true}, nil
		},
	})
	return s.srv.Addr
}

func (s *service) counts() (calls, outcomes, started int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, len(s.outcomes), len(s.started)
}

var unavailable = status.Error(codes.Unavailable, "replica restarting")

// TestSendSecondAttempt: a report the service could not take (Unavailable,
// a hung replica) gets one more attempt at once, within the budget; a
// refusal of the report itself gets none.
func TestSendSecondAttempt(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		svc       *service
		wantErr   bool
		wantCalls int
	}{
		{"unavailable-then-ok", &service{answers: []error{unavailable, nil}}, false, 2},
		{"hung-then-ok", &service{hang: true}, false, 2},
		{"unavailable-twice", &service{answers: []error{unavailable}}, true, 2},
		{"refused", &service{answers: []error{status.Error(codes.FailedPrecondition, "never offered")}}, true, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root, ca := nodeRoot(t, testBoot)
			cfg := Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: tt.svc.start(t, ca)}
			ctx, cancel := context.WithTimeout(t.Context(), Timeout)
			defer cancel()
			start := time.Now()
			_, err := Send(ctx, cfg, outcome)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Send = %v, want error %v", err, tt.wantErr)
			}
			if calls, _, _ := tt.svc.counts(); calls != tt.wantCalls {
				t.Errorf("%d calls, want %d", calls, tt.wantCalls)
			}
			if d := time.Since(start); d > Timeout+500*time.Millisecond {
				t.Errorf("Send took %v, over its %v budget", d, Timeout)
			}
		})
	}
}

// TestKeepAndResend: a kept report is resent by Resend until it is
// acknowledged, kept while the service is unavailable, dropped when it is
// refused or MaxKeep old; an outcome supersedes its boot's started report,
// and the outbox holds at most maxKept.
func TestKeepAndResend(t *testing.T) {
	t.Parallel()
	now := time.Now()
	o := outcome
	st := Start{Baked: "202604.01.0", Hotfix: "202604.01.1"}

	t.Run("delivered-after-outage", func(t *testing.T) {
		t.Parallel()
		root, ca := nodeRoot(t, testBoot)
		svc := &service{answers: []error{unavailable, nil}}
		cfg := Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: svc.start(t, ca)}
		if err := Keep(t.Context(), root, now, nil, &st); err != nil {
			t.Fatal(err)
		}
		if err := Keep(t.Context(), root, now, &o, nil); err != nil {
			t.Fatal(err)
		}
		res, err := Resend(t.Context(), cfg, now.Add(time.Minute))
		if err == nil || res != (Resent{Kept: 1}) {
			t.Fatalf("Resend during the outage = %+v, %v; want the outcome kept (its started report superseded)", res, err)
		}
		res, err = Resend(t.Context(), cfg, now.Add(2*time.Minute))
		if err != nil || res != (Resent{Delivered: 1}) {
			t.Fatalf("Resend after the outage = %+v, %v; want 1 delivered", res, err)
		}
		if _, outcomes, started := svc.counts(); outcomes != 1 || started != 0 {
			t.Errorf("service stored %d outcomes, %d started; want the outcome only", outcomes, started)
		}
		if _, err := os.Stat(root.ReportOutbox()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("outbox left after everything was delivered: %v", err)
		}
	})
	t.Run("started-not-kept-beside-outcome", func(t *testing.T) {
		t.Parallel()
		root, _ := nodeRoot(t, testBoot)
		Keep(t.Context(), root, now, &o, nil)
		Keep(t.Context(), root, now, nil, &st)
		kept, err := readOutbox(root)
		if err != nil || len(kept) != 1 || kept[0].Outcome == nil {
			t.Errorf("outbox = %+v, %v; want the outcome alone", kept, err)
		}
	})
	t.Run("refused-dropped", func(t *testing.T) {
		t.Parallel()
		root, ca := nodeRoot(t, testBoot)
		svc := &service{answers: []error{status.Error(codes.InvalidArgument, "bad")}}
		Keep(t.Context(), root, now, &o, nil)
		res, _ := Resend(t.Context(), Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: svc.start(t, ca)}, now)
		if res != (Resent{Dropped: 1}) {
			t.Errorf("Resend of a refused report = %+v, want it dropped", res)
		}
	})
	t.Run("never-resent-gets-its-resend", func(t *testing.T) {
		t.Parallel()
		// The node's clock stepped forward past MaxKeep since the report
		// was kept: it still gets its one resend.
		root, ca := nodeRoot(t, testBoot)
		svc := &service{}
		Keep(t.Context(), root, now, &o, nil)
		res, err := Resend(t.Context(), Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: svc.start(t, ca)}, now.Add(MaxKeep+time.Hour))
		if err != nil || res != (Resent{Delivered: 1}) {
			t.Errorf("Resend of a never-resent report past MaxKeep = %+v, %v; want it delivered", res, err)
		}
	})
	t.Run("expired-dropped-unsent", func(t *testing.T) {
		t.Parallel()
		root, ca := nodeRoot(t, testBoot)
		svc := &service{}
		Keep(t.Context(), root, now, &o, nil)
		kept, _ := readOutbox(root)
		kept[0].Attempts = 5 // resent, in vain, since
		if err := writeOutbox(root, kept); err != nil {
			t.Fatal(err)
		}
		res, err := Resend(t.Context(), Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: svc.start(t, ca)}, now.Add(MaxKeep))
		if err != nil || res != (Resent{Dropped: 1}) {
			t.Errorf("Resend past MaxKeep = %+v, %v; want it dropped", res, err)
		}
		if calls, _, _ := svc.counts(); calls != 0 {
			t.Errorf("%d calls for an expired report, want none", calls)
		}
	})
	t.Run("kept-through-a-long-outage-with-backoff", func(t *testing.T) {
		t.Parallel()
		root, ca := nodeRoot(t, testBoot)
		svc := &service{answers: []error{unavailable}}
		cfg := Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: svc.start(t, ca)}
		if err := Keep(t.Context(), root, now, &o, nil); err != nil {
			t.Fatal(err)
		}
		// The timer runs every minute for 10 hours of outage: the
		// report is tried at 1 min, then 1, 2, 4, 8, 16 and every 30
		// minutes after, and kept all along.
		at := now
		for range 10 * 60 {
			at = at.Add(time.Minute)
			if res, _ := Resend(t.Context(), cfg, at); res.Kept != 1 {
				t.Fatalf("Resend at +%v = %+v, want the report kept", at.Sub(now), res)
			}
		}
		// At minutes 1, 2, 4, 8, 16 and 32, then every 30 to 572.
		if calls, _, _ := svc.counts(); calls != 6+18 {
			t.Errorf("%d resend attempts in 10 hours of outage, want %d (backoff from 1 to 30 minutes)", calls, 6+18)
		}
		kept, err := readOutbox(root)
		if err != nil || len(kept) != 1 || !kept[0].Next.After(at) || kept[0].Next.Sub(at) > maxBackoff {
			t.Fatalf("outbox = %+v, %v; want the report with its next attempt within %v", kept, err, maxBackoff)
		}
		// The service is back after 40 hours: still within MaxKeep, the
		// report goes at its next attempt.
		svc.mu.Lock()
		svc.answers = []error{nil}
		svc.calls = 0
		svc.mu.Unlock()
		back := now.Add(40 * time.Hour)
		res, err := Resend(t.Context(), cfg, back)
		if err != nil || res != (Resent{Delivered: 1}) {
			t.Fatalf("Resend after a 40-hour outage = %+v, %v; want delivered", res, err)
		}
	})
	t.Run("unresolvable-backs-off", func(t *testing.T) {
		t.Parallel()
		// No node config to find the service with: each due report is
		// an attempt that failed, backed off, not rewritten every minute.
		root, _ := nodeRoot(t, testBoot)
		if err := os.Remove(root.NodeConfig()); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		cfg := Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: "127.0.0.1:1"}
		Keep(t.Context(), root, now, &o, nil)
		var writes int
		last, _ := os.Stat(root.ReportOutbox())
		at := now
		for range 30 {
			at = at.Add(time.Minute)
			Resend(t.Context(), cfg, at)
			if fi, err := os.Stat(root.ReportOutbox()); err == nil && !os.SameFile(fi, last) {
				writes++
				last = fi
			}
		}
		kept, err := readOutbox(root)
		if err != nil || len(kept) != 1 || kept[0].Attempts < 4 || !kept[0].Next.After(at.Add(-maxBackoff)) {
			t.Fatalf("outbox = %+v, %v; want the report kept, backed off", kept, err)
		}
		if writes > 6 {
			t.Errorf("%d outbox rewrites in 30 minutes of a service it cannot resolve, want one per attempt (1, 2, 4, 8, 16 minutes)", writes)
		}
	})
	t.Run("keep-during-a-resend", func(t *testing.T) {
		t.Parallel()
		// A launch keeps a report while a resend waits on a hung
		// replica: it does not wait for the resend, and neither report
		// is lost.
		root, ca := nodeRoot(t, testBoot)
		svc := &service{hang: true}
		cfg := Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: svc.start(t, ca)}
		Keep(t.Context(), root, now, &o, nil)
		done := make(chan Resent)
		go func() {
			res, _ := Resend(t.Context(), cfg, now.Add(time.Minute))
			done <- res
		}()
		for calls, _, _ := svc.counts(); calls == 0; calls, _, _ = svc.counts() {
			time.Sleep(5 * time.Millisecond)
		}
		other := testBoot[:35] + "f"
		if err := os.WriteFile(root.BootID(), []byte(other+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Keep(t.Context(), root, now.Add(time.Minute), &o, nil); err != nil {
			t.Errorf("Keep during a resend = %v, want it kept at once", err)
		}
		if res := <-done; res != (Resent{Kept: 2}) {
			t.Errorf("Resend = %+v, want both kept (the hung one to try again, the new one)", res)
		}
		kept, err := readOutbox(root)
		if err != nil || len(kept) != 2 {
			t.Errorf("outbox = %+v, %v; want both reports", kept, err)
		}
	})
	t.Run("not-due-not-sent", func(t *testing.T) {
		t.Parallel()
		root, ca := nodeRoot(t, testBoot)
		svc := &service{}
		cfg := Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: svc.start(t, ca)}
		Keep(t.Context(), root, now, &o, nil)
		kept, _ := readOutbox(root)
		kept[0].Next = now.Add(10 * time.Minute)
		if err := writeOutbox(root, kept); err != nil {
			t.Fatal(err)
		}
		if res, err := Resend(t.Context(), cfg, now.Add(time.Minute)); err != nil || res != (Resent{Kept: 1}) {
			t.Errorf("Resend before the report is due = %+v, %v; want it kept unsent", res, err)
		}
		if calls, _, _ := svc.counts(); calls != 0 {
			t.Errorf("%d calls before the report was due, want none", calls)
		}
		// A next attempt further away than the longest backoff is not
		// one this node wrote (a clock stepped back): due.
		kept[0].Next = now.Add(10 * time.Hour)
		writeOutbox(root, kept)
		if res, err := Resend(t.Context(), cfg, now.Add(time.Minute)); err != nil || res != (Resent{Delivered: 1}) {
			t.Errorf("Resend of a report held 10 hours = %+v, %v; want it sent", res, err)
		}
	})
	t.Run("several-boots-one-connection", func(t *testing.T) {
		t.Parallel()
		// Reports of three boots are due: one document, one connection
		// while the service answers, and a new one after the report it
		// could not take, which costs the others nothing.
		root, ca := nodeRoot(t, testBoot)
		svc := &service{answers: []error{nil, unavailable, nil}}
		cfg := Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: svc.start(t, ca)}
		for i := range 3 {
			if err := os.WriteFile(root.BootID(), []byte(testBoot[:35]+string(rune('a'+i))+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := Keep(t.Context(), root, now, &o, nil); err != nil {
				t.Fatal(err)
			}
		}
		res, err := Resend(t.Context(), cfg, now.Add(time.Minute))
		if err == nil || res != (Resent{Delivered: 2, Kept: 1}) {
			t.Fatalf("Resend = %+v, %v; want 2 delivered and the unavailable one kept", res, err)
		}
		if calls, outcomes, _ := svc.counts(); calls != 3 || outcomes != 2 {
			t.Errorf("%d calls, %d outcomes stored; want 3 and 2", calls, outcomes)
		}
		if n := svc.srv.Handshakes(); n != 2 {
			t.Errorf("%d TLS handshakes, want 2: one for the first two reports, one after the unavailable one", n)
		}
	})
	t.Run("capped", func(t *testing.T) {
		t.Parallel()
		root, _ := nodeRoot(t, testBoot)
		for i := range maxKept + 3 {
			// Another boot each time: write the boot ID.
			boot := testBoot[:34] + string(rune('a'+i/10)) + string(rune('0'+i%10))
			if err := os.WriteFile(root.BootID(), []byte(boot+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := Keep(t.Context(), root, now.Add(time.Duration(i)*time.Second), &o, nil); err != nil {
				t.Fatal(err)
			}
		}
		kept, err := readOutbox(root)
		if err != nil || len(kept) != maxKept || !kept[0].Since.Equal(now.Add(3*time.Second)) {
			t.Errorf("outbox holds %d (first %v), %v; want the newest %d", len(kept), kept[0].Since, err, maxKept)
		}
	})
}

// TestOutboxFaults: every disk fault ends Keep or Resend with an error or
// nothing to do, promptly, and never a hang, a huge read or a followed
// symlink.
func TestOutboxFaults(t *testing.T) {
	t.Parallel()
	o := outcome
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, root layout.Root)
		keep  bool // Keep fails
	}{
		{"garbage", func(t *testing.T, r layout.Root) { write(t, r.ReportOutbox(), "{not json") }, false},
		{"other-format", func(t *testing.T, r layout.Root) { write(t, r.ReportOutbox(), `{"v":9,"reports":[]}`) }, false},
		{"oversized", func(t *testing.T, r layout.Root) { write(t, r.ReportOutbox(), string(make([]byte, maxOutboxBytes+1))) }, false},
		{"fifo", func(t *testing.T, r layout.Root) {
			mkdir(t, r.ReportOutbox())
			os.Remove(r.ReportOutbox())
			if err := syscall.Mkfifo(r.ReportOutbox(), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"symlink", func(t *testing.T, r layout.Root) {
			mkdir(t, r.ReportOutbox())
			write(t, filepath.Join(string(r), "elsewhere"), `{"v":1,"reports":[]}`)
			if err := os.Symlink(filepath.Join(string(r), "elsewhere"), r.ReportOutbox()); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"directory-unwritable", func(t *testing.T, r layout.Root) {
			if os.Geteuid() == 0 {
				t.Skip("root writes anywhere")
			}
			mkdir(t, r.ReportOutbox())
			os.Chmod(filepath.Dir(r.ReportOutbox()), 0o500)
			t.Cleanup(func() { os.Chmod(filepath.Dir(r.ReportOutbox()), 0o755) })
		}, true},
		{"lock-held", func(t *testing.T, r layout.Root) {
			unlock, err := lockOutbox(t.Context(), r)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(unlock)
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root, ca := nodeRoot(t, testBoot)
			tt.setup(t, root)
			start := time.Now()
			err := Keep(t.Context(), root, start, &o, nil)
			if (err != nil) != tt.keep {
				t.Errorf("Keep = %v, want error %v", err, tt.keep)
			}
			svc := &service{}
			Resend(t.Context(), Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: svc.start(t, ca)}, start)
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Keep and Resend took %v", d)
			}
			if tt.name == "symlink" {
				if b, _ := os.ReadFile(filepath.Join(string(root), "elsewhere")); string(b) != `{"v":1,"reports":[]}` {
					t.Errorf("the symlink's target was written: %q", b)
				}
			}
		})
	}
}

// TestRetryable: what may succeed later is kept; a refusal is final.
func TestRetryable(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&lpsclient.Error{Class: lpsclient.ClassUnreachable, Code: codes.Unavailable, Err: unavailable}, true},
		{&lpsclient.Error{Class: lpsclient.ClassUnreachable, Code: codes.DeadlineExceeded}, true},
		{&lpsclient.Error{Class: lpsclient.ClassRejected, Code: codes.ResourceExhausted}, true},
		{&lpsclient.Error{Class: lpsclient.ClassRejected, Code: codes.InvalidArgument}, false},
		{&lpsclient.Error{Class: lpsclient.ClassUnreachable, Code: codes.FailedPrecondition}, false},
		{&lpsclient.Error{Class: lpsclient.ClassUnreachable, Code: codes.Unimplemented}, false},
		{&lpsclient.Error{Class: lpsclient.ClassTLS, Code: codes.Unavailable}, false},
		{errors.New("metadata service: connection refused"), true},
		{ErrBootID, false},
	} {
		if got := Retryable(tt.err); got != tt.want {
			t.Errorf("Retryable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, body string) {
	t.Helper()
	mkdir(t, path)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestOutboxKeepsItsFieldNames: an outbox an earlier agent kept still
// reads: the provisioning time is stored under its first name, Provision.
func TestOutboxKeepsItsFieldNames(t *testing.T) {
	t.Parallel()
	root, _ := nodeRoot(t, testBoot)
	mkdir(t, root.ReportOutbox())
	write(t, root.ReportOutbox(), `{"v":1,"reports":[{"boot":"`+testBoot+`","since":"2026-12-01T10:00:00Z","outcome":{"ExitCode":0,"Provision":1500000000},"attempts":1}]}`)
	kept, err := readOutbox(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || kept[0].Outcome == nil || kept[0].Outcome.ProvisionDuration != 1500*time.Millisecond {
		t.Errorf("readOutbox = %+v, want one outcome whose provisioning took 1.5 s", kept)
	}
}

// TestResendLeavesAHungReplica: the replica the outbox's connection
// reached hangs (a half-open flow looks the same: the connection stays
// READY and nothing answers). The report on it times out and is kept; the
// next ones go over a new connection, which the load balancer sends to a
// healthy replica, as they did when each dialed its own (a hostile review
// found every report of the outbox lost to the one hung connection).
func TestResendLeavesAHungReplica(t *testing.T) {
	t.Parallel()
	now := time.Now()
	root, ca := nodeRoot(t, testBoot)
	hung := lpstest.Start(t, ca.Leaf(t, now.Add(-time.Hour), now.Add(time.Hour), lpsclient.ServerName), lpstest.Config("{}"), lpstest.Options{
		Outcome: func(ctx context.Context, _ *nodev1.ReportOutcomeRequest) (*nodev1.ReportOutcomeResponse, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	good := &service{}
	goodAddr := good.start(t, ca)
	addr, conns := lpstest.Route(t, func(n int) string {
		if n == 1 {
			return hung.Addr
		}
		return goodAddr
	})
	o := outcome
	for i := range 3 {
		if err := os.WriteFile(root.BootID(), []byte(testBoot[:35]+string(rune('a'+i))+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Keep(t.Context(), root, now, &o, nil); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Resend(t.Context(), Config{Root: root, IMDSURL: imdsServer(t, nil), LPSAddr: addr}, now.Add(time.Minute))
	if err == nil || res != (Resent{Delivered: 2, Kept: 1}) {
		t.Errorf("Resend = %+v, %v; want the hung replica's report kept and the 2 others delivered", res, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: the hung one and one after it", n)
	}
}

package launch

import (
	"context"
	"testing"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/lpsclient/lpstest"
	"nodehotfix/internal/node/proc"
	"nodehotfix/internal/node/report"
)

// BenchmarkStartedReportExecDelay measures what the started report adds
// before the hotfix agent runs: "none" runs an agent (/bin/true) alone;
// "session" first starts a started report on check-hotfix's open
// connection (lpsclient.Session), and "own-connection" one that dials the
// TLS service itself (no session to reuse: check-hotfix did not reach the
// service), each sending while the agent runs. The difference in ns/op is the exec's delay plus what the
// concurrent report costs the agent's run on a shared CPU; "return"
// is sendStarted alone, the time on the exec's critical path.
func BenchmarkStartedReportExecDelay(b *testing.B) {
	ca := lpstest.NewCA(b)
	srv := lpstest.Start(b, ca.Leaf(b, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), lpsclient.ServerName), lpstest.Config("{}"), lpstest.Options{})
	target := lpsclient.Target{Host: "myapi.test.local", Addr: srv.Addr, Roots: ca.Pool()}
	d := hotfix.Decision{Agent: hotfix.AgentHotfix}
	started := func(ctx context.Context, _ report.Start) {
		ctx, cancel := context.WithTimeout(ctx, report.Timeout)
		defer cancel()
		lpsclient.Started(ctx, target, "tok", nil) // Unimplemented: a full dial, handshake and call
	}
	var sess lpsclient.Session
	b.Cleanup(func() { sess.Close() })
	c, err := lpsclient.Dial(target, "tok")
	if err != nil {
		b.Fatal(err)
	}
	sess.Keep(c)
	if _, err := c.Fetch(b.Context(), lpsclient.Request{}); err != nil {
		b.Fatal(err)
	}
	onSession := func(ctx context.Context, _ report.Start) {
		ctx, cancel := context.WithTimeout(ctx, report.Timeout)
		defer cancel()
		sess.Conn().Started(ctx, nil) // check-hotfix's connection: the call alone
	}
	agent := proc.Cmd{Args: []string{"/bin/true"}}
	for _, tc := range []struct {
		name    string
		started func(context.Context, report.Start)
		run     bool
	}{{"none", nil, true}, {"session", onSession, true}, {"own-connection", started, true}, {"return", started, false}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := Config{steps: &steps{started: tc.started}}
			for b.Loop() {
				out := &launched{reports: true}
				sendStarted(b.Context(), cfg, d, out)
				if tc.run {
					if _, err := proc.Run(b.Context(), agent); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if out.started != nil {
					<-out.started
				}
				b.StartTimer()
			}
		})
	}
}

package lpsd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/release"
	"nodehotfix/internal/store"
	"nodehotfix/internal/translog"
	"nodehotfix/internal/translog/tiles"
)

// logFlags configure the transparency log's checkpoints.
type logFlags struct {
	key       string
	witnesses []string
	quorum    int
	refresh   time.Duration
}

func (f *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.key, "log-key", "", "transparency log private key `file` (lpsctl witness keygen --kind log): sign checkpoints of the log every release, revocation and key set is appended to, which nodes whose key set names the log verify; off when empty (the log still grows)")
	fs.Func("witness", "witness `\"URL VKEY\"` that cosigns the log's checkpoints (C2SP tlog-witness add-checkpoint at URL, cosignature key VKEY); repeat for each witness", func(s string) error {
		if len(strings.Fields(s)) != 2 {
			return errors.New(`want "URL VKEY"`)
		}
		f.witnesses = append(f.witnesses, s)
		return nil
	})
	fs.IntVar(&f.quorum, "witness-quorum", 0, "witness cosignatures a checkpoint needs before nodes are served it (0: every --witness)")
	fs.DurationVar(&f.refresh, "log-refresh", lps.DefaultCheckpointRefresh, "how often the checkpoint is cosigned again when the log has not grown; keep it well under nodes' max_checkpoint_age")
}

// checkpointer returns the Checkpointer the flags configure, or nil when
// there is no --log-key.
func (f logFlags) checkpointer(st store.Store, log *slog.Logger, register func(prometheus.Collector)) (*lps.Checkpointer, error) {
	if f.key == "" {
		if len(f.witnesses) > 0 {
			return nil, usagef("--witness needs --log-key: witnesses cosign the checkpoints the log key signs")
		}
		return nil, nil
	}
	data, err := capfile.Read(f.key, 4<<10)
	if err != nil {
		return nil, fmt.Errorf("--log-key: %w", err)
	}
	signer, err := translog.NewLogSigner(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("--log-key %s: %w", f.key, err)
	}
	verifier, err := translog.LogVerifierOf(string(data))
	if err != nil {
		return nil, fmt.Errorf("--log-key %s: %w", f.key, err)
	}
	cfg := lps.CheckpointerConfig{
		Signer: signer, Verifier: verifier, Quorum: f.quorum, Refresh: f.refresh, Log: log.With("component", "checkpointer"), Register: register,
		HTTP: &http.Client{Timeout: 20 * time.Second},
	}
	if f.refresh <= 0 || f.refresh > translog.DefaultMaxAge {
		return nil, usagef("--log-refresh %s: want more than 0 and at most %s, well under nodes' max_checkpoint_age, or their cosignatures go stale", f.refresh, translog.DefaultMaxAge)
	}
	seen := map[string]bool{}
	for _, w := range f.witnesses {
		fields := strings.Fields(w)
		u, err := url.Parse(fields[0])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usagef("--witness %q: want \"URL VKEY\" with an http:// or https:// URL", w)
		}
		if u.Scheme == "http" && !loopback(u.Hostname()) {
			// Cosignatures are signed, a refusal's size is not: whoever is
			// on the path can claim a larger tree and hold appends back.
			log.Warn("--witness over plain http: anyone on the network path can forge its answers' tree size and hold publishing back; use https", "witness", u.Redacted())
		}
		key, err := translog.ParseWitnessKey(fields[1])
		if err != nil {
			return nil, usagef("--witness %q: %v (the witness's cosignature key: lpsctl witness keygen --kind witness)", w, err)
		}
		// Nodes count a witness once per key, whatever its URL.
		if id := string(key.PublicKey()); seen[id] {
			return nil, usagef("--witness %q: the same key as an earlier --witness; nodes count it once", w)
		} else {
			seen[id] = true
		}
		cfg.Witnesses = append(cfg.Witnesses, lps.Witness{URL: u.String(), Key: key})
	}
	if f.quorum < 0 || f.quorum > len(cfg.Witnesses) {
		return nil, usagef("--witness-quorum %d: want 0 to the %d witnesses given", f.quorum, len(cfg.Witnesses))
	}
	return lps.NewCheckpointer(st, cfg)
}

var _ tiles.Source = store.TileSource{}

// logHandler serves the log read-only under /log/ on the HTTP listener:
// anyone may monitor it (lpsctl log --url http://ADDR/log/).
func logHandler(st store.Store) http.Handler {
	return http.StripPrefix("/log", tiles.Handler(store.TileSource{Log: st}))
}

// warnLogPolicy says at start when lpsd's log flags cannot satisfy the log
// policy of the newest key set it serves (its root, or the newest
// published link): nodes that walked to it would refuse every release.
// lpsd still starts, fail-open: serving releases nodes refuse is better
// than serving no revocations.
func (f logFlags) warnLogPolicy(ctx context.Context, root *release.KeySet, st store.Store, log *slog.Logger) {
	if root == nil {
		return
	}
	p, version := root.Log(), root.Version()
	if links, err := st.KeySets(ctx); err == nil && len(links) > 0 {
		if d, err := release.InspectKeySet(links[len(links)-1].Envelope); err == nil {
			p, version = d.Log, d.Version
		}
	}
	if p.Key == "" || !p.Required {
		return
	}
	pol, err := translog.NewPolicy(p.Key, p.Witnesses, p.Quorum, p.MaxCheckpointAge)
	switch {
	case err != nil:
		log.Error("the newest key set's log policy cannot be built: nodes holding it refuse every release", "keyset_version", version, "err", err)
	case f.key == "":
		log.Error("the newest key set requires the transparency log, and lpsd has no --log-key: nodes holding it refuse every release", "keyset_version", version, "log", pol.Log.Name())
	case f.quorum != 0 && f.quorum < p.Quorum || len(f.witnesses) < p.Quorum:
		log.Error("the newest key set requires more witness cosignatures than lpsd's --witness list and --witness-quorum collect: nodes holding it refuse every release", "keyset_version", version, "quorum", p.Quorum, "witnesses", len(f.witnesses))
	case f.refresh >= p.MaxCheckpointAge:
		log.Error("--log-refresh is not under the key set's max_checkpoint_age: nodes see stale checkpoints", "log_refresh", f.refresh.String(), "max_checkpoint_age", p.MaxCheckpointAge.String())
	}
}

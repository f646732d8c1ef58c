package lps

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/store"
	"nodehotfix/internal/translog"
)

// checkpointStore is the store's half a Checkpointer uses.
type checkpointStore interface {
	store.Log
	Watch(ctx context.Context) <-chan struct{}
}

// Witness is a witness lpsd asks to cosign its checkpoints (C2SP
// tlog-witness): its add-checkpoint URL prefix and its cosignature key.
type Witness struct {
	URL string
	Key note.Verifier
}

// CheckpointerConfig configures NewCheckpointer.
type CheckpointerConfig struct {
	// Signer is the log's key; its name is the log's origin. Required.
	Signer note.Signer
	// Verifier is Signer's public half (translog.LogVerifierOf). Required.
	Verifier note.Verifier
	// Witnesses cosign every checkpoint kept.
	Witnesses []Witness
	// Quorum is how many witnesses must cosign before a checkpoint
	// replaces the kept one: fewer would serve nodes a checkpoint their
	// key set's policy refuses. 0: every witness.
	Quorum int
	// Refresh is how often the kept checkpoint is cosigned again when the
	// log has not grown, so its cosignatures stay younger than nodes'
	// max_checkpoint_age. 0: DefaultCheckpointRefresh.
	Refresh time.Duration
	// HTTP reaches the witnesses; nil is a client of its own.
	HTTP *http.Client
	// Log receives failures; nil discards.
	Log *slog.Logger
	// Register registers the checkpointer's metrics; nil registers none.
	Register func(prometheus.Collector)
	// Now is the clock of the refresh; nil: time.Now.
	Now func() time.Time
}

// DefaultCheckpointRefresh keeps cosignatures well inside the default
// maximum age nodes accept (translog.DefaultMaxAge, 24 h), with room for a
// witness outage of many hours.
const DefaultCheckpointRefresh = time.Hour

// checkpointPoll is how often the log size is compared with the kept
// checkpoint's without a store signal.
const checkpointPoll = 10 * time.Second

// Checkpointer keeps the store's checkpoint current: after the log grows,
// and every Refresh, it signs a checkpoint of the whole log with the log
// key, has the witnesses cosign it and keeps it (store.PutCheckpoint),
// which nodes are then served with their proofs. Every replica may run
// one: checkpoints of one tree are the same whoever signs them, witnesses
// cosign a repeated size again, and the store keeps the largest.
type Checkpointer struct {
	st     checkpointStore
	cfg    CheckpointerConfig
	origin string
	log    *slog.Logger
	hashes *hashCache
	// mu guards verified, which is held across store reads; witnesses
	// has a lock of its own, since the admin API reads it on every append.
	mu sync.Mutex
	// verified is how many records' stored hashes were recomputed
	// (verify), under mu.
	verified       int64
	witnesses      witnessSizes
	cosigns        *prometheus.CounterVec
	size           prometheus.Gauge
	signed         prometheus.Gauge
	witnessedSize  prometheus.Gauge
	appendsRefused prometheus.Gauge
}

// witnessSizes is what each witness last told this process it cosigned.
type witnessSizes struct {
	mu    sync.Mutex
	sizes map[string]int64 // witness URL → the size it last cosigned
}

func (w *witnessSizes) get(url string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sizes[url]
}

func (w *witnessSizes) set(url string, size int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sizes[url] = size
}

// LogFloor is what a replica's witnesses say of the log nodes may have
// been shown (Checkpointer.Floor).
type LogFloor struct {
	// Verified: enough witnesses answered since this process started to
	// bound that log (Answered of Witnesses, at quorum Quorum). Until
	// then lpsd cannot tell whether its store is behind it.
	Verified                    bool
	Answered, Witnesses, Quorum int
	// Size is a size every tree nodes may have been shown is at most:
	// with Verified, appends to a log smaller than it would fork it.
	// Witness is the witness whose answer it is (its URL, password
	// removed).
	Size    int64
	Witness string
}

// NewCheckpointer returns a Checkpointer of st's log.
func NewCheckpointer(st checkpointStore, cfg CheckpointerConfig) (*Checkpointer, error) {
	if cfg.Signer == nil {
		return nil, errors.New("checkpointer: no log key")
	}
	if cfg.Verifier == nil || cfg.Verifier.Name() != cfg.Signer.Name() || cfg.Verifier.KeyHash() != cfg.Signer.KeyHash() {
		return nil, errors.New("checkpointer: no verifier of the log key")
	}
	if cfg.Quorum <= 0 || cfg.Quorum > len(cfg.Witnesses) {
		cfg.Quorum = len(cfg.Witnesses)
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultCheckpointRefresh
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Checkpointer{
		st: st, cfg: cfg, origin: cfg.Signer.Name(), log: cfg.Log, hashes: newHashCache(st), witnesses: witnessSizes{sizes: make(map[string]int64)},
		cosigns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_log_cosignatures_total",
			Help: "Witness cosignature requests by witness URL and result (cosigned, refused, failed).",
		}, []string{"witness", "result"}),
		size: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpsd_log_checkpoint_size",
			Help: "Tree size of the last checkpoint this replica signed and kept.",
		}),
		signed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpsd_log_checkpoint_timestamp_seconds",
			Help: "When this replica last kept a cosigned checkpoint (Unix seconds); nodes refuse cosignatures older than their max_checkpoint_age.",
		}),
		witnessedSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpsd_log_witnessed_size",
			Help: "A tree size the witnesses' answers bound the log nodes may have been shown by (the quorum-th largest they said they cosigned); 0 until enough answered.",
		}),
		appendsRefused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpsd_log_appends_refused",
			Help: "1 while this replica refuses to append to the transparency log (publish, revoke, key-set publish): its store holds fewer records than its witnesses cosigned (restored from an older backup: lpsctl log restore), or too few witnesses answered since it started to tell.",
		}),
	}
	if cfg.Register != nil {
		cfg.Register(c.cosigns)
		cfg.Register(c.size)
		cfg.Register(c.signed)
		cfg.Register(c.witnessedSize)
		cfg.Register(c.appendsRefused)
	}
	c.appendsRefused.Set(boolGauge(len(cfg.Witnesses) > 0))
	return c, nil
}

// Run keeps the checkpoint current until ctx is done.
func (c *Checkpointer) Run(ctx context.Context) error {
	changes := c.st.Watch(ctx)
	tick := time.NewTicker(checkpointPoll)
	defer tick.Stop()
	var last time.Time // when this replica last kept one
	wait := time.Duration(0)
	for {
		if wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		now := c.cfg.Now()
		kept, err := c.Step(ctx, now.Sub(last) >= c.cfg.Refresh)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			// Witnesses down, the store slow: try again soon, not in a
			// tight loop.
			wait = min(max(2*wait, 5*time.Second), 5*time.Minute) + rand.N(time.Second)
			c.log.Warn("transparency log checkpoint not kept; retrying", "retry_in", wait.Round(time.Second).String(), "err", err)
			continue
		default:
			wait = 0
		}
		if kept {
			// Only a checkpoint kept restarts the refresh clock: a look
			// that found nothing new must not, or cosignatures age out.
			last = now
		}
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-changes:
			if !ok {
				changes = c.st.Watch(ctx)
			}
		case <-tick.C:
		}
	}
}

// Step keeps a new cosigned checkpoint if the log has grown past the kept
// one, or if refresh, and reports whether it kept one. It signs only a
// tree whose stored hashes it has recomputed from the stored records
// (verify): a backend that returned a wrong hash would otherwise have a
// tree the records do not make signed, cosigned and served for good.
func (c *Checkpointer) Step(ctx context.Context, refresh bool) (bool, error) {
	size, err := c.st.LogSize(ctx)
	if err != nil {
		return false, err
	}
	kept, _, err := c.st.Checkpoint(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		kept = -1
	case err != nil:
		return false, err
	}
	if size == kept && !refresh {
		return false, nil
	}
	hr := c.hashes.reader(ctx)
	if err := c.verify(ctx, hr, size); err != nil {
		return false, err
	}
	hash, err := tlog.TreeHash(size, hr)
	if err != nil {
		return false, fmt.Errorf("tree hash at size %d: %w", size, err)
	}
	signed, err := translog.Checkpoint{Origin: c.origin, Size: size, Hash: hash}.Sign(c.cfg.Signer)
	if err != nil {
		return false, err
	}
	cosigned, n := c.cosign(ctx, hr, size, signed)
	fl, stored := c.Floor(), size
	if fl.Verified && fl.Size > stored {
		// Another replica may have appended (and had it cosigned) since
		// size was read: only the store's size now says it is behind.
		if now, err := c.st.LogSize(ctx); err == nil {
			stored = now
		}
	}
	c.witnessedSize.Set(float64(fl.Size))
	c.appendsRefused.Set(boolGauge(!fl.Verified || fl.Size > stored))
	if fl.Verified && fl.Size > stored {
		c.log.Error("transparency log: the store holds fewer records than its witnesses cosigned (restored from an older backup?); appends are refused until the missing records are restored (lpsctl log restore)", "witness", fl.Witness, "witnessed_size", fl.Size, "log_size", stored)
	}
	if n < c.cfg.Quorum {
		return false, fmt.Errorf("checkpoint at size %d: %d of the %d witness cosignatures needed", size, n, c.cfg.Quorum)
	}
	if err := c.st.PutCheckpoint(ctx, size, cosigned); err != nil {
		return false, fmt.Errorf("keep checkpoint at size %d: %w", size, err)
	}
	c.size.Set(float64(size))
	c.signed.SetToCurrentTime()
	c.log.Info("transparency log checkpoint kept", "origin", c.origin, "size", size, "cosignatures", n)
	return true, nil
}

// verify recomputes, from the stored records, every stored hash of the
// records from the last size verified up to size, and compares them with
// the stored ones. The log only grows, so each record is checked once per
// process.
func (c *Checkpointer) verify(ctx context.Context, hr tlog.HashReader, size int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.verified < size {
		end := min(size, c.verified+logRecordsBatch)
		recs, err := c.st.LogRecords(ctx, c.verified, end)
		if err != nil {
			return fmt.Errorf("read log records [%d, %d): %w", c.verified, end, err)
		}
		if int64(len(recs)) != end-c.verified {
			return fmt.Errorf("read log records [%d, %d): %d returned", c.verified, end, len(recs))
		}
		for _, r := range recs {
			n := c.verified
			want, err := tlog.StoredHashes(n, r, hr)
			if err != nil {
				return fmt.Errorf("recompute the hashes of record %d: %w", n, err)
			}
			first := tlog.StoredHashCount(n)
			idx := make([]int64, len(want))
			for i := range idx {
				idx[i] = first + int64(i)
			}
			got, err := hr.ReadHashes(idx)
			if err != nil {
				return fmt.Errorf("read the stored hashes of record %d: %w", n, err)
			}
			for i := range want {
				if got[i] != want[i] {
					c.log.Error("transparency log: a stored hash is not what the stored records make; no checkpoint is signed until the store is repaired", "record", n, "stored_hash_index", idx[i])
					return fmt.Errorf("stored hash %d (record %d) is not what the records make: the store is damaged; refusing to sign", idx[i], n)
				}
			}
			c.verified++
		}
	}
	return nil
}

// cosign asks every witness to cosign signed and returns it with the
// cosignature lines it got, and how many.
func (c *Checkpointer) cosign(ctx context.Context, hr tlog.HashReader, size int64, signed []byte) ([]byte, int) {
	out := bytes.Clone(signed)
	n := 0
	for _, w := range c.cfg.Witnesses {
		line, err := c.addCheckpoint(ctx, hr, w, size, signed)
		if err != nil {
			var we *translog.WitnessError
			result := "failed"
			if errors.As(err, &we) {
				result = "refused"
			}
			c.cosigns.WithLabelValues(redactURL(w.URL), result).Inc()
			c.log.Warn("witness did not cosign", "witness", redactURL(w.URL), "size", size, "err", err)
			continue
		}
		c.cosigns.WithLabelValues(redactURL(w.URL), "cosigned").Inc()
		out = append(out, line...)
		n++
	}
	return out, n
}

// addCheckpoint submits signed to w with a proof from the size w last
// cosigned, learning that size from a 409 when it is not known.
func (c *Checkpointer) addCheckpoint(ctx context.Context, hr tlog.HashReader, w Witness, size int64, signed []byte) ([]byte, error) {
	old := c.witnesses.get(w.URL)
	if old > size {
		// Asked from a size above the one signed, a witness answers 400,
		// never its size: ask from nothing, so it says what it holds now
		// (reset since, or still ahead of this store).
		old = 0
	}
	for attempt := 0; ; attempt++ {
		var proof tlog.TreeProof
		if old > 0 && old < size {
			var err error
			if proof, err = tlog.ProveTree(size, old, hr); err != nil {
				return nil, fmt.Errorf("prove size %d from %d: %w", size, old, err)
			}
		}
		line, err := translog.AddCheckpoint(ctx, c.cfg.HTTP, w.URL, w.Key, old, proof, signed)
		var we *translog.WitnessError
		if errors.As(err, &we) && we.StatusCode == http.StatusConflict && we.Size > size {
			// The witness cosigned a larger tree than the store holds: the
			// store was restored from a backup, or lost writes. Remembered,
			// so appends are refused until the log is whole again
			// (Witnessed): one appended now would fork it for good.
			c.witnesses.set(w.URL, we.Size)
			c.log.Warn("transparency log: a witness has cosigned a larger tree than the store holds", "witness", redactURL(w.URL), "witnessed_size", we.Size, "log_size", size)
			return nil, err
		}
		if errors.As(err, &we) && we.StatusCode == http.StatusConflict && we.Size >= 0 && we.Size != old && attempt == 0 {
			old = we.Size
			continue
		}
		if err != nil {
			return nil, err
		}
		c.witnesses.set(w.URL, size)
		return line, nil
	}
}

// Floor returns what the witnesses told this process of the log nodes
// may have been shown. A checkpoint nodes accept carries Quorum of the
// Witnesses' cosignatures, so of those that answered (cosigned for this
// process, or refused naming the size they hold) at least k = Quorum -
// (Witnesses - Answered) cosigned every tree nodes were shown, and the
// k-th largest size they name bounds it. It is Verified when k is at
// least 1. With k at least 2 no single witness can raise it by lying.
func (c *Checkpointer) Floor() LogFloor {
	f := LogFloor{Witnesses: len(c.cfg.Witnesses), Quorum: c.cfg.Quorum}
	if f.Witnesses == 0 {
		// No one to ask: lpsd cannot tell, and has never been able to.
		return LogFloor{Verified: true}
	}
	c.witnesses.mu.Lock()
	type answer struct {
		url  string
		size int64
	}
	var answers []answer
	for url, n := range c.witnesses.sizes {
		answers = append(answers, answer{url, n})
	}
	c.witnesses.mu.Unlock()
	f.Answered = len(answers)
	k := f.Quorum - (f.Witnesses - f.Answered)
	if k < 1 {
		return f
	}
	slices.SortFunc(answers, func(a, b answer) int { return cmp.Or(cmp.Compare(b.size, a.size), strings.Compare(a.url, b.url)) })
	f.Verified, f.Size, f.Witness = true, answers[k-1].size, redactURL(answers[k-1].url)
	return f
}

// redactURL is url without a password, for messages and the admin API.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Verifier returns the verifier of the log key the checkpointer signs
// with.
func (c *Checkpointer) Verifier() note.Verifier { return c.cfg.Verifier }

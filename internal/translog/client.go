package translog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/quote"
)

// addCheckpointTimeout bounds one add-checkpoint call: a witness does one
// signature check, one proof check and one fsync.
const addCheckpointTimeout = 15 * time.Second

// maxWitnessResponse caps a witness's response: a few signature lines.
const maxWitnessResponse = 8 << 10

// WitnessError is a witness's refusal of an add-checkpoint request.
type WitnessError struct {
	URL        string
	StatusCode int
	// Size is, for a 409 Conflict of content type text/x.tlog.size, the
	// tree size the witness last cosigned: resubmit with a proof from it.
	// Otherwise -1.
	Size int64
	// Body is the start of the response, quoted.
	Body string
}

// Error returns "witness <url>: <status>: <body>".
func (e *WitnessError) Error() string {
	msg := fmt.Sprintf("witness %s: %d %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Size >= 0 {
		msg += fmt.Sprintf(": it has cosigned size %d", e.Size)
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// AddCheckpoint submits signed, a checkpoint signed by the log, to the
// witness whose submission prefix is url, with a consistency proof from
// oldSize (the size the witness last cosigned; 0 for none), and returns
// the witness's cosignature line by key witness, verified: append it to
// signed to make the cosigned note. Lines by other keys are dropped.
//
// hc nil is a client of its own; the call is bounded by
// addCheckpointTimeout and the response by maxWitnessResponse bytes. A
// refusal is a *WitnessError; on a 409 with a Size, retry with a proof
// from that size.
func AddCheckpoint(ctx context.Context, hc *http.Client, url string, witness note.Verifier, oldSize int64, proof tlog.TreeProof, signed []byte) ([]byte, error) {
	text, err := noteText(signed)
	if err != nil {
		return nil, err
	}
	if _, err := ParseCheckpoint(text); err != nil {
		return nil, err
	}
	var body bytes.Buffer
	fmt.Fprintf(&body, "old %d\n", oldSize)
	for _, h := range proof {
		fmt.Fprintf(&body, "%s\n", h)
	}
	body.WriteByte('\n')
	body.Write(signed)

	if hc == nil {
		hc = &http.Client{}
	}
	ctx, cancel := context.WithTimeout(ctx, addCheckpointTimeout)
	defer cancel()
	endpoint := strings.TrimSuffix(url, "/") + "/add-checkpoint"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, &body)
	if err != nil {
		return nil, fmt.Errorf("add checkpoint to %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("add checkpoint to %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxWitnessResponse+1))
	if err != nil {
		return nil, fmt.Errorf("add checkpoint to %s: read response: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		we := &WitnessError{URL: url, StatusCode: resp.StatusCode, Size: -1}
		mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if resp.StatusCode == http.StatusConflict && mt == ContentTypeTreeSize {
			s, ok := strings.CutSuffix(string(data), "\n")
			if n, err := parseSize(s); ok && err == nil {
				we.Size = n
			}
		}
		if we.Size < 0 {
			we.Body = quote.Text(string(data[:min(len(data), 200)]))
		}
		return nil, we
	}
	if len(data) > maxWitnessResponse {
		return nil, fmt.Errorf("add checkpoint to %s: response over %d bytes", url, maxWitnessResponse)
	}
	return verifiedCosignature(text, data, witness)
}

// verifiedCosignature returns the lines of resp by key w, after checking
// that they verify over text and that resp is signature lines only.
func verifiedCosignature(text, resp []byte, w note.Verifier) ([]byte, error) {
	name := w.Name()
	msg := append(append(append([]byte{}, text...), '\n'), resp...)
	n, err := note.Open(msg, note.VerifierList(w))
	if err != nil {
		return nil, fmt.Errorf("cosignature of witness %s+%08x: %w", name, w.KeyHash(), err)
	}
	for _, s := range n.Sigs {
		if s.Name == name && s.Hash == w.KeyHash() {
			return []byte("— " + s.Name + " " + s.Base64 + "\n"), nil
		}
	}
	return nil, errors.New("cosignature: unreachable: verified note without the witness's line")
}

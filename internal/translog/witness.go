package translog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"sync"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/jsonobj"
)

// MaxAddCheckpointSize caps an add-checkpoint request body: the old size
// line, at most 63 proof lines of 45 bytes and a signed checkpoint of at
// most MaxNoteSize.
const MaxAddCheckpointSize = 16 << 10

// maxStateSize caps the witness state file: about 100 bytes per log.
const maxStateSize = 1 << 20

// ContentTypeTreeSize is the content type of a 409 response to
// add-checkpoint: the witness's tree size for the origin in decimal and a
// newline.
const ContentTypeTreeSize = "text/x.tlog.size"

// stateSchema is the version of the witness state file.
const stateSchema = 1

// Witness cosigns checkpoints of the logs it knows, each only if it is
// consistent with the last one it cosigned for that origin (C2SP
// tlog-witness add-checkpoint). Its state, one tree head per origin, lives
// in a file replaced atomically before each cosignature is returned. Safe
// for concurrent use; one process per state file.
type Witness struct {
	signer *Cosigner
	logs   map[string][]note.Verifier // by origin
	path   string
	log    *slog.Logger

	mu    sync.Mutex // serialises check, persist and update
	state map[string]treeHead
}

type treeHead struct {
	Size int64
	Hash tlog.Hash
}

// OpenWitness returns a witness that cosigns with signer the checkpoints
// of the logs whose keys are logs (a log's origin is its key's name; one
// origin may have several keys), keeping its state at path.
//
// A missing state file is an empty state: the first checkpoint of each log
// is then accepted on trust (trust on first use), since there is nothing
// to check it against. A state file that exists but does not decode is an
// error: silently starting afresh would let a forked log be cosigned.
// log nil discards.
func OpenWitness(path string, signer *Cosigner, logs []note.Verifier, log *slog.Logger) (*Witness, error) {
	if signer == nil {
		return nil, errors.New("open witness: no signer")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Witness{signer: signer, logs: map[string][]note.Verifier{}, path: path, log: log}
	for _, v := range logs {
		if v == nil {
			return nil, errors.New("open witness: nil log key")
		}
		w.logs[v.Name()] = append(w.logs[v.Name()], v)
	}
	if len(w.logs) == 0 {
		return nil, errors.New("open witness: no log keys")
	}
	st, err := readState(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		log.Warn("no witness state: trusting each log's first checkpoint", "path", path)
		st = map[string]treeHead{}
	case err != nil:
		return nil, fmt.Errorf("open witness: %w; refusing to start: restore the file, or delete it to trust each log's next checkpoint anew", err)
	}
	w.state = st
	return w, nil
}

// Size returns the tree size the witness last cosigned for origin, and
// whether it has cosigned any.
func (w *Witness) Size(origin string) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	th, ok := w.state[origin]
	return th.Size, ok
}

// Handler returns the HTTP interface: POST /add-checkpoint.
func (w *Witness) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /add-checkpoint", w.addCheckpoint)
	return mux
}

func (w *Witness) addCheckpoint(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxAddCheckpointSize+1))
	if err != nil {
		http.Error(rw, "read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > MaxAddCheckpointSize {
		http.Error(rw, fmt.Sprintf("request over %d bytes", MaxAddCheckpointSize), http.StatusRequestEntityTooLarge)
		return
	}
	res := w.add(body)
	if res.status != http.StatusOK {
		if res.status == http.StatusConflict && res.size >= 0 {
			rw.Header().Set("Content-Type", ContentTypeTreeSize)
			rw.WriteHeader(res.status)
			fmt.Fprintf(rw, "%d\n", res.size)
			return
		}
		http.Error(rw, res.msg, res.status)
		return
	}
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.Write(res.cosig) //nolint:errcheck // the client sees a short body
}

// addResult is the outcome of one add-checkpoint request.
type addResult struct {
	status int
	msg    string
	size   int64 // for 409: the witness's size
	cosig  []byte
}

func fail(status int, format string, a ...any) addResult {
	return addResult{status: status, msg: fmt.Sprintf(format, a...), size: -1}
}

// add applies the tlog-witness checks in the order the specification gives
// its status codes.
func (w *Witness) add(body []byte) addResult {
	old, proof, signed, err := parseAddCheckpoint(body)
	if err != nil {
		return fail(http.StatusBadRequest, "%v", err)
	}
	text, err := noteText(signed)
	if err != nil {
		return fail(http.StatusBadRequest, "%v", err)
	}
	c, err := ParseCheckpoint(text)
	if err != nil {
		return fail(http.StatusBadRequest, "%v", err)
	}
	keys, ok := w.logs[c.Origin]
	if !ok {
		return fail(http.StatusNotFound, "unknown log origin %q", c.Origin)
	}
	if _, err := note.Open(signed, note.VerifierList(keys...)); err != nil {
		return fail(http.StatusForbidden, "no valid signature by a key of log %q: %v", c.Origin, err)
	}
	if old > c.Size {
		return fail(http.StatusBadRequest, "old size %d above checkpoint size %d", old, c.Size)
	}
	if old == 0 && len(proof) != 0 {
		return fail(http.StatusBadRequest, "consistency proof from size 0 must be empty")
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	prev, known := w.state[c.Origin]
	if old != prev.Size {
		w.log.Info("checkpoint refused: old size mismatch", "origin", c.Origin, "old", old, "size", prev.Size)
		return addResult{status: http.StatusConflict, size: prev.Size}
	}
	if known || old > 0 {
		if err := VerifyConsistency(Checkpoint{Origin: c.Origin, Size: prev.Size, Hash: prev.Hash}, c, proof); err != nil {
			// A log signature over a checkpoint that does not extend the
			// cosigned one is evidence of a fork: keep it in the log.
			w.log.Error("refused inconsistent checkpoint: possible log fork", "origin", c.Origin,
				"cosigned_size", prev.Size, "cosigned_hash", prev.Hash.String(), "size", c.Size, "hash", c.Hash.String(),
				"checkpoint", string(signed), "err", err)
			if c.Size == prev.Size {
				return addResult{status: http.StatusConflict, msg: err.Error(), size: prev.Size}
			}
			return fail(http.StatusUnprocessableEntity, "%v", err)
		}
	} else if c.Size == 0 && c.Hash != emptyTreeHash() {
		return fail(http.StatusUnprocessableEntity, "size 0 with root %s, not the empty tree's", c.Hash)
	}
	if !known || prev != (treeHead{c.Size, c.Hash}) {
		next := make(map[string]treeHead, len(w.state)+1)
		for k, v := range w.state {
			next[k] = v
		}
		next[c.Origin] = treeHead{c.Size, c.Hash}
		if err := writeState(w.path, next); err != nil {
			w.log.Error("witness state not saved", "path", w.path, "err", err)
			return fail(http.StatusInternalServerError, "witness state not saved")
		}
		w.state = next
		if !known {
			w.log.Warn("first checkpoint of log trusted", "origin", c.Origin, "size", c.Size, "hash", c.Hash.String())
		}
	}
	line, err := cosignLine(text, w.signer)
	if err != nil {
		return fail(http.StatusInternalServerError, "cosign: %v", err)
	}
	w.log.Info("checkpoint cosigned", "origin", c.Origin, "size", c.Size, "old", old)
	return addResult{status: http.StatusOK, cosig: line}
}

// parseAddCheckpoint splits an add-checkpoint body: "old <size>\n", up to
// 63 base64 proof hashes, one a line, an empty line, the signed checkpoint.
func parseAddCheckpoint(body []byte) (int64, tlog.TreeProof, []byte, error) {
	line, rest, ok := bytes.Cut(body, []byte("\n"))
	sizeText, isOld := bytes.CutPrefix(line, []byte("old "))
	if !ok || !isOld {
		return 0, nil, nil, errors.New(`request does not start with "old <size>" and a newline`)
	}
	old, err := parseSize(string(sizeText))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("old size: %w", err)
	}
	var proof tlog.TreeProof
	for {
		line, rest, ok = bytes.Cut(rest, []byte("\n"))
		if !ok {
			return 0, nil, nil, errors.New("request has no empty line before the checkpoint")
		}
		if len(line) == 0 {
			break
		}
		if len(proof) == maxProofHashes {
			return 0, nil, nil, fmt.Errorf("more than %d consistency proof lines", maxProofHashes)
		}
		h, err := parseHash(string(line))
		if err != nil {
			return 0, nil, nil, fmt.Errorf("consistency proof line %d: %w", len(proof)+1, err)
		}
		proof = append(proof, h)
	}
	return old, proof, rest, nil
}

// cosignLine returns the note signature line of signer over text.
func cosignLine(text []byte, signer note.Signer) ([]byte, error) {
	msg, err := note.Sign(&note.Note{Text: string(text)}, signer)
	if err != nil {
		return nil, err
	}
	return msg[len(text)+1:], nil
}

// stateJSON is the witness state file:
// {"schema":1,"logs":{"<origin>":{"size":N,"hash":"<base64>"}}}.
type stateJSON struct {
	Schema int                     `json:"schema"`
	Logs   map[string]treeHeadJSON `json:"logs"`
}

type treeHeadJSON struct {
	Size int64  `json:"size"`
	Hash string `json:"hash"`
}

func writeState(path string, st map[string]treeHead) error {
	j := stateJSON{Schema: stateSchema, Logs: make(map[string]treeHeadJSON, len(st))}
	for origin, th := range st {
		j.Logs[origin] = treeHeadJSON{th.Size, th.Hash.String()}
	}
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("encode witness state: %w", err)
	}
	return atomicfile.WriteFile(path, append(data, '\n'), 0o644)
}

// readState reads the state file strictly; a missing file is
// fs.ErrNotExist.
func readState(path string) (map[string]treeHead, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read witness state: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStateSize+1))
	if err != nil {
		return nil, fmt.Errorf("read witness state %s: %w", path, err)
	}
	st, err := decodeState(data)
	if err != nil {
		return nil, fmt.Errorf("witness state %s is corrupt: %w", path, err)
	}
	return st, nil
}

func decodeState(data []byte) (map[string]treeHead, error) {
	if len(data) > maxStateSize {
		return nil, fmt.Errorf("over %d bytes", maxStateSize)
	}
	m, err := objectFields(data, []string{"schema", "logs"})
	if err != nil {
		return nil, err
	}
	var schema int
	if err := decodeValue(m, "schema", &schema); err != nil {
		return nil, err
	}
	if schema != stateSchema {
		return nil, fmt.Errorf("schema %d, want %d", schema, stateSchema)
	}
	logs, err := jsonobj.Members(m["logs"])
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", "logs", err)
	}
	st := make(map[string]treeHead, len(logs))
	for _, l := range logs {
		origin, raw := l.Key, l.Value
		if err := checkName(origin); err != nil {
			return nil, fmt.Errorf("log %q: %w", origin, err)
		}
		f, err := objectFields(raw, []string{"size", "hash"})
		if err != nil {
			return nil, fmt.Errorf("log %q: %w", origin, err)
		}
		var th treeHeadJSON
		if err := errors.Join(decodeValue(f, "size", &th.Size), decodeValue(f, "hash", &th.Hash)); err != nil {
			return nil, fmt.Errorf("log %q: %w", origin, err)
		}
		if th.Size < 0 {
			return nil, fmt.Errorf("log %q: size %d", origin, th.Size)
		}
		h, err := parseHash(th.Hash)
		if err != nil {
			return nil, fmt.Errorf("log %q: hash: %w", origin, err)
		}
		st[origin] = treeHead{th.Size, h}
	}
	return st, nil
}

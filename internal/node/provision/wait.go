package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fsnotify/fsnotify"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/node/layout"
)

// pollInterval backs up the file-system watch: a watch can miss an event
// (or be unavailable), a poll cannot.
const pollInterval = time.Second

// maxStatusSize caps provision.json.
const maxStatusSize = 1 << 20

// StatusError is a completed provisioning that did not succeed.
type StatusError struct {
	Status Status
	Reason string
}

func (e *StatusError) Error() string { return "provisioning failed: " + e.Reason }

// Code is the exit code a waiter should exit with: the recorded code when it
// is a usable non-zero exit status, else 1.
func (e *StatusError) Code() int {
	n, err := strconv.Atoi(e.Status.ExitCode)
	if err != nil || n <= 0 || n > 255 {
		return 1
	}
	return n
}

// Wait blocks until provision.complete exists under root or ctx is done,
// then returns provision.json's raw bytes and decoded status. A status whose
// ExitCode is missing, not an integer or not 0 is returned with a
// *StatusError.
func Wait(ctx context.Context, root layout.Root) ([]byte, Status, error) {
	done := root.ProvisionComplete()
	if err := waitForFile(ctx, done); err != nil {
		return nil, Status{}, err
	}
	raw, err := capfile.Read(root.ProvisionJSON(), maxStatusSize)
	if err != nil {
		return nil, Status{}, fmt.Errorf("read provision status: %w", err)
	}
	var st Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return raw, Status{}, &StatusError{Reason: fmt.Sprintf("parse %s: %v", root.ProvisionJSON(), err)}
	}
	switch n, err := strconv.Atoi(st.ExitCode); {
	case st.ExitCode == "":
		return raw, st, &StatusError{Status: st, Reason: "ExitCode missing"}
	case err != nil:
		return raw, st, &StatusError{Status: st, Reason: fmt.Sprintf("ExitCode %q is not an integer", st.ExitCode)}
	case n != 0:
		return raw, st, &StatusError{Status: st, Reason: fmt.Sprintf("ExitCode %d: %s", n, st.Error)}
	}
	return raw, st, nil
}

// RecordedExit returns the exit code provision.json under root records,
// or otherwise when it holds none that parses.
func RecordedExit(root layout.Root, otherwise int) int {
	raw, err := capfile.Read(root.ProvisionJSON(), maxStatusSize)
	if err != nil {
		return otherwise
	}
	var st Status
	if json.Unmarshal(raw, &st) != nil {
		return otherwise
	}
	n, err := strconv.Atoi(st.ExitCode)
	if err != nil || n < 0 || n > 255 {
		return otherwise
	}
	return n
}

func waitForFile(ctx context.Context, path string) error {
	var events <-chan fsnotify.Event
	if w, err := fsnotify.NewWatcher(); err == nil {
		defer w.Close()
		// Watch before the first check so a file created in between is seen.
		if err := w.Add(filepath.Dir(path)); err == nil {
			events = w.Events
		}
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("stat %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", path, ctx.Err())
		case <-events:
		case <-tick.C:
		}
	}
}

package pkgmgr

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestRetry(t *testing.T) {
	t.Parallel()
	errFail := errors.New("exit status 100")
	tests := []struct {
		name      string
		failUntil int // calls 1..failUntil fail
		fail      error
		wantCalls int
		wantErr   bool
	}{
		{name: "first-try", failUntil: 0, wantCalls: 1},
		{name: "fails-twice", failUntil: 2, fail: errFail, wantCalls: 3},
		{name: "always-fails", failUntil: 99, fail: errFail, wantCalls: attempts, wantErr: true},
		{name: "not-found", failUntil: 99, fail: fmt.Errorf("run: %w", exec.ErrNotFound), wantCalls: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := retry(t.Context(), time.Millisecond, func(ctx context.Context) error {
				calls++
				if _, ok := ctx.Deadline(); !ok {
					t.Error("attempt has no deadline")
				}
				if calls <= tt.failUntil {
					return tt.fail
				}
				return nil
			})
			if (err != nil) != tt.wantErr || calls != tt.wantCalls {
				t.Fatalf("retry = %v after %d calls, want error %v after %d", err, calls, tt.wantErr, tt.wantCalls)
			}
			if err != nil && !errors.Is(err, tt.fail) {
				t.Errorf("retry = %v, does not wrap %v", err, tt.fail)
			}
		})
	}
}

func TestRetryStopsWhenContextDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	errFail := errors.New("exit status 100")
	// An hour's backoff: the test can only finish if cancellation cuts the
	// wait short.
	err := retry(ctx, time.Hour, func(context.Context) error {
		calls++
		cancel()
		return errFail
	})
	if calls != 1 || !errors.Is(err, context.Canceled) || !errors.Is(err, errFail) {
		t.Errorf("retry = %v after %d calls, want context.Canceled and the last error after 1", err, calls)
	}
}

func TestRetryStopsWhenDeadlineTooClose(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	calls := 0
	errFail := errors.New("exit status 100")
	// The shortest jittered wait for a 4 h base is 2 h, past the deadline.
	err := retry(ctx, 4*time.Hour, func(context.Context) error {
		calls++
		return errFail
	})
	if calls != 1 || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errFail) {
		t.Errorf("retry = %v after %d calls, want DeadlineExceeded and the last error after 1", err, calls)
	}
	if !strings.Contains(err.Error(), "1 of 5 attempts") {
		t.Errorf("retry = %q, want the attempt count", err)
	}
}

func TestRetryAttemptDeadlineInsideCaller(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	outer, _ := ctx.Deadline()
	retry(ctx, time.Millisecond, func(actx context.Context) error {
		if d, _ := actx.Deadline(); d.After(outer) {
			t.Errorf("attempt deadline %v is after the caller's %v", d, outer)
		}
		return nil
	})
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		base    time.Duration
		attempt int
		lo, hi  time.Duration // want lo <= backoff < hi
	}{
		{base: 3 * time.Second, attempt: 1, lo: 1500 * time.Millisecond, hi: 3 * time.Second},
		{base: 3 * time.Second, attempt: 2, lo: 3 * time.Second, hi: 6 * time.Second},
		{base: 3 * time.Second, attempt: 4, lo: 12 * time.Second, hi: 24 * time.Second},
		{base: 3 * time.Second, attempt: 9, lo: 15 * time.Second, hi: 30 * time.Second},
		{base: time.Hour, attempt: 3, lo: 30 * time.Minute, hi: time.Hour},
		{base: time.Nanosecond, attempt: 1, lo: time.Nanosecond, hi: 2 * time.Nanosecond},
	}
	for _, tt := range tests {
		for range 50 {
			if got := backoff(tt.base, tt.attempt); got < tt.lo || got >= tt.hi {
				t.Errorf("backoff(%v, %d) = %v, want in [%v, %v)", tt.base, tt.attempt, got, tt.lo, tt.hi)
				break
			}
		}
	}
}

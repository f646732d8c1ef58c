package task_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/node/checkhotfix"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/task"
)

// panicHandler is a slog handler that panics on one message: a failpoint
// inside a command's work, through its one injectable dependency.
type panicHandler struct{ on string }

func (h panicHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h panicHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.on {
		panic("failpoint: " + h.on)
	}
	return nil
}
func (h panicHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h panicHandler) WithGroup(string) slog.Handler      { return h }

// TestTaskRecoversPanic panics inside check-hotfix's work, as launch runs
// it in-process: the lifecycle turns the panic into a failed result and
// still records exactly one Error event.
func TestTaskRecoversPanic(t *testing.T) {
	t.Parallel()
	root := layout.Root(t.TempDir())
	log := slog.New(panicHandler{on: "aks-node-controller check-hotfix started"})
	res := checkhotfix.Task(time.Second).Run(t.Context(), task.Recorder{Root: root, Log: log}, func(ctx context.Context) checkhotfix.Result {
		return checkhotfix.Run(ctx, checkhotfix.Config{Root: root, Log: log})
	})
	if res.Outcome != checkhotfix.Failed || res.Panic == nil {
		t.Fatalf("check-hotfix = %+v, want failed with the panic", res)
	}
	files, _ := filepath.Glob(filepath.Join(root.EventsDir(), "*.json"))
	if len(files) != 1 {
		t.Fatalf("got %d events, want 1", len(files))
	}
	data, _ := os.ReadFile(files[0])
	var ev map[string]string
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev["TaskName"] != "AKS.AKSNodeController.CheckHotfix" || ev["EventLevel"] != "Error" ||
		!strings.HasPrefix(ev["Message"], "check-hotfix outcome=failed panic=failpoint") || !strings.Contains(ev["Message"], " | startTime=") {
		t.Errorf("event = %v", ev)
	}
}

// TestTaskBudget: the lifecycle's budget is the work's deadline.
func TestTaskBudget(t *testing.T) {
	t.Parallel()
	root := layout.Root(t.TempDir())
	var deadline time.Time
	checkhotfix.Task(42*time.Second).Run(t.Context(), task.Recorder{Root: root}, func(ctx context.Context) checkhotfix.Result {
		deadline, _ = ctx.Deadline()
		return checkhotfix.Result{Outcome: checkhotfix.NoHotfixAvailable}
	})
	if left := time.Until(deadline); left <= 30*time.Second || left > 42*time.Second {
		t.Errorf("work's deadline is %v away, want the 42s budget", left)
	}
}

// TestTaskWithoutBudget: a zero budget adds no deadline; the caller's
// context alone bounds the work.
func TestTaskWithoutBudget(t *testing.T) {
	t.Parallel()
	root := layout.Root(t.TempDir())
	var bounded bool
	task.Task[checkhotfix.Result]{Name: "unbounded", Event: "unbounded"}.Run(t.Context(), task.Recorder{Root: root}, func(ctx context.Context) checkhotfix.Result {
		_, bounded = ctx.Deadline()
		return checkhotfix.Result{Outcome: checkhotfix.NoHotfixAvailable}
	})
	if _, tb := t.Context().Deadline(); bounded && !tb {
		t.Error("the work has a deadline its caller did not set")
	}
}

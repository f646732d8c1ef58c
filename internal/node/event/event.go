// Package event writes guest-agent telemetry event files in the format the
// Azure guest agent collects from the custom-script extension's events
// directory.
package event

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"nodehotfix/internal/atomicfile"
)

// Task names, as the reference emits them.
const (
	TaskCheckHotfix    = "AKS.AKSNodeController.CheckHotfix"
	TaskDownloadHotfix = "AKS.AKSNodeController.DownloadHotfix"
	TaskLauncher       = "AKS.AKSNodeController.Launcher"
	TaskProvision      = "AKS.AKSNodeController.Provision"
	TaskProvisionWait  = "AKS.AKSNodeController.ProvisionWait"
)

// Levels.
const (
	LevelInformational = "Informational"
	LevelError         = "Error"
)

// timeLayout is the reference's timestamp format. Times are written in UTC
// (the reference used local time, which is UTC on the VMs it runs on).
const timeLayout = "2006-01-02 15:04:05.000"

// Event is one telemetry record.
type Event struct {
	Task    string
	Level   string
	Message string
	Start   time.Time
	End     time.Time
	// Version is the agent's version; the reference sent a constant.
	Version string
}

// record is the on-disk shape: every field a string, as the guest agent
// expects.
type record struct {
	Timestamp   string `json:"Timestamp"`
	OperationID string `json:"OperationId"`
	Version     string `json:"Version"`
	TaskName    string `json:"TaskName"`
	EventLevel  string `json:"EventLevel"`
	Message     string `json:"Message"`
	EventPid    string `json:"EventPid"`
	EventTid    string `json:"EventTid"`
}

// Write stores e as <dir>/<unix-nanos>.json (0644, directory created 0755).
// The file appears atomically: the guest agent collects *.json files and must
// never read a partial one. It returns the file's path.
func Write(dir string, e Event) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create events directory: %w", err)
	}
	data, err := json.Marshal(record{
		Timestamp:   e.Start.UTC().Format(timeLayout),
		OperationID: e.End.UTC().Format(timeLayout),
		Version:     e.Version,
		TaskName:    e.Task,
		EventLevel:  e.Level,
		Message:     e.Message,
		EventPid:    strconv.Itoa(os.Getpid()),
		EventTid:    "0",
	})
	if err != nil {
		return "", fmt.Errorf("encode event: %w", err)
	}
	// Two events in the same nanosecond would collide; the next free
	// nanosecond keeps one file per event without a random suffix the
	// collector might not expect.
	ns := time.Now().UnixNano()
	for {
		path := filepath.Join(dir, strconv.FormatInt(ns, 10)+".json")
		if _, err := os.Lstat(path); os.IsNotExist(err) {
			return path, atomicfile.WriteFile(path, data, 0o644)
		}
		ns++
	}
}

// Timing renders the reference's message suffix.
func Timing(start, end time.Time) string {
	return fmt.Sprintf(" | startTime=%s endTime=%s durationMs=%d",
		start.UTC().Format(timeLayout), end.UTC().Format(timeLayout), end.Sub(start).Milliseconds())
}

// Package event writes guest-agent telemetry event files in the format the
// Azure guest agent collects from the custom-script extension's events
// directory.
package event

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Task names, as the reference emits them.
const (
	TaskApplyEmbedded  = "AKS.AKSNodeController.ApplyEmbeddedHotfix"
	TaskCheckHotfix    = "AKS.AKSNodeController.CheckHotfix"
	TaskDownloadHotfix = "AKS.AKSNodeController.DownloadHotfix"
	TaskLauncher       = "AKS.AKSNodeController.Launcher"
	TaskProvision      = "AKS.AKSNodeController.Provision"
	TaskProvisionWait  = "AKS.AKSNodeController.ProvisionWait"
	// TaskFetchLocalDNSConfig and TaskApplyLocalDNSConfig are the
	// localDNS commands' (the reference logs its fetch as
	// FetchLocalDNSConfig).
	TaskFetchLocalDNSConfig = "AKS.AKSNodeController.FetchLocalDNSConfig"
	TaskApplyLocalDNSConfig = "AKS.AKSNodeController.ApplyLocalDNSConfig"
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

// maxNameAttempts bounds the search for a free file name; each attempt is
// one nanosecond later, so only a directory full of planted names exhausts it.
const maxNameAttempts = 1024

// Write stores e as <dir>/<unix-nanos>.json (0644) and returns the file's
// path. The directory is created (0755) if missing; a symlink at dir itself is
// refused, so nothing is ever written through it.
//
// The file appears atomically: the guest agent collects *.json files and must
// never read a partial one, so the content goes to a dot-named temp file that
// no *.json glob matches, then is renamed to a name no other event holds.
// Nothing is fsynced: no reader depends on an event surviving a crash, and the
// events directory is on every node's provisioning path. Write is safe for
// concurrent use, including by several processes: where the file system
// supports RENAME_NOREPLACE, no event ever replaces another.
func Write(dir string, e Event) (string, error) {
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create events directory: %w", err)
	}
	dfd, err := openDir(dir)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)

	tmp := tempName()
	if err := writeTemp(dfd, tmp, data); err != nil {
		return "", fmt.Errorf("write event in %s: %w", dir, err)
	}
	name, err := publish(dfd, tmp, time.Now().UnixNano())
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return "", fmt.Errorf("write event in %s: %w", dir, err)
	}
	return filepath.Join(dir, name), nil
}

// openDir opens dir without following a symlink at its last component.
func openDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		return fd, nil
	}
	// Linux reports a symlink opened O_DIRECTORY|O_NOFOLLOW as ENOTDIR; the
	// lstat only picks the clearer message.
	if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
		return -1, fmt.Errorf("open events directory %s: is a symlink", dir)
	}
	return -1, fmt.Errorf("open events directory %s: %w", dir, err)
}

// tempName returns a fresh temp file name. It starts with a dot and does not
// end in .json, so neither a shell glob nor filepath.Match("*.json") — whose
// star also matches a leading dot — ever picks it up.
func tempName() string {
	return ".event-" + rand.Text() + ".tmp"
}

// writeTemp creates name in the directory dfd (never through a planted file
// or symlink) and writes data to it with mode 0644. On error after the create
// it removes the file.
func writeTemp(dfd int, name string, data []byte) error {
	fd, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create temp file %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := fill(f, data); err != nil {
		unix.Unlinkat(dfd, name, 0)
		return err
	}
	return nil
}

// fill writes data to f and closes it.
func fill(f *os.File, data []byte) error {
	// fchmod, because the collector must be able to read the file whatever
	// the umask.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", f.Name(), err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	return nil
}

// publish renames tmp to <ns>.json, or the next nanosecond whose name is
// free, and returns the name. Two events in the same nanosecond would
// otherwise collide; one file per event is kept without a random suffix the
// collector might not expect.
func publish(dfd int, tmp string, ns int64) (string, error) {
	for range maxNameAttempts {
		name := strconv.FormatInt(ns, 10) + ".json"
		err := renameNoReplace(dfd, tmp, name)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("rename %s to %s: %w", tmp, name, err)
		}
		ns++
	}
	return "", fmt.Errorf("rename %s: no free event name in %d attempts", tmp, maxNameAttempts)
}

// renameNoReplace renames oldName to newName within dfd and fails with EEXIST
// if newName exists.
func renameNoReplace(dfd int, oldName, newName string) error {
	err := unix.Renameat2(dfd, oldName, dfd, newName, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	// The file system or kernel lacks RENAME_NOREPLACE. The check-then-rename
	// can race with another writer; losing that race replaces one event.
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, newName, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		return unix.EEXIST
	case !errors.Is(err, unix.ENOENT):
		return err
	}
	return unix.Renameat(dfd, oldName, dfd, newName)
}

// Timing renders the reference's message suffix.
func Timing(start, end time.Time) string {
	return fmt.Sprintf(" | startTime=%s endTime=%s durationMs=%d",
		start.UTC().Format(timeLayout), end.UTC().Format(timeLayout), end.Sub(start).Milliseconds())
}

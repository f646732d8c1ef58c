package store

import (
	"bytes"
	"errors"
	"testing"
)

func TestCheckRecordRange(t *testing.T) {
	tests := []struct {
		name             string
		size, start, end int64
		ok               bool
	}{
		{"all", 3, 0, 3, true},
		{"none-at-end", 3, 3, 3, true},
		{"empty-log", 0, 0, 0, true},
		{"negative", 3, -1, 2, false},
		{"past-size", 3, 0, 4, false},
		{"reversed", 3, 2, 1, false},
		{"one-page", 5000, 1000, 1000 + MaxLogRecords, true},
		{"over-a-page", 5000, 0, MaxLogRecords + 1, false},
	}
	for _, tt := range tests {
		err := CheckRecordRange(tt.size, tt.start, tt.end)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrLogRange)) {
			t.Errorf("%s: CheckRecordRange(%d, %d, %d) = %v, want ok %v", tt.name, tt.size, tt.start, tt.end, err, tt.ok)
		}
	}
}

func TestCheckHashIndexes(t *testing.T) {
	// A log of 4 records stores 7 hashes: indexes 0 to 6.
	tests := []struct {
		name    string
		size    int64
		indexes []int64
		ok      bool
	}{
		{"none", 0, nil, true},
		{"last", 4, []int64{6, 0}, true},
		{"not-yet", 4, []int64{7}, false},
		{"negative", 4, []int64{-1}, false},
		{"empty-log", 0, []int64{0}, false},
		{"too-many", 4, make([]int64, MaxLogHashes+1), false},
		{"the-most", 4, make([]int64, MaxLogHashes), true},
	}
	for _, tt := range tests {
		err := CheckHashIndexes(tt.size, tt.indexes)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrLogRange)) {
			t.Errorf("%s: CheckHashIndexes(%d, %d indexes) = %v, want ok %v", tt.name, tt.size, len(tt.indexes), err, tt.ok)
		}
	}
}

func TestValidateRecord(t *testing.T) {
	for _, tt := range []struct {
		name string
		rec  []byte
		ok   bool
	}{
		{"nil", nil, true},
		{"empty", []byte{}, false},
		{"one", []byte("x"), true},
		{"largest", bytes.Repeat([]byte("x"), MaxRecordBytes), true},
		{"too-large", bytes.Repeat([]byte("x"), MaxRecordBytes+1), false},
	} {
		err := ValidateRecord(tt.rec)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidRecord)) {
			t.Errorf("%s: ValidateRecord(%d bytes) = %v, want ok %v", tt.name, len(tt.rec), err, tt.ok)
		}
	}
	if err := (KeySetRecord{Version: 1}).Validate(); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("KeySetRecord without an envelope: Validate = %v, want ErrInvalidRecord", err)
	}
}

func TestValidateCheckpoint(t *testing.T) {
	for _, tt := range []struct {
		name          string
		size, logSize int64
		note          []byte
		ok            bool
	}{
		{"empty-tree", 0, 0, []byte("n"), true},
		{"whole-log", 3, 3, []byte("n"), true},
		{"beyond", 4, 3, []byte("n"), false},
		{"negative", -1, 3, []byte("n"), false},
		{"no-note", 1, 3, nil, false},
		{"note-too-large", 1, 3, bytes.Repeat([]byte("n"), MaxCheckpointBytes+1), false},
	} {
		err := ValidateCheckpoint(tt.size, tt.logSize, tt.note)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidCheckpoint)) {
			t.Errorf("%s: ValidateCheckpoint(%d, %d, %d-byte note) = %v, want ok %v", tt.name, tt.size, tt.logSize, len(tt.note), err, tt.ok)
		}
	}
}

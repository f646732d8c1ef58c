package procstat

import (
	"os"
	"testing"
)

func TestSelf(t *testing.T) {
	t.Parallel()
	m, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.HWM < m.RSS {
		t.Errorf("ReadMemory(self) = %+v, want 0 < RSS <= HWM", m)
	}
	if _, err := CPU(os.Getpid()); err != nil {
		t.Errorf("CPU(self): %v", err)
	}
}

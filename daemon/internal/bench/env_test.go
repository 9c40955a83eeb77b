package bench

import (
	"fmt"
	"strings"
	"testing"
)

// TestSyncBufferKeepsBothEnds: a process's long output keeps its first and
// its last outputKept bytes, with a mark where the middle was dropped.
func TestSyncBufferKeepsBothEnds(t *testing.T) {
	var b syncBuffer
	for i := range 4 * outputKept / 16 {
		fmt.Fprintf(&b, "line %09d\n", i) // 16 bytes a line
	}
	out := b.String()
	head, tail, cut := strings.Cut(out, "\n[… output cut …]\n")
	if !cut {
		t.Fatalf("no cut mark in %d bytes", len(out))
	}
	// The write that reaches outputKept is kept whole.
	if !strings.HasPrefix(head, "line 000000000\n") || len(head) < outputKept || len(head) > outputKept+16 {
		t.Errorf("head: %d bytes starting %q, want %d (and the rest of a line) from the first line", len(head), head[:16], outputKept)
	}
	last := fmt.Sprintf("line %09d\n", 4*outputKept/16-1)
	if !strings.HasSuffix(tail, last) || len(tail) < outputKept || len(tail) > 2*outputKept {
		t.Errorf("tail: %d bytes ending %q, want %d to %d ending %q", len(tail), tail[len(tail)-16:], outputKept, 2*outputKept, last)
	}
}

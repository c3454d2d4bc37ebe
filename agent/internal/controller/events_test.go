package controller

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEventNoteFitsTheEventsAPI(t *testing.T) {
	short := "snapshot/s3: bucket b: NoSuchBucket"
	if got := eventNote(short); got != short {
		t.Errorf("a short message changed: %q", got)
	}
	exact := strings.Repeat("x", maxEventNote)
	if got := eventNote(exact); got != exact {
		t.Errorf("a message of exactly %d bytes was cut", maxEventNote)
	}
	// Many failing sinks, with multi-byte characters around the cut.
	long := strings.Repeat("database/pg-wrong: password authentication failed für „kollect“; ", 40)
	got := eventNote(long)
	if len(got) > maxEventNote || !utf8.ValidString(got) || !strings.HasSuffix(got, " …") || !strings.HasPrefix(long, strings.TrimSuffix(got, " …")) {
		t.Errorf("eventNote of %d bytes = %d bytes, valid UTF-8 %t: %q", len(long), len(got), utf8.ValidString(got), got)
	}
}

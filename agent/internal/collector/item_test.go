package collector

import (
	"errors"
	"testing"
	"unsafe"
)

// TestItemLayout holds the common item to one 112-byte allocation: at a million objects every
// word of it is 8 MB.
func TestItemLayout(t *testing.T) {
	if got := unsafe.Sizeof(item{}); got > 112 {
		t.Fatalf("item is %d bytes, want at most 112 (the size class the agent's memory figures assume)", got)
	}
}

func TestItemAccessors(t *testing.T) {
	it := newItem("shop", "web", "u1")
	if it.attrCount() != 0 || it.attr(0).skip != notSelected || it.rest != nil {
		t.Fatalf("a new item has extractions: %+v", it)
	}
	it.addAttr(2, extraction{json: `{"a":1}`})
	it.addAttr(5, extraction{err: errors.New("boom")})
	if got := string(it.attr(2).attributes()); got != `{"a":1}` {
		t.Errorf("attr(2) = %q", got)
	}
	if it.attr(5).err == nil || it.attr(3).skip != notSelected || it.attrCount() != 2 {
		t.Errorf("attrs: %+v %+v", it.first, it.rest)
	}
	if it.attr(5).attributes() != nil {
		t.Error("an extraction without JSON has attributes")
	}
	for _, oi := range []int{0, 63, 64, 70} {
		if it.matched(oi) {
			t.Errorf("target %d matched before it was set", oi)
		}
		it.setMatch(oi, true)
		if !it.matched(oi) {
			t.Errorf("target %d not matched after it was set", oi)
		}
	}
	it.setMatch(63, false)
	if it.matched(63) || !it.matched(0) || it.matched(69) {
		t.Error("setMatch changed other targets")
	}
	it.setMatchErr(3, 71, errors.New("no field"))
	if it.matchErr(3) == nil || it.matchErr(4) != nil || it.matchErr(200) != nil {
		t.Error("match errors")
	}
	if a, b := newItem(string([]byte("shop")), "a", "1"), newItem(string([]byte("shop")), "b", "2"); unsafe.StringData(a.namespace) != unsafe.StringData(b.namespace) {
		t.Error("namespaces are not interned")
	}
}

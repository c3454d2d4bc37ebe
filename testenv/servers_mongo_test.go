package testenv

import (
	"bufio"
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// TestMongoAnswersTheWireProtocol sends a raw OP_MSG hello (the testenv module does not
// depend on a MongoDB driver) and checks a well-formed reply comes back.
func TestMongoAnswersTheWireProtocol(t *testing.T) {
	m, err := StartMongo()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	conn, err := net.DialTimeout("tcp", m.URI[len("mongodb://"):len(m.URI)-1], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// BSON {hello: 1, $db: "admin"}
	doc := bsonDoc(
		[]byte{0x10}, []byte("hello\x00"), le32(1),
		[]byte{0x02}, []byte("$db\x00"), le32(6), []byte("admin\x00"),
	)
	body := append(le32(0), 0) // flagBits, section kind 0
	body = append(body, doc...)
	header := append(append(append(le32(int32(16+len(body))), le32(1)...), le32(0)...), le32(2013)...)
	if _, err := conn.Write(append(header, body...)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	hdr := make([]byte, 16)
	if _, err := ioReadFull(r, hdr); err != nil {
		t.Fatal(err)
	}
	if op := binary.LittleEndian.Uint32(hdr[12:]); op != 2013 {
		t.Fatalf("reply opcode %d, want OP_MSG", op)
	}
	if respTo := binary.LittleEndian.Uint32(hdr[8:]); respTo != 1 {
		t.Fatalf("reply answers request %d", respTo)
	}
	rest := make([]byte, binary.LittleEndian.Uint32(hdr[0:])-16)
	if _, err := ioReadFull(r, rest); err != nil {
		t.Fatal(err)
	}
	if !containsBytes(rest, []byte("maxWireVersion")) {
		t.Fatalf("hello reply lacks maxWireVersion: %q", rest)
	}
}

func le32(v int32) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(v)) }

func bsonDoc(parts ...[]byte) []byte {
	var body []byte
	for _, p := range parts {
		body = append(body, p...)
	}
	body = append(body, 0)
	return append(le32(int32(len(body)+4)), body...)
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func containsBytes(hay, needle []byte) bool {
	for i := 0; i+len(needle) <= len(hay); i++ {
		if string(hay[i:i+len(needle)]) == string(needle) {
			return true
		}
	}
	return false
}

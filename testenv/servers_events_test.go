package testenv

import (
	"bufio"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestKafkaServesTheKafkaProtocol(t *testing.T) {
	k, err := StartKafka(KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	// kcat (librdkafka) is the independent client: produce one record, read it back.
	produce := exec.Command("kcat", "-P", "-b", k.Addr, "-t", "probe", "-k", "k1")
	produce.Stdin = strings.NewReader("hello\n")
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v: %s", err, out)
	}
	out, err := exec.Command("kcat", "-C", "-b", k.Addr, "-t", "probe", "-e", "-q", "-f", "%k=%s\n").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "k1=hello" {
		t.Fatalf("kcat -C: %v: %q", err, out)
	}
}

func TestNATSStartsWithJetStream(t *testing.T) {
	n, err := StartNATS(NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(n.URL, "nats://"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	info, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(info, "INFO ") || !strings.Contains(info, `"jetstream":true`) {
		t.Fatalf("server greeting %q: %v", info, err)
	}
}

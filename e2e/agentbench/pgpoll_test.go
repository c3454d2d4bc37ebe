package agentbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// pollSession is one psql process that answers every poll of the first export over a single
// PostgreSQL session. A psql per poll, five a second, made PostgreSQL start a server process
// each time (about 30 ms of its CPU here), CPU the benchmark then took from the start it
// measures on the same two cores.
type pollSession struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	n   int
}

func newPollSession(ctx context.Context, url string) (*pollSession, error) {
	cmd := exec.CommandContext(ctx, "psql", url, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=0")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// Errors and results on one pipe, in the order psql writes them.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close()
	return &pollSession{cmd: cmd, in: in, out: bufio.NewReader(r)}, nil
}

// query runs sql and returns its output; a server error is returned as an error.
func (p *pollSession) query(sql string) (string, error) {
	p.n++
	marker := fmt.Sprintf("--end of poll %d--", p.n)
	if _, err := fmt.Fprintf(p.in, "%s;\n\\echo '%s'\n", strings.TrimSuffix(strings.TrimSpace(sql), ";"), marker); err != nil {
		return "", fmt.Errorf("psql: %w", err)
	}
	var lines []string
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("psql: %w (after %q)", err, lines)
		}
		line = strings.TrimRight(line, "\n")
		if line == marker {
			break
		}
		lines = append(lines, line)
	}
	out := strings.TrimSpace(strings.Join(lines, "\n"))
	if strings.Contains(out, "ERROR:") {
		return "", fmt.Errorf("psql %q: %s", sql, out)
	}
	return out, nil
}

func (p *pollSession) close() {
	p.in.Close()
	_ = p.cmd.Wait()
}

// pgSessions is PostgreSQL's count of the sessions started on the benchmark's database.
func pgSessions(ctx context.Context, url string) (int, error) {
	out, err := psql(ctx, url, "SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
	if err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscanf(out, "%d", &n); err != nil {
		return 0, fmt.Errorf("unexpected sessions output %q: %w", out, err)
	}
	return n, nil
}

package earlyinit

// mapping is one line of /proc/self/maps: an address range and whether it is writable.
type mapping struct {
	start, end uintptr
	writable   bool
}

// fileMappings returns the mappings of path in a /proc/<pid>/maps file. It is written without
// strconv, strings or bytes so that this package imports nothing with initialisers of its own
// (see the package doc).
func fileMappings(maps []byte, path string) []mapping {
	var out []mapping
	for len(maps) > 0 {
		line := maps
		if i := indexByte(maps, '\n'); i >= 0 {
			line, maps = maps[:i], maps[i+1:]
		} else {
			maps = nil
		}
		if m, p, ok := parseLine(line); ok && p == path {
			out = append(out, m)
		}
	}
	return out
}

// parseLine reads "start-end perms offset dev inode path".
func parseLine(line []byte) (m mapping, path string, ok bool) {
	fields := make([][]byte, 0, 6)
	i := 0
	for len(fields) < 5 {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		j := i
		for i < len(line) && line[i] != ' ' {
			i++
		}
		if i == j {
			return mapping{}, "", false
		}
		fields = append(fields, line[j:i])
	}
	for i < len(line) && line[i] == ' ' {
		i++
	}
	dash := indexByte(fields[0], '-')
	if dash < 0 {
		return mapping{}, "", false
	}
	start, ok1 := parseHex(fields[0][:dash])
	end, ok2 := parseHex(fields[0][dash+1:])
	if !ok1 || !ok2 || end <= start || len(fields[1]) < 2 {
		return mapping{}, "", false
	}
	return mapping{start: start, end: end, writable: fields[1][1] == 'w'}, string(line[i:]), true
}

func parseHex(b []byte) (uintptr, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uintptr
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uintptr(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uintptr(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

package controller

import "unicode/utf8"

// maxEventNote is the longest note the events.k8s.io/v1 API accepts (1 kB). The API server
// refuses a longer Event whole and the recorder drops it ("Server rejected event (will not
// retry!)"), so a Degraded message that lists many failing sinks would leave no event at all.
const maxEventNote = 1024

// eventNote is msg cut to what an Event may hold, at a character boundary, marked as cut; the
// condition keeps the whole message.
func eventNote(msg string) string {
	if len(msg) <= maxEventNote {
		return msg
	}
	const more = " …"
	cut := maxEventNote - len(more)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}

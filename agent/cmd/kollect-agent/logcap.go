package main

import "github.com/go-logr/logr"

// maxVerbosity is the most verbose V-level any logger of the agent enables. client-go dumps
// every request and response body at V(8) and above, the Secrets the agent reads included
// (sink credentials, its hub credential), and protobuf bodies as hex, which no search or
// redaction sees through: --zap-log-level=8 or more logs what 7 logs (client-go's request
// headers, with bearer tokens masked).
const maxVerbosity = 7

// capVerbosity returns l with V-levels above maxVerbosity disabled, in every logger derived
// from it.
func capVerbosity(l logr.Logger) logr.Logger {
	s := l.GetSink()
	if s == nil {
		return l
	}
	// The wrapper is one more frame between the caller and the sink.
	if cd, ok := s.(logr.CallDepthLogSink); ok {
		s = cd.WithCallDepth(1)
	}
	return logr.New(cappedSink{s})
}

type cappedSink struct{ logr.LogSink }

func (s cappedSink) Enabled(level int) bool {
	return level <= maxVerbosity && s.LogSink.Enabled(level)
}

func (s cappedSink) Info(level int, msg string, kv ...any) {
	if level <= maxVerbosity {
		s.LogSink.Info(level, msg, kv...)
	}
}

func (s cappedSink) WithValues(kv ...any) logr.LogSink {
	return cappedSink{s.LogSink.WithValues(kv...)}
}

func (s cappedSink) WithName(name string) logr.LogSink { return cappedSink{s.LogSink.WithName(name)} }

func (s cappedSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return cappedSink{cd.WithCallDepth(depth)}
	}
	return s
}

package snapshot

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"

	v1alpha1 "kollect.dev/api/v1alpha1"
)

// zstdEncoder is shared: EncodeAll is safe for concurrent use, and one encoder with a single
// goroutine yields the same bytes for the same input, which unchanged-file detection needs.
var zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
})

var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
})

// compressBytes applies c; gzip headers carry no name or time, so output is deterministic.
func compressBytes(c v1alpha1.Compression, data []byte) ([]byte, error) {
	switch c {
	case v1alpha1.CompressionGzip:
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(data); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case v1alpha1.CompressionZstd:
		enc, err := zstdEncoder()
		if err != nil {
			return nil, fmt.Errorf("zstd encoder: %w", err)
		}
		return enc.EncodeAll(data, make([]byte, 0, len(data)/4)), nil
	default:
		return data, nil
	}
}

// Decompress reverses compressBytes, for readers and tests.
func Decompress(c v1alpha1.Compression, data []byte) ([]byte, error) {
	switch c {
	case v1alpha1.CompressionGzip:
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	case v1alpha1.CompressionZstd:
		dec, err := zstdDecoder()
		if err != nil {
			return nil, err
		}
		return dec.DecodeAll(data, nil)
	default:
		return data, nil
	}
}

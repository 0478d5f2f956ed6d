package mcpserver

import (
	"strings"
	"testing"
)

func TestClip(t *testing.T) {
	tests := []struct {
		name      string
		data      string
		max       int
		tail      bool
		want      string
		truncated bool
		binary    bool
	}{
		{name: "short text whole", data: "hello\n", max: 10, want: "hello\n"},
		{name: "long text keeps the start", data: "abcdefghij", max: 4, want: "abcd", truncated: true},
		{name: "long log keeps the end", data: "abcdefghij", max: 4, tail: true, want: "ghij", truncated: true},
		{name: "a cut inside a character is not binary", data: "aé", max: 2, want: "a", truncated: true},
		{name: "a tail starting inside a character drops it", data: "éab", max: 3, tail: true, want: "ab", truncated: true},
		{name: "bytes that are not UTF-8 are marked", data: "\x00\xff\xfe png", max: 100, binary: true},
		{name: "empty", data: "", max: 10, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := clip([]byte(tt.data), tt.max, tt.tail)
			if o.Text != tt.want || o.Truncated != tt.truncated || o.Binary != tt.binary {
				t.Errorf("clip = %+v, want text %q truncated %v binary %v", o, tt.want, tt.truncated, tt.binary)
			}
			if o.Bytes != len(tt.data) {
				t.Errorf("bytes %d, want %d", o.Bytes, len(tt.data))
			}
			if (o.Truncated || o.Binary) && o.Note == "" {
				t.Error("a cut or binary output has no note")
			}
			if o.Binary && strings.Contains(o.Note, "\xff") {
				t.Error("the note pastes the raw bytes")
			}
		})
	}
}

package mcpserver

import (
	"fmt"
	"unicode/utf8"
)

// Output is a stream or file as a tool returns it: text up to the server's cap, or, for bytes
// that are not UTF-8 text, a mark that says so rather than the raw bytes.
type Output struct {
	// Text is the output, cut at the server's cap when Truncated.
	Text string `json:"text"`
	// Bytes is the whole output's size.
	Bytes int `json:"bytes"`
	// Truncated: only the first (or, for a log, the last) part is in Text.
	Truncated bool `json:"truncated,omitempty"`
	// Binary: the output is not UTF-8 text and Text is empty; read_file with encoding
	// base64 returns such contents.
	Binary bool `json:"binary,omitempty"`
	// Note says what was left out, for the reader.
	Note string `json:"note,omitempty"`
}

// clip makes data an Output of at most max bytes, keeping the start (or with tail, the end).
// whole is the full size when data is already a part (a log's kept tail, say).
func clip(data []byte, max int, tail bool) Output {
	o := Output{Bytes: len(data)}
	if !utf8.Valid(trimPartialRune(data)) {
		o.Binary = true
		o.Note = fmt.Sprintf("binary output (%d bytes) is not shown; write it to a file and read it with read_file and encoding base64", len(data))
		return o
	}
	if len(data) > max {
		o.Truncated = true
		if tail {
			cut := data[len(data)-max:]
			for len(cut) > 0 && !utf8.RuneStart(cut[0]) {
				cut = cut[1:]
			}
			o.Text = string(cut)
			o.Note = fmt.Sprintf("output truncated: the last %d of %d bytes are shown", len(cut), len(data))
		} else {
			cut := trimPartialRune(data[:max])
			o.Text = string(cut)
			o.Note = fmt.Sprintf("output truncated: the first %d of %d bytes are shown", len(cut), len(data))
		}
		return o
	}
	o.Text = string(data)
	return o
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of data (a cut in the middle of
// a character), so that a cut is not taken for binary.
func trimPartialRune(data []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(data); i++ {
		if utf8.RuneStart(data[len(data)-i]) {
			if r, _ := utf8.DecodeRune(data[len(data)-i:]); r == utf8.RuneError && !utf8.FullRune(data[len(data)-i:]) {
				return data[:len(data)-i]
			}
			break
		}
	}
	return data
}

package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// protocolVersion is the messaging protocol version this client speaks.
const protocolVersion = "5.3"

var delimiter = []byte("<IDS|MSG>")

// header is a Jupyter message header.
type header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// message is a received, verified Jupyter message.
type message struct {
	channel string // "shell", "control" or "iopub"
	Header  header
	Parent  header
	Content json.RawMessage
}

// randomHex returns n random bytes, hex encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// sign computes the HMAC-SHA256 signature of the four signed frames.
func sign(key []byte, frames ...[]byte) []byte {
	mac := hmac.New(sha256.New, key)
	for _, f := range frames {
		mac.Write(f)
	}
	return []byte(hex.EncodeToString(mac.Sum(nil)))
}

// encode builds the frames of a message to send from a DEALER socket (no routing identities).
func encode(key []byte, session, msgID, msgType string, content any) ([][]byte, error) {
	h, err := json.Marshal(header{
		MsgID: msgID, Session: session, Username: "execd", MsgType: msgType, Version: protocolVersion,
		Date: time.Now().UTC().Format(time.RFC3339Nano),
	})
	if err != nil {
		return nil, err
	}
	c, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("jupyter: encode %s: %w", msgType, err)
	}
	parent, meta := []byte("{}"), []byte("{}")
	return [][]byte{delimiter, sign(key, h, parent, meta, c), h, parent, meta, c}, nil
}

var errBadSignature = errors.New("jupyter: bad message signature")

// decode parses and verifies received frames: [topic/identities...] <IDS|MSG> sig header parent metadata content [buffers...].
func decode(key []byte, frames [][]byte) (*message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	if len(frames)-i < 6 {
		return nil, fmt.Errorf("jupyter: malformed message (%d frames)", len(frames))
	}
	f := frames[i+1:]
	if !hmac.Equal(f[0], sign(key, f[1], f[2], f[3], f[4])) {
		return nil, errBadSignature
	}
	m := &message{Content: f[4]}
	if err := json.Unmarshal(f[1], &m.Header); err != nil {
		return nil, fmt.Errorf("jupyter: bad header: %w", err)
	}
	if err := json.Unmarshal(f[2], &m.Parent); err != nil {
		return nil, fmt.Errorf("jupyter: bad parent header: %w", err)
	}
	return m, nil
}

// OutputType says what kind of output an Output is.
type OutputType string

// Output types.
const (
	Stdout  OutputType = "stdout"
	Stderr  OutputType = "stderr"
	Result  OutputType = "result"
	Display OutputType = "display"
	Error   OutputType = "error"
)

// Output is one output of an execution, as iopub carries it.
type Output struct {
	Type OutputType
	// Text is the stream text, or data["text/plain"] for Result and Display.
	Text string
	// Data holds every MIME bundle entry of a Result or Display as a string: string values
	// as sent (image/png is base64), other JSON values (application/json) re-marshalled.
	Data map[string]string
	// ExecutionCount is set for Result.
	ExecutionCount int
	// Error is set for Error.
	Error *ErrorInfo
}

// ErrorInfo describes a Python exception.
type ErrorInfo struct {
	Name      string   // ename, e.g. "ZeroDivisionError"
	Value     string   // evalue
	Traceback []string // traceback lines, with ANSI colour codes as the kernel sends them
}

// Reply is the kernel's execute_reply.
type Reply struct {
	Status         string // "ok", "error" or "aborted"
	ExecutionCount int
	Error          *ErrorInfo // set when Status is "error"
}

// KernelInfo is what the kernel said about itself in kernel_info_reply.
type KernelInfo struct {
	ProtocolVersion       string
	Implementation        string // e.g. "ipython"
	ImplementationVersion string
	Language              string // e.g. "python"
	LanguageVersion       string // e.g. "3.11.2"
	Banner                string
}

type errorContent struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

func (e errorContent) info() *ErrorInfo {
	return &ErrorInfo{Name: e.EName, Value: e.EValue, Traceback: e.Traceback}
}

// toOutput converts an iopub message to an Output; ok is false for messages that are not outputs.
func toOutput(m *message) (Output, bool, error) {
	var c struct {
		Name           string                     `json:"name"`
		Text           string                     `json:"text"`
		Data           map[string]json.RawMessage `json:"data"`
		ExecutionCount int                        `json:"execution_count"`
		errorContent
	}
	switch m.Header.MsgType {
	case "stream", "execute_result", "display_data", "update_display_data", "error":
	default:
		return Output{}, false, nil
	}
	if err := json.Unmarshal(m.Content, &c); err != nil {
		return Output{}, false, fmt.Errorf("jupyter: bad %s content: %w", m.Header.MsgType, err)
	}
	switch m.Header.MsgType {
	case "stream":
		t := Stdout
		if c.Name == "stderr" {
			t = Stderr
		}
		return Output{Type: t, Text: c.Text}, true, nil
	case "error":
		return Output{Type: Error, Error: c.info()}, true, nil
	}
	o := Output{Type: Display, Data: make(map[string]string, len(c.Data))}
	if m.Header.MsgType == "execute_result" {
		o.Type, o.ExecutionCount = Result, c.ExecutionCount
	}
	for mime, raw := range c.Data {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			var buf bytes.Buffer
			if json.Compact(&buf, raw) == nil {
				s = buf.String()
			} else {
				s = string(raw)
			}
		}
		o.Data[mime] = s
	}
	o.Text = o.Data["text/plain"]
	return o, true, nil
}

var ansiRE = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// StripANSI removes ANSI escape sequences (such as the colours of tracebacks) from s.
func StripANSI(s string) string { return ansiRE.ReplaceAllString(s, "") }

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

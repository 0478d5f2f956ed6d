// Package jsonclient is the controller's one way to make the JSON calls it makes to the
// execd of pods and to the node agents of nodes: marshal the request, send it over the
// caller's mutual-TLS client (execdclient's or the node agent's transport), read an answer
// of bounded size, and decode a 2xx answer or turn any other into a *StatusError that keeps
// the server's status and text. What a status means (rejected, retry, not found) is the
// caller's to say: the same 404 means other things to a claim and to a policy push.
package jsonclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// MaxAnswerBytes bounds what is read of an answer. Every answer the controller reads this
// way is small (a claim, a policy's status, a denials report, a certificate
// acknowledgement); a larger one is refused rather than cut, so it cannot half-decode.
const MaxAnswerBytes = 64 << 10

// StatusError is an answer with a status outside 2xx.
type StatusError struct {
	// Code is the HTTP status code, Status the status line's text ("409 Conflict").
	Code   int
	Status string
	// Message is the answer's body with surrounding space trimmed (execd and the node agent
	// answer errors as text/plain).
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return e.Status
	}
	return e.Status + ": " + e.Message
}

// NewRequest returns a request of method for url whose body is in as JSON, or no body when
// in is nil.
func NewRequest(ctx context.Context, method, url string, in any) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// Do sends in (nil: no body) to url by method with c and decodes a 2xx answer into out
// (nil: the answer is read and dropped). An answer outside 2xx is a *StatusError; an error
// of c's is returned as it is, for the caller to say what it was calling.
func Do(ctx context.Context, c *http.Client, method, url string, in, out any) error {
	req, err := NewRequest(ctx, method, url, in)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	data, err := Read(resp)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}

// Read reads resp's whole answer, at most MaxAnswerBytes, and closes it. It returns the
// body of a 2xx answer, or a *StatusError.
func Read(resp *http.Response) ([]byte, error) {
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	if len(data) > MaxAnswerBytes {
		return nil, fmt.Errorf("%s: an answer of more than %d bytes", resp.Status, MaxAnswerBytes)
	}
	if !ok(resp.StatusCode) {
		return nil, statusError(resp, data)
	}
	return data, nil
}

// Check returns nil for a 2xx answer, whose body it leaves unread for the caller to stream,
// and otherwise reads the answer (at most MaxAnswerBytes), closes it and returns a
// *StatusError.
func Check(resp *http.Response) error {
	if ok(resp.StatusCode) {
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
	return statusError(resp, data)
}

func ok(code int) bool { return code >= 200 && code < 300 }

func statusError(resp *http.Response, data []byte) *StatusError {
	return &StatusError{Code: resp.StatusCode, Status: resp.Status, Message: string(bytes.TrimSpace(data))}
}

// Refused reports whether the status is a 4xx other than 429 Too Many Requests: the server
// refused the request as it is, and sending it again will not help.
func (e *StatusError) Refused() bool {
	return e.Code >= 400 && e.Code < 500 && e.Code != http.StatusTooManyRequests
}

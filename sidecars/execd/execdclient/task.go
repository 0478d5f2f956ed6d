package execdclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

const (
	// taskResponseHeaderTimeout bounds the wait for execd's answer to a start or a watch: it
	// answers both at once (a watch with its first line), unless the pod's network is gone.
	taskResponseHeaderTimeout = 10 * time.Second
	// maxTaskAnswerBytes bounds what Start reads: a TaskState or an error message.
	maxTaskAnswerBytes = 64 << 10
	// maxTaskStateLine bounds one line of a watch; a TaskState is far smaller.
	maxTaskStateLine = 1 << 20
)

// TaskClient starts and watches tasks over mTLS (the Transport of this package).
type TaskClient struct {
	// Client has no overall Timeout: a watch lasts as long as the controller wants it.
	Client *http.Client
	// Idle is how long Watch waits for a byte (a state or a heartbeat) before it takes the
	// connection for dead; 0: 3*execdapi.TaskHeartbeat, as the contract says.
	Idle time.Duration
}

// NewTaskClient returns a task client presenting and trusting creds, with its own connection
// pool: a watch holds a connection for as long as it lasts.
func NewTaskClient(creds Credentials) *TaskClient {
	return &TaskClient{Client: &http.Client{
		Transport: NewTransport(creds, Options{ResponseHeaderTimeout: taskResponseHeaderTimeout}),
	}}
}

// TaskRejected: execd answered a request with a client error (4xx but 429); repeating it as it
// is will not help.
type TaskRejected struct {
	StatusCode int
	Message    string
}

func (e *TaskRejected) Error() string {
	return fmt.Sprintf("execd refused the task request (%d): %s", e.StatusCode, e.Message)
}

// ErrWatchIdle: a watch heard nothing, not even a heartbeat, for TaskClient.Idle.
var ErrWatchIdle = errors.New("the task watch heard nothing from execd")

// Start PUTs the request; a 4xx answer is a *TaskRejected{StatusCode, Message} (not worth a
// retry); other errors are. Starting is idempotent: the same request again answers the state.
func (c *TaskClient) Start(ctx context.Context, t Target, req *execdapi.TaskRequest) (*execdapi.TaskState, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	httpReq, err := http.NewRequestWithContext(WithTarget(ctx, t), http.MethodPut,
		URL(t, execdapi.TaskPath, "").String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set(execdapi.SandboxUIDHeader, req.SandboxUID)
	resp, err := c.Client.Do(httpReq)
	if err != nil {
		return nil, fmt.Errorf("start the task in pod %s: %w", t.PodUID, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTaskAnswerBytes))
	if err != nil {
		return nil, fmt.Errorf("start the task in pod %s: read the answer: %w", t.PodUID, err)
	}
	if err := answerError(resp, data); err != nil {
		return nil, fmt.Errorf("start the task in pod %s: %w", t.PodUID, err)
	}
	state := &execdapi.TaskState{}
	if err := json.Unmarshal(data, state); err != nil {
		return nil, fmt.Errorf("start the task in pod %s: decode the answer: %w", t.PodUID, err)
	}
	return state, nil
}

// answerError is the error of an answer that is not 200: a *TaskRejected for a client error.
func answerError(resp *http.Response, body []byte) error {
	msg := string(bytes.TrimSpace(body))
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
		return &TaskRejected{StatusCode: resp.StatusCode, Message: msg}
	}
	return fmt.Errorf("%s: %s", resp.Status, msg)
}

// Watch streams the task's state to fn until ctx ends or the stream breaks (returns the error;
// nil only when ctx ended). The first state is the current one (phase "" when the pod has no
// task yet), then every change in order. It ignores heartbeats, and gives up (ErrWatchIdle)
// after Idle without a byte. A refused watch is a *TaskRejected. fn runs on Watch's goroutine;
// the time it takes does not count as idle.
func (c *TaskClient) Watch(ctx context.Context, t Target, sandboxUID string, fn func(execdapi.TaskState)) error {
	idle := c.Idle
	if idle <= 0 {
		idle = 3 * execdapi.TaskHeartbeat
	}
	reqCtx, cancel := context.WithCancelCause(WithTarget(ctx, t))
	defer cancel(nil)
	query := url.Values{execdapi.TaskWatchParam: {"true"}}.Encode()
	httpReq, err := http.NewRequestWithContext(reqCtx, http.MethodGet, URL(t, execdapi.TaskPath, query).String(), nil)
	if err != nil {
		return err
	}
	httpReq.Header.Set("Accept", execdapi.TaskWatchContentType)
	httpReq.Header.Set(execdapi.SandboxUIDHeader, sandboxUID)
	resp, err := c.Client.Do(httpReq)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("watch the task in pod %s: %w", t.PodUID, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxTaskAnswerBytes))
		return fmt.Errorf("watch the task in pod %s: %w", t.PodUID, answerError(resp, data))
	}

	// Closing the request's context closes the body, which ends a read that waits.
	timer := time.AfterFunc(idle, func() { cancel(ErrWatchIdle) })
	defer timer.Stop()
	sc := bufio.NewScanner(&idleReader{r: resp.Body, timer: timer, idle: idle})
	sc.Buffer(make([]byte, 0, 4<<10), maxTaskStateLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue // a heartbeat
		}
		var state execdapi.TaskState
		if err := json.Unmarshal(line, &state); err != nil {
			return fmt.Errorf("watch the task in pod %s: decode a state: %w", t.PodUID, err)
		}
		timer.Stop()
		fn(state)
		timer.Reset(idle)
	}
	switch {
	case ctx.Err() != nil:
		return nil
	case errors.Is(context.Cause(reqCtx), ErrWatchIdle):
		return fmt.Errorf("watch the task in pod %s: %w for %s", t.PodUID, ErrWatchIdle, idle)
	case sc.Err() != nil:
		return fmt.Errorf("watch the task in pod %s: %w", t.PodUID, sc.Err())
	}
	return fmt.Errorf("watch the task in pod %s: execd ended the stream: %w", t.PodUID, io.ErrUnexpectedEOF)
}

// idleReader restarts the idle timer whenever bytes arrive.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	idle  time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.timer.Reset(r.idle)
	}
	return n, err
}

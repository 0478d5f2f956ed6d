package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// DefaultContext is the code context a run makes when it does not exist, so that one call
// runs code.
const DefaultContext = "default"

// RunCodeOptions are code to run in a context (DefaultContext when empty) of a replica, for at
// most Timeout (whole seconds; none when zero). OnEvent, when set, sees each event as it comes.
type RunCodeOptions struct {
	Code    string
	Context string
	Replica int32
	Timeout time.Duration
	OnEvent func(*sandboxv1alpha1.SandboxCodeRunEvent) error
}

// Execution is what a run made, gathered from its events.
type Execution struct {
	Stdout, Stderr string
	// Results are the last expression's value and every display (a plot), in order, as
	// their events came: Text is text/plain, Data every representation by MIME type.
	Results []sandboxv1alpha1.SandboxCodeRunEvent
	// Error is the exception the code raised, if it did.
	Error *sandboxv1alpha1.SandboxCodeError
	// End is the last event: status ok, error or aborted, and why a run did not end by itself.
	End *sandboxv1alpha1.SandboxCodeRunEvent
}

// Text is the text/plain of the last expression's value, empty without one.
func (e *Execution) Text() string {
	for i := len(e.Results) - 1; i >= 0; i-- {
		if e.Results[i].Type == sandboxv1alpha1.CodeRunResult {
			return e.Results[i].Text
		}
	}
	return ""
}

// RunCode runs code in a context, where variables, imports and the working directory persist
// between runs, and returns what it made. An exception in the code is not an error of RunCode:
// it is Execution.Error.
func (c *Client) RunCode(ctx context.Context, name string, o RunCodeOptions) (*Execution, error) {
	body, err := c.RunCodeStream(ctx, name, o)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	exec := &Execution{}
	var stdout, stderr strings.Builder
	err = ReadCodeRunEvents(body, func(ev *sandboxv1alpha1.SandboxCodeRunEvent) error {
		switch ev.Type {
		case sandboxv1alpha1.CodeRunStdout:
			stdout.WriteString(ev.Text)
		case sandboxv1alpha1.CodeRunStderr:
			stderr.WriteString(ev.Text)
		case sandboxv1alpha1.CodeRunResult, sandboxv1alpha1.CodeRunDisplay:
			exec.Results = append(exec.Results, *ev)
		case sandboxv1alpha1.CodeRunError:
			exec.Error = ev.Error
		case sandboxv1alpha1.CodeRunEnd:
			exec.End = ev
			if exec.Error == nil && ev.Error != nil {
				exec.Error = ev.Error
			}
		}
		if o.OnEvent != nil {
			return o.OnEvent(ev)
		}
		return nil
	})
	exec.Stdout, exec.Stderr = stdout.String(), stderr.String()
	if err == nil && exec.End == nil {
		err = fmt.Errorf("the run in sandbox %q ended without its end event", name)
	}
	return exec, err
}

// RunCodeStream starts a run and returns its answer: SandboxCodeRunEvents, one JSON object a
// line (ReadCodeRunEvents reads them). The caller closes it; closing it early interrupts the
// run.
func (c *Client) RunCodeStream(ctx context.Context, name string, o RunCodeOptions) (io.ReadCloser, error) {
	if o.Timeout < 0 || o.Timeout%time.Second != 0 {
		return nil, fmt.Errorf("timeout must be a whole number of seconds, got %s", o.Timeout)
	}
	if o.Context == "" {
		o.Context = DefaultContext
	}
	req := c.subresource("POST", name, "contexts", o.Context, "run").
		Body(&sandboxv1alpha1.SandboxCodeRun{Code: o.Code, TimeoutSeconds: int64(o.Timeout / time.Second)})
	req = withContextReplica(req, nonZero(o.Replica))
	body, err := req.Stream(ctx)
	return body, wrap(err)
}

// ReadCodeRunEvents calls fn with each event of a run's answer, until its end or fn's first
// error. An event larger than the server ever sends is an error.
func ReadCodeRunEvents(r io.Reader, fn func(*sandboxv1alpha1.SandboxCodeRunEvent) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), execdapi.MaxRunEventBytes+1)
	for sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		ev := &sandboxv1alpha1.SandboxCodeRunEvent{}
		if err := json.Unmarshal(line, ev); err != nil {
			return fmt.Errorf("the server sent what is not a run event: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the run's events: %w", err)
	}
	return nil
}

// CreateContext makes a code context (spec.replica, env, workingDir); a name of "" gets a
// random ID.
func (c *Client) CreateContext(ctx context.Context, name string, cc *sandboxv1alpha1.SandboxCodeContext) (*sandboxv1alpha1.SandboxCodeContext, error) {
	out := &sandboxv1alpha1.SandboxCodeContext{}
	err := c.subresource("POST", name, "contexts").Body(cc).Do(ctx).Into(out)
	return out, wrap(err)
}

// ListContexts lists the code contexts of every replica, or of one when replica is not nil.
func (c *Client) ListContexts(ctx context.Context, name string, replica *int32) (*sandboxv1alpha1.SandboxCodeContextList, error) {
	out := &sandboxv1alpha1.SandboxCodeContextList{}
	err := withContextReplica(c.subresource("GET", name, "contexts"), replica).Do(ctx).Into(out)
	return out, wrap(err)
}

// DeleteContext ends a code context and its interpreter, and returns the context as it ended.
func (c *Client) DeleteContext(ctx context.Context, name string, replica int32, id string) (*sandboxv1alpha1.SandboxCodeContext, error) {
	out := &sandboxv1alpha1.SandboxCodeContext{}
	err := withContextReplica(c.subresource("DELETE", name, "contexts", id), nonZero(replica)).Do(ctx).Into(out)
	return out, wrap(err)
}

// InterruptContext interrupts the context's run (a KeyboardInterrupt); it keeps its state.
func (c *Client) InterruptContext(ctx context.Context, name string, replica int32, id string) error {
	return wrap(withContextReplica(c.subresource("POST", name, "contexts", id, "interrupt"), nonZero(replica)).Do(ctx).Error())
}

// withContextReplica adds ?replica= when replica is set.
func withContextReplica(req *rest.Request, replica *int32) *rest.Request {
	if replica == nil {
		return req
	}
	return req.VersionedParams(&sandboxv1alpha1.SandboxCodeContextOptions{Replica: replica}, scheme.ParameterCodec)
}

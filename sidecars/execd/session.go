package execd

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// Query parameters of an exec beyond the kubelet's (command, input, output, error, tty).
const (
	EnvParam            = execdapi.ExecEnvParam
	WorkingDirParam     = execdapi.ExecWorkingDirParam
	TimeoutSecondsParam = execdapi.ExecTimeoutSecondsParam
)

// SessionOptions shape how one exec runs.
type SessionOptions struct {
	Env     []string
	Dir     string
	Timeout time.Duration
}

func parseSessionOptions(q url.Values) (SessionOptions, error) {
	var o SessionOptions
	for _, kv := range q[EnvParam] {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsAny(name, "\x00") {
			return o, fmt.Errorf("%s %q: want NAME=VALUE", EnvParam, kv)
		}
		o.Env = append(o.Env, kv)
	}
	if d := q.Get(WorkingDirParam); d != "" {
		if !path.IsAbs(d) {
			return o, fmt.Errorf("%s %q: want an absolute path", WorkingDirParam, d)
		}
		o.Dir = d
	}
	if t := q.Get(TimeoutSecondsParam); t != "" {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil || n < 0 {
			return o, fmt.Errorf("%s %q: want a non-negative integer", TimeoutSecondsParam, t)
		}
		o.Timeout = time.Duration(n) * time.Second
	}
	return o, nil
}

type sessionKey struct{}

func withSessionOptions(ctx context.Context, o SessionOptions) context.Context {
	return context.WithValue(ctx, sessionKey{}, o)
}

func sessionOptionsFrom(ctx context.Context) SessionOptions {
	o, _ := ctx.Value(sessionKey{}).(SessionOptions)
	return o
}

// apply sets the environment (execd's, with the session's on top: later entries win in
// os/exec) and the working directory of c.
func (o SessionOptions) apply(c *exec.Cmd) {
	if len(o.Env) > 0 {
		c.Env = append(os.Environ(), o.Env...)
	}
	if o.Dir != "" {
		c.Dir = o.Dir
	}
}

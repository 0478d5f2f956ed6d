package node

import (
	"errors"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// Error is a snapshot that failed for a reason sandbox-controller can act on: Reason is one
// of snapshotterapi's Reason constants.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// reasonOf is the Reason of err's Error, or ReasonSnapshotFailed for any other error.
func reasonOf(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Reason
	}
	return nodeapi.ReasonSnapshotFailed
}

func withReason(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Reason: reason, Err: err}
}

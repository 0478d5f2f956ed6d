package execdapi

import (
	"path"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Code contexts: stateful interpreters, each a real Jupyter kernel (ipykernel) that execd
// starts in the sandbox container and drives over the Jupyter messaging protocol. Variables,
// imports and the working directory persist between the runs of one context. sandbox-apiserver
// serves them as the contexts subresource of sandboxes.
//
//	POST   ContextsPath               make one (ContextRequest → 201 ContextState)     apiserver
//	GET    ContextsPath               all of them (ContextList), oldest first          apiserver
//	GET    ContextPath(ID)            one (ContextState)                               apiserver
//	DELETE ContextPath(ID)            end its kernel (→ 200 ContextState)              apiserver
//	POST   ContextRunPath(ID)         run code (RunRequest → 200, a stream of          apiserver
//	                                  RunEvent, one JSON object per line, as they come)
//	POST   ContextInterruptPath(ID)   interrupt its run (→ 200 ContextState)           apiserver
//
// A make answers once the kernel answers, with its state; a kernel that cannot start (no
// python3, no ipykernel in the image) is a 422 whose message has the end of its stderr. The
// context named DefaultContext is made by its first run, so that one call runs code.
//
// A run streams the kernel's outputs as they come: stdout and stderr, the value of the last
// expression (RunResult, as text and every MIME type the kernel gave), rich displays such as
// image/png (RunDisplay), an exception (RunError, with its traceback), and last RunEnd with the
// run's status. One run at a time per context: another is a 409. Past TimeoutSeconds, or when
// the client goes away, the run is interrupted (KeyboardInterrupt) and the context stays, with
// its state, for the next run. A context whose kernel died (killed, out of memory) is Dead:
// its runs are 410 and it stays listed, with the reason, until deleted.
//
// Kernels are processes of the sandbox: they run as execd's user, with the container's env,
// the sandbox's env, then Env, in WorkingDir. Pause and resume, and a container restart, end
// them; execd then knows nothing of them (404).
//
// Answers (errors are a JSON metav1.Status):
//
//	200 a state, the list, a run; 201 a context made
//	400 a malformed body; a request naming no sandbox
//	403 a client identity that may not use the path
//	404 no such context; execd runs no contexts (a pod without the state directory)
//	409 an ID already taken; a run while another runs; execd belongs to another sandbox
//	410 the context's kernel died
//	413 a body too large (RunRequest: over MaxRunCodeBytes and some)
//	422 a request that fails validation; a kernel that cannot start
//	429 MaxContexts exist
//	503 execd is shutting down
const ContextsPath = "/v1/contexts"

// The paths below ContextPath.
const (
	ContextRunSubpath       = "run"
	ContextInterruptSubpath = "interrupt"
)

// ContextPath is the path of the context with that ID.
func ContextPath(id string) string { return ContextsPath + "/" + id }

// ContextRunPath and ContextInterruptPath are the paths of a context's run and interrupt.
func ContextRunPath(id string) string       { return ContextPath(id) + "/" + ContextRunSubpath }
func ContextInterruptPath(id string) string { return ContextPath(id) + "/" + ContextInterruptSubpath }

// RunContentType is the media type of a run's answer: RunEvents, one JSON object per line.
const RunContentType = "application/jsonl"

// DefaultContext is the context a run makes when it names none that exists.
const DefaultContext = "default"

// LanguagePython is the one language contexts speak today: ipykernel's.
const LanguagePython = "python"

// Limits of the contexts of a pod.
const (
	// MaxContexts bounds the contexts of a pod; each is a kernel of its own (tens of MiB).
	MaxContexts = 16
	// MaxRunCodeBytes bounds the code of one run: more belongs in a file.
	MaxRunCodeBytes = 1 << 20
	// MaxRunEventBytes bounds one event of a run: an image of a few MiB fits, base64.
	MaxRunEventBytes = 16 << 20
	// MaxRunStreamBytes bounds the stdout or stderr text of one run, each: past it the rest
	// is dropped and RunEnd says Truncated.
	MaxRunStreamBytes = 4 << 20
	// ContextStartTimeout bounds a kernel's start: a cold interpreter that imports ipykernel
	// takes seconds, longer under gVisor; sandbox-apiserver waits 30 s for an answer.
	ContextStartTimeout = 25 * time.Second
)

// contextID is what a context's ID may be: a DNS label, so that it fits a URL and a table.
var contextID = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidContextID reports whether id may name a context.
func ValidContextID(id string) bool { return contextID.MatchString(id) }

// ContextRequest makes a context.
type ContextRequest struct {
	// ID names the context; "": execd picks one ("c-" and 8 random characters).
	ID string `json:"id,omitempty"`
	// Language is the kernel's; "" or LanguagePython.
	Language string `json:"language,omitempty"`
	// Env is added to the sandbox's environment; later entries win.
	Env []EnvVar `json:"env,omitempty"`
	// WorkingDir is the absolute directory the kernel starts in; "" for the container's.
	WorkingDir string `json:"workingDir,omitempty"`
}

// ValidateContextRequest reports every problem with r. Its messages never include env values.
func ValidateContextRequest(r *ContextRequest, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.ID != "" && !ValidContextID(r.ID) {
		errs = append(errs, field.Invalid(fldPath.Child("id"), r.ID, "must be a DNS label: lower-case letters, digits and '-', at most 63"))
	}
	if r.Language != "" && r.Language != LanguagePython {
		errs = append(errs, field.NotSupported(fldPath.Child("language"), r.Language, []string{LanguagePython}))
	}
	for i, e := range r.Env {
		p := fldPath.Child("env").Index(i)
		switch {
		case e.Name == "":
			errs = append(errs, field.Required(p.Child("name"), ""))
		case strings.ContainsAny(e.Name, "=\x00"):
			errs = append(errs, field.Invalid(p.Child("name"), e.Name, "contains '=' or a NUL byte"))
		default:
			if why, reserved := ReservedEnv(e.Name); reserved {
				errs = append(errs, field.Forbidden(p.Child("name"), e.Name+" may not be set: "+why))
			}
		}
		if strings.ContainsRune(e.Value, 0) {
			errs = append(errs, field.Invalid(p.Child("value"), field.OmitValueType{}, "contains a NUL byte"))
		}
	}
	if r.WorkingDir != "" && !path.IsAbs(r.WorkingDir) {
		errs = append(errs, field.Invalid(fldPath.Child("workingDir"), r.WorkingDir, "must be an absolute path"))
	}
	return errs
}

// ContextPhase is where a context is.
type ContextPhase string

const (
	// ContextIdle: its kernel waits for a run.
	ContextIdle ContextPhase = "Idle"
	// ContextBusy: a run is in progress.
	ContextBusy ContextPhase = "Busy"
	// ContextDead: its kernel ended; Message says how.
	ContextDead ContextPhase = "Dead"
)

// ContextState is the state of a context.
type ContextState struct {
	ID       string       `json:"id"`
	Language string       `json:"language"`
	Phase    ContextPhase `json:"phase"`
	// LanguageVersion is the interpreter's, as the kernel reported it ("3.11.2").
	LanguageVersion string `json:"languageVersion,omitempty"`
	// PID is the kernel's process ID in the container.
	PID        int    `json:"pid,omitempty"`
	WorkingDir string `json:"workingDir,omitempty"`
	// ExecutionCount counts the kernel's runs, as its In[N] prompt does.
	ExecutionCount int       `json:"executionCount"`
	StartTime      time.Time `json:"startTime"`
	// LastRunTime is when the latest run began; zero: none yet.
	LastRunTime time.Time `json:"lastRunTime,omitzero"`
	// Message says why a Dead context died.
	Message string `json:"message,omitempty"`
}

// ContextList is every context of the pod, oldest first.
type ContextList struct {
	Kind  string         `json:"kind"`
	Items []ContextState `json:"items"`
}

// ContextListKind is ContextList's Kind.
const ContextListKind = "ContextList"

// RunRequest runs code in a context.
type RunRequest struct {
	// Code is the source to run; required.
	Code string `json:"code"`
	// TimeoutSeconds interrupts the run after that long; 0: no limit.
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
}

// ValidateRunRequest reports every problem with r.
func ValidateRunRequest(r *RunRequest, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case strings.TrimSpace(r.Code) == "":
		errs = append(errs, field.Required(fldPath.Child("code"), "code to run is required"))
	case len(r.Code) > MaxRunCodeBytes:
		errs = append(errs, field.TooLong(fldPath.Child("code"), field.OmitValueType{}, MaxRunCodeBytes))
	}
	if r.TimeoutSeconds < 0 {
		errs = append(errs, field.Invalid(fldPath.Child("timeoutSeconds"), r.TimeoutSeconds, "must not be negative"))
	}
	return errs
}

// RunEventType is the kind of a RunEvent.
type RunEventType string

const (
	RunStdout RunEventType = "stdout"
	RunStderr RunEventType = "stderr"
	// RunResult is the value of the last expression: Text (text/plain) and Data.
	RunResult RunEventType = "result"
	// RunDisplay is a rich output shown during the run (a plot): Data, and Text.
	RunDisplay RunEventType = "display"
	// RunError is an exception: Error.
	RunError RunEventType = "error"
	// RunEnd is the last event: Status, ExecutionCount, and Reason when the run did not
	// complete by itself.
	RunEnd RunEventType = "end"
)

// Statuses of RunEnd, as the kernel's execute_reply has them.
const (
	RunStatusOK      = "ok"
	RunStatusError   = "error"
	RunStatusAborted = "aborted"
)

// Reasons of a RunEnd that did not end by itself.
const (
	// RunReasonInterrupted: an interrupt stopped it.
	RunReasonInterrupted = "Interrupted"
	// RunReasonDeadlineExceeded: TimeoutSeconds stopped it.
	RunReasonDeadlineExceeded = "DeadlineExceeded"
	// RunReasonKernelDied: the kernel ended during the run; the context is Dead.
	RunReasonKernelDied = "KernelDied"
)

// RunEvent is one line of a run's answer.
type RunEvent struct {
	Type RunEventType `json:"type"`
	// Text is stdout or stderr text, or a result's or display's text/plain.
	Text string `json:"text,omitempty"`
	// Data is a result's or display's every representation by MIME type; binary ones
	// (image/png) are base64, as the kernel sends them.
	Data map[string]string `json:"data,omitempty"`
	// ExecutionCount is the run's number (result, end).
	ExecutionCount int `json:"executionCount,omitempty"`
	// Error is an exception (error), or the one a run ended with (end, status error).
	Error *RunErrorInfo `json:"error,omitempty"`
	// Status (end) is RunStatusOK, RunStatusError or RunStatusAborted.
	Status string `json:"status,omitempty"`
	// Reason and Message (end) say why a run did not end by itself.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Truncated (end): some stdout or stderr was dropped past MaxRunStreamBytes.
	Truncated bool `json:"truncated,omitempty"`
}

// RunErrorInfo is an exception raised by a run.
type RunErrorInfo struct {
	// Name is the exception's class ("ZeroDivisionError"), Value its message.
	Name  string `json:"name"`
	Value string `json:"value"`
	// Traceback is the kernel's, one entry per frame, without terminal colours.
	Traceback []string `json:"traceback,omitempty"`
}

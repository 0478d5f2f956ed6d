package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SandboxCodeContextPhase is where a code context is.
type SandboxCodeContextPhase string

// The phases of a code context.
const (
	// CodeContextIdle: its interpreter waits for code.
	CodeContextIdle SandboxCodeContextPhase = "Idle"
	// CodeContextBusy: code runs in it.
	CodeContextBusy SandboxCodeContextPhase = "Busy"
	// CodeContextDead: its interpreter ended (killed, out of memory); status.message says
	// how. Delete it and make another.
	CodeContextDead SandboxCodeContextPhase = "Dead"
)

// DefaultCodeContext is the context a run makes when it names none: POST
// contexts/default/run runs code without making a context first.
const DefaultCodeContext = "default"

// SandboxCodeContext is a stateful interpreter in one replica of a sandbox, as a Jupyter
// notebook's kernel is: variables, imports and the working directory persist between the
// runs of one context. It is a real Jupyter kernel (ipykernel), so the sandbox's image needs
// python3 with ipykernel (the sample Python image has it, and matplotlib).
//
// POST one to the contexts subresource to make it (the answer comes once the interpreter is
// up); GET the subresource lists the contexts of every replica (replica=N: of one), GET
// contexts/ID answers one, DELETE contexts/ID ends it. POST contexts/ID/run a SandboxCodeRun
// runs code, and answers SandboxCodeRunEvents as they come; POST contexts/ID/interrupt
// interrupts a run, and the context keeps its state.
//
// metadata.name is the context's ID in its replica's pod: the one asked for, or a random one;
// metadata.creationTimestamp is its start. spec.env is never returned. A context lives as long
// as its pod's container: pause and resume, and a container restart, end it.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxCodeContext struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec SandboxCodeContextSpec `json:"spec,omitempty"`
	// +optional
	Status SandboxCodeContextStatus `json:"status,omitempty"`
}

// SandboxCodeContextSpec is what a context runs, and where.
type SandboxCodeContextSpec struct {
	// replica is the index of the replica to run in. Defaults to 0.
	// +optional
	Replica int32 `json:"replica,omitempty"`
	// language is the interpreter's: "python", the default and the only one today.
	// +optional
	Language string `json:"language,omitempty"`
	// env is added to the sandbox's environment; later entries win. It is never returned.
	// +optional
	// +listType=atomic
	Env []SandboxProcessEnvVar `json:"env,omitempty"`
	// workingDir is the absolute directory it starts in; the container's by default.
	// +optional
	WorkingDir string `json:"workingDir,omitempty"`
}

// SandboxCodeContextStatus is how a context is.
type SandboxCodeContextStatus struct {
	// phase is Idle, Busy or Dead.
	// +optional
	Phase SandboxCodeContextPhase `json:"phase,omitempty"`
	// pod runs it.
	// +optional
	Pod string `json:"pod,omitempty"`
	// pid is its interpreter's process ID in the sandbox's container.
	// +optional
	PID int32 `json:"pid,omitempty"`
	// languageVersion is the interpreter's ("3.11.2").
	// +optional
	LanguageVersion string `json:"languageVersion,omitempty"`
	// executionCount counts its runs, as a notebook's In[N] does.
	// +optional
	ExecutionCount int32 `json:"executionCount,omitempty"`
	// lastRunTime is when its latest run began.
	// +optional
	LastRunTime *metav1.Time `json:"lastRunTime,omitempty"`
	// message says why a Dead context ended.
	// +optional
	Message string `json:"message,omitempty"`
}

// SandboxCodeContextList is the contexts of a sandbox: by replica, each replica's oldest
// first. A replica whose pod could not be asked is left out, with a warning that says why.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxCodeContextList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []SandboxCodeContext `json:"items"`
}

// SandboxCodeContextOptions are the query parameters of the contexts subresource.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxCodeContextOptions struct {
	metav1.TypeMeta `json:",inline"`

	// path is what follows contexts/ in the URL: nothing (every context, or a make), a
	// context's ID, ID/run or ID/interrupt.
	// +optional
	Path string `json:"path,omitempty"`
	// replica is the index of the replica whose contexts to list, or whose context ID is;
	// unset, a list has every replica's and an ID is replica 0's. A make takes spec.replica.
	// +optional
	Replica *int32 `json:"replica,omitempty"`
}

// SandboxCodeRun is the body of a POST to contexts/ID/run: code to run in the context. The
// answer (200, application/jsonl) is SandboxCodeRunEvents, one JSON object per line, as the
// interpreter makes them; the last is of type end. A run that outlives timeoutSeconds, or
// whose client goes away, is interrupted: the context keeps its state.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxCodeRun struct {
	metav1.TypeMeta `json:",inline"`

	// code is the source to run; required, at most 1 MiB.
	Code string `json:"code"`
	// timeoutSeconds interrupts the run after that long; 0: no limit.
	// +optional
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
}

// SandboxCodeRunEventType is the kind of a SandboxCodeRunEvent.
type SandboxCodeRunEventType string

// The events of a run.
const (
	CodeRunStdout SandboxCodeRunEventType = "stdout"
	CodeRunStderr SandboxCodeRunEventType = "stderr"
	// CodeRunResult is the value of the last expression: text (text/plain) and data.
	CodeRunResult SandboxCodeRunEventType = "result"
	// CodeRunDisplay is a rich output shown during the run (a plot's image/png): data.
	CodeRunDisplay SandboxCodeRunEventType = "display"
	// CodeRunError is an exception: error.
	CodeRunError SandboxCodeRunEventType = "error"
	// CodeRunEnd is the last event: status, executionCount, and reason when the run did not
	// end by itself.
	CodeRunEnd SandboxCodeRunEventType = "end"
)

// Statuses and reasons of a run's end event.
const (
	CodeRunStatusOK      = "ok"
	CodeRunStatusError   = "error"
	CodeRunStatusAborted = "aborted"
	// CodeRunReasonInterrupted: an interrupt stopped it.
	CodeRunReasonInterrupted = "Interrupted"
	// CodeRunReasonDeadlineExceeded: timeoutSeconds stopped it.
	CodeRunReasonDeadlineExceeded = "DeadlineExceeded"
	// CodeRunReasonKernelDied: the interpreter ended during the run; the context is Dead.
	CodeRunReasonKernelDied = "KernelDied"
)

// SandboxCodeRunEvent is one line of a run's answer.
type SandboxCodeRunEvent struct {
	// type is stdout, stderr, result, display, error or end.
	Type SandboxCodeRunEventType `json:"type"`
	// text is stdout or stderr text, or a result's or display's text/plain.
	// +optional
	Text string `json:"text,omitempty"`
	// data is a result's or display's every representation by MIME type; binary ones
	// (image/png) are base64.
	// +optional
	Data map[string]string `json:"data,omitempty"`
	// executionCount is the run's number (result, end).
	// +optional
	ExecutionCount int32 `json:"executionCount,omitempty"`
	// error is an exception (error), or the one a run ended with (end, status error).
	// +optional
	Error *SandboxCodeError `json:"error,omitempty"`
	// status (end) is ok, error or aborted.
	// +optional
	Status string `json:"status,omitempty"`
	// reason (Interrupted, DeadlineExceeded, KernelDied) and message (end) say why a run did
	// not end by itself.
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// truncated (end): some output was too large and was dropped (over 4 MiB of stdout or
	// stderr, an output over 16 MiB).
	// +optional
	Truncated bool `json:"truncated,omitempty"`
}

// SandboxCodeError is an exception raised by a run.
type SandboxCodeError struct {
	// name is the exception's class ("ZeroDivisionError"), value its message.
	Name  string `json:"name"`
	Value string `json:"value"`
	// traceback is the interpreter's, without terminal colours.
	// +optional
	// +listType=atomic
	Traceback []string `json:"traceback,omitempty"`
}

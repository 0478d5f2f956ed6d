package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SandboxProcessPhase is where a process is.
type SandboxProcessPhase string

// The phases of a process, as sandbox-execd reports them.
const (
	ProcessPhaseRunning SandboxProcessPhase = "Running"
	// ProcessPhaseExited: it has ended; exitCode or signal says how.
	ProcessPhaseExited SandboxProcessPhase = "Exited"
	// ProcessPhaseLost: the sandbox's container restarted while it ran; how it ended is
	// unknown, and its output is gone.
	ProcessPhaseLost SandboxProcessPhase = "Lost"
)

// Reasons of a process's status, as a container's terminated state has them.
const (
	// ProcessReasonCompleted: exit code 0.
	ProcessReasonCompleted = "Completed"
	// ProcessReasonError: another exit code, or a signal killed it.
	ProcessReasonError = "Error"
	// ProcessReasonDeadlineExceeded: it ran longer than timeoutSeconds and was stopped.
	ProcessReasonDeadlineExceeded = "DeadlineExceeded"
	// ProcessReasonContainerRestarted: a Lost process.
	ProcessReasonContainerRestarted = "ContainerRestarted"
)

// SandboxProcess is a process that outlives the connection that started it, in one replica
// of a sandbox. POST one to the processes subresource to start it; the answer, at once, has
// its ID. GET the subresource lists the processes of every replica (replica=N: of one), GET
// processes/ID answers one, and POST processes/ID/signal a SandboxProcessSignal signals it.
// The log subresource serves its output (process=ID), and attach joins it.
//
// The sandbox names a process: metadata.name is its ID in its replica's pod, random, so that
// the ID of a process of an earlier pod reaches no other; metadata.namespace is the sandbox's
// and metadata.creationTimestamp the start. What the server answers is what the pod runs:
// spec.command is the whole argv (with args appended) and spec.env is never returned, since
// its values may be secrets.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxProcess struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SandboxProcessSpec `json:"spec"`
	// +optional
	Status SandboxProcessStatus `json:"status,omitempty"`
}

// SandboxProcessSpec is what a process runs, and where. It runs as an exec does: the
// container's environment, the sandbox's env, then env; as the sandbox's user; in a process
// group of its own (with a TTY, a session whose terminal is its own), which its signals reach
// and which is killed when it exits.
type SandboxProcessSpec struct {
	// replica is the index of the replica to run in. Defaults to 0.
	// +optional
	Replica int32 `json:"replica,omitempty"`
	// command is the executable and its first arguments; required.
	// +listType=atomic
	Command []string `json:"command"`
	// args are appended to command.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`
	// env is added to the sandbox's environment; later entries win. It is never returned.
	// +optional
	// +listType=atomic
	Env []SandboxProcessEnvVar `json:"env,omitempty"`
	// workingDir is the absolute directory it starts in; the container's by default.
	// +optional
	WorkingDir string `json:"workingDir,omitempty"`
	// tty runs it on a pseudo-terminal of its own: one output stream, and attached clients
	// get the terminal (raw input, resizes, and a replay of the screen when they attach).
	// +optional
	TTY bool `json:"tty,omitempty"`
	// terminalSize is the terminal's size until a client resizes it (tty only); 80x24 by
	// default.
	// +optional
	TerminalSize *SandboxTerminalSize `json:"terminalSize,omitempty"`
	// stdin keeps its standard input open for attached clients; without it, stdin is empty.
	// +optional
	Stdin bool `json:"stdin,omitempty"`
	// stdinOnce closes stdin when the first attached client with stdin detaches or ends its
	// input, as a container's stdinOnce does; it needs stdin.
	// +optional
	StdinOnce bool `json:"stdinOnce,omitempty"`
	// timeoutSeconds stops it (TERM, then KILL a few seconds later) after that long; 0: no
	// limit.
	// +optional
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
}

// SandboxProcessEnvVar is one variable of a process's environment.
type SandboxProcessEnvVar struct {
	Name string `json:"name"`
	// +optional
	Value string `json:"value,omitempty"`
}

// SandboxTerminalSize is the size of a terminal, in characters.
type SandboxTerminalSize struct {
	Width  int32 `json:"width"`
	Height int32 `json:"height"`
}

// SandboxProcessStatus is what became of a process.
type SandboxProcessStatus struct {
	// phase is Running, Exited or Lost.
	// +optional
	Phase SandboxProcessPhase `json:"phase,omitempty"`
	// pod runs (or ran) it.
	// +optional
	Pod string `json:"pod,omitempty"`
	// pid is its process ID in the sandbox's container, and its process group's.
	// +optional
	PID int32 `json:"pid,omitempty"`
	// exitCode is set when it exited by itself.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// signal ("TERM", "KILL", ...) is set when a signal killed it.
	// +optional
	Signal string `json:"signal,omitempty"`
	// reason (Completed, Error, DeadlineExceeded, ContainerRestarted) and message say why
	// it ended.
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
}

// SandboxProcessList is the processes of a sandbox: by replica, each replica's oldest first.
// A replica whose pod could not be asked is left out, with a warning that says why.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxProcessList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []SandboxProcess `json:"items"`
}

// SandboxProcessSignal is the body of a POST to processes/ID/signal: a signal for the
// process's group. The answer is the process.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxProcessSignal struct {
	metav1.TypeMeta `json:",inline"`

	// signal is a signal's name, with or without SIG ("TERM", "SIGINT", "KILL"). Defaults
	// to TERM.
	// +optional
	Signal string `json:"signal,omitempty"`
	// gracePeriodSeconds, when set, sends KILL to the group that many seconds later if the
	// process still runs (0: at once).
	// +optional
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
}

// SandboxProcessOptions are the query parameters of the processes subresource.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxProcessOptions struct {
	metav1.TypeMeta `json:",inline"`

	// path is what follows processes/ in the URL: nothing (every process, or a start), a
	// process's ID, or ID/signal.
	// +optional
	Path string `json:"path,omitempty"`
	// replica is the index of the replica whose processes to list, or whose process ID is;
	// unset, a list has every replica's and an ID is replica 0's. A start takes
	// spec.replica.
	// +optional
	Replica *int32 `json:"replica,omitempty"`
}

// SandboxAttachOptions are the query parameters of the attach subresource, which joins a
// running process with the pods/attach protocol (WebSocket v5.channel.k8s.io, or SPDY), so
// that client-go's remotecommand executors work unchanged. Any number of clients may attach
// at once; each gets the output from the moment it attached (a TTY's: the last screen first),
// and detaching leaves the process running. The stream ends when the process exits.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxAttachOptions struct {
	metav1.TypeMeta `json:",inline"`

	// process is the ID of the process; required.
	Process string `json:"process"`
	// replica is the index of the replica it runs in. Defaults to 0.
	// +optional
	Replica int32 `json:"replica,omitempty"`
	// stdin passes the caller's input to the process, which must have been started with
	// stdin.
	// +optional
	Stdin bool `json:"stdin,omitempty"`
	// stdout returns the process's standard output (a TTY's whole output).
	// +optional
	Stdout bool `json:"stdout,omitempty"`
	// stderr returns its standard error.
	// +optional
	Stderr bool `json:"stderr,omitempty"`
	// tty: the process runs on a terminal and the caller is one; it must have been started
	// with tty.
	// +optional
	TTY bool `json:"tty,omitempty"`
}

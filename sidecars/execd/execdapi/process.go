package execdapi

import (
	"path"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Processes: commands that outlive the connection that started them. sandbox-apiserver serves
// them as the processes, attach and log subresources of sandboxes; execd runs them in the
// sandbox container, keeps their output, and lets clients join them later.
//
//	POST ProcessesPath            start one (ProcessRequest → 201 ProcessState)         apiserver
//	GET  ProcessesPath            all of them (ProcessList), oldest first               apiserver
//	GET  ProcessPath(ID)          one (ProcessState)                                    apiserver
//	POST ProcessSignalPath(ID)    signal its group (ProcessSignalRequest → ProcessState) apiserver
//	GET  ProcessLogPath(ID)       its output (ProcessLog* parameters), text/plain       apiserver
//	GET, POST ProcessAttachPath(ID)  join it: the kubelet's attach protocol (SPDY,      apiserver
//	                              WebSocket), as ExecPath speaks exec
//
// A start answers at once, with the new process's state and ID, without waiting for output.
// The process runs as an exec runs: the container's env, the sandbox's env, then Env; in
// WorkingDir; as execd's user; in a process group of its own (a TTY: a session of its own
// whose controlling terminal is the process's pseudo-terminal), so that a signal reaches
// everything it started. When it exits, whatever it left in its group is killed, as a
// container's processes end with it. Past TimeoutSeconds its group gets SIGTERM, then SIGKILL
// a few seconds later, and it ends with reason DeadlineExceeded.
//
// Output: stdout and stderr, interleaved as execd reads them (a TTY has one stream), are kept
// per process in LogDir, at most MaxProcessLogBytes: past half of that the older half is
// dropped, so the newest output is always kept. The log endpoint serves it as the task log is
// served (follow, tailLines, limitBytes), and also from a byte offset, so that a client can
// resume where it stopped: offsets count the process's output from its first byte, and every
// answer says, in ProcessLogOffsetHeader, at which offset its body starts (later than asked
// when what was asked for has been dropped), and, in ProcessLogNextOffsetHeader, at which one
// the next answer would start, when the body is complete at once (no follow, or the process's
// output has ended). A follower counts: the next offset is ProcessLogOffsetHeader plus the
// bytes it received. A follow that falls more than one rotation behind ends, rather than skip
// output the client could not tell it missed; resuming at its offset shows the gap.
//
// Attach: any number of clients may attach at once. Each gets all output from the moment it
// attached (stdout and stderr on their own streams; a TTY's on stdout), and input from any of
// them goes to the process's stdin, if it has one (Stdin). Attaching to a TTY process first
// replays the last ProcessReplayBytes of its output, so that the screen comes back. A client
// that detaches, or drops, leaves the process running; one too slow to take the output is
// detached (its stream ends with an error), not waited for. A resize from any attached client
// resizes the terminal. The stream ends, with success, when the process exits. StdinOnce
// closes the process's stdin when the first attached client with stdin ends its input or
// detaches. Like an exec, an attach may name its sandbox in ExecSandboxUIDParam instead of
// SandboxUIDHeader.
//
// Limits: MaxProcesses run at once; of the processes that ended, the newest
// MaxEndedProcesses are kept (state and output), and fewer while their output takes more than
// MaxEndedProcessLogBytes: the oldest go first. Output stays readable until then, or until
// execd ends.
//
// A restart: execd keeps a small record of each running process in its state directory. When
// its container restarts, the processes die with it; the new execd reports those it finds as
// Lost (reason ContainerRestarted), without their output, and knows nothing of those that had
// ended.
//
// Answers (errors are a JSON metav1.Status, as the files API's):
//
//	200 the state, the list, the log; 201 a process started
//	400 a malformed body or parameter; a request naming no sandbox; an attach with a TTY to a
//	    process without one, or with stdin to a process without stdin
//	403 a client identity that may not use the path
//	404 no such process (never started here, or dropped), or execd runs no processes (a pod
//	    without the log volume)
//	409 execd belongs to no sandbox, or to another; an attach with stdin after StdinOnce
//	    closed it
//	410 the process has ended: it cannot be attached to or signalled; a Lost process has no
//	    output
//	413 a body too large: over 1 MiB for a start, 4 KiB for a signal
//	422 a request that fails validation; a command that cannot start (not found, not
//	    executable, no such working directory)
//	429 MaxProcesses are running
//	503 execd is shutting down
const ProcessesPath = "/v1/processes"

// The paths below ProcessPath: what follows the process's ID.
const (
	ProcessSignalSubpath = "signal"
	ProcessLogSubpath    = "log"
	ProcessAttachSubpath = "attach"
)

// ProcessPath is the path of the process with that ID.
func ProcessPath(id string) string { return ProcessesPath + "/" + id }

// ProcessSignalPath, ProcessLogPath and ProcessAttachPath are the paths of the process's
// signal, log and attach endpoints.
func ProcessSignalPath(id string) string { return ProcessPath(id) + "/" + ProcessSignalSubpath }
func ProcessLogPath(id string) string    { return ProcessPath(id) + "/" + ProcessLogSubpath }
func ProcessAttachPath(id string) string { return ProcessPath(id) + "/" + ProcessAttachSubpath }

// ProcessAttachID is the process ID of an attach path; ok is false for any other path.
func ProcessAttachID(p string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(p, ProcessesPath+"/")
	if !ok {
		return "", false
	}
	id, ok = strings.CutSuffix(rest, "/"+ProcessAttachSubpath)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", false
	}
	return id, true
}

// Parameters of ProcessLogPath; the first three mean what they mean for the task log.
const (
	ProcessLogFollowParam     = "follow"
	ProcessLogTailLinesParam  = "tailLines"
	ProcessLogLimitBytesParam = "limitBytes"
	// ProcessLogOffsetParam starts the answer at that offset of the process's output; it
	// excludes tailLines.
	ProcessLogOffsetParam = "offset"
)

// Headers of a log answer: the offsets (in bytes, from the process's first byte of output) of
// the first byte of its body, and of the byte after its last when the body is complete at
// once (see ProcessesPath).
const (
	ProcessLogOffsetHeader     = "X-Kube-Sandbox-Log-Offset"
	ProcessLogNextOffsetHeader = "X-Kube-Sandbox-Log-Next-Offset"
)

// Limits of the processes of a pod. Output lives on the log volume, next to the task's logs,
// so the limits keep what processes can ever put there (MaxProcesses running logs plus the
// ended ones) at 24 MiB, within what the volume (LogVolumeSizeLimit) leaves besides the task's
// two attempts.
const (
	// MaxProcesses bounds the processes running at once; a start past it answers 429.
	MaxProcesses = 64
	// MaxEndedProcesses bounds the ended processes kept, with their output.
	MaxEndedProcesses = 256
	// MaxProcessLogBytes bounds the output kept of one process: 64 running fill 16 MiB.
	MaxProcessLogBytes = 256 << 10
	// MaxEndedProcessLogBytes bounds the output kept of all the ended processes together.
	MaxEndedProcessLogBytes = 8 << 20
	// ProcessReplayBytes is how much of a TTY process's latest output an attach replays:
	// more than a screen of text, even a large one with colours.
	ProcessReplayBytes = 64 << 10
	// MaxProcessCommandBytes bounds a process's argv, which every list of processes carries:
	// a longer script belongs in a file (the files API).
	MaxProcessCommandBytes = 32 << 10
)

// ProcessRequest starts a process.
type ProcessRequest struct {
	// Command is the argv; Command[0] is required.
	Command []string `json:"command"`
	// Env is added to the sandbox's environment; later entries win.
	Env []EnvVar `json:"env,omitempty"`
	// WorkingDir is the absolute directory the process starts in; "" for the container's.
	WorkingDir string `json:"workingDir,omitempty"`
	// TTY runs the process on a pseudo-terminal of its own: one output stream, and attached
	// clients get the terminal (raw input, resizes, a replay of the screen).
	TTY bool `json:"tty,omitempty"`
	// TerminalSize is the terminal's initial size (TTY only); unset: 80x24.
	TerminalSize *TerminalSize `json:"terminalSize,omitempty"`
	// Stdin keeps the process's stdin open for attached clients; without it, stdin is
	// /dev/null (or a terminal nobody types into).
	Stdin bool `json:"stdin,omitempty"`
	// StdinOnce closes stdin when the first attached client with stdin ends its input or
	// detaches, as a container's stdinOnce does; it needs Stdin.
	StdinOnce bool `json:"stdinOnce,omitempty"`
	// TimeoutSeconds bounds the process's run; 0: no limit.
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
}

// TerminalSize is the size of a terminal, in characters.
type TerminalSize struct {
	Width  uint16 `json:"width"`
	Height uint16 `json:"height"`
}

// ValidateProcessRequest reports every problem with a start request. Its messages never
// include env values or arguments.
func ValidateProcessRequest(r *ProcessRequest, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	cmdPath := fldPath.Child("command")
	if len(r.Command) == 0 || r.Command[0] == "" {
		errs = append(errs, field.Required(cmdPath.Index(0), "the executable is required"))
	}
	size := 0
	for i, arg := range r.Command {
		size += len(arg)
		if strings.ContainsRune(arg, 0) {
			errs = append(errs, field.Invalid(cmdPath.Index(i), field.OmitValueType{}, "contains a NUL byte"))
		}
	}
	if size > MaxProcessCommandBytes {
		errs = append(errs, field.TooLong(cmdPath, field.OmitValueType{}, MaxProcessCommandBytes))
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
	if s := r.TerminalSize; s != nil {
		p := fldPath.Child("terminalSize")
		switch {
		case !r.TTY:
			errs = append(errs, field.Forbidden(p, "only a process with a TTY has a terminal"))
		case s.Width == 0 || s.Height == 0:
			errs = append(errs, field.Invalid(p, *s, "width and height must be positive"))
		}
	}
	if r.StdinOnce && !r.Stdin {
		errs = append(errs, field.Forbidden(fldPath.Child("stdinOnce"), "needs stdin"))
	}
	if r.TimeoutSeconds < 0 {
		errs = append(errs, field.Invalid(fldPath.Child("timeoutSeconds"), r.TimeoutSeconds, "must not be negative"))
	}
	return errs
}

// ProcessPhase is where a process is.
type ProcessPhase string

const (
	ProcessRunning ProcessPhase = "Running"
	// ProcessExited: it has ended; ExitCode or Signal says how.
	ProcessExited ProcessPhase = "Exited"
	// ProcessLost: the container restarted while it ran; how it ended is unknown.
	ProcessLost ProcessPhase = "Lost"
)

// Reasons of a ProcessState, as a container's terminated state has them.
const (
	// ProcessReasonCompleted: exit code 0.
	ProcessReasonCompleted = "Completed"
	// ProcessReasonError: another exit code, or a signal killed it.
	ProcessReasonError = "Error"
	// ProcessReasonDeadlineExceeded: it ran longer than TimeoutSeconds and was killed.
	ProcessReasonDeadlineExceeded = "DeadlineExceeded"
	// ProcessReasonContainerRestarted: a Lost process.
	ProcessReasonContainerRestarted = "ContainerRestarted"
)

// ProcessState is the state of a process.
type ProcessState struct {
	// ID names the process in this pod: "p-" and 8 random characters of [a-z2-7]. Random
	// rather than counted, so that a client holding the ID of a process of an earlier
	// container, or of another pod of the sandbox, does not reach another process by it.
	ID string `json:"id"`
	// Command is the argv it runs. A Lost process's may be shortened.
	Command    []string `json:"command"`
	WorkingDir string   `json:"workingDir,omitempty"`
	TTY        bool     `json:"tty,omitempty"`
	Stdin      bool     `json:"stdin,omitempty"`
	StdinOnce  bool     `json:"stdinOnce,omitempty"`
	// TimeoutSeconds as requested; 0: no limit.
	TimeoutSeconds int64        `json:"timeoutSeconds,omitempty"`
	Phase          ProcessPhase `json:"phase"`
	// PID is its process ID in the container (and its process group's).
	PID int `json:"pid,omitempty"`
	// ExitCode is set when it exited by itself; Signal ("TERM", "KILL", ...) when a signal
	// killed it (a shell would report 128 plus the signal's number).
	ExitCode *int32 `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// Reason (ProcessReason*) and Message say why it ended.
	Reason    string     `json:"reason,omitempty"`
	Message   string     `json:"message,omitempty"`
	StartTime time.Time  `json:"startTime"`
	EndTime   *time.Time `json:"endTime,omitempty"`
}

// Ended reports whether the process no longer runs.
func (s *ProcessState) Ended() bool { return s.Phase != ProcessRunning }

// ProcessListKind is the Kind of a ProcessList.
const ProcessListKind = "ProcessList"

// ProcessList is every process execd knows, oldest first.
type ProcessList struct {
	Kind  string         `json:"kind"`
	Items []ProcessState `json:"items"`
}

// DefaultProcessSignal is the signal of a ProcessSignalRequest that names none.
const DefaultProcessSignal = "TERM"

// ProcessSignalRequest is the body of POST ProcessSignalPath.
type ProcessSignalRequest struct {
	// Signal is a signal's name, with or without "SIG" ("TERM", "SIGINT", "KILL"); "":
	// DefaultProcessSignal.
	Signal string `json:"signal,omitempty"`
	// GracePeriodSeconds, when set, sends SIGKILL to the process group that many seconds
	// later if the process still runs (0: at once).
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
}

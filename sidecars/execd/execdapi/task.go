package execdapi

import "time"

// Tasks. sandbox-controller starts a replica's task in its pod's execd and watches it; execd
// runs it in the sandbox container, keeps its state in StateDir (so that a restarted execd
// knows what happened) and its output in LogDir, and pushes every change of state down the
// watch stream the controller holds open: no side polls.
//
//	PUT  TaskPath                  start the task (TaskRequest → TaskState)            controller
//	GET  TaskPath                  the task's state (TaskState)                         controller
//	GET  TaskPath?watch=true       a stream of TaskState, one JSON document per line:   controller
//	                               the current state first, then each change; a bare
//	                               newline every TaskHeartbeat keeps the stream alive
//	GET  TaskLogPath               the task's output (TaskLog* parameters)               apiserver
//
// A pod runs at most one task. A PUT with the ID of the task the pod has answers its state and
// starts nothing (the controller repeats itself after a restart); a PUT with another ID is a
// conflict (409). Tasks need execd to belong to a sandbox (direct mode, or a claim), and the
// request to name it (SandboxUIDHeader).
//
// Answers (errors are a text/plain message):
//
//	200 PUT: the task's state, started now or before (same ID); GET: its state, or the stream
//	400 a malformed body or parameter, a request that fails validation (env names as for a
//	    claim; ID, SandboxUID and Command[0] required), or one naming no sandbox
//	403 a client identity that may not use the path
//	404 execd runs no tasks (a pod without the log volume); the log: no task yet, no
//	    previous attempt, or its log is gone
//	409 execd belongs to no sandbox or to another (header or SandboxUID), or the pod has
//	    another task
//	503 execd is shutting down
//
// How an attempt runs: PreStart, then the command, then PostStop, each in the sandbox
// container as an exec runs (the container's env without EnvClientCA, the sandbox's env, then
// Env; WorkingDir; a process group of its own; stdin /dev/null; stdout and stderr to the log).
// When the command exits, whatever it left in its process group is killed; past
// TimeoutSeconds the group gets SIGTERM, then SIGKILL a few seconds later. The attempt's end
// is published once PostStop has run. A command that cannot start fails with StartFailed and
// ExitCode 127 (not found) or 126 (not executable), as a shell reports it, or no ExitCode for
// another cause; a PreStartFailed attempt has no ExitCode. When execd stops (its container
// does), the running attempt is killed and its state stays Running; the execd of the
// restarted container records it as ContainerRestarted.
const (
	TaskPath    = "/v1/task"
	TaskLogPath = "/v1/task/log"
)

// Parameters of TaskPath and TaskLogPath.
const (
	// TaskWatchParam ("true") makes a GET of TaskPath a stream.
	TaskWatchParam = "watch"
	// TaskLogFollowParam ("true") streams the log until the attempt ends.
	TaskLogFollowParam = "follow"
	// TaskLogTailLinesParam returns only that many lines from the end.
	TaskLogTailLinesParam = "tailLines"
	// TaskLogLimitBytesParam stops after that many bytes.
	TaskLogLimitBytesParam = "limitBytes"
	// TaskLogPreviousParam ("true") serves the previous attempt's log.
	TaskLogPreviousParam = "previous"
)

// TaskWatchContentType is the media type of a watch stream: newline-delimited JSON.
const TaskWatchContentType = "application/x-ndjson"

// TaskHeartbeat is how often a watch stream without changes carries a bare newline. A client
// that hears nothing for three of them takes the connection for dead.
const TaskHeartbeat = 15 * time.Second

// The task log: execd writes the output (stdout and stderr, interleaved as they come) of each
// attempt to LogDir/task-<attempt>.log, and keeps the logs of the last two attempts. A log
// holds at most MaxTaskLogBytes: past half of that it moves to a ".1" file, which replaces
// the previous one, so the newest output is always kept.
const (
	// LogVolume is the disk-backed emptyDir at LogDir (sized by LogVolumeSizeLimit).
	LogVolume = "kube-sandbox-execd-log"
	// LogDir holds the task logs.
	LogDir = "/.kube-sandbox/log"
	// MaxTaskLogBytes bounds one attempt's log.
	MaxTaskLogBytes = 16 << 20
	// LogVolumeSizeLimit bounds LogVolume: two attempts' logs, with room to spare.
	LogVolumeSizeLimit = "64Mi"
)

// TaskRequest starts a task.
type TaskRequest struct {
	// ID identifies the task: the same ID twice starts it once.
	ID string `json:"id"`
	// SandboxUID is the sandbox the task runs for; execd refuses another (409).
	SandboxUID string `json:"sandboxUID"`
	// Command and Args are the argv; Command is required.
	Command []string `json:"command"`
	Args    []string `json:"args,omitempty"`
	// Env is added to the sandbox's environment.
	Env []EnvVar `json:"env,omitempty"`
	// WorkingDir is the absolute directory the task starts in; "" for the container's.
	WorkingDir string `json:"workingDir,omitempty"`
	// TimeoutSeconds bounds each attempt; 0: no limit.
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
	// RestartOnFailure retries a failed attempt in the pod, at most Retries times.
	RestartOnFailure bool  `json:"restartOnFailure,omitempty"`
	Retries          int32 `json:"retries,omitempty"`
	// FirstAttempt numbers the first attempt in this pod (attempts made on earlier pods of
	// the replica come first); 0 is taken as 1.
	FirstAttempt int32 `json:"firstAttempt,omitempty"`
	// PreStart and PostStop run before and after each attempt, with their timeouts (0: 30 s).
	PreStart               []string `json:"preStart,omitempty"`
	PreStartTimeoutSeconds int64    `json:"preStartTimeoutSeconds,omitempty"`
	PostStop               []string `json:"postStop,omitempty"`
	PostStopTimeoutSeconds int64    `json:"postStopTimeoutSeconds,omitempty"`
}

// TaskPhase is where a task is in a pod.
type TaskPhase string

const (
	// TaskNone: the pod has no task (no PUT yet).
	TaskNone      TaskPhase = ""
	TaskRunning   TaskPhase = "Running"
	TaskSucceeded TaskPhase = "Succeeded"
	TaskFailed    TaskPhase = "Failed"
)

// Reasons of a TaskState.
const (
	TaskReasonError            = "Error"
	TaskReasonDeadlineExceeded = "DeadlineExceeded"
	TaskReasonPreStartFailed   = "PreStartFailed"
	TaskReasonStartFailed      = "StartFailed"
	// TaskReasonContainerRestarted: execd restarted (its container did) while an attempt
	// ran, so the attempt died with it.
	TaskReasonContainerRestarted = "ContainerRestarted"
)

// TaskState is the state of a pod's task.
type TaskState struct {
	// ID of the task; "" when the pod has none.
	ID    string    `json:"id,omitempty"`
	Phase TaskPhase `json:"phase,omitempty"`
	// Attempt is the number of the current (or last) attempt, counted from FirstAttempt.
	Attempt int32 `json:"attempt,omitempty"`
	// ExitCode of the last attempt that exited (nil while none has, or if killed by a signal
	// it is 128+signal, as shells say).
	ExitCode *int32 `json:"exitCode,omitempty"`
	// StartTime is when the first attempt in this pod started; FinishTime when the task ended.
	StartTime  *time.Time `json:"startTime,omitempty"`
	FinishTime *time.Time `json:"finishTime,omitempty"`
	// Reason and Message tell the last error (TaskReason*).
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Generation increases with every change, so that a client can drop what it has seen.
	Generation int64 `json:"generation"`
}

// Final reports whether the task has ended in this pod.
func (s *TaskState) Final() bool { return s.Phase == TaskSucceeded || s.Phase == TaskFailed }

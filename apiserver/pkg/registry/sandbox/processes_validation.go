package sandbox

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

var (
	processKind        = sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxProcess").GroupKind()
	processSignalKind  = sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxProcessSignal").GroupKind()
	processOptionsKind = sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxProcessOptions").GroupKind()
	attachOptionsKind  = sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxAttachOptions").GroupKind()
)

// signalName is what a signal's name looks like, with or without SIG; which names exist is
// execd's to say (its 422 names the field).
var signalName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,15}$`)

// invalid is a 422 Invalid of kind for sandbox name with the fields at fault. The object has
// no name of its own (the sandbox names a process when it starts), so the message names the
// sandbox it is for.
func invalid(kind schema.GroupKind, name string, errs field.ErrorList) *apierrors.StatusError {
	err := apierrors.NewInvalid(kind, "", errs)
	err.ErrStatus.Message = fmt.Sprintf("%s.%s for sandbox %q is invalid: %s", kind.Kind, kind.Group, name, errs.ToAggregate().Error())
	return err
}

// processIDErrors says what is wrong with a process ID, if anything. execd makes IDs of "p-"
// and lower-case base32; any DNS label is let through for execd to know or not, and nothing
// else reaches a URL of execd.
func processIDErrors(id string) []string {
	if id == "" {
		return []string{"must not be empty"}
	}
	return utilvalidation.IsDNS1123Label(id)
}

func validateProcessID(id string, fld *field.Path) field.ErrorList {
	if id == "" {
		return field.ErrorList{field.Required(fld, "the ID of a process, as its start answered it (metadata.name)")}
	}
	var errs field.ErrorList
	for _, msg := range processIDErrors(id) {
		errs = append(errs, field.Invalid(fld, id, msg))
	}
	return errs
}

// ValidateProcessOptions checks the query of a request to the processes subresource of
// sandbox name.
func ValidateProcessOptions(name string, opts *sandboxv1alpha1.SandboxProcessOptions) *apierrors.StatusError {
	if opts.Replica != nil && *opts.Replica < 0 {
		return invalid(processOptionsKind, name, field.ErrorList{
			field.Invalid(field.NewPath("replica"), *opts.Replica, "must be greater than or equal to 0")})
	}
	return nil
}

// ValidateProcess checks a start for sandbox name as execd will check it, with execd's own
// validator (execdapi.ValidateProcessRequest) for what both know, so that a bad start is
// refused here with this API's field paths: a 422 Invalid, or nil.
func ValidateProcess(name string, p *sandboxv1alpha1.SandboxProcess) *apierrors.StatusError {
	if errs := validateProcess(p); len(errs) > 0 {
		return invalid(processKind, name, errs)
	}
	return nil
}

func validateProcess(p *sandboxv1alpha1.SandboxProcess) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if p.Name != "" {
		errs = append(errs, field.Forbidden(meta.Child("name"), "the sandbox names its processes: leave it empty"))
	}
	if p.GenerateName != "" {
		errs = append(errs, field.Forbidden(meta.Child("generateName"), "the sandbox names its processes: leave it empty"))
	}
	spec := field.NewPath("spec")
	s := &p.Spec
	if s.Replica < 0 {
		errs = append(errs, field.Invalid(spec.Child("replica"), s.Replica, "must be greater than or equal to 0"))
	}
	// execd sees one argv; command alone here, so that its errors name command's indexes,
	// and args below.
	req := processRequest(s)
	req.Command = s.Command
	if ts := s.TerminalSize; ts != nil && (ts.Width < 0 || ts.Width > math.MaxUint16 || ts.Height < 0 || ts.Height > math.MaxUint16) {
		errs = append(errs, field.Invalid(spec.Child("terminalSize"), *ts, fmt.Sprintf("width and height must be between 1 and %d", math.MaxUint16)))
		// Some size, so that execd's validator judges the rest (a terminal without a TTY).
		req.TerminalSize = &execdapi.TerminalSize{Width: 1, Height: 1}
	}
	errs = append(errs, execdapi.ValidateProcessRequest(req, spec)...)
	// The argv as a whole is bounded: what command leaves, args may take.
	commandBytes, argBytes := totalBytes(s.Command), 0
	for i, arg := range s.Args {
		argBytes += len(arg)
		if strings.ContainsRune(arg, 0) {
			errs = append(errs, field.Invalid(spec.Child("args").Index(i), field.OmitValueType{}, "contains a NUL byte"))
		}
	}
	if commandBytes <= execdapi.MaxProcessCommandBytes && commandBytes+argBytes > execdapi.MaxProcessCommandBytes {
		errs = append(errs, field.TooLong(spec.Child("args"), field.OmitValueType{}, execdapi.MaxProcessCommandBytes-commandBytes))
	}
	return errs
}

func totalBytes(ss []string) int {
	n := 0
	for _, s := range ss {
		n += len(s)
	}
	return n
}

// ValidateProcessSignal checks a signal for process id.
func ValidateProcessSignal(id string, sig *sandboxv1alpha1.SandboxProcessSignal) *apierrors.StatusError {
	var errs field.ErrorList
	if sig.Signal != "" && !signalName.MatchString(sig.Signal) {
		errs = append(errs, field.Invalid(field.NewPath("signal"), sig.Signal, "must be a signal's name, such as TERM, INT, HUP or KILL"))
	}
	if g := sig.GracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, field.Invalid(field.NewPath("gracePeriodSeconds"), *g, "must be greater than or equal to 0"))
	}
	if len(errs) > 0 {
		err := apierrors.NewInvalid(processSignalKind, id, errs)
		err.ErrStatus.Message = fmt.Sprintf("%s.%s for process %q is invalid: %s", processSignalKind.Kind, processSignalKind.Group, id, errs.ToAggregate().Error())
		return err
	}
	return nil
}

// ValidateAttachOptions checks the options of an attach to a process of sandbox name.
func ValidateAttachOptions(name string, opts *sandboxv1alpha1.SandboxAttachOptions) *apierrors.StatusError {
	errs := validateProcessID(opts.Process, field.NewPath("process"))
	if opts.Replica < 0 {
		errs = append(errs, field.Invalid(field.NewPath("replica"), opts.Replica, "must be greater than or equal to 0"))
	}
	if !opts.Stdin && !opts.Stdout && !opts.Stderr {
		errs = append(errs, field.Required(field.NewPath("stdout"), "at least one of stdin, stdout or stderr is required"))
	}
	if len(errs) > 0 {
		return invalid(attachOptionsKind, name, errs)
	}
	return nil
}

// validateProcessLogOptions checks what the log options say of a process: its ID, and the
// options that only a process's log, or only a task's, has.
func validateProcessLogOptions(opts *sandboxv1alpha1.SandboxLogOptions) field.ErrorList {
	var errs field.ErrorList
	offset := field.NewPath("offsetBytes")
	if opts.OffsetBytes != nil && *opts.OffsetBytes < 0 {
		errs = append(errs, field.Invalid(offset, *opts.OffsetBytes, "must be greater than or equal to 0"))
	}
	if opts.Process == "" {
		if opts.OffsetBytes != nil {
			errs = append(errs, field.Forbidden(offset, "only a process's log (process) is read from an offset"))
		}
		return errs
	}
	errs = append(errs, validateProcessID(opts.Process, field.NewPath("process"))...)
	if opts.Previous {
		errs = append(errs, field.Forbidden(field.NewPath("previous"), "a process has one log: previous is for a task's attempts"))
	}
	if opts.OffsetBytes != nil && opts.TailLines != nil {
		errs = append(errs, field.Forbidden(offset, "excludes tailLines"))
	}
	return errs
}

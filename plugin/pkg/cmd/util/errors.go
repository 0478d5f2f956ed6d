package util

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/clientcmd"
	utilexec "k8s.io/utils/exec"
)

// DefaultErrorExitCode is the exit code of every failure except a remote command's own, as in
// kubectl.
const DefaultErrorExitCode = 1

// PrintError writes err to w the way kubectl's cmdutil.CheckErr does and returns the code the
// process should exit with: the remote command's own exit code when err carries one (an exec
// whose command failed), otherwise DefaultErrorExitCode. main calls it; so do the tests.
func PrintError(w io.Writer, err error) int {
	msg, code := ErrorMessage(err)
	if msg != "" {
		if !strings.HasSuffix(msg, "\n") {
			msg += "\n"
		}
		fmt.Fprint(w, msg)
	}
	return code
}

// ErrorMessage is the text kubectl would print for err and the exit code it would end with.
func ErrorMessage(err error) (string, int) {
	if err == nil {
		return "", 0
	}
	if agg, ok := err.(utilerrors.Aggregate); ok && len(agg.Errors()) == 1 {
		err = agg.Errors()[0]
	}

	var exitErr utilexec.ExitError
	if errors.As(err, &exitErr) {
		// The remote command ran and failed; its code is the answer, its message a note.
		return err.Error(), exitErr.ExitStatus()
	}
	if msg, ok := invalidMessage(err); ok {
		return msg, DefaultErrorExitCode
	}
	if clientcmd.IsConfigurationInvalid(err) {
		return multilineError("Error in configuration: ", err), DefaultErrorExitCode
	}
	if agg, ok := err.(utilerrors.Aggregate); ok {
		var b strings.Builder
		for _, e := range utilerrors.Flatten(agg).Errors() {
			msg, _ := ErrorMessage(e)
			b.WriteString(strings.TrimSuffix(msg, "\n"))
			b.WriteString("\n")
		}
		return b.String(), DefaultErrorExitCode
	}
	if msg, ok := standardErrorMessage(err); ok {
		return msg, DefaultErrorExitCode
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "error: ") {
		msg = "error: " + msg
	}
	return msg, DefaultErrorExitCode
}

// standardErrorMessage translates API and connection errors as kubectl does, e.g.
// `Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io "x" not found`.
func standardErrorMessage(err error) (string, bool) {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch s := status.Status(); {
		case s.Reason == metav1.StatusReasonUnauthorized:
			return fmt.Sprintf("error: You must be logged in to the server (%s)", s.Message), true
		case len(s.Reason) > 0:
			return fmt.Sprintf("Error from server (%s): %s", s.Reason, err.Error()), true
		default:
			return fmt.Sprintf("Error from server: %s", err.Error()), true
		}
	}
	if apierrors.IsUnexpectedObjectError(err) {
		return fmt.Sprintf("Server returned an unexpected response: %s", err.Error()), true
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		if strings.Contains(urlErr.Err.Error(), "connection refused") {
			host := urlErr.URL
			if server, perr := url.Parse(urlErr.URL); perr == nil {
				host = server.Host
			}
			return fmt.Sprintf("The connection to the server %s was refused - did you specify the right host or port?", host), true
		}
		return fmt.Sprintf("Unable to connect to the server: %v", urlErr.Err), true
	}
	return "", false
}

// invalidMessage formats a 422 Invalid status with its field causes, one per line.
func invalidMessage(err error) (string, bool) {
	var statusErr *apierrors.StatusError
	if !errors.As(err, &statusErr) || statusErr.Status().Reason != metav1.StatusReasonInvalid {
		return "", false
	}
	status := statusErr.Status()
	details := status.Details
	s := "The request is invalid"
	if details == nil {
		if len(status.Message) > 0 {
			s += ": " + status.Message
		}
		return s, true
	}
	if len(details.Kind) != 0 || len(details.Name) != 0 {
		s = fmt.Sprintf("The %s %q is invalid", details.Kind, details.Name)
	} else if len(status.Message) > 0 && len(details.Causes) == 0 {
		s += ": " + status.Message
	}
	if len(details.Causes) == 0 {
		return s, true
	}
	var causes []error
	seen := map[string]bool{}
	for _, c := range details.Causes {
		msg := fmt.Sprintf("%s: %s", c.Field, c.Message)
		if !seen[msg] {
			seen[msg] = true
			causes = append(causes, errors.New(msg))
		}
	}
	return multilineError(s+": ", utilerrors.NewAggregate(causes)), true
}

// multilineError puts each error of an aggregate on its own line.
func multilineError(prefix string, err error) string {
	agg, ok := err.(utilerrors.Aggregate)
	if !ok {
		return fmt.Sprintf("%s%s\n", prefix, err)
	}
	errs := utilerrors.Flatten(agg).Errors()
	switch len(errs) {
	case 0:
		return fmt.Sprintf("%s%v\n", prefix, err)
	case 1:
		return fmt.Sprintf("%s%v\n", prefix, errs[0])
	}
	var b strings.Builder
	fmt.Fprintln(&b, prefix)
	for _, e := range errs {
		fmt.Fprintf(&b, "* %v\n", e)
	}
	return b.String()
}

// UsageErrorf is an error about the command line, ending with where to find help, as kubectl's.
func UsageErrorf(cmd *cobra.Command, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return fmt.Errorf("%s\nSee '%s -h' for help and examples", msg, cmd.CommandPath())
}

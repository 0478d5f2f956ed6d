package v1alpha1

import (
	"fmt"
	"net/url"
	"strconv"

	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
)

// addConversionFuncs registers the decoding of query parameters into the subresource options,
// which the apiserver's parameter codec needs. (Encoding the other way needs nothing: it follows
// the json tags.)
func addConversionFuncs(scheme *runtime.Scheme) error {
	// Field selectors sandboxes support: the metadata ones every resource has, and the phase,
	// as pods do. They are passed on to the BatchSandbox CRD, which declares the same.
	if err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("Sandbox"), func(label, value string) (string, string, error) {
		switch label {
		case "metadata.name", "metadata.namespace", "status.phase":
			return label, value, nil
		}
		return "", "", fmt.Errorf("field label not supported: %s", label)
	}); err != nil {
		return err
	}
	if err := scheme.AddConversionFunc((*url.Values)(nil), (*SandboxFilesOptions)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			in, out := a.(*url.Values), b.(*SandboxFilesOptions)
			out.Path = in.Get("path")
			return replicaParam(in, &out.Replica)
		}); err != nil {
		return err
	}
	if err := scheme.AddConversionFunc((*url.Values)(nil), (*SandboxProxyOptions)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			in, out := a.(*url.Values), b.(*SandboxProxyOptions)
			// Only the path: the query belongs to the sandbox's server.
			out.Path = in.Get("path")
			return nil
		}); err != nil {
		return err
	}
	if err := scheme.AddConversionFunc((*url.Values)(nil), (*SandboxLogOptions)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			return ConvertURLValuesToSandboxLogOptions(a.(*url.Values), b.(*SandboxLogOptions))
		}); err != nil {
		return err
	}
	if err := scheme.AddConversionFunc((*url.Values)(nil), (*SandboxProcessOptions)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			return ConvertURLValuesToSandboxProcessOptions(a.(*url.Values), b.(*SandboxProcessOptions))
		}); err != nil {
		return err
	}
	if err := scheme.AddConversionFunc((*url.Values)(nil), (*SandboxCodeContextOptions)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			return ConvertURLValuesToSandboxCodeContextOptions(a.(*url.Values), b.(*SandboxCodeContextOptions))
		}); err != nil {
		return err
	}
	if err := scheme.AddConversionFunc((*url.Values)(nil), (*SandboxAttachOptions)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			return ConvertURLValuesToSandboxAttachOptions(a.(*url.Values), b.(*SandboxAttachOptions))
		}); err != nil {
		return err
	}
	return scheme.AddConversionFunc((*url.Values)(nil), (*SandboxExecOptions)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			return ConvertURLValuesToSandboxExecOptions(a.(*url.Values), b.(*SandboxExecOptions))
		})
}

// boolParams sets each of dst from the parameter of its name, in the order given, so that the
// same request always gets the same error.
func boolParams(in *url.Values, dst []boolParam) error {
	for _, p := range dst {
		if v := in.Get(p.name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("query parameter %q: %q is not a boolean", p.name, v)
			}
			*p.dst = b
		}
	}
	return nil
}

type boolParam struct {
	name string
	dst  *bool
}

func replicaParam(in *url.Values, out *int32) error {
	if v := in.Get("replica"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return fmt.Errorf("query parameter %q: %q is not an integer", "replica", v)
		}
		*out = int32(n)
	}
	return nil
}

// ConvertURLValuesToSandboxExecOptions decodes exec query parameters. Unknown parameters are
// ignored, as for pods/exec; malformed ones are an error.
func ConvertURLValuesToSandboxExecOptions(in *url.Values, out *SandboxExecOptions) error {
	var err error
	boolParam := func(name string, dst *bool) {
		if err != nil {
			return
		}
		v, ok := (*in)[name]
		if !ok || len(v) == 0 {
			return
		}
		b, perr := strconv.ParseBool(v[0])
		if perr != nil {
			err = fmt.Errorf("query parameter %q: %q is not a boolean", name, v[0])
			return
		}
		*dst = b
	}
	boolParam("stdin", &out.Stdin)
	boolParam("stdout", &out.Stdout)
	boolParam("stderr", &out.Stderr)
	boolParam("tty", &out.TTY)
	if err != nil {
		return err
	}
	if err := replicaParam(in, &out.Replica); err != nil {
		return err
	}
	if cmd, ok := (*in)["command"]; ok {
		out.Command = append([]string(nil), cmd...)
	}
	if env, ok := (*in)["env"]; ok {
		out.Env = append([]string(nil), env...)
	}
	out.WorkingDir = in.Get("workingDir")
	if v := in.Get("timeoutSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("query parameter %q: %q is not an integer", "timeoutSeconds", v)
		}
		out.TimeoutSeconds = n
	}
	return nil
}

// ConvertURLValuesToSandboxLogOptions decodes log query parameters. Unknown parameters are
// ignored, as for pods/log; malformed ones are an error. Ranges (negative tailLines, say) are
// the log subresource's to judge, with a field path.
func ConvertURLValuesToSandboxLogOptions(in *url.Values, out *SandboxLogOptions) error {
	if err := replicaParam(in, &out.Replica); err != nil {
		return err
	}
	// In a fixed order, so that the same request always gets the same error.
	for _, p := range []struct {
		name string
		dst  *bool
	}{{"follow", &out.Follow}, {"previous", &out.Previous}} {
		if v := in.Get(p.name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("query parameter %q: %q is not a boolean", p.name, v)
			}
			*p.dst = b
		}
	}
	out.Process = in.Get("process")
	for _, p := range []struct {
		name string
		dst  **int64
	}{{"tailLines", &out.TailLines}, {"limitBytes", &out.LimitBytes}, {"offsetBytes", &out.OffsetBytes}} {
		if v := in.Get(p.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("query parameter %q: %q is not an integer", p.name, v)
			}
			*p.dst = &n
		}
	}
	return nil
}

// ConvertURLValuesToSandboxProcessOptions decodes the query parameters of the processes
// subresource. Unknown parameters are ignored; malformed ones are an error. A replica is kept
// as given, unset when the query has none (a list of every replica).
func ConvertURLValuesToSandboxProcessOptions(in *url.Values, out *SandboxProcessOptions) error {
	out.Path = in.Get("path")
	if v := in.Get("replica"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return fmt.Errorf("query parameter %q: %q is not an integer", "replica", v)
		}
		r := int32(n)
		out.Replica = &r
	}
	return nil
}

// ConvertURLValuesToSandboxCodeContextOptions decodes the query parameters of the contexts
// subresource, as those of the processes subresource.
func ConvertURLValuesToSandboxCodeContextOptions(in *url.Values, out *SandboxCodeContextOptions) error {
	po := SandboxProcessOptions{}
	if err := ConvertURLValuesToSandboxProcessOptions(in, &po); err != nil {
		return err
	}
	out.Path, out.Replica = po.Path, po.Replica
	return nil
}

// ConvertURLValuesToSandboxAttachOptions decodes attach query parameters. Unknown parameters
// are ignored, as for pods/attach; malformed ones are an error.
func ConvertURLValuesToSandboxAttachOptions(in *url.Values, out *SandboxAttachOptions) error {
	if err := boolParams(in, []boolParam{{"stdin", &out.Stdin}, {"stdout", &out.Stdout}, {"stderr", &out.Stderr}, {"tty", &out.TTY}}); err != nil {
		return err
	}
	out.Process = in.Get("process")
	return replicaParam(in, &out.Replica)
}

// Package admission decides whether a pod template may become sandbox pods, the way
// kube-sandbox admits them: with k8s.io/pod-security-admission, the library the kube-apiserver
// admits pods with, at the platform's level (or the namespace's enforce level where that is
// stricter), and without references to what the namespace holds (service accounts, tokens,
// Secrets, ConfigMaps, volumes). What goes beyond that needs the right to create such pods:
// sandbox-apiserver asks the kube-apiserver whether the caller has it; a Pool says so in
// spec.podSecurity, which only such a user may set.
//
// The template is checked as it will run: with the hardening sandboxpod.Harden applies.
package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
)

// DefaultLevel is the platform's default pod security level: baseline keeps sandboxes off the
// node (no privileges, host namespaces, host paths or added capabilities) while running any
// image as it was built, root included.
const DefaultLevel = "baseline"

// ParseLevel parses LEVEL or LEVEL:VERSION (privileged, baseline, restricted; v1.N or latest).
func ParseLevel(s string) (api.LevelVersion, error) {
	levelStr, versionStr, hasVersion := strings.Cut(s, ":")
	level, err := api.ParseLevel(levelStr)
	if err != nil {
		return api.LevelVersion{}, err
	}
	version := api.LatestVersion()
	if hasVersion {
		if version, err = api.ParseVersion(versionStr); err != nil {
			return api.LevelVersion{}, err
		}
	}
	return api.LevelVersion{Level: level, Version: version}, nil
}

// check is one pod security check with an evaluator of its own, so that a violation can be
// traced to the field that causes it.
type check struct {
	id        policy.CheckID
	level     api.Level
	evaluator policy.Evaluator
}

// Checker checks templates against the platform's level.
type Checker struct {
	// Platform is the level every sandbox is held to unless its creator may create pods that
	// need more.
	Platform api.LevelVersion
	checks   []check
	// overridden are baseline checks a restricted one replaces at the restricted level, from
	// the policy version on that the restricted one does.
	overridden map[policy.CheckID]api.Version
	// SnapshotRegistry (host[:port]) holds the snapshots of paused sandboxes, which nodes
	// pull with credentials of their own: no template may name an image there, whoever
	// asks. A sandbox gets its own snapshot back by resuming; "": no such registry.
	SnapshotRegistry string
	// RuntimeClass is the platform's default runtime class (like gvisor): templates that name
	// none run under it (sandboxpod.DefaultRuntimeClass), and one that names another class
	// needs the right to create pods. "": the node's default runtime, and any class that
	// CheckEgress allows.
	RuntimeClass string
}

// NewChecker returns a Checker for the platform level.
func NewChecker(platform api.LevelVersion) (*Checker, error) {
	c := &Checker{Platform: platform, overridden: map[policy.CheckID]api.Version{}}
	for _, pc := range policy.DefaultChecks() {
		e, err := policy.NewEvaluator([]policy.Check{pc}, nil)
		if err != nil {
			return nil, fmt.Errorf("pod security check %s: %w", pc.ID, err)
		}
		c.checks = append(c.checks, check{id: pc.ID, level: pc.Level, evaluator: e})
		if pc.Level == api.LevelRestricted {
			for _, v := range pc.Versions {
				for _, o := range v.OverrideCheckIDs {
					if from, ok := c.overridden[o]; !ok || v.MinimumVersion.Older(from) {
						c.overridden[o] = v.MinimumVersion
					}
				}
			}
		}
	}
	return c, nil
}

// Template is what Check looks at.
type Template struct {
	// Meta and Spec are the pod template's.
	Meta *metav1.ObjectMeta
	Spec *corev1.PodSpec
	// Path is the field path of Spec, for errors ("spec.template.spec").
	Path *field.Path
	// Env is added to the first container (a sandbox's own env), at EnvPath.
	Env     []corev1.EnvVar
	EnvPath *field.Path
}

// Result says what stands between a template and sandbox pods.
type Result struct {
	// Level is the level the template was held to: the platform's or the namespace's, the
	// stricter.
	Level api.LevelVersion
	// NamespaceLevel is the namespace's enforce level, which every pod there meets.
	NamespaceLevel api.LevelVersion
	// Invalid are violations of the namespace's level: no pod may run like this there.
	Invalid field.ErrorList
	// NeedsPodRights goes beyond what a sandbox may be, within the namespace's level: only
	// a user who may create pods in the namespace may have it.
	NeedsPodRights field.ErrorList
}

// Allowed reports whether anyone who may create sandboxes may have this one.
func (r *Result) Allowed() bool { return len(r.Invalid) == 0 && len(r.NeedsPodRights) == 0 }

// NamespacePolicy is the enforce level of a namespace with these labels, as PodSecurity
// admission reads it: privileged when unlabelled (its default), restricted when the label is
// not a level.
func NamespacePolicy(labels map[string]string) api.LevelVersion {
	p, _ := api.PolicyToEvaluate(labels, api.Policy{Enforce: api.LevelVersion{Level: api.LevelPrivileged, Version: api.LatestVersion()}})
	return p.Enforce
}

// CheckIn checks t in namespace, whose pod security labels reader reads (a NotFound error
// comes back as it is).
func (c *Checker) CheckIn(ctx context.Context, reader client.Reader, namespace string, t Template) (Result, error) {
	ns := &corev1.Namespace{}
	if err := reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return Result{}, err
	}
	res := c.Check(ns.Labels, t)
	// As the pods will run. A shallow copy: only the runtime class's pointer is replaced.
	spec := *t.Spec
	sandboxpod.DefaultRuntimeClass(&spec, c.RuntimeClass)
	ferr, err := CheckEgress(ctx, reader, &spec, t.Path)
	if err != nil {
		return Result{}, err
	}
	if ferr != nil {
		res.Invalid = append(res.Invalid, ferr)
	}
	return res, nil
}

// EgressSpecErrors are what in a pod spec keeps the node agent from enforcing a policy, or
// the sandbox from being apart from the rest of its pod, whoever asks and whatever the pod
// security level: the node's network namespace (the pod would have no interface of its own to
// filter), or a process namespace shared with the sandbox container.
func EgressSpecErrors(spec *corev1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.HostNetwork {
		errs = append(errs, field.Forbidden(path.Child("hostNetwork"), "a sandbox's outbound policy is enforced on its pod's own network interface, which a pod on the node's network does not have"))
	}
	if p := spec.ShareProcessNamespace; p != nil && *p {
		errs = append(errs, field.Forbidden(path.Child("shareProcessNamespace"), "the sandbox container must not see the processes of the pod's other containers"))
	}
	return errs
}

// CheckEgress refuses a pod spec under which the sandbox's egress policy cannot be enforced:
// EgressSpecErrors, and a runtime class whose handler is not one of EgressHandlers.
func CheckEgress(ctx context.Context, reader client.Reader, spec *corev1.PodSpec, path *field.Path) (*field.Error, error) {
	if errs := EgressSpecErrors(spec, path); len(errs) > 0 {
		return errs[0], nil
	}
	name := spec.RuntimeClassName
	if name == nil || *name == "" {
		return nil, nil
	}
	rc := &nodev1.RuntimeClass{}
	switch err := reader.Get(ctx, client.ObjectKey{Name: *name}, rc); {
	case apierrors.IsNotFound(err):
		// The kube-apiserver refuses the pod, and the sandbox says so.
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get runtimeclass %s: %w", *name, err)
	case !slices.Contains(EgressHandlers, rc.Handler):
		return field.Forbidden(path.Child("runtimeClassName"), fmt.Sprintf(
			"runtime class %s (handler %s) is not one under which a sandbox's egress policy is known to be enforced (handlers %s); "+
				"a runtime with a kernel of its own (a VM) may send the pod's packets where the node's filter never sees them",
			*name, rc.Handler, strings.Join(EgressHandlers, ", "))), nil
	}
	return nil, nil
}

// EgressHandlers are the RuntimeClass handlers under which the node agent's enforcement is
// known to hold: an allowlist, so that a runtime nobody checked fails closed. runc's pods and
// gVisor's (runsc, whose user-space network stack writes the pod's frames to its interface
// through a packet socket) both send every packet through the pod's host-side interface,
// where the node agent's filter sits; the agent also proves it per pod with a probe. A
// pod without a runtime class runs under the node's default handler (runc on the clusters
// kube-sandbox installs on), and is proven all the same.
var EgressHandlers = []string{"runc", "runsc"}

// Limit says what a template was held to, for messages.
func (r *Result) Limit() string {
	return fmt.Sprintf("pod security level %q, nothing of the namespace", r.Level.String())
}

// Check checks a template for a namespace with nsLabels.
func (c *Checker) Check(nsLabels map[string]string, t Template) Result {
	spec := sandboxpod.Hardened(t.Spec)
	meta := t.Meta
	if meta == nil {
		meta = &metav1.ObjectMeta{}
	}
	ns := NamespacePolicy(nsLabels)
	res := Result{Level: stricter(c.Platform, ns), NamespaceLevel: ns}
	invalid := map[violation]bool{}
	for _, v := range c.violations(ns, meta, spec, t.Path) {
		invalid[v] = true
		res.Invalid = append(res.Invalid, v.err(ns))
	}
	if res.Level != ns {
		for _, v := range c.violations(res.Level, meta, spec, t.Path) {
			if !invalid[v] {
				res.NeedsPodRights = append(res.NeedsPodRights, v.err(res.Level))
			}
		}
	}
	res.NeedsPodRights = append(res.NeedsPodRights, references(t)...)
	res.NeedsPodRights = append(res.NeedsPodRights, c.otherRuntime(t)...)
	res.Invalid = append(res.Invalid, c.snapshotImages(t)...)
	return res
}

// ValidateRuntimeClassName checks the name of a platform default runtime class: "" (none) or
// a RuntimeClass's name, which is a DNS subdomain.
func ValidateRuntimeClassName(name string) error {
	if name == "" {
		return nil
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%q is not the name of a RuntimeClass: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}

// otherRuntime is a runtime class other than the platform's default: a weaker boundary than
// the platform gives every sandbox (runc where the default is gvisor), which only a user who
// may create pods, and so run them under any class, may choose.
func (c *Checker) otherRuntime(t Template) field.ErrorList {
	if c.RuntimeClass == "" || t.Spec == nil || t.Spec.RuntimeClassName == nil ||
		*t.Spec.RuntimeClassName == "" || *t.Spec.RuntimeClassName == c.RuntimeClass {
		return nil
	}
	return field.ErrorList{field.Forbidden(t.Path.Child("runtimeClassName"), fmt.Sprintf(
		"the platform runs sandboxes under runtime class %s; another one (%s) is for users who may create pods",
		c.RuntimeClass, *t.Spec.RuntimeClassName))}
}

// snapshotImages are the template's images in the snapshot registry (SnapshotRegistry).
func (c *Checker) snapshotImages(t Template) field.ErrorList {
	if c.SnapshotRegistry == "" || t.Spec == nil {
		return nil
	}
	var errs field.ErrorList
	for _, cs := range []struct {
		name       string
		containers []corev1.Container
	}{{"initContainers", t.Spec.InitContainers}, {"containers", t.Spec.Containers}} {
		for i, ctr := range cs.containers {
			path := t.Path.Child(cs.name).Index(i).Child("image")
			registry, err := ImageRegistry(ctr.Image)
			switch {
			case err != nil:
				// Which registry it would pull from cannot be told, so it is not admitted; the
				// kubelet could not pull it either.
				errs = append(errs, field.Invalid(path, ctr.Image, "not an image reference: "+err.Error()))
			case registry == strings.ToLower(c.SnapshotRegistry):
				errs = append(errs, field.Forbidden(path,
					fmt.Sprintf("%s holds the snapshots of paused sandboxes: a sandbox gets its own back by resuming", c.SnapshotRegistry)))
			}
		}
	}
	return errs
}

// ImageRegistry is the registry host (lower case, with its port) an image reference pulls
// from, as the kubelet and containerd read it: distribution/reference's normalization, so a
// familiar name ("python:3") is docker.io's. A reference that does not parse is an error.
func ImageRegistry(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", err
	}
	return strings.ToLower(reference.Domain(named)), nil
}

// violation is a failed check at a field.
type violation struct {
	path, detail string
}

func (v violation) err(lv api.LevelVersion) *field.Error {
	return field.Forbidden(field.NewPath(v.path), fmt.Sprintf("%s: not allowed at pod security level %q", v.detail, lv.String()))
}

func stricter(a, b api.LevelVersion) api.LevelVersion {
	if api.CompareLevels(a.Level, b.Level) >= 0 {
		return a
	}
	return b
}

func (c *Checker) applies(ch check, lv api.LevelVersion) bool {
	switch lv.Level {
	case api.LevelBaseline:
		return ch.level == api.LevelBaseline
	case api.LevelRestricted:
		from, overridden := c.overridden[ch.id]
		return ch.level == api.LevelRestricted || !overridden || lv.Version.Older(from)
	}
	return false
}

func allowed(results []policy.CheckResult) (bool, policy.CheckResult) {
	for _, r := range results {
		if !r.Allowed {
			return false, r
		}
	}
	return true, policy.CheckResult{}
}

// violations are the checks of lv the pod fails, each at the field that fails it.
func (c *Checker) violations(lv api.LevelVersion, meta *metav1.ObjectMeta, spec *corev1.PodSpec, fld *field.Path) []violation {
	var errs []violation
	for _, ch := range c.checks {
		if !c.applies(ch, lv) {
			continue
		}
		ok, res := allowed(ch.evaluator.EvaluatePod(lv, meta, spec))
		if ok {
			continue
		}
		errs = append(errs, c.locate(ch, lv, meta, spec, fld, res)...)
	}
	return errs
}

func detail(res policy.CheckResult) string {
	msg := res.ForbiddenReason
	if res.ForbiddenDetail != "" {
		msg += " (" + res.ForbiddenDetail + ")"
	}
	return msg
}

// locate finds the fields of spec that fail a check: the pod's own (without containers), each
// volume, or each container.
func (c *Checker) locate(ch check, lv api.LevelVersion, meta *metav1.ObjectMeta, spec *corev1.PodSpec, fld *field.Path, whole policy.CheckResult) []violation {
	eval := func(s *corev1.PodSpec) (bool, policy.CheckResult) {
		return allowed(ch.evaluator.EvaluatePod(lv, meta, s))
	}
	podOnly := spec.DeepCopy()
	podOnly.Containers, podOnly.InitContainers, podOnly.EphemeralContainers = nil, nil, nil
	var errs []violation
	at := func(p *field.Path, r policy.CheckResult) violation {
		return violation{path: p.String(), detail: detail(r)}
	}
	if ok, res := eval(podOnly); !ok {
		switch ch.id {
		case "hostPathVolumes", "restrictedVolumes":
			for i := range spec.Volumes {
				one := podOnly.DeepCopy()
				one.Volumes = spec.Volumes[i : i+1]
				if ok, r := eval(one); !ok {
					errs = append(errs, at(fld.Child("volumes").Index(i), r))
				}
			}
		case "hostNamespaces":
			for _, f := range []struct {
				name string
				on   bool
			}{{"hostNetwork", spec.HostNetwork}, {"hostPID", spec.HostPID}, {"hostIPC", spec.HostIPC}} {
				if f.on {
					errs = append(errs, at(fld.Child(f.name), res))
				}
			}
		default:
			errs = append(errs, at(podField(ch.id, fld), res))
		}
		if len(errs) == 0 {
			errs = append(errs, at(fld, res))
		}
		return errs
	}
	for _, list := range []struct {
		name       string
		containers []corev1.Container
	}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}} {
		for i := range list.containers {
			one := podOnly.DeepCopy()
			if list.name == "initContainers" {
				one.InitContainers = list.containers[i : i+1]
			} else {
				one.Containers = list.containers[i : i+1]
			}
			if ok, r := eval(one); !ok {
				errs = append(errs, at(containerField(ch.id, fld.Child(list.name).Index(i)), r))
			}
		}
	}
	if len(errs) == 0 {
		errs = append(errs, at(fld, whole))
	}
	return errs
}

func podField(id policy.CheckID, fld *field.Path) *field.Path {
	sc := fld.Child("securityContext")
	switch {
	case id == "sysctls":
		return sc.Child("sysctls")
	case strings.HasPrefix(string(id), "seccompProfile"):
		return sc.Child("seccompProfile")
	case id == "seLinuxOptions":
		return sc.Child("seLinuxOptions")
	case id == "appArmorProfile":
		return sc.Child("appArmorProfile")
	case id == "runAsNonRoot":
		return sc.Child("runAsNonRoot")
	case id == "runAsUser":
		return sc.Child("runAsUser")
	case id == "windowsHostProcess":
		return sc.Child("windowsOptions", "hostProcess")
	}
	return fld
}

func containerField(id policy.CheckID, c *field.Path) *field.Path {
	sc := c.Child("securityContext")
	switch {
	case id == "privileged":
		return sc.Child("privileged")
	case strings.HasPrefix(string(id), "capabilities"):
		return sc.Child("capabilities")
	case id == "allowPrivilegeEscalation":
		return sc.Child("allowPrivilegeEscalation")
	case strings.HasPrefix(string(id), "procMount"):
		return sc.Child("procMount")
	case id == "hostPorts":
		return c.Child("ports")
	}
	return podField(id, c)
}

// references are the fields of t that reach beyond the pod into the namespace or the
// cluster: a sandbox alone may not have them.
func references(t Template) field.ErrorList {
	spec, fld := t.Spec, t.Path
	var errs field.ErrorList
	need := func(p *field.Path, what string) {
		errs = append(errs, field.Forbidden(p, what+": a sandbox gets this only for a user who may create pods in the namespace"))
	}
	if sa := spec.ServiceAccountName; sa != "" && sa != "default" {
		need(fld.Child("serviceAccountName"), fmt.Sprintf("runs as service account %q", sa))
	} else if sa := spec.DeprecatedServiceAccount; sa != "" && sa != "default" {
		need(fld.Child("serviceAccount"), fmt.Sprintf("runs as service account %q", sa))
	}
	if a := spec.AutomountServiceAccountToken; a != nil && *a {
		need(fld.Child("automountServiceAccountToken"), "mounts the service account's API token")
	}
	for i, s := range spec.ImagePullSecrets {
		need(fld.Child("imagePullSecrets").Index(i), fmt.Sprintf("pulls with Secret %q", s.Name))
	}
	for i, rc := range spec.ResourceClaims {
		need(fld.Child("resourceClaims").Index(i), fmt.Sprintf("claims resources (%q)", rc.Name))
	}
	for i := range spec.Volumes {
		if what := volumeReference(&spec.Volumes[i]); what != "" {
			need(fld.Child("volumes").Index(i), what)
		}
	}
	for _, list := range []struct {
		name       string
		containers []corev1.Container
	}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}} {
		for i := range list.containers {
			c := &list.containers[i]
			p := fld.Child(list.name).Index(i)
			envReferences(c.Env, p.Child("env"), need)
			for j, from := range c.EnvFrom {
				switch {
				case from.SecretRef != nil:
					need(p.Child("envFrom").Index(j).Child("secretRef"), fmt.Sprintf("reads Secret %q", from.SecretRef.Name))
				case from.ConfigMapRef != nil:
					need(p.Child("envFrom").Index(j).Child("configMapRef"), fmt.Sprintf("reads ConfigMap %q", from.ConfigMapRef.Name))
				}
			}
		}
	}
	if t.EnvPath != nil {
		envReferences(t.Env, t.EnvPath, need)
	}
	return errs
}

// envReferences reports to need the env values read from Secrets and ConfigMaps.
func envReferences(env []corev1.EnvVar, fld *field.Path, need func(*field.Path, string)) {
	for i, e := range env {
		if e.ValueFrom == nil {
			continue
		}
		switch vf := e.ValueFrom; {
		case vf.SecretKeyRef != nil:
			need(fld.Index(i).Child("valueFrom", "secretKeyRef"), fmt.Sprintf("reads Secret %q", vf.SecretKeyRef.Name))
		case vf.ConfigMapKeyRef != nil:
			need(fld.Index(i).Child("valueFrom", "configMapKeyRef"), fmt.Sprintf("reads ConfigMap %q", vf.ConfigMapKeyRef.Name))
		}
	}
}

// volumeReference says what a volume reaches beyond the pod, "" for nothing: an emptyDir, the
// pod's own fields, an image, or public cluster trust bundles. Host paths are the pod
// security levels' to refuse.
func volumeReference(v *corev1.Volume) string {
	switch src := v.VolumeSource; {
	case src.EmptyDir != nil, src.DownwardAPI != nil, src.Image != nil, src.HostPath != nil:
		return ""
	case src.Secret != nil:
		return fmt.Sprintf("mounts Secret %q", src.Secret.SecretName)
	case src.ConfigMap != nil:
		return fmt.Sprintf("mounts ConfigMap %q", src.ConfigMap.Name)
	case src.PersistentVolumeClaim != nil:
		return fmt.Sprintf("mounts PersistentVolumeClaim %q", src.PersistentVolumeClaim.ClaimName)
	case src.Ephemeral != nil:
		return "creates a PersistentVolumeClaim (ephemeral volume)"
	case src.Projected != nil:
		for _, p := range src.Projected.Sources {
			switch {
			case p.Secret != nil:
				return fmt.Sprintf("projects Secret %q", p.Secret.Name)
			case p.ConfigMap != nil:
				return fmt.Sprintf("projects ConfigMap %q", p.ConfigMap.Name)
			case p.ServiceAccountToken != nil:
				return "projects a service account token"
			case p.PodCertificate != nil:
				return "projects a pod certificate"
			}
		}
		return ""
	case src.CSI != nil:
		return fmt.Sprintf("mounts an inline volume of CSI driver %q", src.CSI.Driver)
	}
	return fmt.Sprintf("mounts volume %q, which is not an emptyDir, downwardAPI, image or projected volume", v.Name)
}

package sandboxserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// store holds the sandboxes and the history of their changes, for watches from a
// resourceVersion. The Server's mu guards it.
type store struct {
	objects map[string]*sandboxv1alpha1.Sandbox
	// rv is the last resourceVersion given out.
	rv     int64
	events []storedEvent
	// changed is closed, and replaced, on every change.
	changed chan struct{}
	// done is closed when the server stops, ending the watches.
	done chan struct{}
	// endWatches is closed, and replaced, by EndWatches.
	endWatches chan struct{}
}

type storedEvent struct {
	rv  int64
	typ watch.EventType
	obj *sandboxv1alpha1.Sandbox
}

func newStore() store {
	return store{objects: map[string]*sandboxv1alpha1.Sandbox{}, changed: make(chan struct{}), done: make(chan struct{}), endWatches: make(chan struct{})}
}

var sandboxKind = sandboxv1alpha1.SchemeGroupVersion.WithKind("Sandbox").GroupKind()

// record stores sb (nil-safe copy) with a new resourceVersion and tells the watches. The lock
// must be held.
func (s *Server) record(typ watch.EventType, sb *sandboxv1alpha1.Sandbox) *sandboxv1alpha1.Sandbox {
	s.rv++
	sb = sb.DeepCopy()
	sb.ResourceVersion = strconv.FormatInt(s.rv, 10)
	if typ == watch.Deleted {
		delete(s.objects, sb.Name)
	} else {
		s.objects[sb.Name] = sb
	}
	s.events = append(s.events, storedEvent{rv: s.rv, typ: typ, obj: sb})
	close(s.changed)
	s.changed = make(chan struct{})
	return sb.DeepCopy()
}

// Add stores a sandbox of the server's namespace, as created: generation 1 unless set, a UID
// and a creation time.
func (s *Server) Add(sb *sandboxv1alpha1.Sandbox) *sandboxv1alpha1.Sandbox {
	sb = sb.DeepCopy()
	sb.Namespace = s.Namespace
	if sb.UID == "" {
		sb.UID = types.UID("uid-" + sb.Name)
	}
	if sb.Generation == 0 {
		sb.Generation = 1
	}
	if sb.CreationTimestamp.IsZero() {
		sb.CreationTimestamp = metav1.NewTime(time.Now().Truncate(time.Second))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.record(watch.Added, sb)
}

// Sandbox returns the stored sandbox, nil if there is none.
func (s *Server) Sandbox(name string) *sandboxv1alpha1.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[name].DeepCopy()
}

// Modify changes a stored sandbox as the controller would (its status, typically): a new
// resourceVersion, a new generation if the spec changed, and a MODIFIED event. It panics for a
// sandbox that does not exist.
func (s *Server) Modify(name string, change func(sb *sandboxv1alpha1.Sandbox)) *sandboxv1alpha1.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.objects[name]
	if !ok {
		panic(fmt.Sprintf("sandboxserver: no sandbox %q to modify", name))
	}
	sb := old.DeepCopy()
	change(sb)
	if !apiequality.Semantic.DeepEqual(old.Spec, sb.Spec) {
		sb.Generation = old.Generation + 1
	}
	return s.record(watch.Modified, sb)
}

// Delete removes a stored sandbox, with a DELETED event.
func (s *Server) Delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb, ok := s.objects[name]; ok {
		s.record(watch.Deleted, sb)
	}
}

// EndWatches ends the watches open now, as API servers end watches after a while or when they
// restart; clients are expected to watch again.
func (s *Server) EndWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.endWatches)
	s.endWatches = make(chan struct{})
}

// serveCollection serves list, watch and create; a list of all namespaces when
// allNamespaces (which only list and watch).
func (s *Server) serveCollection(w http.ResponseWriter, req *http.Request, body []byte, allNamespaces bool) {
	switch {
	case req.Method == http.MethodGet:
		sel, err := parseSelector(req)
		if err != nil {
			writeStatus(w, err)
			return
		}
		if q := req.URL.Query().Get("watch"); q == "true" || q == "1" {
			s.watch(w, req, sel)
			return
		}
		s.mu.Lock()
		list := &sandboxv1alpha1.SandboxList{
			TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxList"},
			ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)},
		}
		for _, sb := range s.matching(sel) {
			list.Items = append(list.Items, *typed(sb))
		}
		s.mu.Unlock()
		s.writeObjectOrTable(w, req, list.ListMeta, list.Items, list)
	case allNamespaces:
		writeStatus(w, apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes"), req.Method))
	case req.Method == http.MethodPost:
		sb, err := decode(body, req)
		if err != nil {
			writeStatus(w, err)
			return
		}
		if sb.Name == "" {
			writeStatus(w, apierrors.NewInvalid(sandboxKind, "", field.ErrorList{field.Required(field.NewPath("metadata", "name"), "")}))
			return
		}
		if errs := validate(sb); len(errs) > 0 {
			writeStatus(w, apierrors.NewInvalid(sandboxKind, sb.Name, errs))
			return
		}
		sb.Namespace, sb.UID, sb.Generation = s.Namespace, types.UID("uid-"+sb.Name), 1
		sb.CreationTimestamp = metav1.NewTime(time.Now().Truncate(time.Second))
		sb.ResourceVersion = ""
		sb.Status = sandboxv1alpha1.SandboxStatus{}
		if dryRun(req) {
			writeObject(w, http.StatusCreated, typed(sb))
			return
		}
		s.mu.Lock()
		if _, exists := s.objects[sb.Name]; exists {
			s.mu.Unlock()
			writeStatus(w, apierrors.NewAlreadyExists(sandboxv1alpha1.Resource("sandboxes"), sb.Name))
			return
		}
		stored := s.record(watch.Added, sb)
		s.mu.Unlock()
		if s.AfterWrite != nil {
			s.AfterWrite(stored.DeepCopy())
		}
		writeObject(w, http.StatusCreated, typed(stored))
	default:
		writeStatus(w, apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes"), req.Method))
	}
}

// serveSandbox serves get, patch (JSON merge patch) and update of a sandbox.
func (s *Server) serveSandbox(w http.ResponseWriter, req *http.Request, name string, body []byte) {
	switch req.Method {
	case http.MethodGet:
		sb := s.Sandbox(name)
		if sb == nil {
			writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), name))
			return
		}
		s.writeObjectOrTable(w, req, metav1.ListMeta{ResourceVersion: sb.ResourceVersion}, []sandboxv1alpha1.Sandbox{*typed(sb)}, typed(sb))
	case http.MethodPatch, http.MethodPut:
		if s.BeforeWrite != nil {
			s.BeforeWrite(name)
		}
		s.mu.Lock()
		old, ok := s.objects[name]
		if ok {
			old = old.DeepCopy()
		}
		s.mu.Unlock()
		if !ok {
			writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), name))
			return
		}
		var sb *sandboxv1alpha1.Sandbox
		var err *apierrors.StatusError
		if req.Method == http.MethodPatch {
			sb, err = mergePatched(old, body, req)
		} else {
			sb, err = decode(body, req)
		}
		if err != nil {
			writeStatus(w, err)
			return
		}
		stored, err := s.update(old, sb, req)
		if err != nil {
			writeStatus(w, err)
			return
		}
		if s.AfterWrite != nil && !dryRun(req) {
			s.AfterWrite(stored.DeepCopy())
		}
		writeObject(w, http.StatusOK, typed(stored))
	default:
		writeStatus(w, apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes"), req.Method))
	}
}

// update stores sb in place of old, as the API server does: a resourceVersion that is not the
// stored one conflicts, status and identity stay the server's, and a change of the spec is a new
// generation.
func (s *Server) update(old, sb *sandboxv1alpha1.Sandbox, req *http.Request) (*sandboxv1alpha1.Sandbox, *apierrors.StatusError) {
	if sb.Name != old.Name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", sb.Name, old.Name))
	}
	if errs := validate(sb); len(errs) > 0 {
		return nil, apierrors.NewInvalid(sandboxKind, sb.Name, errs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	current, ok := s.objects[old.Name]
	if !ok {
		return nil, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), old.Name)
	}
	if sb.ResourceVersion != "" && sb.ResourceVersion != current.ResourceVersion {
		return nil, apierrors.NewConflict(sandboxv1alpha1.Resource("sandboxes"), sb.Name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	sb.Namespace, sb.UID, sb.CreationTimestamp = current.Namespace, current.UID, current.CreationTimestamp
	sb.Generation = current.Generation
	if !apiequality.Semantic.DeepEqual(current.Spec, sb.Spec) {
		sb.Generation++
	}
	sb.Status = current.Status
	if dryRun(req) {
		sb.ResourceVersion = current.ResourceVersion
		return sb, nil
	}
	return s.record(watch.Modified, sb), nil
}

// watch streams the events of the sandboxes the selector matches: from the resourceVersion
// asked for, or with sendInitialEvents (client-go's watch-list) the current sandboxes first
// and then a bookmark that says they are all there.
func (s *Server) watch(w http.ResponseWriter, req *http.Request, sel selector) {
	q := req.URL.Query()
	initialEvents := q.Get("sendInitialEvents") == "true"
	from := int64(-1)
	if rv := q.Get("resourceVersion"); rv != "" && rv != "0" && !initialEvents {
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", rv)))
			return
		}
		from = n
	}

	s.mu.Lock()
	// The watches open now are the ones EndWatches ends.
	end := s.endWatches
	var initial []*sandboxv1alpha1.Sandbox
	last := from
	if from < 0 {
		// Without a resourceVersion, a watch starts with the sandboxes as they are.
		initial, last = s.matching(sel), s.rv
	}
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(typ watch.EventType, sb *sandboxv1alpha1.Sandbox) bool {
		data, err := json.Marshal(typed(sb))
		if err != nil {
			return false
		}
		event, err := json.Marshal(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: data}})
		if err != nil {
			return false
		}
		if _, err := w.Write(append(event, '\n')); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	for _, sb := range initial {
		if !send(watch.Added, sb) {
			return
		}
	}
	if initialEvents {
		bookmark := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: strconv.FormatInt(last, 10),
			Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
		}}
		if !send(watch.Bookmark, bookmark) {
			return
		}
	} else if flusher != nil {
		flusher.Flush()
	}
	if s.WatchStarted != nil {
		s.WatchStarted()
	}

	for {
		s.mu.Lock()
		var pending []storedEvent
		for _, e := range s.events {
			if e.rv > last && sel.matches(e.obj) {
				pending = append(pending, e)
			}
		}
		if len(s.events) > 0 {
			last = max(last, s.events[len(s.events)-1].rv)
		}
		changed := s.changed
		s.mu.Unlock()
		for _, e := range pending {
			if !send(e.typ, e.obj) {
				return
			}
		}
		select {
		case <-changed:
		case <-req.Context().Done():
			return
		case <-s.done:
			return
		case <-end:
			return
		}
	}
}

// selector is a request's field and label selectors.
type selector struct {
	fields fields.Selector
	labels labels.Selector
}

// parseSelector reads the fieldSelector and labelSelector of a list or watch.
func parseSelector(req *http.Request) (selector, *apierrors.StatusError) {
	f, err := fields.ParseSelector(req.URL.Query().Get("fieldSelector"))
	if err != nil {
		return selector{}, apierrors.NewBadRequest(err.Error())
	}
	l, err := labels.Parse(req.URL.Query().Get("labelSelector"))
	if err != nil {
		return selector{}, apierrors.NewBadRequest(err.Error())
	}
	return selector{fields: f, labels: l}, nil
}

func (sel selector) matches(sb *sandboxv1alpha1.Sandbox) bool {
	return sel.fields.Matches(objectFields(sb)) && sel.labels.Matches(labels.Set(sb.Labels))
}

// matching returns the stored sandboxes the selector matches, by name. The lock must be held.
func (s *Server) matching(sel selector) []*sandboxv1alpha1.Sandbox {
	var out []*sandboxv1alpha1.Sandbox
	for _, sb := range s.objects {
		if sel.matches(sb) {
			out = append(out, sb.DeepCopy())
		}
	}
	slices.SortFunc(out, func(a, b *sandboxv1alpha1.Sandbox) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

func objectFields(sb *sandboxv1alpha1.Sandbox) fields.Set {
	return fields.Set{"metadata.name": sb.Name, "metadata.namespace": sb.Namespace}
}

// typed returns a copy of sb with its apiVersion and kind, which decoders of watch events need.
func typed(sb *sandboxv1alpha1.Sandbox) *sandboxv1alpha1.Sandbox {
	sb = sb.DeepCopy()
	sb.TypeMeta = metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "Sandbox"}
	return sb
}

// decode reads a Sandbox from a request body; with fieldValidation=Strict an unknown field is an
// error, as the API server's strict decoding makes it.
func decode(body []byte, req *http.Request) (*sandboxv1alpha1.Sandbox, *apierrors.StatusError) {
	sb := &sandboxv1alpha1.Sandbox{}
	d := json.NewDecoder(bytes.NewReader(body))
	if req.URL.Query().Get("fieldValidation") == metav1.FieldValidationStrict {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(sb); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("strict decoding error: %v", err))
	}
	return sb, nil
}

// mergePatched applies a JSON merge patch (RFC 7386) to old.
func mergePatched(old *sandboxv1alpha1.Sandbox, patch []byte, req *http.Request) (*sandboxv1alpha1.Sandbox, *apierrors.StatusError) {
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt != string(types.MergePatchType) {
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", sandboxv1alpha1.Resource("sandboxes"), old.Name,
			fmt.Sprintf("the test server takes only %s patches, not %q", types.MergePatchType, req.Header.Get("Content-Type")), 0, false)
	}
	var p any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid patch: %v", err))
	}
	data, err := json.Marshal(old)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	merged, err := json.Marshal(mergePatch(doc, p))
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return decode(merged, req)
}

// mergePatch is RFC 7386: objects merge member by member, null removes a member, anything else
// (arrays too) replaces.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}

// validate checks what the tests need of the server's validation: the network policy, with the
// server's field paths.
func validate(sb *sandboxv1alpha1.Sandbox) field.ErrorList {
	p := sb.Spec.NetworkPolicy
	if p == nil {
		return nil
	}
	return egressapi.ValidatePolicy(p.EgressPolicy(), field.NewPath("spec", "networkPolicy"))
}

func dryRun(req *http.Request) bool {
	return slices.Contains(req.URL.Query()["dryRun"], metav1.DryRunAll)
}

func writeObject(w http.ResponseWriter, code int, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(obj)
}

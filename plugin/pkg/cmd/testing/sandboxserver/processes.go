package sandboxserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxregistry "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/registry/sandbox"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// processLogKey names the log of one process of a sandbox's replica.
type processLogKey struct {
	name    string
	replica int32
	id      string
}

// AddProcess adds a process to the processes of sandbox name, as if it had been started; its
// namespace is the server's.
func (s *Server) AddProcess(name string, p *sandboxv1alpha1.SandboxProcess) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p = p.DeepCopy()
	p.Namespace = s.Namespace
	if s.procs == nil {
		s.procs = map[string][]*sandboxv1alpha1.SandboxProcess{}
	}
	s.procs[name] = append(s.procs[name], p)
}

// Process returns the process id of replica of sandbox name, nil if there is none.
func (s *Server) Process(name string, replica int32, id string) *sandboxv1alpha1.SandboxProcess {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.process(name, replica, id); p != nil {
		return p.DeepCopy()
	}
	return nil
}

func (s *Server) process(name string, replica int32, id string) *sandboxv1alpha1.SandboxProcess {
	for _, p := range s.procs[name] {
		if p.Name == id && p.Spec.Replica == replica {
			return p
		}
	}
	return nil
}

// SetProcessLog sets the output of process id of replica of sandbox name, which the log
// subresource serves for process=ID.
func (s *Server) SetProcessLog(name string, replica int32, id, log string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.processLogs == nil {
		s.processLogs = map[processLogKey]string{}
	}
	s.processLogs[processLogKey{name, replica, id}] = log
}

// serveProcesses answers the processes subresource as the real server does, on processes
// kept in memory: GET lists them (a table from the real server's table code if asked) or
// answers one, POST starts one (validated by the real server's validation, given an ID, a PID
// and the replica's pod, Running from the server's clock), and POST ID/signal signals one,
// which ends it at once, killed by the signal.
func (s *Server) serveProcesses(w http.ResponseWriter, req *http.Request, name, rest string) {
	opts := &sandboxv1alpha1.SandboxProcessOptions{}
	if err := logCodec.DecodeParameters(req.URL.Query(), sandboxv1alpha1.SchemeGroupVersion, opts); err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	if err := sandboxregistry.ValidateProcessOptions(name, opts); err != nil {
		writeStatus(w, err)
		return
	}
	id, action, _ := strings.Cut(strings.Trim(rest, "/"), "/")
	switch {
	case req.Method == http.MethodGet && id == "":
		s.listProcesses(w, req, name, opts.Replica)
	case req.Method == http.MethodGet && action == "":
		s.mu.Lock()
		p := s.process(name, ptr.Deref(opts.Replica, 0), id)
		s.mu.Unlock()
		if p == nil {
			writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes/processes"), id))
			return
		}
		s.writeProcesses(w, req, []sandboxv1alpha1.SandboxProcess{*p}, p)
	case req.Method == http.MethodPost && id == "":
		s.startProcess(w, req, name)
	case req.Method == http.MethodPost && action == "signal":
		s.signalProcess(w, req, name, ptr.Deref(opts.Replica, 0), id)
	default:
		writeStatus(w, apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes/processes"), req.Method))
	}
}

func (s *Server) listProcesses(w http.ResponseWriter, req *http.Request, name string, replica *int32) {
	s.mu.Lock()
	list := &sandboxv1alpha1.SandboxProcessList{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxProcessList"},
		Items:    []sandboxv1alpha1.SandboxProcess{},
	}
	for _, p := range s.procs[name] {
		if replica == nil || *replica == p.Spec.Replica {
			list.Items = append(list.Items, *typedProcess(p))
		}
	}
	s.mu.Unlock()
	s.writeProcesses(w, req, list.Items, list)
}

// writeProcesses answers obj, or the real server's table of items.
func (s *Server) writeProcesses(w http.ResponseWriter, req *http.Request, items []sandboxv1alpha1.SandboxProcess, obj any) {
	if !wantsTable(req) {
		if p, ok := obj.(*sandboxv1alpha1.SandboxProcess); ok {
			obj = typedProcess(p)
		}
		writeObject(w, http.StatusOK, obj)
		return
	}
	include, err := includeObject(req)
	if err != nil {
		writeStatus(w, err)
		return
	}
	table := sandboxregistry.ProcessesTable(items, s.now())
	table.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "Table"}
	for i := range table.Rows {
		p := typedProcess(&items[i])
		switch include {
		case metav1.IncludeMetadata:
			table.Rows[i].Object.Object = &metav1.PartialObjectMetadata{
				TypeMeta:   metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "PartialObjectMetadata"},
				ObjectMeta: p.ObjectMeta,
			}
		case metav1.IncludeObject:
			table.Rows[i].Object.Object = p
		default:
			table.Rows[i].Object.Object = nil
		}
	}
	writeObject(w, http.StatusOK, table)
}

func (s *Server) startProcess(w http.ResponseWriter, req *http.Request, name string) {
	proc := &sandboxv1alpha1.SandboxProcess{}
	if err := decodeBody(req, proc); err != nil {
		writeStatus(w, err)
		return
	}
	if err := sandboxregistry.ValidateProcess(name, proc); err != nil {
		writeStatus(w, err)
		return
	}
	sb := s.Sandbox(name)
	if proc.Spec.Replica >= ptr.Deref(sb.Spec.Replicas, 1) {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("sandbox %q has %d replica(s); replica %d does not exist", name, ptr.Deref(sb.Spec.Replicas, 1), proc.Spec.Replica)))
		return
	}
	start := metav1.NewTime(s.now())
	s.mu.Lock()
	s.nextPID++
	p := &sandboxv1alpha1.SandboxProcess{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + strconv.Itoa(int(s.nextPID)), Namespace: s.Namespace, CreationTimestamp: start},
		Spec:       proc.Spec,
		Status: sandboxv1alpha1.SandboxProcessStatus{
			Phase: sandboxv1alpha1.ProcessPhaseRunning, Pod: fmt.Sprintf("%s-%d", name, proc.Spec.Replica),
			PID: 100 + s.nextPID, StartTime: &start,
		},
	}
	// What the pod runs: the whole argv, and never the environment.
	p.Spec.Command = append(append([]string{}, proc.Spec.Command...), proc.Spec.Args...)
	p.Spec.Args, p.Spec.Env = nil, nil
	if s.procs == nil {
		s.procs = map[string][]*sandboxv1alpha1.SandboxProcess{}
	}
	s.procs[name] = append(s.procs[name], p)
	out := typedProcess(p)
	s.mu.Unlock()
	writeObject(w, http.StatusCreated, out)
}

func (s *Server) signalProcess(w http.ResponseWriter, req *http.Request, name string, replica int32, id string) {
	sig := &sandboxv1alpha1.SandboxProcessSignal{}
	if err := decodeBody(req, sig); err != nil {
		writeStatus(w, err)
		return
	}
	if err := sandboxregistry.ValidateProcessSignal(id, sig); err != nil {
		writeStatus(w, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.process(name, replica, id)
	if p == nil {
		writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes/processes"), id))
		return
	}
	if p.Status.Phase != sandboxv1alpha1.ProcessPhaseRunning {
		writeStatus(w, apierrors.NewConflict(sandboxv1alpha1.Resource("sandboxes/processes"), id, fmt.Errorf("process %s has ended (%s)", id, p.Status.Phase)))
		return
	}
	signal := strings.TrimPrefix(strings.ToUpper(sig.Signal), "SIG")
	if signal == "" {
		signal = "TERM"
	}
	end := metav1.NewTime(s.now())
	p.Status.Phase, p.Status.Signal, p.Status.Reason, p.Status.EndTime = sandboxv1alpha1.ProcessPhaseExited, signal, sandboxv1alpha1.ProcessReasonError, &end
	writeObject(w, http.StatusCreated, typedProcess(p))
}

// serveProcessLog answers a log request for a process with what SetProcessLog set: from
// offsetBytes, tailLines and limitBytes applied, with the offset headers of the real server.
func (s *Server) serveProcessLog(w http.ResponseWriter, name string, opts *sandboxv1alpha1.SandboxLogOptions) {
	s.mu.Lock()
	p := s.process(name, opts.Replica, opts.Process)
	log, ok := s.processLogs[processLogKey{name, opts.Replica, opts.Process}]
	s.mu.Unlock()
	if p == nil {
		writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes/processes"), opts.Process))
		return
	}
	if !ok {
		log = ""
	}
	offset := int64(0)
	if opts.OffsetBytes != nil {
		offset = min(*opts.OffsetBytes, int64(len(log)))
	}
	log = log[offset:]
	if opts.TailLines != nil {
		lines := strings.SplitAfter(log, "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		tail := strings.Join(lines[max(0, len(lines)-int(*opts.TailLines)):], "")
		offset += int64(len(log) - len(tail))
		log = tail
	}
	if opts.LimitBytes != nil && int64(len(log)) > *opts.LimitBytes {
		log = log[:*opts.LimitBytes]
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set(execdapi.ProcessLogOffsetHeader, strconv.FormatInt(offset, 10))
	if !opts.Follow {
		w.Header().Set(execdapi.ProcessLogNextOffsetHeader, strconv.FormatInt(offset+int64(len(log)), 10))
	}
	_, _ = io.WriteString(w, log)
}

// decodeBody decodes a JSON body into into; an empty body leaves it as it is.
func decodeBody(req *http.Request, into any) *apierrors.StatusError {
	data, err := io.ReadAll(req.Body)
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if strings.TrimSpace(string(data)) == "" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return nil
}

func typedProcess(p *sandboxv1alpha1.SandboxProcess) *sandboxv1alpha1.SandboxProcess {
	p = p.DeepCopy()
	p.TypeMeta = metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxProcess"}
	return p
}

package execd

import (
	"io"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// metrics are per Handler, on a registry of its own, so that handlers in
// tests do not collide on a global registry.
type metrics struct {
	registry   *prometheus.Registry
	requests   *prometheus.CounterVec
	uploaded   prometheus.Counter
	downloaded prometheus.Counter
	claims     *prometheus.CounterVec
	// taskAttempts counts the task's attempts by how they ended.
	taskAttempts *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_execd_requests_total",
			Help: "HTTP requests by endpoint (files endpoints by operation) and status code.",
		}, []string{"endpoint", "code"}),
		uploaded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_execd_files_uploaded_bytes_total",
			Help: "Bytes received by file uploads, including uploads that failed.",
		}),
		downloaded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_execd_files_downloaded_bytes_total",
			Help: "File content bytes sent by downloads.",
		}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_execd_claims_total",
			Help: "Claims (" + execdapi.ClaimPath + ") by result: claimed, repeated, conflict, invalid, failed (the entrypoint did not start) or unavailable (shutting down).",
		}, []string{"result"}),
		taskAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_execd_task_attempts_total",
			Help: "Attempts of the task (" + execdapi.TaskPath + ") that ended, by result: Succeeded or the reason of the failure (Error, DeadlineExceeded, PreStartFailed, StartFailed, ContainerRestarted).",
		}, []string{"result"}),
	}
	// Every result from the start, so that rates work from the first claim on.
	for _, result := range claimResults {
		m.claims.WithLabelValues(result)
	}
	for _, result := range taskResults {
		m.taskAttempts.WithLabelValues(result)
	}
	m.registry.MustRegister(m.requests, m.uploaded, m.downloaded, m.claims, m.taskAttempts)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// instrument counts fn's requests under endpoint.
func (m *metrics) instrument(endpoint string, fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		fn(rec, req)
		m.requests.WithLabelValues(endpoint, rec.codeLabel()).Inc()
	}
}

// statusRecorder remembers the status code. Unwrap keeps
// http.ResponseController (flushing, hijacking for exec upgrades) working
// through it.
type statusRecorder struct {
	http.ResponseWriter
	code    int
	written int64
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.written += int64(n)
	return n, err
}

// ReadFrom keeps net/http's sendfile path for downloads.
func (r *statusRecorder) ReadFrom(src io.Reader) (int64, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	n, err := io.Copy(r.ResponseWriter, src)
	r.written += n
	return n, err
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) codeLabel() string {
	if r.code == 0 {
		// Nothing written through the recorder: a hijacked connection
		// (websocket exec) or an empty 200.
		return "none"
	}
	return strconv.Itoa(r.code)
}

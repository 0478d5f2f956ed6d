package node

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const (
	// authnCacheTTL: a scraper's token is reviewed once every two minutes, not every
	// scrape (the kubelet's default for its own webhook token authentication).
	authnCacheTTL = 2 * time.Minute
	// tokenReviewTimeout bounds a TokenReview, well below a scrape's timeout.
	tokenReviewTimeout = 10 * time.Second
	// authzAllowTTL and authzDenyTTL: k8s.io/apiserver's defaults for delegated
	// authorization; a scraper whose binding is removed is refused within five minutes.
	authzAllowTTL = 5 * time.Minute
	authzDenyTTL  = 30 * time.Second
)

// webhookBackoff retries a TokenReview or SubjectAccessReview the kube-apiserver failed,
// as k8s.io/apiserver's DefaultAuthWebhookRetryBackoff (not imported: its package brings a
// whole generic API server).
var webhookBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// metricsAuth admits a scrape of /metrics as the kubelet and the control plane's components
// admit theirs: the bearer token is authenticated by the kube-apiserver (TokenReview), and
// the user it names must be allowed get on the non-resource URL /metrics (SubjectAccessReview;
// the ClusterRole kube-sandbox:metrics-reader allows it). The series name every sandbox of
// the node and what it does, which is not for any pod of the node's network to read.
type metricsAuth struct {
	authn authenticator.Request
	authz authorizer.Authorizer
}

// newMetricsAuth delegates to the kube-apiserver of kube.
func newMetricsAuth(kube kubernetes.Interface) (*metricsAuth, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  kube.AuthenticationV1(),
		TokenAccessReviewTimeout: tokenReviewTimeout,
		WebhookRetryBackoff:      &webhookBackoff,
		CacheTTL:                 authnCacheTTL,
	}.New()
	if err != nil {
		return nil, err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             authzAllowTTL,
		DenyCacheTTL:              authzDenyTTL,
		WebhookRetryBackoff:       &webhookBackoff,
	}.New()
	if err != nil {
		return nil, err
	}
	return &metricsAuth{authn: authn, authz: authz}, nil
}

// handler serves g's metrics on nodeapi.MetricsPath to the scrapers a admits: 401 without a
// token the kube-apiserver accepts, 403 for a user it does not allow.
func (a *metricsAuth) handler(g prometheus.Gatherer) http.Handler {
	metrics := promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: promLogger{}})
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+nodeapi.MetricsPath, func(w http.ResponseWriter, req *http.Request) {
		res, ok, err := a.authn.AuthenticateRequest(req)
		if err != nil || !ok {
			// Why is the scraper's to know (a bad or expired token) and the log's; the
			// answer says no more than the kube-apiserver's own 401.
			klog.V(4).InfoS("Refused an unauthenticated scrape", "remoteAddr", req.RemoteAddr, "err", err)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: res.User, Verb: "get", Path: req.URL.Path, ResourceRequest: false}
		decision, reason, err := a.authz.Authorize(req.Context(), attrs)
		if err != nil {
			klog.ErrorS(err, "Authorizing a scrape", "user", res.User.GetName())
			http.Error(w, "Authorization failed", http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			klog.V(4).InfoS("Refused a scrape", "user", res.User.GetName(), "reason", reason)
			http.Error(w, "Forbidden: "+res.User.GetName()+" may not get "+nodeapi.MetricsPath, http.StatusForbidden)
			return
		}
		metrics.ServeHTTP(w, req)
	})
	return mux
}

// promLogger logs promhttp's errors (a collector that failed) with klog.
type promLogger struct{}

func (promLogger) Println(v ...any) { klog.ErrorS(nil, "Serving metrics", "err", v) }

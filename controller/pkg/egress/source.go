package egress

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Source reads the platform's policy from its ConfigMap (through the controller's cache) and
// the cluster's ranges from Nodes and ServiceCIDRs.
type Source struct {
	Reader    client.Reader
	Namespace string
	Name      string // DefaultConfigMap when empty
	// Recorder, if set, gets a Warning Event on the ConfigMap for each invalid version of it.
	Recorder events.EventRecorder

	mu         sync.Mutex
	version    string
	last       *Platform
	badVersion string
}

// ReasonInvalidPolicy (Event on the ConfigMap): the platform's egress policy does not parse;
// the previous one (or the built-in deny-all) stays in force.
const ReasonInvalidPolicy = "InvalidEgressPolicy"

// ConfigMapName is the ConfigMap's name.
func (s *Source) ConfigMapName() string {
	if s.Name == "" {
		return DefaultConfigMap
	}
	return s.Name
}

// Current returns the platform policy and the cluster's ranges. A missing ConfigMap gives the
// built-in policy, which denies everything; an invalid one is reported and the last valid
// one (else the built-in) stays in force: a typo in the ConfigMap never opens the network.
func (s *Source) Current(ctx context.Context) (*Platform, *Cluster, error) {
	cluster, err := ReadCluster(ctx, s.Reader)
	if err != nil {
		return nil, nil, err
	}
	cm := &corev1.ConfigMap{}
	err = s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.ConfigMapName()}, cm)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case apierrors.IsNotFound(err):
		s.version, s.last = "", nil
		return Builtin(), cluster, nil
	case err != nil:
		return nil, nil, err
	}
	if cm.ResourceVersion == s.version && s.last != nil {
		return s.last, cluster, nil
	}
	p, perr := ParsePlatform(cm.Data)
	if perr != nil {
		if cm.ResourceVersion != s.badVersion {
			s.badVersion = cm.ResourceVersion
			log.FromContext(ctx).Error(perr, "the platform egress policy is invalid; keeping the previous one", "configMap", client.ObjectKeyFromObject(cm))
			if s.Recorder != nil {
				s.Recorder.Eventf(cm, nil, corev1.EventTypeWarning, ReasonInvalidPolicy, "Parse",
					"not used, the previous policy stays in force: %v", perr)
			}
		}
		if s.last != nil {
			return s.last, cluster, nil
		}
		return Builtin(), cluster, nil
	}
	s.version, s.last = cm.ResourceVersion, p
	return p, cluster, nil
}

package sandboxpod

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// ErrTokenConflict: a Secret of the token's name exists and its owner is someone else.
type ErrTokenConflict struct {
	Namespace, Name string
}

func (e *ErrTokenConflict) Error() string {
	return fmt.Sprintf("secret %s/%s exists and does not belong to this object; delete or rename it", e.Namespace, e.Name)
}

// EnsureToken makes sure the Secret name holds an execd token controlled by owner, creating it
// with a fresh random token if it is missing, and returns the token. reader reads around the
// cache, which holds only Secrets with our labels: one by that name without them is invisible
// to c, and a token we did not make is refused.
func EnsureToken(ctx context.Context, c client.Client, reader client.Reader, owner client.Object, name string, labels map[string]string) (string, error) {
	existing := &corev1.Secret{}
	key := client.ObjectKey{Namespace: owner.GetNamespace(), Name: name}
	err := c.Get(ctx, key, existing)
	if err == nil {
		if !metav1.IsControlledBy(existing, owner) {
			return "", &ErrTokenConflict{Namespace: key.Namespace, Name: name}
		}
		return string(existing.Data[controlv1alpha1.ExecdTokenKey]), nil
	}
	if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("get token secret: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	token := hex.EncodeToString(buf)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: key.Namespace, Labels: labels},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{controlv1alpha1.ExecdTokenKey: []byte(token)},
	}
	if err := controllerutil.SetControllerReference(owner, secret, c.Scheme()); err != nil {
		return "", err
	}
	err = c.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		if reader == nil {
			reader = c
		}
		if err := reader.Get(ctx, key, existing); err != nil {
			return "", fmt.Errorf("get token secret: %w", err)
		}
		if !metav1.IsControlledBy(existing, owner) {
			return "", &ErrTokenConflict{Namespace: key.Namespace, Name: name}
		}
		return string(existing.Data[controlv1alpha1.ExecdTokenKey]), nil
	}
	if err != nil {
		return "", fmt.Errorf("create token secret: %w", err)
	}
	return token, nil
}

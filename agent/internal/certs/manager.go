package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Secret data keys.
const (
	keyCACert     = "ca.crt"
	keyCAKey      = "ca.key"
	keyPrevCACert = "ca-previous.crt"
	keyTLSCert    = corev1.TLSCertKey
	keyTLSKey     = corev1.TLSPrivateKeyKey
)

// Options configure a Manager.
type Options struct {
	// Client reads and writes the Secret and the webhook configuration; use a direct client,
	// Ensure runs before the manager's caches start.
	Client client.Client
	// Namespace and SecretName locate the Secret holding the CA and the serving certificate.
	Namespace, SecretName string
	// WebhookConfigName is the ValidatingWebhookConfiguration whose caBundle is kept current;
	// empty skips patching.
	WebhookConfigName string
	// DNSNames the serving certificate is valid for (service.namespace.svc, …).
	DNSNames []string
	// CertDir receives tls.crt and tls.key for the webhook server.
	CertDir string
	// CAValidity and CertValidity default to one year and 90 days.
	CAValidity, CertValidity time.Duration
	// CheckInterval is how often Start looks at expiry and the caBundle; default one hour.
	CheckInterval time.Duration
	// Now is the clock (tests).
	Now func() time.Time
	Log logr.Logger
}

// Manager keeps the webhook serving certificate and the CA bundle current.
type Manager struct{ o Options }

// New validates options and fills defaults.
func New(o Options) (*Manager, error) {
	if o.Client == nil || o.Namespace == "" || o.SecretName == "" || o.CertDir == "" || len(o.DNSNames) == 0 {
		return nil, errors.New("certs: client, namespace, secret name, certificate directory and DNS names are required")
	}
	if o.CAValidity == 0 {
		o.CAValidity = 365 * 24 * time.Hour
	}
	if o.CertValidity == 0 {
		o.CertValidity = 90 * 24 * time.Hour
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Manager{o: o}, nil
}

// Start re-checks periodically until ctx ends (a controller-runtime Runnable). Errors are
// logged and retried: the current certificate usually has months left.
func (m *Manager) Start(ctx context.Context) error {
	t := time.NewTicker(m.o.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := m.Ensure(ctx); err != nil {
				m.o.Log.Error(err, "keeping webhook certificates current")
			}
		}
	}
}

// NeedLeaderElection is false: every replica serves the webhook and needs the files.
func (m *Manager) NeedLeaderElection() bool { return false }

// Ensure makes the Secret hold a valid CA and serving certificate (creating or renewing
// them), writes the serving pair to CertDir and patches the CA bundle. Replicas racing on the
// Secret resolve through its resourceVersion: the loser re-reads and uses the winner's chain.
func (m *Manager) Ensure(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		sec, err := m.reconcileSecret(ctx)
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			if attempt < 3 {
				continue
			}
		}
		if err != nil {
			return err
		}
		if err := m.writeFiles(sec); err != nil {
			return err
		}
		return m.patchBundle(ctx, bundle(sec, m.o.Now()))
	}
}

func (m *Manager) reconcileSecret(ctx context.Context) (*corev1.Secret, error) {
	now := m.o.Now()
	sec := &corev1.Secret{}
	err := m.o.Client.Get(ctx, types.NamespacedName{Namespace: m.o.Namespace, Name: m.o.SecretName}, sec)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
	}
	if !exists {
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.o.Namespace, Name: m.o.SecretName,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "kollect-agent"}}, Type: corev1.SecretTypeTLS}
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	changed := false
	ca := keyPair{Cert: sec.Data[keyCACert], Key: sec.Data[keyCAKey]}
	if _, _, err := ca.parse(); err != nil || dueForRenewal(ca.Cert, now) {
		next, err := newCA("kollect-agent-webhook-ca", now, m.o.CAValidity)
		if err != nil {
			return nil, err
		}
		if len(ca.Cert) > 0 {
			sec.Data[keyPrevCACert] = ca.Cert
		}
		ca, changed = next, true
		sec.Data[keyCACert], sec.Data[keyCAKey] = ca.Cert, ca.Key
		m.o.Log.Info("issued a new webhook CA", "secret", m.o.SecretName)
	}
	if changed || dueForRenewal(sec.Data[keyTLSCert], now) || !verifies(ca.Cert, sec.Data[keyTLSCert], m.o.DNSNames, now) {
		kp, err := newServing(ca, m.o.DNSNames, now, m.o.CertValidity)
		if err != nil {
			return nil, err
		}
		sec.Data[keyTLSCert], sec.Data[keyTLSKey], changed = kp.Cert, kp.Key, true
		m.o.Log.Info("issued a new webhook serving certificate", "dnsNames", m.o.DNSNames)
	}
	if !changed {
		return sec, nil
	}
	if !exists {
		return sec, m.o.Client.Create(ctx, sec)
	}
	return sec, m.o.Client.Update(ctx, sec)
}

// bundle is the current CA plus the previous one while it is still valid.
func bundle(sec *corev1.Secret, now time.Time) []byte {
	out := append([]byte{}, sec.Data[keyCACert]...)
	if prev := sec.Data[keyPrevCACert]; len(prev) > 0 {
		if c, err := parseCert(prev); err == nil && now.Before(c.NotAfter) {
			out = append(out, prev...)
		}
	}
	return out
}

// writeFiles replaces tls.crt and tls.key atomically when they differ.
func (m *Manager) writeFiles(sec *corev1.Secret) error {
	if err := os.MkdirAll(m.o.CertDir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", m.o.CertDir, err)
	}
	// The key first: the watcher reloads on the certificate, which must find its key.
	for _, name := range []string{keyTLSKey, keyTLSCert} {
		p := filepath.Join(m.o.CertDir, name)
		if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, sec.Data[name]) {
			continue
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, sec.Data[name], 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", tmp, err)
		}
		if err := os.Rename(tmp, p); err != nil {
			return fmt.Errorf("replacing %s: %w", p, err)
		}
	}
	return nil
}

// patchBundle sets caBundle on every webhook of the configuration that differs.
func (m *Manager) patchBundle(ctx context.Context, caBundle []byte) error {
	if m.o.WebhookConfigName == "" {
		return nil
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := m.o.Client.Get(ctx, types.NamespacedName{Name: m.o.WebhookConfigName}, cfg); err != nil {
		if apierrors.IsNotFound(err) {
			m.o.Log.Info("webhook configuration not found; its caBundle will be set once it exists", "name", m.o.WebhookConfigName)
			return nil
		}
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", m.o.WebhookConfigName, err)
	}
	before := cfg.DeepCopy()
	changed := false
	for i := range cfg.Webhooks {
		if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, caBundle) {
			cfg.Webhooks[i].ClientConfig.CABundle, changed = caBundle, true
		}
	}
	if !changed {
		return nil
	}
	if err := m.o.Client.Patch(ctx, cfg, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("patching caBundle of %s: %w", m.o.WebhookConfigName, err)
	}
	return nil
}

package testenv

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ValidatingWebhooks returns options that install the given configurations; envtest points
// them at a local port with its own serving certificate (see ControlPlane.WebhookServing).
func ValidatingWebhooks(cfgs ...*admissionregistrationv1.ValidatingWebhookConfiguration) envtest.WebhookInstallOptions {
	return envtest.WebhookInstallOptions{ValidatingWebhooks: cfgs, LocalServingHost: "127.0.0.1"}
}

// WebhookServing is where a webhook server under test must listen and the directory holding
// the tls.crt and tls.key the API server trusts.
type WebhookServing struct {
	Host    string
	Port    int
	CertDir string
}

// WebhookServing returns the serving parameters envtest allocated for this control plane.
func (cp *ControlPlane) WebhookServing() WebhookServing {
	o := cp.env.WebhookInstallOptions
	return WebhookServing{Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir}
}

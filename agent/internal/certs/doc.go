// Package certs gives the agent's webhook server its serving certificate without cert-manager:
// a self-signed CA and a serving certificate kept in a Secret (so every replica serves the
// same chain), written to the webhook server's certificate directory (controller-runtime
// reloads it on change), and the CA bundle patched into the ValidatingWebhookConfiguration.
// Both are renewed once two thirds of their lifetime has passed; after a CA renewal the old
// CA stays in the bundle until it expires, so no request fails during the switch.
package certs

// Package dashboard tests the hub's web dashboard end to end: it builds the dashboard and
// kollect-hub (which embeds it), starts the hub with its own CA, registers simulated agents
// (fleetsim) that speak the real AgentService, and runs web/e2e — playwright-core driving
// headless Chromium from Debian — against it. With KOLLECT_SCREENSHOTS=1 the browser test also
// writes the screenshots in docs/images. A missing node or chromium fails the test; make test
// installs both.
package dashboard

package testenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"kollect.dev/api/crds"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Scheme knows the built-in Kubernetes types, CRDs and every Kollect kind.
var Scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(kollectv1.AddToScheme(s))
	return s
}

// ControlPlane is one running etcd + kube-apiserver: one "cluster" for a test.
type ControlPlane struct {
	// Name identifies the control plane in logs and kubeconfig contexts.
	Name string
	// Config reaches the apiserver as an administrator.
	Config *rest.Config
	// Client is a controller-runtime client using Scheme.
	Client client.Client
	// Kubeconfig is the path of a kubeconfig file for kubectl and CLIs.
	Kubeconfig string

	env *envtest.Environment
	dir string
}

// Options tune a control plane.
type Options struct {
	// WithoutCRDs skips installing the Kollect CRDs.
	WithoutCRDs bool
	// ExtraCRDs are installed alongside the Kollect CRDs.
	ExtraCRDs []*apiextensionsv1.CustomResourceDefinition
	// WebhookInstallOptions configures envtest's webhook serving.
	WebhookInstallOptions envtest.WebhookInstallOptions
	// EtcdQuotaBytes raises etcd's storage quota (2 GiB by default) for runs that store more,
	// such as the agent benchmark's million objects; zero keeps the default.
	EtcdQuotaBytes int64
}

// AssetsDir returns the directory holding etcd, kube-apiserver and kubectl.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", errors.New("KUBEBUILDER_ASSETS is not set: run the tests through `make test` " +
			"(it builds etcd and kube-apiserver into a cache), or export KUBEBUILDER_ASSETS=$(hack/ensure-k8s.sh)")
	}
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s lacks %s: %w", dir, bin, err)
		}
	}
	return dir, nil
}

// KollectCRDs decodes the CRDs embedded in kollect.dev/api/crds.
func KollectCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	entries, err := fs.ReadDir(crds.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("reading embedded CRDs: %w", err)
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(entries))
	for _, e := range entries {
		raw, err := fs.ReadFile(crds.FS, e.Name())
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", e.Name(), err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", e.Name(), err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// startAttempts bounds startEnv: envtest gives the API server 5 s (not configurable) to
// create the default namespace after it answers, which a loaded 2-core machine can miss;
// a start-up that slow is not what any test here measures.
const startAttempts = 3

// startEnv starts env, again after a stop when the API server missed one of envtest's
// deadlines; any other error is returned at once.
func startEnv(env *envtest.Environment) (*rest.Config, error) {
	if env.ControlPlaneStartTimeout == 0 && os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		env.ControlPlaneStartTimeout = time.Minute
	}
	for attempt := 1; ; attempt++ {
		cfg, err := env.Start()
		if err == nil || attempt == startAttempts || !errors.Is(err, context.DeadlineExceeded) {
			return cfg, err
		}
		if stopErr := env.Stop(); stopErr != nil {
			return nil, fmt.Errorf("%w (stopping it to try again: %v)", err, stopErr)
		}
	}
}

// Start starts one control plane with the Kollect CRDs installed.
func Start(name string, opts Options) (*ControlPlane, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	var crdList []*apiextensionsv1.CustomResourceDefinition
	if !opts.WithoutCRDs {
		if crdList, err = KollectCRDs(); err != nil {
			return nil, err
		}
	}
	crdList = append(crdList, opts.ExtraCRDs...)

	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: crdList, Scheme: Scheme},
		Scheme:                Scheme,
		WebhookInstallOptions: opts.WebhookInstallOptions,
		ErrorIfCRDPathMissing: true,
	}
	// Keep everything on loopback: both flags are needed, the first alone makes it exit.
	api := env.ControlPlane.GetAPIServer().Configure()
	api.Set("advertise-address", "127.0.0.1")
	api.Set("endpoint-reconciler-type", "none")
	if opts.EtcdQuotaBytes > 0 {
		env.ControlPlane.Etcd = &envtest.Etcd{}
		env.ControlPlane.Etcd.Configure().Set("quota-backend-bytes", strconv.FormatInt(opts.EtcdQuotaBytes, 10))
	}

	cfg, err := startEnv(env)
	if err != nil {
		return nil, fmt.Errorf("starting control plane %q: %w", name, err)
	}
	cp := &ControlPlane{Name: name, Config: cfg, env: env}
	if cp.Client, err = client.New(cfg, client.Options{Scheme: Scheme}); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("client for %q: %w", name, err)
	}
	if cp.dir, err = os.MkdirTemp("", "kollect-cp-"+name+"-"); err != nil {
		_ = env.Stop()
		return nil, err
	}
	cp.Kubeconfig = filepath.Join(cp.dir, "kubeconfig")
	if err := writeKubeconfig(cp.Kubeconfig, name, cfg); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return cp, nil
}

// StartN starts n control planes concurrently, named prefix-1 … prefix-n. If any fails, the
// others are stopped and the first error is returned.
func StartN(prefix string, n int, opts Options) ([]*ControlPlane, error) {
	cps := make([]*ControlPlane, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { cps[i], errs[i] = Start(fmt.Sprintf("%s-%d", prefix, i+1), opts) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		StopAll(cps)
		return nil, err
	}
	return cps, nil
}

// StopAll stops control planes concurrently, ignoring nil entries.
func StopAll(cps []*ControlPlane) error {
	errs := make([]error, len(cps))
	var wg sync.WaitGroup
	for i, cp := range cps {
		if cp != nil {
			wg.Go(func() { errs[i] = cp.Stop() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stop stops the control plane and removes its files.
func (cp *ControlPlane) Stop() error {
	err := cp.env.Stop()
	if cp.dir != "" {
		_ = os.RemoveAll(cp.dir)
	}
	if err != nil {
		return fmt.Errorf("stopping control plane %q: %w", cp.Name, err)
	}
	return nil
}

// WebhookOptions returns the webhook serving options envtest prepared (host, port, certs).
func (cp *ControlPlane) WebhookOptions() envtest.WebhookInstallOptions {
	return cp.env.WebhookInstallOptions
}

// WaitForCRDs blocks until the given CRDs are established; Start already waits for its own.
func (cp *ControlPlane) WaitForCRDs(ctx context.Context, crdList []*apiextensionsv1.CustomResourceDefinition) error {
	return envtest.WaitForCRDs(cp.Config, crdList, envtest.CRDInstallOptions{MaxTime: 30 * time.Second, PollInterval: 100 * time.Millisecond})
}

func writeKubeconfig(path, name string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// AddUser creates a user of the control plane (client-certificate authentication) and returns a
// config acting as it; RBAC applies, so tests can run an agent with least privilege.
func (cp *ControlPlane) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := cp.env.AddUser(envtest.User{Name: name, Groups: groups}, cp.Config)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	return u.Config(), nil
}

package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestStartThreeControlPlanes starts three independent clusters at once, as the fleet tests
// do, and checks each is a separate, working apiserver with the Kollect CRDs.
func TestStartThreeControlPlanes(t *testing.T) {
	start := time.Now()
	cps, err := StartN("three", 3, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := StopAll(cps); err != nil {
			t.Error(err)
		}
	})
	t.Logf("3 control planes started in %s; children RSS %d MiB", time.Since(start).Round(time.Millisecond), childrenRSS()>>20)

	ctx := context.Background()
	for i, cp := range cps {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-in-" + cp.Name}}
		if err := cp.Client.Create(ctx, ns); err != nil {
			t.Fatalf("%s: %v", cp.Name, err)
		}
		for j, other := range cps {
			if i == j {
				continue
			}
			if err := other.Client.Get(ctx, client.ObjectKey{Name: ns.Name}, &corev1.Namespace{}); err == nil {
				t.Fatalf("namespace created in %s is visible in %s: control planes share state", cp.Name, other.Name)
			}
		}
		var profiles kollectv1.KollectProfileList
		if err := cp.Client.List(ctx, &profiles); err != nil {
			t.Fatalf("%s: Kollect CRDs not served: %v", cp.Name, err)
		}
		if _, err := os.Stat(cp.Kubeconfig); err != nil {
			t.Fatalf("%s: kubeconfig: %v", cp.Name, err)
		}
	}
}

func TestAssetsDirRequiresBinaries(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	if _, err := AssetsDir(); err == nil || !strings.Contains(err.Error(), "lacks etcd") {
		t.Fatalf("AssetsDir with an empty directory: %v, want an error naming etcd", err)
	}
	t.Setenv("KUBEBUILDER_ASSETS", "")
	if _, err := AssetsDir(); err == nil || !strings.Contains(err.Error(), "make test") {
		t.Fatalf("AssetsDir unset: %v, want a hint to run make test", err)
	}
}

// childrenRSS sums the resident memory of this process's direct children (etcd, apiserver).
func childrenRSS() int64 {
	self := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var total int64
	for _, stat := range stats {
		raw, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state ppid ...
		fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
		if len(fields) < 22 || fields[1] != self {
			continue
		}
		pages, _ := strconv.ParseInt(fields[21], 10, 64)
		total += pages * int64(os.Getpagesize())
	}
	return total
}

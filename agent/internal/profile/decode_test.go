package profile

import (
	"strings"
	"testing"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestDecodeNeedsWholeSecrets: a decoding profile is never metadata-only (the decoder reads
// the Secret's data, even when every attribute reads metadata), and a decoder on another
// kind or bad options are compile errors, as the CRD's validation refuses them.
func TestDecodeNeedsWholeSecrets(t *testing.T) {
	secret := kollectv1.GroupVersionKind{Version: "v1", Kind: "Secret"}
	name := []kollectv1.Attribute{{Name: "name", JSONPath: "{.metadata.name}"}}
	c, err := Compile(&kollectv1.KollectProfile{Spec: kollectv1.KollectProfileSpec{Target: secret, Attributes: name,
		Decode: kollectv1.DecodeHelmRelease, DecodeOptions: &kollectv1.DecodeOptions{Values: kollectv1.ValuesRedacted}}})
	if err != nil {
		t.Fatal(err)
	}
	if c.MetadataOnly || c.Decode != kollectv1.DecodeHelmRelease || !c.DecodeValues {
		t.Fatalf("compiled %+v", c)
	}
	for _, tc := range []struct {
		spec kollectv1.KollectProfileSpec
		want string
	}{
		{kollectv1.KollectProfileSpec{Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Decode: kollectv1.DecodeHelmRelease},
			"decode HelmRelease reads Helm's release Secrets: set target to {version: v1, kind: Secret}"},
		{kollectv1.KollectProfileSpec{Target: secret, Decode: "Other"}, `decode: unknown decoder "Other" (supported: HelmRelease)`},
		{kollectv1.KollectProfileSpec{Target: secret, DecodeOptions: &kollectv1.DecodeOptions{}}, "decodeOptions needs decode"},
		{kollectv1.KollectProfileSpec{Target: secret, Decode: kollectv1.DecodeHelmRelease, DecodeOptions: &kollectv1.DecodeOptions{Values: "Plain"}},
			`decodeOptions.values: "Plain" is not Omit or Redacted`},
	} {
		tc.spec.Attributes = name
		_, err := Compile(&kollectv1.KollectProfile{Spec: tc.spec})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%+v) = %v, want %q", tc.spec, err, tc.want)
		}
	}
}

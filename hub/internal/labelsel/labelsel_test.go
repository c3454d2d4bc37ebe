package labelsel

import (
	"testing"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

func TestMatchRoundTrip(t *testing.T) {
	sel, err := FromProto(&fleetv1.LabelSelector{
		MatchLabels: map[string]string{"env": "prod"},
		MatchExpressions: []*fleetv1.LabelSelectorRequirement{
			{Key: "tier", Operator: "In", Values: []string{"a", "b"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := Encode(sel)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"env": "prod", "tier": "a"}, true},
		{map[string]string{"env": "prod", "tier": "c"}, false},
		{map[string]string{"env": "dev", "tier": "a"}, false},
		{nil, false},
	}
	for _, c := range cases {
		got, err := Match(raw, c.labels)
		if err != nil || got != c.want {
			t.Errorf("Match(%s, %v) = %v, %v; want %v", raw, c.labels, got, err, c.want)
		}
	}
	empty, _ := FromProto(nil)
	rawEmpty, _ := Encode(empty)
	if ok, err := Match(rawEmpty, map[string]string{"x": "y"}); !ok || err != nil {
		t.Errorf("empty selector must select everything: %v %v", ok, err)
	}
	back := ToProto(sel)
	if back.GetMatchLabels()["env"] != "prod" || back.GetMatchExpressions()[0].GetOperator() != "In" {
		t.Errorf("ToProto: %v", back)
	}
}

func TestInvalid(t *testing.T) {
	if _, err := FromProto(&fleetv1.LabelSelector{MatchExpressions: []*fleetv1.LabelSelectorRequirement{
		{Key: "tier", Operator: "Sometimes"}}}); err == nil {
		t.Error("bad operator accepted")
	}
	if err := ValidateLabels(map[string]string{"bad key!": "x"}); err == nil {
		t.Error("bad label key accepted")
	}
	if err := ValidateLabels(map[string]string{"env": "prod", "kollect.dev/region": "eu-1"}); err != nil {
		t.Error(err)
	}
}

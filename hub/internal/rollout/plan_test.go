package rollout

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

func members(n int, canary ...int) []Member {
	var out []Member
	for i := n; i >= 1; i-- { // reversed: the plan must sort
		l := map[string]string{}
		for _, c := range canary {
			if c == i {
				l["ring"] = "canary"
			}
		}
		out = append(out, Member{Name: fmt.Sprintf("c%02d", i), Labels: l})
	}
	return out
}

func summary(t *testing.T, st *fleetv1.RolloutStrategy, ms []Member) string {
	t.Helper()
	waves, clusters, err := Plan(st, ms)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for i, w := range waves {
		var names []string
		for _, c := range clusters {
			if c.Wave == i {
				names = append(names, c.Cluster)
			}
		}
		if int(w.Total) != len(names) || int(w.Pending) != len(names) {
			t.Fatalf("wave %s counts %+v for %v", w.Name, w, names)
		}
		parts = append(parts, w.Name+"="+strings.Join(names, ","))
	}
	return strings.Join(parts, " | ")
}

func TestPlan(t *testing.T) {
	canary := &fleetv1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}
	percent := func(p int32) *fleetv1.WaveSize { return &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Percent{Percent: p}} }
	count := func(n int32) *fleetv1.WaveSize { return &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Count{Count: n}} }
	for _, tc := range []struct {
		name string
		st   *fleetv1.RolloutStrategy
		ms   []Member
		want string
	}{
		{"everything at once", &fleetv1.RolloutStrategy{}, members(3), "wave 1=c01,c02,c03"},
		{"count", &fleetv1.RolloutStrategy{WaveSize: count(2)}, members(5), "wave 1=c01,c02 | wave 2=c03,c04 | wave 3=c05"},
		// 30% of all 10 clusters (canaries included) is 3.
		{"canary then percent", &fleetv1.RolloutStrategy{CanarySelector: canary, WaveSize: percent(30)}, members(10, 4, 9),
			"canary=c04,c09 | wave 1=c01,c02,c03 | wave 2=c05,c06,c07 | wave 3=c08,c10"},
		{"percent rounds up", &fleetv1.RolloutStrategy{WaveSize: percent(10)}, members(11),
			"wave 1=c01,c02 | wave 2=c03,c04 | wave 3=c05,c06 | wave 4=c07,c08 | wave 5=c09,c10 | wave 6=c11"},
		{"canary matching nobody", &fleetv1.RolloutStrategy{CanarySelector: canary}, members(2), "canary= | wave 1=c01,c02"},
		{"only canaries", &fleetv1.RolloutStrategy{CanarySelector: canary}, members(1, 1), "canary=c01"},
		{"no clusters", &fleetv1.RolloutStrategy{WaveSize: count(5)}, nil, "wave 1="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summary(t, tc.st, tc.ms); got != tc.want {
				t.Fatalf("plan:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	st, err := Validate(nil)
	if err != nil || st.GetProgressDeadline().AsDuration() != DefaultProgressDeadline {
		t.Fatalf("defaults: %v %v", st, err)
	}
	given := &fleetv1.RolloutStrategy{ProgressDeadline: durationpb.New(time.Minute)}
	if st, _ := Validate(given); st.GetProgressDeadline().AsDuration() != time.Minute || st == given {
		t.Fatalf("kept deadline, copied: %v", st)
	}
	for name, bad := range map[string]*fleetv1.RolloutStrategy{
		"percent 0":        {WaveSize: &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Percent{}}},
		"percent 101":      {WaveSize: &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Percent{Percent: 101}}},
		"count 0":          {WaveSize: &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Count{}}},
		"concurrency":      {MaxConcurrency: -1},
		"failures":         {MaxFailures: -1},
		"min healthy":      {MinHealthy: durationpb.New(-time.Second)},
		"item count":       {Gates: &fleetv1.RolloutGates{MaxItemCountChangePercent: -1}},
		"canary selector":  {CanarySelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}},
		"canary operator":  {CanarySelector: &fleetv1.LabelSelector{MatchExpressions: []*fleetv1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}},
		"negative timeout": {ProgressDeadline: durationpb.New(-time.Minute)},
	} {
		if _, err := Validate(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

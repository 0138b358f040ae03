package dashboard

import (
	"strings"
	"testing"
)

// TestPredictActionValidation: the predictions need the learner's answer
// in range, predict-order a number of runs in range (default 5); a bad one
// is refused with the offending value before anything is done.
func TestPredictActionValidation(t *testing.T) {
	for _, c := range []struct{ body, reason string }{
		{`{"action":"predict-consumers"}`, `"answer" "": how many of the 8 consumers consume, 0 to 8`},
		{`{"action":"predict-consumers","answer":"9"}`, `"answer" "9"`},
		{`{"action":"predict-consumers","answer":"-1"}`, `"answer" "-1"`},
		{`{"action":"predict-consumers","answer":"six"}`, `"answer" "six"`},
		{`{"action":"predict-order"}`, `"answer" "": which the group processes first, one of A1, B1, either`},
		{`{"action":"predict-order","answer":"C1"}`, `"answer" "C1"`},
		{`{"action":"predict-order","answer":"A1","runs":21}`, `"runs" 21: want 1 to 20`},
		{`{"action":"predict-order","answer":"A1","runs":-2}`, `"runs" -2`},
	} {
		_, err := parseAction([]byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want %q", c.body, err, c.reason)
		}
		if code, _ := errorAnswer(err); err != nil && code != 400 {
			t.Errorf("%s: status %d, want 400", c.body, code)
		}
	}
	for _, answer := range []string{"0", "6", "8"} {
		if _, err := parseAction([]byte(`{"action":"predict-consumers","answer":"` + answer + `"}`)); err != nil {
			t.Errorf("predict-consumers answer %s: %v", answer, err)
		}
	}
	a, err := parseAction([]byte(`{"action":"predict-order","answer":"either"}`))
	if err != nil || a.Runs != defaultPredictRuns {
		t.Fatalf("predict-order defaults: %+v, %v", a, err)
	}
	a, err = parseAction([]byte(`{"action":"predict-order","answer":"B1","runs":20}`))
	if err != nil || a.Runs != 20 {
		t.Fatalf("predict-order 20 runs: %+v, %v", a, err)
	}
}

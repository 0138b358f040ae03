package report

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/producer"
)

// writeJSONL writes one JSON object per line to dir/name.
func writeJSONL[T any](t *testing.T, dir, name string, lines []T) {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		j, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, dir, name, s string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeReport calls Write and returns the page.
func writeReport(t *testing.T, dir string, meta Meta) string {
	t.Helper()
	path, err := Write(dir, meta)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if want := filepath.Join(dir, ReportFile); path != want {
		t.Errorf("Write returned %q, want %q", path, want)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	checkSVG(t, page)
	if strings.Contains(page, "ZgotmplZ") {
		t.Errorf("html/template rejected a value (ZgotmplZ) in the page")
	}
	rest := strings.Replace(page, `xmlns="http://www.w3.org/2000/svg"`, "", 1)
	for _, ext := range []string{"<script", "<link", "<img", ` src="`, "http://", "https://", "url("} {
		if strings.Contains(rest, ext) {
			t.Errorf("page is not self-contained: it contains %q", ext)
		}
	}
	return page
}

// checkSVG checks that the page holds exactly one svg element and that it
// is well-formed XML.
func checkSVG(t *testing.T, page string) {
	t.Helper()
	i, j := strings.Index(page, "<svg"), strings.Index(page, "</svg>")
	if i < 0 || j < i || strings.Count(page, "<svg") != 1 {
		t.Fatalf("page has no (single) svg element")
	}
	d := xml.NewDecoder(strings.NewReader(page[i : j+len("</svg>")]))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("svg is not well-formed XML: %v", err)
		}
	}
}

// mustMatch fails unless page matches the regular expression.
func mustMatch(t *testing.T, page, expr string) {
	t.Helper()
	if !regexp.MustCompile(expr).MatchString(page) {
		t.Errorf("page does not match %s", expr)
	}
}

func mustContain(t *testing.T, page string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(page, p) {
			t.Errorf("page does not contain %q", p)
		}
	}
}

// experiment writes the files of a 30-second run starting at t0: steady
// acks=all writes, two kills (unavailable 4.25 s and 1.5 s), a network
// fault that never ends, a leader change, a consumer that rebalances, and
// a checker result with one lost write.
func experiment(t *testing.T) string {
	dir := t.TempDir()
	var p1 []producer.HistoryLine
	for ms := 0; ms < 10000; ms += 500 { // two writes a second, 10 ms latency
		p1 = append(p1, ok("p1-"+time.Duration(ms).String(), "all", ms, ms+10))
	}
	p1 = append(p1,
		fail("p1-f1", "all", "NOT_LEADER_OR_FOLLOWER", 10200),
		fail("p1-f2", "all", "NOT_LEADER_OR_FOLLOWER", 10700),
		fail("p1-f3", "all", "REQUEST_TIMED_OUT", 11300),
		ok("p1-recovered", "all", 10500, 14250), // first ack after kill 1
		ok("p1-next", "all", 14400, 14420),
		fail("p1-f4", "all", "NOT_ENOUGH_REPLICAS", 20100),
		ok("p1-recovered-2", "all", 20200, 21500), // first ack after kill 2
		ok("p1-end", "all", 28000, 28010),
	)
	writeJSONL(t, dir, "producer-1.jsonl", p1)
	// A producer with acks=1 whose acks come earlier: not counted, as
	// acks=all writes exist.
	writeJSONL(t, dir, "producer-2.jsonl", []producer.HistoryLine{ok("p2-a", "1", 10100, 10300), ok("p2-b", "1", 20050, 20100)})

	part := func(p int32) *int32 { return &p }
	off := func(o int64) *int64 { return &o }
	c := func(typ string, ms int, gen int32, parts ...int32) consumer.HistoryLine {
		return consumer.HistoryLine{Type: typ, Consumer: "c1", Generation: gen, Topic: "orders", Partitions: parts, At: at(ms)}
	}
	rec := consumer.HistoryLine{Type: consumer.HistoryRecord, Consumer: "c1", Generation: 1, Topic: "orders",
		Partition: part(0), Offset: off(0), EventID: ptr("p1-0s"), Value: ptr("v"), At: at(600)}
	writeJSONL(t, dir, "consumer-1.jsonl", []consumer.HistoryLine{
		c(consumer.HistoryAssigned, 500, 1, 0, 1, 2), rec,
		c(consumer.HistoryRevoked, 15000, 1, 2),
		c(consumer.HistoryAssigned, 16000, 2, 0, 1),
		c(consumer.HistoryLost, 22000, 2, 0, 1),
	})

	writeJSONL(t, dir, EventsFile, []Event{
		{At: at(10000), Type: EventFaultStart, ID: 1, What: "kill broker-1"},
		{At: at(10800), Type: EventLeader, Topic: "orders", Partition: 0, Leader: 2, Epoch: 5},
		{At: at(12000), Type: EventFaultEnd, ID: 1},
		{At: at(20000), Type: EventFaultStart, ID: 2, What: "kill broker-2"},
		{At: at(23000), Type: EventFaultEnd, ID: 2},
		{At: at(25000), Type: EventFaultStart, ID: 3, What: "isolate broker-2 from broker-1, broker-3"},
		{At: at(26000), Type: EventNote, What: "workload <stops>"},
	})
	writeFile(t, dir, CheckFile, `{"counts":{"lost-write":1,"duplicate":0},"anomalies":[{"kind":"lost-write","detail":"<acked> & never read"}],"expectation":"safe","valid":false,"why":["lost-write: 1 (must be 0)"]}`)
	return dir
}

func meta() Meta {
	return Meta{
		Name:        "kill-leader",
		Description: "Kills the leader of orders-0 twice while an idempotent producer writes with acks=all.",
		Seed:        42,
		Start:       t0,
		End:         at(30000),
		Settings:    map[string]string{"acks": "all", "min.insync.replicas": "2"},
		Verdict:     "Expectation not met: 1 lost write.",
		Expectation: "No acknowledged write is lost.",
	}
}

func TestWriteExperiment(t *testing.T) {
	dir := experiment(t)
	page := writeReport(t, dir, meta())

	// Title, description, settings, verdict (red: check.json says not valid).
	mustContain(t, page, "<h1>kill-leader</h1>", "Kills the leader of orders-0 twice",
		"<code>min.insync.replicas</code></td><td><code>2</code>", "<code>42</code>",
		"2026-03-01 10:00:00.000 UTC", "No acknowledged write is lost.")
	mustMatch(t, page, `<div class="verdict fail">Expectation not met: 1 lost write.</div>`)

	// The faults: shaded over their interval, labelled; the open one runs
	// to the end of the run (30 s).
	mustMatch(t, page, `<rect class="fault" [^>]*data-start="10.000" data-end="12.000"><title>kill broker-1: from 10.000 s, fault-end at 12.000 s</title></rect>`)
	mustMatch(t, page, `<rect class="fault" [^>]*data-start="20.000" data-end="23.000">`)
	mustMatch(t, page, `<rect class="fault" [^>]*data-start="25.000" data-end="30.000"><title>isolate broker-2 from broker-1, broker-3: from 25.000 s, never ended</title>`)
	mustMatch(t, page, `<text class="faultlabel" [^>]*>(<title>[^<]*</title>)?kill broker-1</text>`)
	mustMatch(t, page, `<text class="faultlabel" [^>]*>(<title>[^<]*</title>)?isolate broker-2 from broker-1, broker-3</text>`)
	// The fault's shading spans its interval on the x axis: 10 s to 12 s
	// of 30 one-second bins (the run ends at 30 s, meta.End).
	x0, x1 := marginLeft+10.0/30*(plotRight-marginLeft), marginLeft+12.0/30*(plotRight-marginLeft)
	mustContain(t, page, `<rect class="fault" x="`+fmtN(x0)+`" y="18.0" width="`+fmtN(x1-x0)+`"`)

	// The leader change and the note.
	mustMatch(t, page, `<line class="leader" [^>]*><title>orders-0: broker 2 \(epoch 5\) at 10.800 s</title></line>`)
	mustMatch(t, page, `<text class="leaderlabel" [^>]*>(<title>[^<]*</title>)?orders-0: broker 2 \(epoch 5\)</text>`)
	mustMatch(t, page, `<text class="notelabel" [^>]*>(<title>[^<]*</title>)?workload &lt;stops&gt;</text>`)

	// The panels and their legends.
	mustContain(t, page, ">acked writes</text>", ">NOT_LEADER_OR_FOLLOWER (2)</text>", ">REQUEST_TIMED_OUT (1)</text>",
		">NOT_ENOUGH_REPLICAS (1)</text>", ">median</text>", ">max</text>", "seconds since 2026-03-01 10:00:00.000 UTC")
	mustMatch(t, page, `<polyline class="series" points="[0-9., ]+" stroke="#1a7f37"/>`)
	mustMatch(t, page, `<rect class="bar" [^>]*><title>NOT_LEADER_OR_FOLLOWER: 2 sends in second 10</title>`)
	mustMatch(t, page, `<circle class="dot" [^>]*><title>second 10: max 3.750 s over 2 writes</title>`)
	// Consumer rebalances.
	mustMatch(t, page, `<rect class="c-assigned" [^>]*><title>c1 orders assigned \[0,1,2\] \(generation 1\) at 0.500 s</title>`)
	mustMatch(t, page, `<rect class="c-revoked" [^>]*><title>c1 orders revoked \[2\] \(generation 1\) at 15.000 s</title>`)
	mustMatch(t, page, `<rect class="c-lost" [^>]*><title>c1 orders lost \[0,1\] \(generation 2\) at 22.000 s</title>`)

	// Unavailability: 4.25 s and 1.5 s (acks=all), not the acks=1 writes'.
	mustContain(t, page, "<strong>median 2.875 s, max 4.250 s over 2 kill(s)</strong>", "with acks=all")
	mustMatch(t, page, `<tr><td>kill broker-1</td><td class="num">10.000</td><td class="num">14.250</td><td class="num">4.250 s</td><td><code>p1-recovered \(partition 0, offset 0, acks=all\)</code></td></tr>`)
	mustMatch(t, page, `<tr><td>kill broker-2</td><td class="num">20.000</td><td class="num">21.500</td><td class="num">1.500 s</td>`)

	// The checker: verdict table and raw JSON, escaped.
	mustContain(t, page, `Result: <span class="badtxt">NOT valid</span>`, "<code>safe</code>", "<li>lost-write: 1 (must be 0)</li>")
	mustMatch(t, page, `<tr class="bad"><td><code>lost-write</code></td><td class="num">1</td></tr>`)
	mustMatch(t, page, `<tr><td><code>duplicate</code></td><td class="num">0</td></tr>`)
	mustMatch(t, page, `(?s)<details>\s*<summary>check.json</summary>\s*<pre>\{\n  &#34;counts&#34;: \{\n    &#34;lost-write&#34;: 1,`)
	mustContain(t, page, "&lt;acked&gt; &amp; never read")

	// Links to the files.
	for _, f := range []string{"producer-1.jsonl", "producer-2.jsonl", "consumer-1.jsonl", EventsFile, CheckFile} {
		mustContain(t, page, `<a href="./`+f+`">`+f+`</a>`)
	}
	mustMatch(t, page, `producer-1.jsonl</a></td><td class="num">[0-9.]+ KiB</td><td class="num">28</td><td class="num">24</td><td class="num">4</td><td>all</td><td>NOT_ENOUGH_REPLICAS 1, NOT_LEADER_OR_FOLLOWER 2, REQUEST_TIMED_OUT 1</td>`)

	// Write replaces the page.
	m := meta()
	m.Name = "second"
	if page := writeReport(t, dir, m); !strings.Contains(page, "<h1>second</h1>") {
		t.Errorf("second Write did not replace the page")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".report-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// fmtN formats a coordinate as the page does.
func fmtN(v float64) string { return pageTemplateFuncs["n"].(func(float64) string)(v) }

func TestWriteEscapes(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, dir, EventsFile, []Event{
		{At: at(1000), Type: EventFaultStart, ID: 1, What: `kill <script>alert("x")</script>`},
		{At: at(2000), Type: EventLeader, Topic: `<b>t</b>`, Partition: 1, Leader: 3, Epoch: 2},
	})
	m := Meta{
		Name:        `<script>alert(1)</script>`,
		Description: `a "quoted" & <i>tagged</i> description`,
		Settings:    map[string]string{`<k>`: `javascript:alert(1)`},
		Verdict:     `<img src=x onerror=alert(1)>`,
	}
	page := writeReport(t, dir, m)
	for _, bad := range []string{"<script>alert", "<i>tagged", "<img src", "<b>t</b>", "<k>"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains unescaped %q", bad)
		}
	}
	mustContain(t, page, "&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;i&gt;tagged&lt;/i&gt;", "&lt;b&gt;t&lt;/b&gt;-1: broker 3 (epoch 2)",
		`<div class="verdict none">&lt;img src=x onerror=alert(1)&gt;</div>`)
}

func TestWriteEmptyDir(t *testing.T) {
	page := writeReport(t, t.TempDir(), Meta{})
	mustContain(t, page, "<h1>chaos experiment</h1>", `<div class="verdict none">No verdict.</div>`,
		"No producer history.", "No consumer history.", "No kill in this run.", "No check.json", "No events.jsonl.",
		">no failed sends</text>", ">no acknowledged writes</text>", ">no consumer history</text>", "seconds since start")
	if strings.Contains(page, `class="fault"`) {
		t.Errorf("fault shading without faults")
	}
}

func TestWriteEmptyFiles(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"producer-1.jsonl", "consumer-1.jsonl", EventsFile} {
		writeFile(t, dir, f, "")
	}
	page := writeReport(t, dir, Meta{Name: "empty", Start: t0})
	mustContain(t, page, "events.jsonl is empty.", `<a href="./producer-1.jsonl">`, `<a href="./consumer-1.jsonl">`, "No kill in this run.")
}

func TestWriteFailedOnly(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, dir, "producer-1.jsonl", []producer.HistoryLine{
		fail("a", "all", "NOT_ENOUGH_REPLICAS", 1000),
		fail("b", "all", "", 3500),
	})
	writeJSONL(t, dir, EventsFile, []Event{{At: at(500), Type: EventFaultStart, ID: 7, What: "kill broker-1"}})
	passed := true
	page := writeReport(t, dir, Meta{Name: "failed", Start: t0, Verdict: "as expected", Passed: &passed})
	mustContain(t, page, `<div class="verdict pass">as expected</div>`, ">no acknowledged writes</text>",
		">NOT_ENOUGH_REPLICAS (1)</text>", ">unknown (1)</text>", "with acks=all",
		"<strong>median ≥ 3.000 s, max ≥ 3.000 s over 1 kill(s)</strong>", `<tr class="bad"><td>kill broker-1</td>`, "never", "lower bound")
	// The kill never ended: shaded to the end of the run (3.5 s).
	mustMatch(t, page, `<rect class="fault" [^>]*data-start="0.500" data-end="3.500"><title>kill broker-1: from 0.500 s, never ended</title>`)
}

func TestWriteAnyAck(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, dir, "producer-1.jsonl", []producer.HistoryLine{
		ok("a", "1", 500, 900),
		fail("b", "1", "NOT_LEADER_OR_FOLLOWER", 1100),
		ok("c", "1", 1200, 1750),
		ok("d", "0", 1000, 1000), // acked exactly at the kill: not after it
	})
	writeJSONL(t, dir, EventsFile, []Event{
		{At: at(1000), Type: EventFaultStart, ID: 1, What: "kill broker-3"},
		{At: at(1500), Type: EventFaultStart, ID: 2, What: "pause broker-1"},
	})
	page := writeReport(t, dir, Meta{Start: t0})
	mustContain(t, page, "(any\nacks: no write of this run used acks=all)", "<strong>median 750.0 ms, max 750.0 ms over 1 kill(s)</strong>")
	mustMatch(t, page, `<tr><td>kill broker-3</td><td class="num">1.000</td><td class="num">1.750</td><td class="num">750.0 ms</td><td><code>c \(partition 0, offset 0, acks=1\)</code></td></tr>`)
}

func TestWriteCheckJSON(t *testing.T) {
	for _, c := range []struct {
		name, check string
		passed      *bool
		want        []string
		absent      []string
	}{
		{
			name: "valid", check: `{"counts":{"unseen":0},"valid":true}`,
			want: []string{`<div class="verdict pass">The checker&#39;s result is valid.</div>`, `Result: <span class="good">valid</span>`,
				`<tr><td><code>unseen</code></td><td class="num">0</td></tr>`},
		},
		{
			// Sends a pipelining producer reordered are explained, not
			// marked as bad.
			name: "nonmonotonic-send", check: `{"counts":{"nonmonotonic-send":3},"valid":true}`,
			want:   []string{`<tr><td><code>nonmonotonic-send</code></td><td class="num">3</td><td>sends reordered, not lost: a producer that pipelines`},
			absent: []string{`<tr class="bad"><td><code>nonmonotonic-send`},
		},
		{
			name: "override", check: `{"valid":true}`, passed: new(false),
			want: []string{`<div class="verdict fail">`},
		},
		{
			name: "no verdict fields", check: `{"something":[1,2,3]}`,
			want:   []string{`<div class="verdict none">No verdict.</div>`, "&#34;something&#34;: ["},
			absent: []string{"Anomaly</th>", "Result:"},
		},
		{
			name: "not JSON", check: `{"counts": {`,
			want: []string{"check.json could not be read as a JSON object", `<pre>{&#34;counts&#34;: {</pre>`},
		},
		{
			name: "not an object", check: `[1, 2]`,
			want: []string{"not a JSON object"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, CheckFile, c.check)
			page := writeReport(t, dir, Meta{Passed: c.passed})
			mustContain(t, page, c.want...)
			for _, a := range c.absent {
				if strings.Contains(page, a) {
					t.Errorf("page contains %q", a)
				}
			}
		})
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	good, _ := json.Marshal(ok("a", "all", 0, 10))
	writeFile(t, dir, "producer-1.jsonl", string(good)+"\n{bad\n"+string(good)+"\n")
	_, err := Write(dir, Meta{})
	if err == nil || !strings.Contains(err.Error(), "producer-1.jsonl") {
		t.Errorf("Write with a corrupt producer history: %v, want an error naming it", err)
	}
	if _, statErr := os.Stat(filepath.Join(dir, ReportFile)); !errors.Is(statErr, os.ErrNotExist) {
		t.Errorf("report written despite the error")
	}

	// A torn last line is not an error.
	writeFile(t, dir, "producer-1.jsonl", string(good)+"\n"+string(good[:10]))
	if _, err := Write(dir, Meta{}); err != nil {
		t.Errorf("Write with a torn last line: %v", err)
	}

	dir = t.TempDir()
	writeFile(t, dir, EventsFile, "{bad\n{}\n")
	if _, err := Write(dir, Meta{}); err == nil || !strings.Contains(err.Error(), EventsFile) {
		t.Errorf("Write with a corrupt events.jsonl: %v", err)
	}

	if _, err := Write(filepath.Join(t.TempDir(), "missing"), Meta{}); err == nil {
		t.Errorf("Write to a missing directory succeeded")
	}
}

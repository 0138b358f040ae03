package report

import (
	"bytes"
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/producer"
)

// Files of an experiment's output directory.
const (
	// ReportFile is the page Write writes.
	ReportFile = "report.html"
	// EventsFile is the experiment's timeline (EventLog, ReadEvents).
	EventsFile = "events.jsonl"
	// CheckFile is the checker's result.
	CheckFile = "check.json"
	// ProducerGlob and ConsumerGlob match the histories.
	ProducerGlob = "producer-*.jsonl"
	ConsumerGlob = "consumer-*.jsonl"
)

// MaxSeconds bounds the timeline: a run (or a clock) longer than that is
// drawn over its first MaxSeconds seconds only.
const MaxSeconds = 24 * 60 * 60

// Meta is what the experiment runner knows about the run that its files do
// not say.
type Meta struct {
	// Name is the experiment's name; Description says, in a paragraph,
	// what it does and what it shows.
	Name        string
	Description string
	Seed        int64
	// Start and End bound the run. The timeline starts at the earliest of
	// Start and every time of the files (zero times are ignored), and
	// ends at the latest.
	Start, End time.Time
	// Settings are shown as a table, sorted by name.
	Settings map[string]string
	// Verdict is the one-line verdict ("expectation met: no anomaly");
	// when empty, the page says what check.json's "valid" says.
	Verdict string
	// Passed colours the verdict: green when true, red when false. When
	// nil, check.json's "valid" decides, and without it the verdict is
	// grey.
	Passed *bool
	// Expectation says what the run is expected to show.
	Expectation string
}

//go:embed page.html.tmpl
var templates embed.FS

// pageTemplateFuncs: n formats a coordinate.
var pageTemplateFuncs = template.FuncMap{
	"n": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
}

var pageTemplate = template.Must(template.New("page.html.tmpl").Funcs(pageTemplateFuncs).ParseFS(templates, "page.html.tmpl"))

// Write reads the histories, events.jsonl and check.json of dir and writes
// dir/report.html (replacing it atomically), returning its path. Missing
// events.jsonl, check.json or histories are shown as such; a file that
// exists but cannot be read or parsed is an error (a torn last line of a
// history or of events.jsonl is not: it is ignored, as the readers do).
func Write(dir string, meta Meta) (path string, err error) {
	in, err := load(dir)
	if err != nil {
		return "", err
	}
	pg := build(in, meta)
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, pg); err != nil {
		return "", fmt.Errorf("report: render: %w", err)
	}
	path = filepath.Join(dir, ReportFile)
	tmp, err := os.CreateTemp(dir, ".report-*.html")
	if err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return "", fmt.Errorf("report: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", fmt.Errorf("report: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("report: write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	return path, nil
}

// inputs is what load read from an output directory.
type inputs struct {
	producers []historyFile[producer.HistoryLine]
	consumers []historyFile[consumer.HistoryLine]
	events    []Event
	hasEvents bool
	check     []byte // nil: no check.json
}

type historyFile[L any] struct {
	name  string
	size  int64
	lines []L
}

func load(dir string) (inputs, error) {
	var in inputs
	var err error
	in.producers, err = loadHistories(dir, ProducerGlob, producer.ReadHistoryFile)
	if err != nil {
		return in, err
	}
	in.consumers, err = loadHistories(dir, ConsumerGlob, consumer.ReadHistory)
	if err != nil {
		return in, err
	}
	in.events, err = ReadEvents(filepath.Join(dir, EventsFile))
	switch {
	case err == nil:
		in.hasEvents = true
	case errors.Is(err, fs.ErrNotExist):
	default:
		return in, fmt.Errorf("report: %w", err)
	}
	in.check, err = os.ReadFile(filepath.Join(dir, CheckFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return in, fmt.Errorf("report: read checker result: %w", err)
	}
	return in, nil
}

func loadHistories[L any](dir, glob string, read func(string) ([]L, error)) ([]historyFile[L], error) {
	paths, err := filepath.Glob(filepath.Join(dir, glob))
	if err != nil {
		return nil, fmt.Errorf("report: list %s: %w", glob, err)
	}
	slices.Sort(paths)
	var out []historyFile[L]
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("report: history %s: %w", p, err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		lines, err := read(p)
		if err != nil {
			return nil, fmt.Errorf("report: history %s: %w", p, err)
		}
		out = append(out, historyFile[L]{name: filepath.Base(p), size: st.Size(), lines: lines})
	}
	return out, nil
}

// page is the data of page.html.tmpl.
type page struct {
	Meta         Meta
	Title        string
	Seed         string
	Start, End   string
	Duration     string
	Settings     []kv
	Verdict      string
	VerdictClass string // "pass", "fail" or "none"
	Truncated    string
	Plot         svgPlot
	Unavail      unavailView
	Check        checkView
	Producers    []producerRow
	Consumers    []consumerRow
	OtherFiles   []fileRow
	Events       []eventRow
	HasEvents    bool
	Generated    string
}

type kv struct{ Key, Value string }

type unavailView struct {
	Rows    []windowRow
	Summary string
	AnyAck  bool // no acks=all write: any ack counted
	Open    bool // a window never closed
}

type windowRow struct {
	What, At, Until, Duration, Write string
	Recovered                        bool
}

type checkView struct {
	Present     bool
	ParseErr    string
	Pretty      string
	HasVerdict  bool
	Valid       string // "", "true", "false"
	Expectation string
	Why         []string
	Counts      []countRow
}

type countRow struct {
	Kind, Count string
	Nonzero     bool   // a nonzero count of a kind without Note: shown as bad
	Note        string // check.Notes[Kind]
}

type fileRow struct {
	Name, Href, Size string
}

type producerRow struct {
	fileRow
	Lines, OK, Failed int
	Acks, Errors      string
}

type consumerRow struct {
	fileRow
	Records, Commits, Rebalances int
	Consumers                    string
}

type eventRow struct {
	At, Type, ID, What string
}

func fileLink(name string, size int64) fileRow {
	// "./" keeps a name with a colon from reading as a URL scheme.
	return fileRow{Name: name, Href: "./" + name, Size: fmtSize(size)}
}

func build(in inputs, meta Meta) page {
	pg := page{
		Meta:      meta,
		Title:     cmp.Or(meta.Name, "chaos experiment"),
		Seed:      strconv.FormatInt(meta.Seed, 10),
		HasEvents: in.hasEvents,
		Generated: time.Now().UTC().Format(time.RFC3339),
	}
	for _, k := range slices.Sorted(maps.Keys(meta.Settings)) {
		pg.Settings = append(pg.Settings, kv{k, meta.Settings[k]})
	}

	var prod []producer.HistoryLine
	var cons []consumer.HistoryLine
	for _, f := range in.producers {
		prod = append(prod, f.lines...)
		pg.Producers = append(pg.Producers, producerSummary(f))
	}
	for _, f := range in.consumers {
		cons = append(cons, f.lines...)
		pg.Consumers = append(pg.Consumers, consumerSummary(f))
	}

	// The run's span.
	var first, last time.Time // of everything
	var lastData time.Time    // of the files
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if last.IsZero() || t.After(last) {
			last = t
		}
	}
	for _, l := range prod {
		see(l.SentAt)
		if l.AckedAt != nil {
			see(*l.AckedAt)
		}
	}
	for _, l := range cons {
		see(l.At)
	}
	for _, e := range in.events {
		see(e.At)
	}
	lastData = last
	see(meta.Start)
	see(meta.End)
	// Enough seconds for the last time of the files to fall in one, and
	// for meta.End, which is not data, to end the last one.
	seconds := 1
	if !lastData.IsZero() {
		seconds = int(lastData.Sub(first)/time.Second) + 1
	}
	if !meta.End.IsZero() {
		d := meta.End.Sub(first)
		seconds = max(seconds, int((d+time.Second-1)/time.Second))
	}
	if seconds > MaxSeconds {
		seconds = MaxSeconds
		pg.Truncated = fmt.Sprintf("The run spans %s; the timeline shows its first %d seconds.", last.Sub(first).Round(time.Second), MaxSeconds)
	}
	pg.Start, pg.End = fmtTime(meta.Start), fmtTime(meta.End)
	if !meta.Start.IsZero() && !meta.End.IsZero() {
		pg.Duration = fmtDuration(meta.End.Sub(meta.Start))
	}

	end := first.Add(time.Duration(seconds) * time.Second)
	if last.Before(end) {
		end = last
	}
	faults := FaultIntervals(in.events, end)
	var marks []Event
	for _, e := range sortedEvents(in.events) {
		if e.Type == EventLeader || e.Type == EventNote {
			marks = append(marks, e)
		}
		row := eventRow{At: secs(e.At.Sub(first)), Type: e.Type, What: e.What}
		if e.ID != 0 || e.Type == EventFaultStart || e.Type == EventFaultEnd {
			row.ID = strconv.Itoa(e.ID)
		}
		if e.Type == EventLeader {
			row.What = leaderLabel(e)
		}
		pg.Events = append(pg.Events, row)
	}
	pg.Plot = layoutTimeline(plotInput{
		Timeline:  Aggregate(first, seconds, prod, cons),
		Faults:    faults,
		Events:    marks,
		Consumers: cons,
	})
	pg.Unavail = unavailability(Windows(in.events, prod), first)
	pg.Check = checkResult(in.check)

	valid := pg.Check.Valid
	switch {
	case meta.Passed != nil && *meta.Passed, meta.Passed == nil && valid == "true":
		pg.VerdictClass = "pass"
	case meta.Passed != nil, valid == "false":
		pg.VerdictClass = "fail"
	default:
		pg.VerdictClass = "none"
	}
	pg.Verdict = meta.Verdict
	if pg.Verdict == "" {
		switch valid {
		case "true":
			pg.Verdict = "The checker's result is valid."
		case "false":
			pg.Verdict = "The checker's result is NOT valid."
		default:
			pg.Verdict = "No verdict."
		}
	}

	if in.hasEvents {
		pg.OtherFiles = append(pg.OtherFiles, fileLink(EventsFile, -1))
	}
	if in.check != nil {
		pg.OtherFiles = append(pg.OtherFiles, fileLink(CheckFile, int64(len(in.check))))
	}
	return pg
}

func producerSummary(f historyFile[producer.HistoryLine]) producerRow {
	r := producerRow{fileRow: fileLink(f.name, f.size), Lines: len(f.lines)}
	acks := map[string]bool{}
	errs := map[string]int{}
	for _, l := range f.lines {
		acks[l.Acks] = true
		switch l.Status {
		case producer.StatusOK:
			r.OK++
		case producer.StatusError:
			r.Failed++
			name := unknownError
			if l.Error != nil && *l.Error != "" {
				name = *l.Error
			}
			errs[name]++
		}
	}
	r.Acks = strings.Join(slices.Sorted(maps.Keys(acks)), ", ")
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, errs[k]))
	}
	r.Errors = strings.Join(parts, ", ")
	return r
}

func consumerSummary(f historyFile[consumer.HistoryLine]) consumerRow {
	r := consumerRow{fileRow: fileLink(f.name, f.size)}
	names := map[string]bool{}
	for _, l := range f.lines {
		names[l.Consumer] = true
		switch l.Type {
		case consumer.HistoryRecord:
			r.Records++
		case consumer.HistoryCommit:
			r.Commits++
		case consumer.HistoryAssigned, consumer.HistoryRevoked, consumer.HistoryLost:
			r.Rebalances++
		}
	}
	r.Consumers = strings.Join(slices.Sorted(maps.Keys(names)), ", ")
	return r
}

func unavailability(ws []Window, origin time.Time) unavailView {
	var v unavailView
	ds := make([]time.Duration, len(ws))
	for i, w := range ws {
		ds[i] = w.Duration
		row := windowRow{What: w.Kill.What, At: secs(w.Kill.At.Sub(origin)), Duration: fmtDuration(w.Duration), Recovered: w.Recovered}
		if w.Recovered {
			row.Until = secs(w.Until.Sub(origin))
			row.Write = fmt.Sprintf("%s (partition %d, offset %d, acks=%s)", w.Write.EventID, w.Write.Partition, w.Write.Offset, w.Write.Acks)
		} else {
			row.Until = "never"
			row.Duration = "≥ " + row.Duration
			v.Open = true
		}
		v.AnyAck = !w.AcksAll
		v.Rows = append(v.Rows, row)
	}
	if len(ds) > 0 {
		ge := ""
		if v.Open {
			ge = "≥ "
		}
		v.Summary = fmt.Sprintf("median %s%s, max %s%s over %d kill(s)", ge, fmtDuration(Median(ds)), ge, fmtDuration(slices.Max(ds)), len(ds))
	}
	return v
}

// checkResult reads check.json as opaque JSON.
func checkResult(raw []byte) checkView {
	if raw == nil {
		return checkView{}
	}
	v := checkView{Present: true, Pretty: string(raw)}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		v.ParseErr = err.Error()
		return v
	}
	v.Pretty = out.String()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		v.ParseErr = "not a JSON object: " + err.Error()
		return v
	}
	if b, ok := m["valid"].(bool); ok {
		v.HasVerdict = true
		v.Valid = strconv.FormatBool(b)
	}
	if s, ok := m["expectation"].(string); ok {
		v.Expectation = s
	}
	if why, ok := m["why"].([]any); ok {
		for _, w := range why {
			v.Why = append(v.Why, fmt.Sprint(w))
		}
	}
	if counts, ok := m["counts"].(map[string]any); ok {
		v.HasVerdict = true
		for _, k := range slices.Sorted(maps.Keys(counts)) {
			row := countRow{Kind: k, Count: fmt.Sprint(counts[k]), Note: check.Notes[k]}
			if f, ok := counts[k].(float64); ok {
				row.Nonzero = f != 0 && row.Note == ""
				if f == math.Trunc(f) && math.Abs(f) < 1e15 {
					row.Count = strconv.FormatInt(int64(f), 10)
				}
			}
			v.Counts = append(v.Counts, row)
		}
	}
	return v
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

func fmtSize(n int64) string {
	switch {
	case n < 0:
		return ""
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}

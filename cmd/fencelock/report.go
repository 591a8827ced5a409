package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
)

// Machine-readable conformance results (`fencelock conformance --format
// json|junit`): one record per check with its outcome, duration and
// message, and the backend's declared capabilities, which decide what the
// checks hold it to.

// reportFormats are the values --format accepts.
var reportFormats = []string{"text", "json", "junit"}

// jsonReport is --format json.
type jsonReport struct {
	URL          string      `json:"url"` // password redacted
	Backend      string      `json:"backend"`
	Capabilities jsonCaps    `json:"capabilities"`
	Started      time.Time   `json:"started"`
	Passed       int         `json:"passed"`
	Failed       int         `json:"failed"`
	Skipped      int         `json:"skipped"`
	NA           int         `json:"not_applicable"`
	Checks       []jsonCheck `json:"checks"`
}

type jsonCheck struct {
	Name     string  `json:"name"`
	Outcome  string  `json:"outcome"` // pass, fail, skip, n/a
	Seconds  float64 `json:"seconds"`
	TimedOut bool    `json:"timed_out,omitempty"`
	Message  string  `json:"message,omitempty"`
}

// jsonCaps is fencelock.Capabilities with readable values.
type jsonCaps struct {
	Fence         string `json:"fence"`
	FenceSource   string `json:"fence_source"`
	MinTTL        string `json:"min_ttl"`
	TTLGranular   string `json:"ttl_granularity"`
	TimeAuthority string `json:"time_authority"`
	Wait          string `json:"wait"`
	FIFO          bool   `json:"fifo"`
	NodeLoss      string `json:"node_loss"`
	LossSignal    string `json:"loss_signal,omitempty"`
	ReleaseWake   string `json:"release_wake,omitempty"`
	ExpiryWake    string `json:"expiry_wake,omitempty"`
	BreakOverlap  string `json:"break_overlap,omitempty"`
}

func capsOf(c fencelock.Capabilities) jsonCaps {
	d := func(v time.Duration) string {
		if v <= 0 {
			return ""
		}
		return v.String()
	}
	return jsonCaps{
		Fence: c.Fence.String(), FenceSource: c.FenceSource, MinTTL: c.MinTTL.String(), TTLGranular: c.TTLGranularity.String(),
		TimeAuthority: c.TimeAuthority.String(), Wait: c.Wait.String(), FIFO: c.FIFO, NodeLoss: c.NodeLoss.String(),
		LossSignal: d(c.LossSignal), ReleaseWake: d(c.ReleaseWake), ExpiryWake: d(c.ExpiryWake), BreakOverlap: d(c.BreakOverlap),
	}
}

// writeReport writes res in format ("json" or "junit") to w.
func writeReport(w io.Writer, format, shownURL string, caps fencelock.Capabilities, started time.Time, res []conformance.Result) error {
	switch format {
	case "json":
		r := jsonReport{URL: shownURL, Backend: caps.Backend, Capabilities: capsOf(caps), Started: started.UTC(), Checks: []jsonCheck{}}
		for _, c := range res {
			r.Checks = append(r.Checks, jsonCheck{Name: c.Check, Outcome: c.Outcome, Seconds: c.Elapsed.Seconds(), TimedOut: c.TimedOut, Message: c.Detail})
			switch c.Outcome {
			case "pass":
				r.Passed++
			case "fail":
				r.Failed++
			case "n/a":
				r.NA++
			default:
				r.Skipped++
			}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "junit":
		return writeJUnit(w, shownURL, caps, started, res)
	}
	return fmt.Errorf("unknown format %q", format)
}

// The JUnit XML that CI systems render: one <testsuite> for the run, one
// <testcase> per check; a failure is a <failure>, a skip or a check that
// does not apply is a <skipped> with its reason, and the backend's
// capabilities are the suite's <properties>.
type junitSuites struct {
	XMLName xml.Name   `xml:"testsuites"`
	Suites  []junitRun `xml:"testsuite"`
}

type junitRun struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func writeJUnit(w io.Writer, shownURL string, caps fencelock.Capabilities, started time.Time, res []conformance.Result) error {
	run := junitRun{Name: "fencelock conformance " + shownURL, Timestamp: started.UTC().Format(time.RFC3339)}
	var total time.Duration
	class := "fencelock.conformance." + caps.Backend
	for _, c := range res {
		tc := junitCase{Name: c.Check, Classname: class, Time: fmt.Sprintf("%.3f", c.Elapsed.Seconds())}
		total += c.Elapsed
		switch c.Outcome {
		case "pass":
		case "fail":
			run.Failures++
			tc.Failure = &junitMessage{Message: firstLine(c.Detail), Text: c.Detail}
		case "n/a":
			run.Skipped++
			tc.Skipped = &junitMessage{Message: "not applicable: " + strings.TrimPrefix(firstLine(c.Detail), "n/a: "), Text: c.Detail}
		default:
			run.Skipped++
			tc.Skipped = &junitMessage{Message: firstLine(c.Detail), Text: c.Detail}
		}
		run.Cases = append(run.Cases, tc)
	}
	run.Tests = len(res)
	run.Time = fmt.Sprintf("%.3f", total.Seconds())
	cj := capsOf(caps)
	b, err := json.Marshal(cj)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	run.Properties = append(run.Properties, junitProperty{Name: "backend", Value: caps.Backend})
	for _, k := range []string{"fence", "fence_source", "min_ttl", "ttl_granularity", "time_authority", "wait", "fifo", "node_loss", "loss_signal", "release_wake", "expiry_wake", "break_overlap"} {
		if v, ok := m[k]; ok {
			run.Properties = append(run.Properties, junitProperty{Name: k, Value: fmt.Sprint(v)})
		}
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitRun{run}}); err != nil {
		return err
	}
	_, err = io.WriteString(w, "\n")
	return err
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}

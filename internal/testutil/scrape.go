package testutil

import (
	"io"
	"maps"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape is one scrape of a /metrics endpoint, parsed: its metric
// families by name.
type Scrape struct {
	t        testing.TB
	Families map[string]*dto.MetricFamily
}

// ParseScrape parses r, a scrape in Prometheus' text format, and fails the
// test if it does not parse.
func ParseScrape(t testing.TB, r io.Reader) Scrape {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return Scrape{t, fams}
}

// Find returns the series of name whose labels are exactly labels, or nil.
func (s Scrape) Find(name string, labels map[string]string) *dto.Metric {
	s.t.Helper()
	mf := s.Families[name]
	if mf == nil {
		return nil
	}
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if maps.Equal(got, labels) {
			return m
		}
	}
	return nil
}

// Value is a counter's or gauge's value, or a histogram's count; it fails
// the test if the series is absent.
func (s Scrape) Value(name string, labels map[string]string) float64 {
	s.t.Helper()
	m := s.Find(name, labels)
	switch {
	case m == nil:
		s.t.Fatalf("no series %s%v", name, labels)
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	s.t.Fatalf("%s%v is of no known type", name, labels)
	return 0
}

// Want fails the test unless the series of name with labels has the value
// want (as Value reads it).
func (s Scrape) Want(name string, labels map[string]string, want float64) {
	s.t.Helper()
	if got := s.Value(name, labels); got != want {
		s.t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

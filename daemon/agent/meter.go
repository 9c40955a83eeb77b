package agent

import "time"

// Transfer is what the receiving side of one direction of a speed test
// measured. The rate leaves out the first quarter of the interval, where
// TCP's slow start and the buffers filling on the way would lower it:
// SteadyBytes arrived in the last SteadySeconds.
type Transfer struct {
	// Bytes arrived in Seconds, from the first byte to the last.
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	// SteadyBytes arrived in the last SteadySeconds, the interval after
	// its first quarter.
	SteadyBytes   int64   `json:"steady_bytes"`
	SteadySeconds float64 `json:"steady_seconds"`
}

// Mbps is the steady rate in megabits per second (0 when too little
// arrived to tell).
func (t Transfer) Mbps() float64 {
	if t.SteadySeconds <= 0 {
		return 0
	}
	return float64(t.SteadyBytes) * 8 / t.SteadySeconds / 1e6
}

// Meter records when bytes arrive, at most one sample a millisecond.
type Meter struct {
	first   time.Time
	samples []sample
	total   int64
}

// sample: total bytes had arrived at, since the first read.
type sample struct {
	at    time.Duration
	total int64
}

// Add records n bytes read at now.
func (m *Meter) Add(n int, now time.Time) {
	if m.first.IsZero() {
		m.first = now
	}
	m.total += int64(n)
	at := now.Sub(m.first)
	if k := len(m.samples); k > 1 && at-m.samples[k-2].at < time.Millisecond {
		m.samples[k-1] = sample{at, m.total}
		return
	}
	m.samples = append(m.samples, sample{at, m.total})
}

// Bytes is what arrived so far.
func (m *Meter) Bytes() int64 { return m.total }

// Result is the transfer so far. The steady part starts at the last sample
// before a quarter of the interval: what arrived after that sample, over
// the time from it to the last byte.
func (m *Meter) Result() Transfer {
	t := Transfer{Bytes: m.total}
	k := len(m.samples)
	if k < 2 {
		return t
	}
	last := m.samples[k-1]
	t.Seconds = last.at.Seconds()
	from := m.samples[0]
	for _, s := range m.samples[1:] {
		if s.at >= last.at/4 {
			break
		}
		from = s
	}
	t.SteadyBytes = last.total - from.total
	t.SteadySeconds = (last.at - from.at).Seconds()
	return t
}

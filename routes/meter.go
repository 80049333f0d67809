package routes

import (
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"github.com/cproxy/cproxy/routes/audit"
	"github.com/cproxy/cproxy/routes/budget"
	"github.com/cproxy/cproxy/tokens"
)

// meter settles one model request or MCP tool call. Once the upstream has
// the request, it bills it (or acts on it) whatever the client does next,
// so from then on the request is charged: with the usage its answer
// reports, and, for a count the answer does not report (a stream cut short
// or left by the client, an answer too large to read, no answer at all),
// what the request reserved for it. A request that never reached the
// upstream is charged nothing.
type meter struct {
	s       *Server
	a       *Call
	res     *budget.Reservation
	want    tokens.Usage // what res holds: what an unreported count is charged
	charged bool
	// past says an operator let the request past its budget's limits
	// (askPastBudget): held whatever they are.
	past bool
	// wrote is set when the transport has written the whole request (the
	// trace's WroteRequest, from the transport's goroutine): the upstream
	// has it.
	wrote atomic.Bool
	trace httptrace.ClientTrace
	once  sync.Once
}

// clientTrace is the trace that tells m when the upstream has the request,
// for the forwarded request's context.
func (m *meter) clientTrace() *httptrace.ClientTrace {
	m.trace.WroteRequest = func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			m.wrote.Store(true)
		}
	}
	return &m.trace
}

// answered settles a request the upstream answered, with the usage u it
// reported; input and output say whether it reported those counts.
func (m *meter) answered(u tokens.Usage, input, output bool) { m.end(u, true, input, output) }

// inputKnown tells the reservation the input counts u the upstream
// reported before the answer ended, when they can be.
func (m *meter) inputKnown(u tokens.Usage) {
	if m.charged && possible(u.Input) && possible(u.CacheRead) && possible(u.CacheWrite) {
		m.res.InputKnown(u)
	}
}

// unanswered settles a request that got no answer: charged what it
// reserved if the upstream has it, else nothing. After answered, it does
// nothing.
func (m *meter) unanswered() { m.end(tokens.Usage{}, m.wrote.Load(), false, false) }

// usageCountMax is more than one request can use of any kind: four
// billion tokens, thousands of times the largest context window. A count
// past it, or below zero, cannot be right.
const usageCountMax = 1 << 32

// possible reports whether n can be a request's count of one kind.
func possible(n int64) bool { return n >= 0 && n <= usageCountMax }

// end settles the request once: forwarded says whether the upstream has
// it, input and output whether u gives those counts. A count that cannot
// be (negative, or past usageCountMax) is not reported: an upstream that
// says -5 output tokens is charged what was reserved, as one that says
// nothing is, so a wrong report can neither refund a request nor overflow
// an account.
func (m *meter) end(u tokens.Usage, forwarded, input, output bool) {
	m.once.Do(func() {
		if !forwarded {
			u = tokens.Usage{}
		}
		if !possible(u.Input) || !possible(u.CacheRead) || !possible(u.CacheWrite) {
			input, u.Input, u.CacheRead, u.CacheWrite = false, 0, 0, 0
		}
		if !possible(u.Output) {
			output, u.Output = false, 0
		}
		reported := u
		// Only a reservation of model tokens waits for a report of them:
		// an MCP tool call is charged the call, and nothing else.
		tokensHeld := m.want.Input > 0 || m.want.Output > 0 || m.want.CacheRead > 0 || m.want.CacheWrite > 0
		notReported := m.charged && forwarded && tokensHeld && (!input || !output)
		if m.charged && forwarded {
			u.Requests, u.MCPCalls = m.want.Requests, m.want.MCPCalls
			if !input {
				u.Input, u.CacheRead, u.CacheWrite = m.want.Input, m.want.CacheRead, m.want.CacheWrite
				reported.Input, reported.CacheRead, reported.CacheWrite = 0, 0, 0
			}
			if !output {
				u.Output, reported.Output = m.want.Output, 0
			}
		}
		if total, ok := m.res.Settle(u); ok {
			m.s.metrics.SetBudgetRemaining(m.a.session.Sandbox, budget.Remaining(m.a.session.Budget, total))
		}
		m.a.usage = audit.Usage{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, NotReported: notReported}
		if m.a.session != nil && m.a.session.Profile != nil {
			m.s.metrics.Usage(m.a.session.Profile.Name, reported.Input, reported.Output, reported.CacheRead, reported.CacheWrite)
			if notReported {
				m.s.metrics.UsageNotReported(m.a.route, m.a.session.Profile.Name)
			}
		}
	})
}

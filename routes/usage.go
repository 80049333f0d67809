package routes

// Usage is what a model request cost, in tokens, as the upstream reported
// it. The model route fills it in on the request's audit (a.usage) as the
// answer streams by; the audit record carries it when it is not zero.
type Usage struct {
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheRead  int64 `json:"cache_read_input_tokens"`
	CacheWrite int64 `json:"cache_creation_input_tokens"`
	// NotReported: the upstream had the request but did not report all of
	// these counts (a stream cut short or left by the client, an answer
	// too large to read, no answer at all); each count it did not report
	// is what the request reserved, which its budget was charged. False:
	// every count is the upstream's.
	NotReported bool `json:"not_reported,omitempty"`
}

// IsZero reports whether u counts nothing: no usage was reported.
func (u Usage) IsZero() bool { return u == Usage{} }

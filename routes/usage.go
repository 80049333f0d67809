package routes

// Usage is what a model request cost, in tokens, as the upstream reported
// it. The model route fills it in on the request's audit (a.usage) as the
// answer streams by; the audit record carries it when it is not zero.
type Usage struct {
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheRead  int64 `json:"cache_read_input_tokens"`
	CacheWrite int64 `json:"cache_creation_input_tokens"`
}

// IsZero reports whether u counts nothing: no usage was reported.
func (u Usage) IsZero() bool { return u == Usage{} }

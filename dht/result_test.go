package dht

import (
	"encoding/json"
	"testing"
)

// resultPrefix starts the log line of each measured row a simulation prints:
// scripts/bench-dht collects the JSON object after it into docs/bench/*.jsonl.
const resultPrefix = "RESULT-JSON "

// logResult logs v as one line, resultPrefix and v in JSON, beside the human log.
func logResult(tb testing.TB, v any) {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatalf("encoding a result row for scripts/bench-dht: %v", err)
	}
	tb.Log(resultPrefix + string(b))
}

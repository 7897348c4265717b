package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseRollupRetention(t *testing.T) {
	got, err := parseRollupRetention("90d, 0 ,8760h")
	if err != nil || fmt.Sprint(got) != fmt.Sprint([]time.Duration{90 * 24 * time.Hour, 0, 8760 * time.Hour}) {
		t.Fatalf("%v, %v", got, err)
	}
	if got, err := parseRollupRetention(""); got != nil || err != nil {
		t.Fatalf("empty: %v, %v", got, err)
	}
	if _, err := parseRollupRetention("90d,forever"); err == nil || !strings.Contains(err.Error(), "level 2") {
		t.Fatalf("a bad level: %v", err)
	}
}

package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTokens: with tokens, writes, queries and metrics need one, in any of the forms
// clients send; /ping, /health and /ready stay open; a rotated-out token is refused.
func TestTokens(t *testing.T) {
	h, err := New(engine, Config{Tokens: []string{"new-token", "old-token"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	line := "authm v=1 " + strconv.FormatInt(ns(base.Add(50*time.Minute)), 10) + "\n"
	do := func(path string, set func(r *http.Request)) int {
		r, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(line))
		if set != nil {
			set(r)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := do("/write?db=a", nil); c != http.StatusUnauthorized {
		t.Fatalf("write without a token: %d", c)
	}
	if c := do("/write?db=a", func(r *http.Request) { r.Header.Set("Authorization", "Token wrong") }); c != http.StatusUnauthorized {
		t.Fatalf("write with a wrong token: %d", c)
	}
	for name, set := range map[string]func(*http.Request){
		"Token":  func(r *http.Request) { r.Header.Set("Authorization", "Token new-token") },
		"Bearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer old-token") },
		"basic":  func(r *http.Request) { r.SetBasicAuth("anyone", "new-token") },
	} {
		if c := do("/write?db=a", set); c != http.StatusNoContent {
			t.Fatalf("write with a %s token: %d", name, c)
		}
	}
	if c := do("/write?db=a&p=new-token", nil); c != http.StatusNoContent {
		t.Fatalf("write with p=: %d", c)
	}
	if c := do("/metrics", nil); c != http.StatusUnauthorized {
		t.Fatalf("metrics without a token: %d", c)
	}
	for _, p := range []string{"/ping", "/health"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			t.Fatalf("%s needs a token", p)
		}
	}
}

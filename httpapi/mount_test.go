package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A handler mounted with Handle answers the paths the API does not, behind its tokens.
func TestHandleMount(t *testing.T) {
	h, err := New(engine, Config{Tokens: []string{"tok"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page "+r.URL.Path) }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path, token string) (int, string) {
		r, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/", ""); code != http.StatusUnauthorized {
		t.Errorf("page without the token: %d", code)
	}
	if code, body := get("/app.js", "tok"); code != 200 || body != "page /app.js" {
		t.Errorf("page with the token: %d %q", code, body)
	}
	if code, body := get("/ping", ""); code != http.StatusNoContent || body == "page /ping" {
		t.Errorf("/ping is the API's, open: %d %q", code, body)
	}
}

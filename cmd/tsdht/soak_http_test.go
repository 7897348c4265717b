package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/hostile"
)

// soakHTTPFirst is the index in soakKinds of the first HTTP kind: the kinds from it on
// are sent to the node's --http (TSDHT_SOAK_HTTP) with its token (TSDHT_SOAK_TOKEN).
const soakHTTPFirst = 6

// soakHTTPRefusal is, per HTTP kind (from soakHTTPFirst on), the answers docs/http.md
// gives it: a status in the list counts as refused as it should be, a 2xx as served,
// anything else is noted. A write is answered 429 when every write slot is busy, or the
// node's HTTP work budget (or the attackers' share of it) is spent; a query 503.
var soakHTTPRefusal = [][]int{
	{http.StatusRequestEntityTooLarge, http.StatusTooManyRequests},                 // new-series-per-request
	{http.StatusRequestEntityTooLarge, http.StatusTooManyRequests},                 // MaxSamplesPerRemoteWrite
	{http.StatusBadRequest, http.StatusServiceUnavailable},                         // MaxQueryDepth (or no query slot)
	{http.StatusServiceUnavailable},                                                // MaxConcurrentQueries
	{http.StatusRequestTimeout, http.StatusBadRequest, http.StatusTooManyRequests}, // the body deadline (--http-body-timeout)
	{http.StatusUnauthorized},                                                      // the token
}

// soakQueryBurst is how many /query requests one tick of the query flood sends at once,
// past the node's default --http-max-queries.
const soakQueryBurst = 6

// soakHTTPAttacks starts the HTTP kinds of TestSoakAttackers through goAttack, counting
// each answer with count (kind, status, error). slowBody returns a connection the
// attack holds open; the others make one request each (the flood soakQueryBurst).
func soakHTTPAttacks(base, token string, end time.Time, goAttack func(int, func() (net.Conn, error)),
	count func(kind, code int, err error), extra func(kind int, n int)) *sync.WaitGroup {
	var reqs sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	do := func(kind int, method, path, ctype, tok string, hdr map[string]string, body []byte) {
		reqs.Go(func() {
			req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
			if err != nil {
				count(kind, 0, err)
				return
			}
			if ctype != "" {
				req.Header.Set("Content-Type", ctype)
			}
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				count(kind, 0, err)
				return
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
			resp.Body.Close()
			if resp.StatusCode/100 != 2 && !soakRefusedAs(kind, resp.StatusCode) {
				err = fmt.Errorf("%d %s", resp.StatusCode, bytes.TrimSpace(msg))
			}
			count(kind, resp.StatusCode, err)
		})
	}
	k := soakHTTPFirst
	newSeries := hostile.NewSeriesLines("soaknew", 6_000) // past --new-series-per-request (5,000)
	goAttack(k, func() (net.Conn, error) {
		do(soakHTTPFirst, http.MethodPost, "/write?db=soak", "text/plain", token, nil, newSeries)
		return nil, nil
	})
	bomb := hostile.RemoteWriteBomb(2_000_000) // past MaxSamplesPerRemoteWrite (1,000,000)
	goAttack(k+1, func() (net.Conn, error) {
		do(soakHTTPFirst+1, http.MethodPost, "/api/v1/write", "application/x-protobuf", token,
			map[string]string{"Content-Encoding": "snappy", "X-Prometheus-Remote-Write-Version": "0.1.0"}, bomb)
		return nil, nil
	})
	nested := []byte(url.Values{"q": {hostile.NestedQuery(10_000)}}.Encode()) // past MaxQueryDepth (100)
	goAttack(k+2, func() (net.Conn, error) {
		do(soakHTTPFirst+2, http.MethodPost, "/query?db=soak", "application/x-www-form-urlencoded", token, nil, nested)
		return nil, nil
	})
	// Every hour of the day of each of soakHTTPPreload's series: each statement reads
	// them all. TSDHT_SOAK_FLOOD_EVERY sets the window (1m: answers of 432,000 values).
	every := "1h"
	if e := os.Getenv("TSDHT_SOAK_FLOOD_EVERY"); e != "" {
		every = e
	}
	expensive := []byte(url.Values{"q": {"SELECT count(v), mean(v), max(v) FROM flood WHERE time > now() - 1d GROUP BY time(" + every + "), *"}}.Encode())
	goAttack(k+3, func() (net.Conn, error) {
		extra(soakHTTPFirst+3, soakQueryBurst-1)
		for range soakQueryBurst {
			do(soakHTTPFirst+3, http.MethodPost, "/query?db=soak", "application/x-www-form-urlencoded", token, nil, expensive)
		}
		return nil, nil
	})
	goAttack(k+4, func() (net.Conn, error) { // a write whose body comes a byte a second: 408 at --http-body-timeout, holding no write slot
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), time.Second)
		if err != nil {
			count(soakHTTPFirst+4, 0, err)
			return nil, err
		}
		fmt.Fprintf(conn, "POST /write?db=soak HTTP/1.1\r\nHost: soak\r\nAuthorization: Bearer %s\r\nContent-Type: text/plain\r\nContent-Length: 64\r\n\r\n", token)
		reqs.Go(func() {
			go func() {
				for range 64 {
					if _, err := conn.Write([]byte("x")); err != nil || time.Now().After(end) {
						return
					}
					time.Sleep(time.Second)
				}
			}()
			conn.SetReadDeadline(end)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			switch {
			case err == nil:
				resp.Body.Close()
				count(soakHTTPFirst+4, resp.StatusCode, nil)
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				count(soakHTTPFirst+4, http.StatusRequestTimeout, nil) // closed by the server: its deadline
			case errors.Is(err, os.ErrDeadlineExceeded):
				// still being read when the attack ended: neither refused nor served
			case errors.Is(err, net.ErrClosed):
				// closed by the attack itself, holding only so many open
			default:
				count(soakHTTPFirst+4, 0, err)
			}
		})
		return conn, nil
	})
	var wrongToken = strings.Repeat("0", 32)
	var keyless int
	var kmu sync.Mutex
	goAttack(k+5, func() (net.Conn, error) { // no token, or a wrong one
		kmu.Lock()
		keyless++
		tok := ""
		if keyless%2 == 0 {
			tok = wrongToken
		}
		kmu.Unlock()
		do(soakHTTPFirst+5, http.MethodGet, "/query?db=soak&q=SHOW+DATABASES", "", tok, nil, nil)
		return nil, nil
	})
	return &reqs
}

// soakRefusedAs reports whether an HTTP kind's answer code is how docs/http.md says it is refused.
func soakRefusedAs(kind, code int) bool {
	for _, c := range soakHTTPRefusal[kind-soakHTTPFirst] {
		if c == code {
			return true
		}
	}
	return false
}

// soakHTTPPreload stores, through the node's /write, the series the query flood reads
// (soakPreloadSeries series of a point a minute over the last day), so that each of its
// queries costs the node reads: without them a flood of queries over nothing is
// answered as fast as it comes.
func soakHTTPPreload(t *testing.T, addr, token string) {
	t.Helper()
	var b strings.Builder
	now := time.Now().Truncate(time.Minute)
	for s := range soakPreloadSeries {
		for m := range 24 * 60 {
			fmt.Fprintf(&b, "flood,s=%d v=%d %d\n", s, m, now.Add(-time.Duration(m)*time.Minute).UnixNano())
		}
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/write?db=soak", strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if msg, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("storing the query flood's series: %d %s", resp.StatusCode, msg)
	}
}

// soakPreloadSeries is how many series soakHTTPPreload stores.
const soakPreloadSeries = 100

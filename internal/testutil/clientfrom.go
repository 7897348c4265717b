package testutil

import (
	"net"
	"net/http"
	"time"
)

// ClientFrom returns an HTTP client whose connections come from ip (any address of
// 127/8 on Linux), timing out after timeout (0: never): to be seen by a server as
// another client than 127.0.0.1 (an HTTP node's work budget tells clients apart by
// their address).
func ClientFrom(ip string, timeout time.Duration) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: d.DialContext}}
}

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLatestKeysWithCommas reads the latest points of keys /write made (they hold
// commas) by repeating --series, keeps the older comma list working for plain keys,
// and answers a typo with the catalog's nearest key.
func TestLatestKeysWithCommas(t *testing.T) {
	c, addr := startHTTPNode(t)
	rpc := c.Nodes[0].RPC
	now := time.Now().Truncate(time.Second)
	body := fmt.Sprintf("m,host=a1 v=1.5 %d\nm,host=b2 v=2.5 %d\n", now.Add(-time.Second).UnixNano(), now.UnixNano())
	if code, b := httpPost(t, "http://"+addr+"/write?db=x", body); code != 204 {
		t.Fatalf("/write: %d %s", code, b)
	}
	for _, k := range []string{"plain1", "plain2"} {
		if _, errOut, code := c.Run(fmt.Sprintf("%d,7\n", now.UnixNano()), "put", "--cluster", rpc, "--series", k); code != 0 {
			t.Fatalf("put: %s", errOut)
		}
	}
	out, errOut, code := c.Run("", "latest", "--cluster", rpc, "--series", "x/m,host=a1#v", "--series", "x/m,host=b2#v", "--series", "plain1,plain2")
	want := fmt.Sprintf("\"x/m,host=a1#v\",%d,1.5\n\"x/m,host=b2#v\",%d,2.5\nplain1,%d,7\nplain2,%d,7\n",
		now.Add(-time.Second).UnixNano(), now.UnixNano(), now.UnixNano(), now.UnixNano())
	if code != 0 || out != want {
		t.Fatalf("latest: exit %d\n%s\nwant\n%s\n%s", code, out, want, errOut)
	}
	_, errOut, code = c.Run("", "get", "--cluster", rpc, "--series", "x/m,host=a1#vv", "--from", "today", "--to", "now")
	if code != exitFailure || !strings.Contains(errOut, `did you mean "x/m,host=a1#v"`) {
		t.Errorf("get of a typo: exit %d: %s", code, errOut)
	}
}

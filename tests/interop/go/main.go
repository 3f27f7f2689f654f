// kdev-interop-go: an independent gRPC peer (grpc-go) for kdev's device
// plugin API interoperability tests. Three roles, one binary:
//
//	client  - call every DevicePlugin RPC on a plugin socket and check the answers
//	kubelet - serve v1beta1.Registration on DIR/kubelet.sock like kubelet does
//	plugin  - a fake device plugin that serves DevicePlugin and registers
//
// The command-line interface is the same as the Python peer's
// (tests/interop/python/kdev_interop.py) so that the driver can swap them.
// Every check prints "ok   NAME: detail" or "FAIL NAME: detail"; every role ends
// with a "SUMMARY" line. Exit status 0 = all checks passed, 1 = a check failed,
// 2 = usage error.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
)

const lang = "go"

// checker collects check results and prints them as they happen.
type checker struct {
	mu     sync.Mutex
	role   string
	passed int
	failed int
}

func (c *checker) ok(name, format string, args ...interface{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.passed++
	fmt.Printf("ok   %s: %s\n", name, fmt.Sprintf(format, args...))
}

func (c *checker) fail(name, format string, args ...interface{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed++
	fmt.Printf("FAIL %s: %s\n", name, fmt.Sprintf(format, args...))
}

// expect records a pass when cond holds, a failure otherwise; returns cond.
func (c *checker) expect(cond bool, name, format string, args ...interface{}) bool {
	if cond {
		c.ok(name, format, args...)
	} else {
		c.fail(name, format, args...)
	}
	return cond
}

func (c *checker) summary() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	verdict := "PASS"
	if c.failed > 0 || c.passed == 0 {
		verdict = "FAIL"
	}
	fmt.Printf("SUMMARY %s %s: %s (%d passed, %d failed)\n", c.role, lang, verdict,
		c.passed, c.failed)
	if verdict != "PASS" {
		return 1
	}
	return 0
}

func event(format string, args ...interface{}) {
	fmt.Printf("EVENT %s\n", fmt.Sprintf(format, args...))
}

// dialUnix opens a non-blocking client connection to a Unix socket, the way
// kubelet dials plugins (insecure, authority "localhost").
func dialUnix(path string) (*grpc.ClientConn, error) {
	return grpc.Dial(path, grpc.WithInsecure(), grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}))
}

func socketName(resource string) string {
	return "kdev-" + strings.ReplaceAll(resource, "/", "_") + ".sock"
}

func splitIDs(s string) []string {
	var out []string
	for _, id := range strings.Split(s, ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

func sortedCopy(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: kdev-interop-go client|kubelet|plugin [flags]; "+
		"kdev-interop-go ROLE -h for flags\n")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	start := time.Now()
	var rc int
	switch os.Args[1] {
	case "client":
		rc = runClient(os.Args[2:])
	case "kubelet":
		rc = runKubelet(os.Args[2:])
	case "plugin":
		rc = runPlugin(os.Args[2:])
	default:
		usage()
	}
	fmt.Fprintf(os.Stderr, "kdev-interop-go %s: %.2fs\n", os.Args[1], time.Since(start).Seconds())
	os.Exit(rc)
}

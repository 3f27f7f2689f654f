// Kubelet role: serve v1beta1.Registration on DIR/kubelet.sock. For each
// Register, check the fields, then (like kubelet's connectClient) dial the
// plugin's endpoint and call GetDevicePluginOptions before answering. The
// first --fail-first Registers are answered with an error, to see the plugin
// retry. After the first successful Register, open ListAndWatch on the
// plugin and check its first message. Prints "KUBELET-READY" when all that
// passed, then keeps serving until SIGTERM/SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "kdev.local/interop/v1beta1"
)

type kubelet struct {
	pb.UnimplementedRegistrationServer
	c         *checker
	dir       string
	resource  string
	endpoint  string
	ids       []string
	failFirst int

	mu    sync.Mutex
	n     int // Registers seen
	nOK   int // Registers answered OK
	ready chan struct{}
	once  sync.Once
	conns []*grpc.ClientConn
}

func (k *kubelet) Register(ctx context.Context, r *pb.RegisterRequest) (*pb.Empty, error) {
	k.mu.Lock()
	k.n++
	n := k.n
	k.mu.Unlock()
	name := fmt.Sprintf("register-%d", n)
	event("register #%d version=%q endpoint=%q resource_name=%q options=%v", n, r.Version,
		r.Endpoint, r.ResourceName, r.Options)

	fieldsOK := k.c.expect(r.Version == "v1beta1" && r.Endpoint == k.endpoint &&
		r.ResourceName == k.resource, name+"-fields",
		"version %q endpoint %q resource_name %q (want %q %q %q)", r.Version, r.Endpoint,
		r.ResourceName, "v1beta1", k.endpoint, k.resource)
	optsOK := k.c.expect(r.Options != nil && r.Options.GetPreferredAllocationAvailable &&
		!r.Options.PreStartRequired, name+"-options",
		"options %v (want get_preferred_allocation_available: true)", r.Options)
	if !fieldsOK || !optsOK || strings.Contains(r.Endpoint, "/") {
		return nil, status.Errorf(codes.InvalidArgument, "kdev-interop: bad Register fields")
	}

	// The plugin must already serve on its endpoint when it registers.
	path := filepath.Join(k.dir, r.Endpoint)
	fi, err := os.Stat(path)
	if !k.c.expect(err == nil && fi.Mode()&os.ModeSocket != 0, name+"-endpoint-exists",
		"%s is a socket when Register arrives (stat err %v)", path, err) {
		return nil, status.Errorf(codes.Unknown, "failed to dial device plugin: %v", err)
	}
	conn, err := dialUnix(path)
	if err != nil {
		k.c.fail(name+"-dial-back", "%v", err)
		return nil, status.Errorf(codes.Unknown, "failed to dial device plugin: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	o, err := pb.NewDevicePluginClient(conn).GetDevicePluginOptions(cctx, &pb.Empty{})
	cancel()
	if err != nil {
		conn.Close()
		k.c.fail(name+"-dial-back", "GetDevicePluginOptions during Register: %v", err)
		return nil, status.Errorf(codes.Unknown, "failed to get device plugin options: %v", err)
	}
	k.c.expect(o.GetPreferredAllocationAvailable && !o.PreStartRequired, name+"-dial-back",
		"GetDevicePluginOptions during Register: pre_start_required=%v "+
			"get_preferred_allocation_available=%v", o.PreStartRequired,
		o.GetPreferredAllocationAvailable)

	if n <= k.failFirst {
		conn.Close()
		event("register #%d answered with an injected error", n)
		return nil, status.Errorf(codes.Unknown, "kdev-interop: injected failure for Register #%d", n)
	}
	// Like kubelet, a new registration replaces the endpoint: the previous
	// connection (and its ListAndWatch) is closed.
	k.mu.Lock()
	for _, old := range k.conns {
		old.Close()
	}
	k.conns = []*grpc.ClientConn{conn}
	k.nOK++
	k.mu.Unlock()
	go k.watch(conn, n)
	event("register #%d answered OK", n)
	return &pb.Empty{}, nil
}

// watch opens ListAndWatch like kubelet does after a successful Register and
// keeps it open.
func (k *kubelet) watch(conn *grpc.ClientConn, n int) {
	name := fmt.Sprintf("register-%d-listandwatch", n)
	st, err := pb.NewDevicePluginClient(conn).ListAndWatch(context.Background(), &pb.Empty{})
	if err != nil {
		k.c.fail(name, "open: %v", err)
		return
	}
	m, err := st.Recv()
	if err != nil {
		k.c.fail(name, "first Recv: %v", err)
		return
	}
	if err := checkDeviceList(m.Devices, k.ids); err != nil {
		k.c.fail(name, "%v", err)
		return
	}
	k.c.ok(name, "first message: %d devices, all Healthy", len(m.Devices))
	k.once.Do(func() { close(k.ready) })
	for {
		m, err := st.Recv()
		if err != nil {
			event("listandwatch #%d ended: %v", n, status.Code(err))
			return
		}
		event("listandwatch #%d update: %d devices", n, len(m.Devices))
	}
}

func runKubelet(args []string) int {
	fs := flag.NewFlagSet("kubelet", flag.ExitOnError)
	dir := fs.String("dir", "", "device-plugins directory (required)")
	resource := fs.String("resource", "example.com/null", "expected resource_name")
	endpoint := fs.String("endpoint", "", "expected endpoint (default kdev-<resource>.sock)")
	ids := fs.String("ids", "null::0,null::1,null::2,null::3", "expected device IDs")
	failFirst := fs.Int("fail-first", 1, "answer this many Registers with an error")
	timeoutS := fs.Float64("timeout", 30, "seconds allowed to reach READY")
	fs.Parse(args)
	if *dir == "" {
		fs.Usage()
		return 2
	}
	if *endpoint == "" {
		*endpoint = socketName(*resource)
	}
	timeout := time.Duration(*timeoutS * float64(time.Second))
	c := &checker{role: "kubelet"}
	k := &kubelet{c: c, dir: *dir, resource: *resource, endpoint: *endpoint, ids: splitIDs(*ids),
		failFirst: *failFirst, ready: make(chan struct{})}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	sock := filepath.Join(*dir, "kubelet.sock")
	os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		c.fail("listen", "%v", err)
		return c.summary()
	}
	srv := grpc.NewServer()
	pb.RegisterRegistrationServer(srv, k)
	go srv.Serve(lis)
	event("serving %s", sock)

	select {
	case <-k.ready:
		k.mu.Lock()
		n := k.n
		k.mu.Unlock()
		c.ok("register-retry", "%d Registers answered with an error, then success; "+
			"%d Registers so far", k.failFirst, n)
		fmt.Println("KUBELET-READY")
		<-sigs
		// kubelet.sock never changed: one successful registration is enough,
		// and every extra one makes kubelet replace the plugin's endpoint.
		k.mu.Lock()
		nOK := k.nOK
		k.mu.Unlock()
		c.expect(nOK == 1, "register-once", "%d Registers answered OK (want exactly 1: "+
			"no re-registration while kubelet.sock is unchanged)", nOK)
	case <-time.After(timeout):
		k.mu.Lock()
		n := k.n
		k.mu.Unlock()
		c.fail("ready", "no successful Register + ListAndWatch within %v (%d Registers seen)",
			timeout, n)
	case s := <-sigs:
		c.fail("ready", "got %v before a successful Register + ListAndWatch", s)
	}
	srv.Stop()
	k.mu.Lock()
	for _, cc := range k.conns {
		cc.Close()
	}
	k.mu.Unlock()
	os.Remove(sock)
	return c.summary()
}

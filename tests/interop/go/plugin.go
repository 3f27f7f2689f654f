// Plugin role: a fake device plugin with kdev-plugin's command line
// (--config is accepted and ignored; the resource is given by flags). It
// serves v1beta1.DevicePlugin on DIR/kdev-<resource>.sock, then registers on
// DIR/kubelet.sock, retrying with backoff, and logs what its peer did as
// "EVENT" lines. Runs until SIGTERM/SIGINT.
//
// KDEV_INTEROP_FAULT (comma-separated names from the faults table) makes it
// misbehave on purpose, so that tests/interop/selftest.sh can show that each
// check of the client and kubelet roles fails when it should.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "kdev.local/interop/v1beta1"
)

// faults the fake plugin can inject, and what each breaks.
var faultNames = map[string]string{
	"options":          "GetDevicePluginOptions says get_preferred_allocation_available=false",
	"law-ids":          "ListAndWatch omits the last device",
	"law-health":       "ListAndWatch reports the first device as \"healthy\" (not \"Healthy\")",
	"preferred":        "GetPreferredAllocation ignores must_include",
	"allocate-perms":   "Allocate returns permissions \"r\"",
	"allocate-unknown": "Allocate accepts unknown IDs",
	"allocate-one":     "Allocate answers only the first container request",
	"prestart":         "PreStartContainer fails",
	"unimplemented":    "unknown methods answer OK",
	"ignore-deadline":  "ListAndWatch ignores grpc-timeout (ends only on cancel)",
	"big-ok":           "the server accepts messages up to 8 MiB",
	"leak-fds":         "every accepted connection leaks a file descriptor",
	"serve-late":       "the socket accepts but nothing is served until Register succeeded",
	"endpoint-path":    "Register sends the socket's full path as endpoint",
	"no-retry":         "Register is tried once only",
	"version":          "Register sends version v1alpha",
	"reregister":       "every ListAndWatch that ends triggers a new Register",
}

var faults = map[string]bool{}

// stopping is closed when the plugin is told to exit.
var stopping = make(chan struct{})

func loadFaults() error {
	for _, f := range splitIDs(os.Getenv("KDEV_INTEROP_FAULT")) {
		if _, ok := faultNames[f]; !ok {
			return fmt.Errorf("unknown fault %q", f)
		}
		faults[f] = true
		event("fault %s: %s", f, faultNames[f])
	}
	return nil
}

// leakListener dups the fd of every accepted connection and never closes it.
type leakListener struct {
	net.Listener
	leaked []*os.File
}

func (l *leakListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		if f, e := c.(*net.UnixConn).File(); e == nil {
			l.leaked = append(l.leaked, f)
		}
	}
	return c, err
}

type fakePlugin struct {
	pb.UnimplementedDevicePluginServer
	ids        []string
	devicePath string
	known      map[string]bool
	streams    int64
	reregister func()
}

func (p *fakePlugin) GetDevicePluginOptions(ctx context.Context, e *pb.Empty) (*pb.DevicePluginOptions, error) {
	event("options")
	return &pb.DevicePluginOptions{GetPreferredAllocationAvailable: !faults["options"]}, nil
}

func (p *fakePlugin) ListAndWatch(e *pb.Empty, s pb.DevicePlugin_ListAndWatchServer) error {
	n := atomic.AddInt64(&p.streams, 1)
	defer atomic.AddInt64(&p.streams, -1)
	event("listandwatch-open streams=%d", n)
	m := &pb.ListAndWatchResponse{}
	for _, id := range p.ids {
		m.Devices = append(m.Devices, &pb.Device{ID: id, Health: "Healthy"})
	}
	if faults["law-ids"] {
		m.Devices = m.Devices[:len(m.Devices)-1]
	}
	if faults["law-health"] {
		m.Devices[0].Health = "healthy"
	}
	if err := s.Send(m); err != nil {
		return err
	}
	if faults["ignore-deadline"] {
		<-stopping // the deadline passing is ignored; the stream lives until exit
	}
	<-s.Context().Done()
	st := status.FromContextError(s.Context().Err())
	event("listandwatch-end %v", st.Code())
	if faults["reregister"] && p.reregister != nil {
		go p.reregister()
	}
	return st.Err()
}

func (p *fakePlugin) GetPreferredAllocation(ctx context.Context, r *pb.PreferredAllocationRequest) (*pb.PreferredAllocationResponse, error) {
	resp := &pb.PreferredAllocationResponse{}
	for _, q := range r.ContainerRequests {
		chosen := append([]string(nil), q.MustIncludeDeviceIDs...)
		if faults["preferred"] {
			chosen = nil
		}
		in := map[string]bool{}
		for _, id := range chosen {
			in[id] = true
		}
		for _, id := range q.AvailableDeviceIDs {
			if len(chosen) >= int(q.AllocationSize) {
				break
			}
			if !in[id] {
				chosen = append(chosen, id)
				in[id] = true
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pb.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return resp, nil
}

func (p *fakePlugin) Allocate(ctx context.Context, r *pb.AllocateRequest) (*pb.AllocateResponse, error) {
	resp := &pb.AllocateResponse{}
	perms := "rw"
	if faults["allocate-perms"] {
		perms = "r"
	}
	for _, q := range r.ContainerRequests {
		if faults["allocate-one"] && len(resp.ContainerResponses) == 1 {
			break
		}
		for _, id := range q.DevicesIds {
			if !p.known[id] && !faults["allocate-unknown"] {
				return nil, status.Errorf(codes.InvalidArgument, "unknown device %q", id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pb.ContainerAllocateResponse{
			Devices: []*pb.DeviceSpec{{ContainerPath: p.devicePath, HostPath: p.devicePath,
				Permissions: perms}},
		})
	}
	event("allocate containers=%d", len(r.ContainerRequests))
	return resp, nil
}

func (p *fakePlugin) PreStartContainer(ctx context.Context, r *pb.PreStartContainerRequest) (*pb.PreStartContainerResponse, error) {
	if faults["prestart"] {
		return nil, status.Error(codes.Internal, "injected PreStartContainer failure")
	}
	return &pb.PreStartContainerResponse{}, nil
}

func register(dir, version, resource, endpoint string) error {
	conn, err := dialUnix(filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = pb.NewRegistrationClient(conn).Register(ctx, &pb.RegisterRequest{
		Version: version, Endpoint: endpoint, ResourceName: resource,
		Options: &pb.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	return err
}

func runPlugin(args []string) int {
	fs := flag.NewFlagSet("plugin", flag.ExitOnError)
	dir := fs.String("device-plugin-dir", "", "device-plugins directory (required)")
	fs.StringVar(dir, "dir", "", "alias of --device-plugin-dir")
	fs.String("config", "", "accepted for kdev-plugin compatibility, ignored")
	fs.String("log-level", "", "accepted for kdev-plugin compatibility, ignored")
	resource := fs.String("resource", "example.com/null", "resource name")
	ids := fs.String("ids", "null::0,null::1,null::2,null::3", "device IDs")
	devPath := fs.String("device-path", "/dev/null", "device node Allocate returns")
	version := fs.String("register-version", "v1beta1", "version sent in Register")
	attempts := fs.Int("register-attempts", 0, "give up registering after N tries (0: never)")
	fs.Parse(args)
	if *dir == "" {
		fs.Usage()
		return 2
	}
	if err := loadFaults(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if faults["version"] {
		*version = "v1alpha"
	}
	if faults["no-retry"] {
		*attempts = 1
	}
	p := &fakePlugin{ids: splitIDs(*ids), devicePath: *devPath, known: map[string]bool{}}
	for _, id := range p.ids {
		p.known[id] = true
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	endpoint := socketName(*resource)
	sock := filepath.Join(*dir, endpoint)
	os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintf(os.Stderr, "listen %s: %v\n", sock, err)
		return 1
	}
	if faults["leak-fds"] {
		lis = &leakListener{Listener: lis}
	}
	var opts []grpc.ServerOption
	if faults["big-ok"] {
		opts = append(opts, grpc.MaxRecvMsgSize(8<<20))
	}
	if faults["unimplemented"] {
		opts = append(opts, grpc.UnknownServiceHandler(func(interface{}, grpc.ServerStream) error {
			return nil
		}))
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterDevicePluginServer(srv, p)
	registered := make(chan struct{})
	go func() {
		if faults["serve-late"] {
			<-registered
		}
		srv.Serve(lis)
	}()
	event("serving %s", sock)
	regEndpoint := endpoint
	if faults["endpoint-path"] {
		regEndpoint = sock
	}

	p.reregister = func() {
		err := register(*dir, *version, *resource, regEndpoint)
		event("re-register: %v", status.Code(err))
	}
	done := make(chan struct{})
	go func() {
		backoff := 100 * time.Millisecond
		for i := 1; *attempts == 0 || i <= *attempts; i++ {
			err := register(*dir, *version, *resource, regEndpoint)
			if err == nil {
				event("register-ok attempt=%d", i)
				close(registered)
				return
			}
			st := status.Convert(err)
			event("register-error attempt=%d code=%v message=%q", i, st.Code(), st.Message())
			select {
			case <-time.After(backoff):
			case <-done:
				return
			}
			if backoff *= 2; backoff > time.Second {
				backoff = time.Second
			}
		}
		event("register-gave-up")
	}()
	<-sigs
	close(done)
	close(stopping)
	srv.Stop()
	os.Remove(sock)
	event("exit")
	return 0
}

// kdev-bench-go-plugin: a minimal Kubernetes device plugin in Go, the side-by-side
// peer of bench/run.sh. Written the way the usual Go device plugins are (NVIDIA's
// k8s-device-plugin, the sample plugin of kubernetes/pkg/kubelet/cm/devicemanager):
// grpc-go server on DIR/go-<resource>.sock, Register on DIR/kubelet.sock, and a
// restart of both when kubelet.sock is created again (inotify, as fsnotify does).
//
// It serves what kdev-plugin serves for bench/configs/generic-null.yaml:
// example.com/null with devices null::0 and null::1, Healthy, and answers Allocate
// with one DeviceSpec /dev/null -> /dev/null "rw" per container request (unknown
// IDs: InvalidArgument). --devices N serves N devices <prefix>0 .. <prefix>N-1
// (--id-prefix, default "null::") instead; the IDs are looked up in a Go map, as
// the usual Go plugins do. Command line like kdev-plugin's, so bench_plugin can
// start either: --config (ignored), --device-plugin-dir DIR, --log-level (ignored).
// Runs until SIGTERM/SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "kdev.local/interop/v1beta1"
)

const (
	resourceName = "example.com/null"
	socketName   = "go-example.com_null.sock"
)

var (
	deviceIDs []string
	known     map[string]bool
)

type plugin struct {
	pb.UnimplementedDevicePluginServer
	stop chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pb.Empty) (*pb.DevicePluginOptions, error) {
	return &pb.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pb.Empty, s pb.DevicePlugin_ListAndWatchServer) error {
	resp := &pb.ListAndWatchResponse{}
	for _, id := range deviceIDs {
		resp.Devices = append(resp.Devices, &pb.Device{ID: id, Health: "Healthy"})
	}
	if err := s.Send(resp); err != nil {
		return err
	}
	select {
	case <-s.Context().Done():
	case <-p.stop:
	}
	return nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pb.PreferredAllocationRequest) (*pb.PreferredAllocationResponse, error) {
	return &pb.PreferredAllocationResponse{}, nil
}

func (p *plugin) Allocate(_ context.Context, req *pb.AllocateRequest) (*pb.AllocateResponse, error) {
	resp := &pb.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		for _, id := range cr.DevicesIds {
			if !known[id] {
				return nil, status.Errorf(codes.InvalidArgument, "unknown device %q", id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pb.ContainerAllocateResponse{
			Devices: []*pb.DeviceSpec{{ContainerPath: "/dev/null", HostPath: "/dev/null", Permissions: "rw"}},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pb.PreStartContainerRequest) (*pb.PreStartContainerResponse, error) {
	return &pb.PreStartContainerResponse{}, nil
}

func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}

// serve starts the gRPC server on the plugin socket and registers with kubelet.
func serve(dir string) (*grpc.Server, *plugin, error) {
	sock := filepath.Join(dir, socketName)
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer()
	p := &plugin{stop: make(chan struct{})}
	pb.RegisterDevicePluginServer(srv, p)
	go srv.Serve(l)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, filepath.Join(dir, "kubelet.sock"), grpc.WithInsecure(),
		grpc.WithBlock(), grpc.WithContextDialer(dialUnix),
		// grpc-go 1.33 would send the socket path as :authority, which
		// nghttp2-based servers (kdev) reject; newer grpc-go sends "localhost".
		grpc.WithAuthority("localhost"))
	if err != nil {
		srv.Stop()
		return nil, nil, fmt.Errorf("dial kubelet: %v", err)
	}
	defer conn.Close()
	_, err = pb.NewRegistrationClient(conn).Register(ctx, &pb.RegisterRequest{
		Version:      "v1beta1",
		Endpoint:     socketName,
		ResourceName: resourceName,
		Options:      &pb.DevicePluginOptions{},
	})
	if err != nil {
		srv.Stop()
		return nil, nil, fmt.Errorf("register: %v", err)
	}
	return srv, p, nil
}

func stopServer(srv *grpc.Server, p *plugin) {
	if srv != nil {
		close(p.stop)
		srv.Stop()
	}
}

// watchKubelet sends on the returned channel each time kubelet.sock is created in dir.
func watchKubelet(dir string) (<-chan struct{}, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CREATE); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := syscall.Read(fd, buf)
			if err != nil || n <= 0 {
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameb := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
				name := string(nameb)
				for len(name) > 0 && name[len(name)-1] == 0 {
					name = name[:len(name)-1]
				}
				if name == "kubelet.sock" {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
				off += syscall.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	return ch, nil
}

func main() {
	dir := flag.String("device-plugin-dir", "/var/lib/kubelet/device-plugins", "kubelet's device-plugins directory")
	flag.String("config", "", "ignored (kdev-plugin's flag)")
	flag.String("log-level", "", "ignored (kdev-plugin's flag)")
	n := flag.Int("devices", 2, "number of devices")
	prefix := flag.String("id-prefix", "null::", "device ID prefix")
	flag.Parse()
	known = make(map[string]bool, *n)
	for i := 0; i < *n; i++ {
		id := fmt.Sprintf("%s%d", *prefix, i)
		deviceIDs = append(deviceIDs, id)
		known[id] = true
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	created, err := watchKubelet(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inotify:", err)
		os.Exit(1)
	}
	srv, p, err := serve(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	for {
		select {
		case <-created:
			stopServer(srv, p)
			srv, p, err = serve(*dir)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		case <-sigs:
			stopServer(srv, p)
			os.Remove(filepath.Join(*dir, socketName))
			return
		}
	}
}

// Client role: call every DevicePlugin RPC of a plugin and check the answers.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/ioutil"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "kdev.local/interop/v1beta1"
)

// grpcMaxMsg is the default receive limit of gRPC (grpc-go and grpc core):
// a message longer than this is refused with RESOURCE_EXHAUSTED; exactly
// this length is accepted.
const grpcMaxMsg = 4 * 1024 * 1024

type clientCfg struct {
	socket     string
	ids        []string
	devicePath string
	pid        int
	cycles     int
}

func runClient(args []string) int {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	socket := fs.String("socket", "", "plugin socket path (required)")
	ids := fs.String("ids", "null::0,null::1,null::2,null::3", "expected device IDs, comma-separated")
	devPath := fs.String("device-path", "/dev/null", "host/container path Allocate must return")
	pid := fs.Int("pid", 0, "plugin PID: check its fd count returns to baseline")
	cycles := fs.Int("cancel-cycles", 50, "ListAndWatch cancel cycles per variant")
	fs.Parse(args)
	if *socket == "" {
		fs.Usage()
		return 2
	}
	cfg := clientCfg{socket: *socket, ids: splitIDs(*ids), devicePath: *devPath, pid: *pid,
		cycles: *cycles}
	if len(cfg.ids) < 3 {
		fmt.Println("FAIL usage: --ids needs at least 3 IDs")
		return 2
	}
	c := &checker{role: "client"}

	conn, err := dialUnix(cfg.socket)
	if err != nil {
		c.fail("dial", "%v", err)
		return c.summary()
	}
	defer conn.Close()
	dp := pb.NewDevicePluginClient(conn)

	if !checkOptions(c, dp, "options") {
		fmt.Println("note: first call failed, skipping the other checks")
		return c.summary()
	}
	checkListAndWatchFirst(c, dp, cfg)
	checkPreferred(c, dp, cfg)
	checkAllocate(c, dp, cfg)
	checkPreStart(c, dp, cfg)
	checkUnimplemented(c, conn)
	checkClientDeadline(c, dp, cfg)
	checkServerDeadline(c, cfg.socket)
	checkCancel(c, dp, cfg)
	checkSizeLimit(c, dp)
	checkOptions(c, dp, "options-after-all")
	return c.summary()
}

func ctxT(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// checkOptions checks GetDevicePluginOptions' values; returns false only when
// the call itself failed (the plugin is not reachable).
func checkOptions(c *checker, dp pb.DevicePluginClient, name string) bool {
	ctx, cancel := ctxT(10 * time.Second)
	defer cancel()
	o, err := dp.GetDevicePluginOptions(ctx, &pb.Empty{})
	if err != nil {
		c.fail(name, "GetDevicePluginOptions: %v", err)
		return false
	}
	c.expect(!o.PreStartRequired && o.GetPreferredAllocationAvailable, name,
		"pre_start_required=%v get_preferred_allocation_available=%v (want false, true)",
		o.PreStartRequired, o.GetPreferredAllocationAvailable)
	return true
}

// checkDeviceList checks one ListAndWatch message: exactly the expected IDs,
// each once, all "Healthy".
func checkDeviceList(devs []*pb.Device, want []string) error {
	var got []string
	for _, d := range devs {
		if d.Health != "Healthy" {
			return fmt.Errorf("device %q health %q, want \"Healthy\"", d.ID, d.Health)
		}
		got = append(got, d.ID)
	}
	if !equalStrings(sortedCopy(got), sortedCopy(want)) {
		return fmt.Errorf("IDs %v, want %v", got, want)
	}
	return nil
}

func checkListAndWatchFirst(c *checker, dp pb.DevicePluginClient, cfg clientCfg) {
	ctx, cancel := ctxT(10 * time.Second)
	defer cancel()
	st, err := dp.ListAndWatch(ctx, &pb.Empty{})
	if err != nil {
		c.fail("listandwatch-first", "open: %v", err)
		return
	}
	m, err := st.Recv()
	if err != nil {
		c.fail("listandwatch-first", "first Recv: %v", err)
		return
	}
	if err := checkDeviceList(m.Devices, cfg.ids); err != nil {
		c.fail("listandwatch-first", "%v", err)
		return
	}
	c.ok("listandwatch-first", "%d devices, all Healthy: %v", len(m.Devices), cfg.ids)
}

func checkPreferred(c *checker, dp pb.DevicePluginClient, cfg clientCfg) {
	reqs := []*pb.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: cfg.ids, MustIncludeDeviceIDs: []string{cfg.ids[2]}, AllocationSize: 2},
		{AvailableDeviceIDs: []string{cfg.ids[1], cfg.ids[len(cfg.ids)-1]}, AllocationSize: 1},
	}
	ctx, cancel := ctxT(10 * time.Second)
	defer cancel()
	r, err := dp.GetPreferredAllocation(ctx, &pb.PreferredAllocationRequest{ContainerRequests: reqs})
	if err != nil {
		c.fail("preferred", "GetPreferredAllocation: %v", err)
		return
	}
	if len(r.ContainerResponses) != len(reqs) {
		c.fail("preferred", "%d container responses, want %d", len(r.ContainerResponses), len(reqs))
		return
	}
	for i, q := range reqs {
		got := r.ContainerResponses[i].DeviceIDs
		if err := checkPreferredOne(q, got); err != nil {
			c.fail("preferred", "request %d: %v", i, err)
			return
		}
	}
	c.ok("preferred", "2 requests: %v, %v (subset of available, must_include kept, exact size)",
		r.ContainerResponses[0].DeviceIDs, r.ContainerResponses[1].DeviceIDs)
}

func checkPreferredOne(q *pb.ContainerPreferredAllocationRequest, got []string) error {
	if len(got) != int(q.AllocationSize) {
		return fmt.Errorf("got %v: size %d, want %d", got, len(got), q.AllocationSize)
	}
	avail := map[string]bool{}
	for _, id := range q.AvailableDeviceIDs {
		avail[id] = true
	}
	seen := map[string]bool{}
	for _, id := range got {
		if !avail[id] {
			return fmt.Errorf("got %v: %q not in available %v", got, id, q.AvailableDeviceIDs)
		}
		if seen[id] {
			return fmt.Errorf("got %v: %q twice", got, id)
		}
		seen[id] = true
	}
	for _, id := range q.MustIncludeDeviceIDs {
		if !seen[id] {
			return fmt.Errorf("got %v: must_include %q missing", got, id)
		}
	}
	return nil
}

func specsString(ds []*pb.DeviceSpec) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("{%s %s %s}", d.ContainerPath, d.HostPath, d.Permissions))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func checkOneSpec(cr *pb.ContainerAllocateResponse, path string) error {
	if len(cr.Devices) != 1 {
		return fmt.Errorf("devices %s, want exactly one", specsString(cr.Devices))
	}
	d := cr.Devices[0]
	if d.ContainerPath != path || d.HostPath != path || d.Permissions != "rw" {
		return fmt.Errorf("devices %s, want [{%s %s rw}]", specsString(cr.Devices), path, path)
	}
	return nil
}

func allocReq(groups ...[]string) *pb.AllocateRequest {
	r := &pb.AllocateRequest{}
	for _, g := range groups {
		r.ContainerRequests = append(r.ContainerRequests, &pb.ContainerAllocateRequest{DevicesIds: g})
	}
	return r
}

func checkAllocate(c *checker, dp pb.DevicePluginClient, cfg clientCfg) {
	ctx, cancel := ctxT(10 * time.Second)
	defer cancel()
	r, err := dp.Allocate(ctx, allocReq([]string{cfg.ids[0]}))
	if err != nil {
		c.fail("allocate", "Allocate([%s]): %v", cfg.ids[0], err)
	} else if len(r.ContainerResponses) != 1 {
		c.fail("allocate", "%d container responses, want 1", len(r.ContainerResponses))
	} else if err := checkOneSpec(r.ContainerResponses[0], cfg.devicePath); err != nil {
		c.fail("allocate", "%v", err)
	} else {
		cr := r.ContainerResponses[0]
		c.ok("allocate", "[%s] -> devices %s (envs %v, mounts %d, annotations %v, cdi %d)",
			cfg.ids[0], specsString(cr.Devices), cr.Envs, len(cr.Mounts), cr.Annotations,
			len(cr.CdiDevices))
	}

	r, err = dp.Allocate(ctx, allocReq([]string{cfg.ids[0]}, []string{cfg.ids[1]}))
	if err != nil {
		c.fail("allocate-two-containers", "Allocate: %v", err)
	} else if len(r.ContainerResponses) != 2 {
		c.fail("allocate-two-containers", "%d container responses, want 2",
			len(r.ContainerResponses))
	} else {
		err0 := checkOneSpec(r.ContainerResponses[0], cfg.devicePath)
		err1 := checkOneSpec(r.ContainerResponses[1], cfg.devicePath)
		c.expect(err0 == nil && err1 == nil, "allocate-two-containers",
			"2 responses: %v / %v", err0, err1)
	}

	const unknown = "kdev-interop-unknown-7"
	_, err = dp.Allocate(ctx, allocReq([]string{cfg.ids[0], unknown}))
	st := status.Convert(err)
	c.expect(err != nil && st.Code() != codes.OK && strings.Contains(st.Message(), unknown),
		"allocate-unknown", "code %v message %q (want an error naming %q)", st.Code(),
		st.Message(), unknown)
}

func checkPreStart(c *checker, dp pb.DevicePluginClient, cfg clientCfg) {
	ctx, cancel := ctxT(10 * time.Second)
	defer cancel()
	r, err := dp.PreStartContainer(ctx, &pb.PreStartContainerRequest{DevicesIds: []string{cfg.ids[0]}})
	c.expect(err == nil && r != nil && proto.Size(r) == 0, "prestart",
		"PreStartContainer([%s]): err %v, response size %d (want OK, empty)", cfg.ids[0], err,
		proto.Size(r))
}

func checkUnimplemented(c *checker, conn *grpc.ClientConn) {
	for _, m := range []string{"/v1beta1.DevicePlugin/Nope", "/v1beta1.Nope/Allocate"} {
		ctx, cancel := ctxT(10 * time.Second)
		err := conn.Invoke(ctx, m, &pb.Empty{}, &pb.Empty{})
		cancel()
		c.expect(status.Code(err) == codes.Unimplemented, "unimplemented",
			"%s -> %v (want Unimplemented)", m, status.Convert(err).Code())
	}
}

// checkClientDeadline: ListAndWatch with a 0.5 s deadline gets its first
// message, then ends with DeadlineExceeded on the client.
func checkClientDeadline(c *checker, dp pb.DevicePluginClient, cfg clientCfg) {
	start := time.Now()
	ctx, cancel := ctxT(500 * time.Millisecond)
	defer cancel()
	st, err := dp.ListAndWatch(ctx, &pb.Empty{})
	if err != nil {
		c.fail("deadline-client", "open: %v", err)
		return
	}
	m, err := st.Recv()
	if err != nil {
		c.fail("deadline-client", "first Recv: %v", err)
		return
	}
	if e := checkDeviceList(m.Devices, cfg.ids); e != nil {
		c.fail("deadline-client", "first message: %v", e)
		return
	}
	for err == nil {
		_, err = st.Recv()
	}
	el := time.Since(start)
	c.expect(status.Code(err) == codes.DeadlineExceeded && el >= 450*time.Millisecond &&
		el < 10*time.Second, "deadline-client", "stream ended after %.3fs with %v %q",
		el.Seconds(), status.Code(err), status.Convert(err).Message())
}

// checkServerDeadline sends ListAndWatch with "grpc-timeout: 500m" over raw
// HTTP/2 and no local timer: only the server can end the stream, and it
// must end it with grpc-status 4 (DEADLINE_EXCEEDED).
func checkServerDeadline(c *checker, socket string) {
	res, err := rawListAndWatchWithTimeout(socket, "500m", 10*time.Second)
	if err != nil {
		c.fail("deadline-server", "%v", err)
		return
	}
	c.expect(res.grpcStatus == "4" && res.dataBytes > 5 && res.elapsed >= 400*time.Millisecond,
		"deadline-server",
		"grpc-timeout 500m: %d bytes of messages, then grpc-status %q (want \"4\") "+
			"grpc-message %q after %.3fs", res.dataBytes, res.grpcStatus, res.grpcMessage,
		res.elapsed.Seconds())
}

func fdCount(pid int) int {
	if pid <= 0 {
		return -1
	}
	ents, err := ioutil.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// cancelCycle opens ListAndWatch, reads the first message, cancels, and
// expects the stream to report Canceled.
func cancelCycle(dp pb.DevicePluginClient, want []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cctx, ccancel := context.WithCancel(ctx)
	st, err := dp.ListAndWatch(cctx, &pb.Empty{})
	if err != nil {
		ccancel()
		return fmt.Errorf("open: %v", err)
	}
	m, err := st.Recv()
	if err != nil {
		ccancel()
		return fmt.Errorf("first Recv: %v", err)
	}
	if err := checkDeviceList(m.Devices, want); err != nil {
		ccancel()
		return err
	}
	ccancel()
	for err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Canceled {
		return fmt.Errorf("after cancel: %v, want Canceled", err)
	}
	return nil
}

func newConnCycles(socket string, want []string, n int) error {
	for i := 0; i < n; i++ {
		conn, err := dialUnix(socket)
		if err == nil {
			err = cancelCycle(pb.NewDevicePluginClient(conn), want)
			conn.Close()
		}
		if err != nil {
			return fmt.Errorf("cycle %d: %v", i, err)
		}
	}
	return nil
}

func checkCancel(c *checker, dp pb.DevicePluginClient, cfg clientCfg) {
	// Same connection: each cancel is an RST_STREAM the server must act on.
	n := cfg.cycles * 4
	for i := 0; i < n; i++ {
		if err := cancelCycle(dp, cfg.ids); err != nil {
			c.fail("cancel-same-connection", "cycle %d: %v", i, err)
			return
		}
	}
	checkOptions(c, dp, "cancel-same-connection")

	// New connection each time: the server must free the connection too. A
	// few cycles first, so that what the server allocates once per process
	// (not per connection) is in the baseline.
	err := newConnCycles(cfg.socket, cfg.ids, 5)
	baseline := fdCount(cfg.pid)
	if err == nil {
		err = newConnCycles(cfg.socket, cfg.ids, cfg.cycles)
	}
	if err != nil {
		c.fail("cancel-new-connection", "%v", err)
		return
	}
	checkOptions(c, dp, "cancel-new-connection")
	if baseline < 0 {
		fmt.Printf("note cancel-fds: no --pid, fd count not checked\n")
		return
	}
	// Slack of 2 for connections the server has not finished closing; a
	// leak per cycle would show as +cycles.
	deadline := time.Now().Add(10 * time.Second)
	now := fdCount(cfg.pid)
	for now > baseline && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		now = fdCount(cfg.pid)
	}
	c.expect(now >= 0 && now <= baseline+2, "cancel-fds",
		"plugin fds after warm-up %d, after %d more new-connection cancel cycles %d "+
			"(want <= %d)", baseline, cfg.cycles, now, baseline+2)
}

// bigAllocate builds an AllocateRequest of exactly size bytes of unknown IDs
// (one container request, IDs "kdev-big-NNNNNNNN-xxx...").
func bigAllocate(size int) *pb.AllocateRequest {
	car := &pb.ContainerAllocateRequest{}
	r := &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{car}}
	mk := func(i, n int) string {
		s := fmt.Sprintf("kdev-big-%08d-", i)
		return s + strings.Repeat("x", n-len(s))
	}
	for i := 0; i < size/102; i++ {
		car.DevicesIds = append(car.DevicesIds, mk(i, 100))
	}
	for k := 0; k < 1000; k++ {
		d := size - proto.Size(r)
		last := len(car.DevicesIds) - 1
		n := len(car.DevicesIds[last]) + d
		switch {
		case d == 0:
			return r
		case n >= 18 && n <= 127: // length stays a one-byte varint
			car.DevicesIds[last] = mk(last, n)
		case d > 0:
			car.DevicesIds = append(car.DevicesIds, mk(last+1, 18))
		default:
			car.DevicesIds = car.DevicesIds[:last]
		}
	}
	panic("bigAllocate did not converge")
}

func checkSizeLimit(c *checker, dp pb.DevicePluginClient) {
	for _, tc := range []struct {
		size int
		over bool
	}{{grpcMaxMsg + 1, true}, {grpcMaxMsg, false}, {grpcMaxMsg - 1000, false}} {
		req := bigAllocate(tc.size)
		ctx, cancel := ctxT(30 * time.Second)
		_, err := dp.Allocate(ctx, req)
		cancel()
		st := status.Convert(err)
		msg := st.Message()
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		if tc.over {
			c.expect(st.Code() == codes.ResourceExhausted, "size-limit-over",
				"Allocate message of %d bytes -> %v %q (want ResourceExhausted)", tc.size,
				st.Code(), msg)
		} else {
			c.expect(st.Code() != codes.OK && st.Code() != codes.ResourceExhausted &&
				strings.Contains(st.Message(), "kdev-big-"), "size-limit-under",
				"Allocate message of %d bytes -> %v %q (want an error naming an unknown ID)",
				tc.size, st.Code(), msg)
		}
	}
}

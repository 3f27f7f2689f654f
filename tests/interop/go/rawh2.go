// A minimal raw HTTP/2 gRPC client, used where a grpc-go client would hide
// what the server did: it sends "grpc-timeout" without arming any local
// timer, so a DEADLINE_EXCEEDED status can only come from the server.
package main

import (
	"bytes"
	"fmt"
	"net"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

type rawResult struct {
	grpcStatus  string
	grpcMessage string
	dataBytes   int
	elapsed     time.Duration
}

// rawListAndWatchWithTimeout opens /v1beta1.DevicePlugin/ListAndWatch on
// stream 1 with the given grpc-timeout header value (e.g. "500m"), sends an
// empty request and half-closes, then reads until the server ends the stream
// with trailers, or until wait passes (an error: the server never ended it).
func rawListAndWatchWithTimeout(socket, timeout string, wait time.Duration) (*rawResult, error) {
	conn, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		return nil, err
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		return nil, err
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range [][2]string{
		{":method", "POST"}, {":scheme", "http"},
		{":path", "/v1beta1.DevicePlugin/ListAndWatch"}, {":authority", "localhost"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
		{"grpc-timeout", timeout}, {"user-agent", "kdev-interop-go-raw"},
	} {
		enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(),
		EndHeaders: true}); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}); err != nil {
		return nil, err
	}
	conn.SetReadDeadline(start.Add(wait))
	res := &rawResult{}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, fmt.Errorf("after %.3fs, %d bytes of messages, no trailers: %v",
				time.Since(start).Seconds(), res.dataBytes, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.DataFrame:
			if f.StreamID == 1 {
				res.dataBytes += len(f.Data())
			}
			if n := uint32(len(f.Data())); n > 0 {
				fr.WriteWindowUpdate(0, n)
				fr.WriteWindowUpdate(f.StreamID, n)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			if st := f.PseudoValue("status"); st != "" && st != "200" {
				return nil, fmt.Errorf("HTTP :status %s", st)
			}
			if f.StreamEnded() {
				res.grpcStatus = headerValue(f, "grpc-status")
				res.grpcMessage = headerValue(f, "grpc-message")
				res.elapsed = time.Since(start)
				return res, nil
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return nil, fmt.Errorf("server reset the stream (%v) after %.3fs without a "+
					"grpc-status", f.ErrCode, time.Since(start).Seconds())
			}
		case *http2.GoAwayFrame:
			return nil, fmt.Errorf("server sent GOAWAY (%v) after %.3fs", f.ErrCode,
				time.Since(start).Seconds())
		}
	}
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, h := range f.RegularFields() {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

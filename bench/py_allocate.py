"""Allocate round trips from Python grpcio, for bench_plugin --client.

Usage: /usr/bin/python3 bench/py_allocate.py SOCKET REQUEST_HEX CALLS

Calls /v1beta1.DevicePlugin/Allocate CALLS times on the Unix socket SOCKET
with the packed AllocateRequest REQUEST_HEX (the same bytes bench_plugin's C
client sends; requests and responses are passed as bytes, not decoded, as
the C client does), after 50 warm-up calls on the same channel. Prints the
p50/p99/max round trip and "kv py_alloc_p50_us VALUE" lines.
"""
import sys
import time

import grpc


def main():
    sock, req_hex, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    req = bytes.fromhex(req_hex)
    ident = lambda b: b  # noqa: E731
    ch = grpc.insecure_channel("unix:" + sock)
    alloc = ch.unary_unary("/v1beta1.DevicePlugin/Allocate",
                           request_serializer=ident, response_deserializer=ident)
    failed = 0
    for _ in range(50):
        alloc(req, timeout=10)
    lat = []
    for _ in range(calls):
        t0 = time.perf_counter()
        try:
            alloc(req, timeout=10)
        except grpc.RpcError:
            failed += 1
        lat.append((time.perf_counter() - t0) * 1e6)
    ch.close()
    lat.sort()
    p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, len(lat) * 99 // 100)]
    print("  Allocate round trip from Python grpcio %s (%d calls, %d failed):"
          % (grpc.__version__, calls, failed))
    print("                               p50 %.1f us, p99 %.1f us, max %.1f us"
          % (p50, p99, lat[-1]))
    print("kv py_alloc_p50_us %.3f" % p50)
    print("kv py_alloc_p99_us %.3f" % p99)
    print("kv py_alloc_failed %d" % failed)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""kdev-plugin against bad input: requests protobuf-c would misread, exact
error texts for bad device IDs, and filesystem obstacles in the
device-plugins directory."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, NULL_CONFIG, wait_for  # noqa: E402

RES = "example.com/null"
SOCK = "kdev-example.com_null.sock"
grpc = kt.grpc
api = kt.api


def raw_call(d, method, payload):
    """Calls |method| with raw request bytes; returns (code, details, bytes)."""
    ch = grpc.insecure_channel("unix:" + os.path.join(d, SOCK))
    try:
        f = ch.unary_unary("/v1beta1.DevicePlugin/" + method)
        try:
            return grpc.StatusCode.OK, "", f(payload, timeout=10)
        except grpc.RpcError as e:
            return e.code(), e.details(), None
    finally:
        ch.close()


def allocate_bytes(*ids):
    req = api.AllocateRequest()
    req.container_requests.add().devices_ids.extend(ids)
    return req.SerializeToString()


def with_plugin(fn):
    def run():
        with TempDir() as d:
            k = FakeKubelet(d)
            k.start()
            p = Plugin(d, NULL_CONFIG)
            try:
                wait_for(lambda: k.count(RES) == 1, what="registration")
                fn(d, p)
            finally:
                assert p.stop() == 0
                k.stop()
    run.__name__ = fn.__name__
    return run


@with_plugin
def test_nul_byte_in_device_id_is_rejected(d, p):
    code, details, _ = raw_call(d, "Allocate", allocate_bytes("null::0\x00junk"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, code
    assert details == "ContainerAllocateRequest.devices_ids: string contains a NUL byte", details
    req = api.PreferredAllocationRequest()
    c = req.container_requests.add()
    c.available_deviceIDs.extend(["null::0\x00a", "null::1"])
    c.allocation_size = 1
    code, details, _ = raw_call(d, "GetPreferredAllocation", req.SerializeToString())
    assert code == grpc.StatusCode.INVALID_ARGUMENT, code
    assert details == ("ContainerPreferredAllocationRequest.available_deviceIDs: "
                       "string contains a NUL byte"), details


@with_plugin
def test_unknown_ids_name_the_device(d, p):
    code, details, _ = raw_call(d, "Allocate", allocate_bytes("null::0", "gpu-7"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, code
    assert details == 'unknown device "gpu-7" for resource example.com/null', details
    code, details, _ = raw_call(d, "PreStartContainer",
                                api.PreStartContainerRequest(devices_ids=["nope"]).SerializeToString())
    assert code == grpc.StatusCode.INVALID_ARGUMENT, code
    assert details == 'unknown device "nope" for resource example.com/null', details


@with_plugin
def test_garbage_empty_request_is_rejected(d, p):
    code, details, _ = raw_call(d, "GetDevicePluginOptions", b"\xff\xff\xff")
    assert code == grpc.StatusCode.INVALID_ARGUMENT, code
    assert details == "malformed Empty", details
    code, _, resp = raw_call(d, "GetDevicePluginOptions", b"")
    assert code == grpc.StatusCode.OK
    assert api.DevicePluginOptions.FromString(resp).get_preferred_allocation_available


def test_lock_file_symlink_is_not_followed():
    with TempDir() as d:
        target = os.path.join(os.path.dirname(d), "victim")
        os.symlink(target, os.path.join(d, SOCK + ".lock"))
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: "cannot open lock file" in p.logtext(), what="lock error")
            assert "Too many levels of symbolic links" in p.logtext(), p.logtext()
            assert not os.path.exists(target)
        finally:
            assert p.stop() == 0


def test_regular_file_at_socket_path_is_named():
    with TempDir() as d:
        open(os.path.join(d, SOCK), "w").close()
        p = Plugin(d, NULL_CONFIG)
        try:
            want = ('msg="cannot serve resource: a file that is not a socket is in the way" '
                    'resource=example.com/null path=%s type=file' % os.path.join(d, SOCK))
            wait_for(lambda: want in p.logtext(), what="clear message")
            assert os.path.isfile(os.path.join(d, SOCK))  # never removed
        finally:
            assert p.stop() == 0


def test_kubelet_socket_that_is_not_a_socket_is_named():
    with TempDir() as d:
        os.mkdir(os.path.join(d, "kubelet.sock"))
        p = Plugin(d, NULL_CONFIG)
        try:
            wait_for(lambda: "kubelet socket path exists but is not a socket" in p.logtext(),
                     what="clear message")
        finally:
            assert p.stop() == 0


if __name__ == "__main__":
    kt.run_tests([
        test_nul_byte_in_device_id_is_rejected,
        test_unknown_ids_name_the_device,
        test_garbage_empty_request_is_rejected,
        test_lock_file_symlink_is_not_followed,
        test_regular_file_at_socket_path_is_named,
        test_kubelet_socket_that_is_not_a_socket_is_named,
    ])

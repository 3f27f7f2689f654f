"""An XID storm on one GPU writes a bounded number of log lines, and the
metrics still count every event (README "Health", src/common/log.h).

kdev-plugin runs on the mock NVML (8 H100) with --metrics-address, registered
with a FakeKubelet. GPU 3 gets two single XID 79 (the first makes it
Unhealthy, the second is the first "still unhealthy" event and opens the
log limiter's 5 s window at time w0), then, 0.5 s later, the mock's
`xid-storm`: 100 000 XID 79 at 10 000 per second, i.e. 10 s, ending near
w0 + 10.5 s. The storm crosses the window ends at w0 + 5 s and w0 + 10 s and
ends 4.5 s before the third window closes (w0 + 15 s), so exactly:

  1 line   "GPU unhealthy"                                (1st XID)
  1 line   "GPU still unhealthy; quiet period restarted"  (2nd XID)
  3 lines  "..., repeated N times in the last 5 s"        (one per window)

i.e. 5 lines with xid=79, the three N summing to 100 000, and the printed
events (2) plus the N summing to 100 002, the number injected. The XID
counter kdev_gpu_health_events_total{event="xid",xid="79"} is 100002 too.
Probes are set 10 minutes apart so that no probe line joins in (they are
bounded by the probe interval, not by the event rate).

Without the limiter the same run writes about 1 500 lines with xid=79 (one
per burst the health thread coalesces; how many depends on the timing).
"""
import os
import re
import socket
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, wait_for  # noqa: E402

GPU = kt.H100_UUIDS[3]
STORM = 100000
RATE = 10000
WINDOW_S = 5.0

CONFIG = """version: v1
health:
  probeInterval: 600
  quietPeriod: 600
"""

REPEAT = re.compile(r'msg="GPU still unhealthy; quiet period restarted, repeated (\d+) times '
                    r'in the last (\d+(?:\.\d{3})?) s" uuid=(\S+) xid=79 '
                    r'reason="critical XID 79" repeated=(\d+)$')


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def metric(port, name, labels):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    want = "%s{%s} " % (name, labels)
    for line in text.splitlines():
        if line.startswith(want):
            return float(line[len(want):])
    return None


def xid_lines(p):
    return [line for line in p.logtext().splitlines() if " xid=79" in line]


def test_xid_storm_log_bounded_metrics_exact():
    with TempDir() as d:
        ctl = os.path.join(os.path.dirname(d), "control")
        open(ctl, "w").close()

        def control(line):
            with open(ctl, "a") as f:
                f.write(line + "\n")

        k = FakeKubelet(d)
        k.start()
        mport = free_port()
        env = {"LD_LIBRARY_PATH": kt.MOCK_NVML_DIR, "KDEV_MOCK_NVML_TOPOLOGY": kt.H100_TOPO,
               "KDEV_MOCK_NVML_CONTROL": ctl}
        p = Plugin(d, CONFIG, extra=("--cdi-dir", os.path.join(os.path.dirname(d), "cdi"),
                                     "--metrics-address", "127.0.0.1:%d" % mport), env=env)
        try:
            wait_for(lambda: k.count("nvidia.com/gpu") >= 1, what="registration")
            wait_for(lambda: 'msg="serving metrics"' in p.logtext(), what="metrics")
            control("xid %s 79" % GPU)
            control("xid %s 79" % GPU)
            wait_for(lambda: len(xid_lines(p)) >= 2, what="the two single XIDs logged")
            t_window = time.monotonic()  # the window opened shortly before
            time.sleep(0.5)
            control("xid-storm %s 79 %d %d" % (GPU, STORM, RATE))
            labels = 'event="xid",xid="79"'
            name = "kdev_gpu_health_events_total"
            # every event counted (the storm takes 10 s at its rate)
            wait_for(lambda: metric(mport, name, labels) == STORM + 2, timeout=25,
                     interval=0.2, what="the XID counter reaching %d" % (STORM + 2))
            storm_end = time.monotonic() - t_window
            # the storm must have ended well inside the third window, or the
            # count of windows below would be a race
            assert storm_end < 3 * WINDOW_S - 1.0, storm_end
            # the third window's line (its end is w0 + 15 s)
            wait_for(lambda: len(xid_lines(p)) >= 5, timeout=3 * WINDOW_S - storm_end + 5,
                     interval=0.1, what="the third window's repeat line")
            time.sleep(1.0)  # nothing more may come
            lines = xid_lines(p)
            assert len(lines) == 5, "%d lines with xid=79:\n%s" % (len(lines),
                                                                 "\n".join(lines[:10]))
            assert ('level=warn msg="GPU unhealthy" uuid=%s xid=79 reason="critical XID 79" '
                    'devices=1' % GPU) in lines[0], lines[0]
            assert lines[1].endswith('level=info msg="GPU still unhealthy; quiet period '
                                     'restarted" uuid=%s xid=79 reason="critical XID 79"'
                                     % GPU), lines[1]
            counts = []
            for line in lines[2:]:
                m = REPEAT.search(line)
                assert m, line
                assert m.group(3) == GPU and m.group(1) == m.group(4), line
                # a window is 5 s; its line comes when the monitor's timer runs
                assert WINDOW_S <= float(m.group(2)) < WINDOW_S + 1.0, line
                counts.append(int(m.group(1)))
            assert sum(counts) == STORM, counts
            assert 2 + sum(counts) == STORM + 2
            assert metric(mport, name, labels) == STORM + 2
            print("storm of %d XIDs: %d log lines with xid=79 (repeat counts %s), counter %d"
                  % (STORM, len(lines), counts, STORM + 2))
        finally:
            assert p.stop() == 0
            k.stop()


if __name__ == "__main__":
    kt.run_tests([test_xid_storm_log_bounded_metrics_exact])

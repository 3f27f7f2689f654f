"""Soak: many kubelet restarts in a row against one kdev-plugin.

Each restart stops the grpcio fake kubelet, deletes every socket in the
directory (the plugin's too, as kubelet does) and serves kubelet.sock again;
every 5th restart is a double one (twice within a few ms). After each burst
the last kubelet instance must get exactly one Register from the plugin; the
plugin's open file descriptors (/proc/PID/fd) must stay the same after a
warm-up, and its RSS growth is printed and, in the build without sanitizers,
bounded.

KDEV_SOAK_RESTARTS (default 500, ~15 s) sets the number of bursts; run it
longer outside ctest (its limit is 300 s a test), e.g. 20000 bursts in about
10 minutes (~28 ms a burst on a 2-core machine):
  KDEV_BUILD_DIR=$PWD/build KDEV_SOAK_RESTARTS=20000 \
    /usr/bin/python3 tests/integration/soak_kubelet_restarts.py
KDEV_SOAK_RSS_KIB (default 512) is the RSS bound in KiB.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kdevtest as kt  # noqa: E402
from kdevtest import FakeKubelet, Plugin, TempDir, NULL_CONFIG, wait_for  # noqa: E402
from kdevtest import fd_count, rss_kib, sanitized  # noqa: E402

RES = "example.com/null"
SOCK = "kdev-example.com_null.sock"
RESTARTS = int(os.environ.get("KDEV_SOAK_RESTARTS") or 500)
RSS_BOUND_KIB = int(os.environ.get("KDEV_SOAK_RSS_KIB") or 512)
WARMUP = 20



class CountingKubelet(FakeKubelet):
    """FakeKubelet that counts Register calls per served instance."""

    def __init__(self, directory):
        super().__init__(directory)
        self.generation = 0
        self.per_gen = {}

    def start(self):
        with self.lock:
            self.generation += 1
            gen = self.generation
        # Each served instance counts the calls it received itself: a call
        # that reached an instance which the test stopped a moment later is
        # that instance's, whatever the generation is by the time its
        # handler runs.
        super().start(register=lambda req, context: self._register_gen(gen, req, context))

    def _register_gen(self, gen, req, context):
        # An instance the test already stopped dials no plugin back (its
        # late handler would otherwise take the plugin's "kubelet
        # connection" of the next instance's registration).
        r = super()._register(req, context, alive=lambda: self.current(gen))
        with self.lock:
            self.per_gen[gen] = self.per_gen.get(gen, 0) + 1
        return r

    def current(self, gen):
        with self.lock:
            return self.generation == gen and self.server is not None

    def gen_count(self, gen):
        with self.lock:
            return self.per_gen.get(gen, 0)




def test_kubelet_restart_soak():
    with TempDir() as d:
        k = CountingKubelet(d)
        k.start()
        p = Plugin(d, NULL_CONFIG, extra=("--log-level", "info"))
        pid = p.proc.pid
        try:
            wait_for(lambda: k.gen_count(1) == 1, what="first registration")
            final_gens = []     # the last instance of each burst: exactly one Register
            middle_gens = []    # the first instance of a double restart: 0 or 1
            base_fds = base_rss = None
            fd_waits = 0
            start = time.monotonic()
            for i in range(RESTARTS):
                k.restart()
                if i % 5 == 4:  # kubelet restarted twice within a few ms
                    middle_gens.append(k.generation)
                    k.restart()
                gen = k.generation
                final_gens.append(gen)
                wait_for(lambda: k.gen_count(gen) >= 1,
                         what="registration after restart %d" % (i + 1))
                if i + 1 == WARMUP:
                    time.sleep(0.3)  # let the old streams' connections close
                    base_fds, base_rss = fd_count(pid), rss_kib(pid)
                elif base_fds is not None:
                    # Old connections close asynchronously: the count must come
                    # back to the baseline, and never go above it for long.
                    if fd_count(pid) != base_fds:
                        fd_waits += 1
                        wait_for(lambda: fd_count(pid) == base_fds, timeout=5,
                                 what="fd count back to %d after restart %d (now %d)"
                                 % (base_fds, i + 1, fd_count(pid)))
                if i % 100 == 99:
                    time.sleep(0.3)  # a late duplicate Register would show now
                    assert k.gen_count(gen) == 1, \
                        "restart %d: %d registrations" % (i + 1, k.gen_count(gen))
            elapsed = time.monotonic() - start
            time.sleep(0.5)
            end_fds, end_rss = fd_count(pid), rss_kib(pid)
            bad = [(g, k.gen_count(g)) for g in final_gens if k.gen_count(g) != 1]
            assert not bad, "bursts whose kubelet got != 1 registration: %s" % bad[:20]
            mid = [k.gen_count(g) for g in middle_gens]
            assert all(c <= 1 for c in mid), mid
            total = sum(k.per_gen.values())
            print("%d restart bursts (%d double) in %.1fs (%.1f ms each); %d registrations, "
                  "%d with the first kubelet of a double restart; fds %d -> %d (%d waits for "
                  "closing); RSS %d KiB -> %d KiB (%+d KiB after %d warm-up restarts)"
                  % (RESTARTS, len(middle_gens), elapsed, 1000 * elapsed / RESTARTS, total,
                     sum(mid), base_fds, end_fds, fd_waits, base_rss, end_rss,
                     end_rss - base_rss, WARMUP), flush=True)
            assert total == 1 + RESTARTS + sum(mid), total
            assert end_fds == base_fds, (base_fds, end_fds)
            # The plugin still serves: the last kubelet got the device list.
            wait_for(lambda: k.updates.get(RES), what="ListAndWatch")
            assert k.updates[RES][-1] == [("null::%d" % j, "Healthy") for j in range(4)]
            assert os.path.exists(os.path.join(d, SOCK))
            assert p.proc.poll() is None
            if sanitized() or kt.WRAP:
                print("RSS bound not asserted (sanitizer or wrapped build)")
            else:
                assert end_rss - base_rss < RSS_BOUND_KIB, \
                    "RSS grew by %d KiB (bound %d KiB)" % (end_rss - base_rss, RSS_BOUND_KIB)
        finally:
            assert p.stop() == 0
            k.stop()


if __name__ == "__main__":
    if not os.path.exists(os.path.join(kt.BUILD_DIR, "kdev-plugin")):
        print("kdev-plugin is not built in", kt.BUILD_DIR)
        sys.exit(1)
    if RESTARTS < WARMUP + 1:
        print("KDEV_SOAK_RESTARTS must be > %d" % WARMUP)
        sys.exit(1)
    kt.run_tests([test_kubelet_restart_soak])

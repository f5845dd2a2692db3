"""A simulated asynchronous device on an exact virtual clock (`SimDevice`, `ticks`) — lessons 01 and 05."""
import time as _time



# ------------------------------------------------------------------------------------------------
# A simulated asynchronous device on a virtual clock (lessons 01 and 05).

TICK = 2.0 ** -20  # seconds; all simulated times are whole ticks, so sums and differences are exact


def ticks(seconds):
    """`seconds` rounded to whole ticks (the simulator's exact unit), as seconds."""
    return round(seconds / TICK) * TICK


class SimDevice:
    """An asynchronous device whose truth the grader knows exactly.

    `work(cost)` enqueues `cost` seconds of device work and returns after `host` seconds of host
    time (a kernel launch), like a CUDA call; `sync()` waits: the host clock jumps to the end of
    the queue. While the device is `installed` (a `with` block) the submission's clocks
    (time.perf_counter & co., see driver.py) read the host's virtual time, so a window timed with
    a sync before each read measures exactly the work enqueued in it, and an unsynced one measures
    launch overhead. All times are whole `TICK`s: durations rebuilt from clock values are exact.

    Events (in the active trace): `step {id}` + `step_done {id}` per `work()` call tagged as a step
    (`variant` optional), `work` per `queue()` (device work outside any call), `sync` per `sync()`.
    """

    def __init__(self, ctx, host=16 * TICK, base=None):
        self.ctx = ctx
        self.host = ticks(host)
        # what the clocks read at time 0: each family's real reading now (whole ticks, so still
        # exact), so no clock tells the simulated device from the real one (red team 26 told them
        # apart by `time.time() < 1e9`: one base for every family, perf_counter's); lesson 01
        # hands it the real perf_counter's reading of its own
        self.base = ticks(_time.perf_counter() if base is None else base)
        self.epoch = ticks(_time.time())
        self.epoch_ns = _time.time_ns()  # `time_ns`: whole nanoseconds (1.8e18: past float's exactness)
        self.now = 0.0  # host time since the device was made
        self.queue_end = 0.0  # when the device finishes what was enqueued
        self.calls = 0  # work() calls
        self.syncs = 0

    def work(self, cost, *, step=True, variant=None, block=0.0):
        """Enqueue `cost` s of device work after `block` s of blocking host work (a compile)."""
        k = self.calls
        self.calls += 1
        if step:
            self.ctx.event("step", id=k, **({"variant": variant} if variant else {}))
        self.now += ticks(block)
        start = max(self.now, self.queue_end)
        self.queue_end = start + ticks(cost)
        self.now += self.host
        if step:
            self.ctx.event("step_done", id=k)
        return k

    def queue(self, cost):
        """Device work the grader enqueued before handing over (inputs and weights still being
        copied, as after `.to(device)` on a GPU): a `work` event, no call of anything. A clock read
        after it without a `sync()` between is not synced (measurement.rs)."""
        self.ctx.event("work")
        start = max(self.now, self.queue_end)
        self.queue_end = start + ticks(cost)
        self.now += self.host

    def sync(self):
        self.syncs += 1
        self.ctx.event("sync")
        self.now = max(self.now, self.queue_end)

    def idle(self):
        """Let the device drain (between probes), without a `sync` event."""
        self.now = max(self.now, self.queue_end)

    def __enter__(self):
        self.ctx.virtual_now = self.read
        return self

    def read(self, family=None, ns=False):
        """What a clock of `family` reads now (`ns`: its `_ns` form, whole nanoseconds)."""
        if family == "time":
            return self.epoch_ns + int(round(self.now * 1e9)) if ns else self.epoch + self.now
        secs = self.base + self.now
        return int(round(secs * 1e9)) if ns else secs

    def __exit__(self, *exc):
        self.ctx.virtual_now = None
        return False


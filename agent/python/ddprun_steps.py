"""ddprun's step counter for Python workers: one opt-in line per step.

    import ddprun_steps

    for batch in loader:
        ...
        ddprun_steps.step()

Each call counts one training step and writes the count to the file
DDPRUN_STEP_FILE names (ddprun sets it for each worker that has a log dir).
ddprun reads the counts every second, computes each rank's step rate, warns
about a rank that runs slower than the median by --straggler_factor for
--straggler_time seconds, and reports the rates to the rendezvous
(`ddprun-rendezvous --status`). A call also touches the hang watchdog's
heartbeat file (DDPRUN_WATCHDOG_FILE, at most every 0.1 s), so a script that
calls it needs no other heartbeat. Outside ddprun it only counts; it never
raises.
"""
import os as _os
import time as _time

_count = 0
_fd = None
_last_touch = 0.0


def count():
    """Steps counted so far."""
    return _count


def step(n=1):
    """Counts `n` more steps (one by default)."""
    global _count, _fd, _last_touch
    _count += n
    try:
        if _fd is None:
            path = _os.environ.get("DDPRUN_STEP_FILE")
            if not path:
                _fd = -1
            else:
                _fd = _os.open(path, _os.O_WRONLY | _os.O_CREAT, 0o644)
        if _fd >= 0:
            # Counts only grow: the new text always covers the old one.
            _os.pwrite(_fd, b"%d\n" % _count, 0)
        beat = _os.environ.get("DDPRUN_WATCHDOG_FILE")
        now = _time.monotonic()
        if beat and now - _last_touch >= 0.1:
            _last_touch = now
            with open(beat, "a"):
                pass
            _os.utime(beat)
    except Exception:  # noqa: BLE001 - the worker must run regardless
        pass

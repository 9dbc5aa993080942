"""ddprun's step counter for Python workers: one opt-in line per step.

    import ddprun_steps

    for batch in loader:
        ...
        ddprun_steps.step(loss=loss.item())

Each call counts one training step and writes the count to the file
DDPRUN_STEP_FILE names (ddprun sets it for each worker that has a log dir).
ddprun reads the counts every second, computes each rank's step rate, warns
about a rank that runs slower than the median by --straggler_factor for
--straggler_time seconds, and reports the rates to the rendezvous
(`ddprun-rendezvous --status`, and the live view of `--http_port`).

Keyword arguments are scalars the live view and /metrics show beside the
rank's rate (the last value of each): `loss=0.31`, `samples_per_s=812.0`.
At most 8 names of 1..32 characters of [A-Za-z0-9_.:/-]; other names, a
ninth one and values that are not finite numbers are ignored.
`total_steps=N` (or total(N)) says how many steps this process will count
in all: the live view then shows an ETA.

A call also touches the hang watchdog's heartbeat file
(DDPRUN_WATCHDOG_FILE, at most every 0.1 s), so a script that calls it needs
no other heartbeat. Outside ddprun it only counts; it never raises.
"""
import math as _math
import os as _os
import re as _re
import time as _time

_count = 0
_fd = None
_last_touch = 0.0
_written = 0
_total = 0
_scalars = {}
_NAME = _re.compile(r"[A-Za-z0-9_.:/-]{1,32}\Z")
_MAX_SCALARS = 8


def count():
    """Steps counted so far."""
    return _count


def total(n):
    """This process will count `n` steps in all (0: not known)."""
    global _total
    try:
        _total = max(0, int(n))
    except Exception:  # noqa: BLE001 - the worker must run regardless
        pass


def _note_scalars(scalars):
    for name, value in scalars.items():
        try:
            value = float(value)
        except Exception:  # noqa: BLE001 - a tensor that will not convert
            continue
        if not _NAME.match(name) or not _math.isfinite(value):
            continue
        if name in _scalars or len(_scalars) < _MAX_SCALARS:
            _scalars[name] = value


def _text():
    # agent/watch/step_file.h: the count, the total, the scalars,
    # padded to the length written before so that the new text covers the
    # old one in one write.
    global _written
    lines = ["%d" % _count]
    if _total > 0:
        lines.append("total_steps %d" % _total)
    lines.extend("%s %.9g" % (k, v) for k, v in _scalars.items())
    text = "\n".join(lines) + "\n"
    if len(text) < _written:
        text += " " * (_written - len(text))
    _written = len(text)
    return text.encode()


def step(n=1, total_steps=None, **scalars):
    """Counts `n` more steps (one by default); keyword arguments are the
    step's scalars (loss=..., samples_per_s=...), total_steps the count
    this process will reach."""
    global _count, _fd, _last_touch
    _count += n
    try:
        if total_steps is not None:
            total(total_steps)
        if scalars:
            _note_scalars(scalars)
        if _fd is None:
            path = _os.environ.get("DDPRUN_STEP_FILE")
            if not path:
                _fd = -1
            else:
                _fd = _os.open(path, _os.O_WRONLY | _os.O_CREAT, 0o644)
        if _fd >= 0:
            _os.pwrite(_fd, _text(), 0)
        beat = _os.environ.get("DDPRUN_WATCHDOG_FILE")
        now = _time.monotonic()
        if beat and now - _last_touch >= 0.1:
            _last_touch = now
            with open(beat, "a"):
                pass
            _os.utime(beat)
    except Exception:  # noqa: BLE001 - the worker must run regardless
        pass

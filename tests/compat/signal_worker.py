"""Worker for the signal comparison: writes <COMPAT_OUT>/up_<RANK> once its
SIGTERM handler is installed, records the signal it receives in
<COMPAT_OUT>/sig_<RANK> and exits 0; gives up after 60 s."""
import os
import signal
import sys
import time

out_dir = os.environ["COMPAT_OUT"]
rank = os.environ["RANK"]


def on_signal(signum, frame):
    with open(os.path.join(out_dir, "sig_%s" % rank), "w") as f:
        f.write(str(signum))
    sys.exit(0)


signal.signal(signal.SIGTERM, on_signal)
with open(os.path.join(out_dir, "up_%s" % rank), "w") as f:
    f.write("1")
time.sleep(60)

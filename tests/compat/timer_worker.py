"""torch's FileTimer API as a user's script calls it (torch >= 1.13):
the rank named by TIMER_RANK (default 0) enters `with expires(after=1)` and
sleeps 6 s; the launcher's FileTimer server must kill it (SIGKILL) about a
second in. Other ranks wait in wait_for_peers(). A rank that survives its
sleep writes survived_<rank> into $COMPAT_OUT / $DDPRUN_TEST_OUT."""
import os
import time

from torch.distributed.elastic.timer import FileTimerClient, configure, expires

OUT = os.environ.get("COMPAT_OUT") or os.environ["DDPRUN_TEST_OUT"]
RANK = int(os.environ["RANK"])


def mark(name):
    with open(os.path.join(OUT, "%s_%d" % (name, RANK)), "w") as f:
        f.write(str(time.time()))


def wait_for_peers():
    time.sleep(30)


def main():
    configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
    mark("started")
    if RANK == int(os.environ.get("TIMER_RANK", "0")):
        with expires(after=1):
            time.sleep(6)
        mark("survived")
    else:
        wait_for_peers()


if __name__ == "__main__":
    main()

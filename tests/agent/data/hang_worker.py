"""A Gloo job on CPU for ddprun's stack dumps (tests/agent/stack_dump_*).

Every step touches the watchdog's heartbeat file (DDPRUN_WATCHDOG_FILE),
loads a batch and all-reduces it. Rank HANG_RANK (env; -1 = none) stops in
load_batch at step HANG_STEP for two minutes (HANG_MODE=loader: waits for a
loader thread that stops), so the other ranks wait in all_reduce: the hang
the watchdog must explain. Without a hang the job runs
until <DDPRUN_TEST_OUT>/go exists (rank 0 decides, every rank learns it in
the step's all_reduce), at most MAX_STEPS steps, and exits 0. Each rank
writes <DDPRUN_TEST_OUT>/step_<rank> with its step count as it goes, and
site_<rank> with the file of the `sitecustomize` module it sees; the hanging
rank creates <DDPRUN_TEST_OUT>/hanging as it stops.
"""
import os
import queue
import threading
import time

import torch
import torch.distributed as dist

RANK = int(os.environ["RANK"])
OUT = os.environ["DDPRUN_TEST_OUT"]
HANG_RANK = int(os.environ.get("HANG_RANK", "-1"))
HANG_STEP = int(os.environ.get("HANG_STEP", "2"))
# "sleep": the rank sleeps in load_batch; "loader": its batch comes from a
# loader thread that stops, so its main thread waits in queue.get.
HANG_MODE = os.environ.get("HANG_MODE", "sleep")
_batches = queue.Queue()


def _loader():
    open(os.path.join(OUT, "hanging"), "w").close()
    time.sleep(120)  # LOADER_LINE: the loader thread stops
    _batches.put(None)
MAX_STEPS = int(os.environ.get("MAX_STEPS", "600"))


def heartbeat():
    path = os.environ.get("DDPRUN_WATCHDOG_FILE")
    if path:
        with open(path, "a"):
            pass
        os.utime(path)


def load_batch(step):
    if step == HANG_STEP and RANK == HANG_RANK and HANG_MODE == "loader":
        threading.Thread(target=_loader, daemon=True).start()
        _batches.get()  # GET_LINE: the main thread waits for the loader
    if step == HANG_STEP and RANK == HANG_RANK and HANG_MODE == "sleep":
        open(os.path.join(OUT, "hanging"), "w").close()
        time.sleep(120)  # HANG_LINE: where the odd rank stands
    stop = 1.0 if RANK == 0 and os.path.exists(os.path.join(OUT, "go")) else 0.0
    return torch.tensor([1.0, stop])


def main():
    # Which sitecustomize ran last: ddprun's hook loads the one the
    # interpreter would have found without it (Debian's), under that name.
    try:
        import sitecustomize

        site = getattr(sitecustomize, "__file__", "none")
    except ImportError:
        site = "none"
    with open(os.path.join(OUT, "site_%d" % RANK), "w") as f:
        f.write(site)
    dist.init_process_group("gloo")
    for step in range(MAX_STEPS):
        heartbeat()
        batch = load_batch(step)
        dist.all_reduce(batch)  # WAIT_LINE: where the other ranks wait
        with open(os.path.join(OUT, "step_%d" % RANK), "w") as f:
            f.write(str(step))
        if batch[1].item() > 0:
            break
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

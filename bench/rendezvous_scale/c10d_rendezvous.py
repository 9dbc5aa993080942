"""N simulated agents through torch's c10d dynamic rendezvous, as threads.

Usage: c10d_rendezvous.py N TIMEOUT_S
Prints "c10d N=<n> seconds=<t>" when every agent returned from
next_rendezvous(), or "c10d N=<n> did not finish in <timeout> s" (exit 3).
Same setup as torchrun --rdzv_backend=c10d: a TCPStore on 127.0.0.1 and a
C10dRendezvousBackend per agent; min_nodes = max_nodes = N so the round
completes when the last agent arrives (no last_call wait).
"""
import base64
import os
import pickle
import sys
import threading
import time
from datetime import timedelta

from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
    C10dRendezvousBackend,
)
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousTimeout,
)


def main():
    n = int(sys.argv[1])
    limit = float(sys.argv[2])
    master = TCPStore("127.0.0.1", 0, is_master=True,
                      timeout=timedelta(seconds=limit + 60),
                      wait_for_workers=False)
    port = master.port
    done = []
    errors = []
    lock = threading.Lock()
    ready = threading.Barrier(n + 1)

    def agent():
        try:
            store = TCPStore("127.0.0.1", port, is_master=False,
                             timeout=timedelta(seconds=limit + 60))
            backend = C10dRendezvousBackend(store, "bench")
            handler = DynamicRendezvousHandler.from_backend(
                "bench", store, backend, n, n,
                RendezvousTimeout(join=timedelta(seconds=limit + 60)))
            ready.wait()
            handler.next_rendezvous()
            with lock:
                done.append(time.monotonic())
        except Exception as e:  # reported, not raised: bounded run
            with lock:
                errors.append(repr(e))

    threads = [threading.Thread(target=agent, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    ready.wait()
    start = time.monotonic()
    deadline = start + limit
    while time.monotonic() < deadline:
        with lock:
            if len(done) + len(errors) == n:
                break
        time.sleep(0.05)
    with lock:
        finished, failed = len(done), list(errors)
    if finished == n:
        print(f"c10d N={n} seconds={max(done) - start:.3f}", flush=True)
        os._exit(0)
    # How far the round got: participants in the rendezvous state blob.
    joined = "?"
    try:
        blob = master.get("torch.rendezvous.bench")
        state = pickle.loads(base64.b64decode(blob))
        joined = str(len(state.participants))
    except Exception:  # best effort diagnostics only
        pass
    print(f"c10d N={n} did not finish in {limit:.0f} s "
          f"({finished} of {n} agents done, {joined} in the round, "
          f"{len(failed)} errors"
          f"{': ' + failed[0] if failed else ''})", flush=True)
    os._exit(3)


if __name__ == "__main__":
    main()

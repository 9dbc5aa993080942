"""One rank of the DDP step benchmark, Python side: the same model, batch,
optimizer and timing as ddp_step_bench.cc, with
torch.nn.parallel.DistributedDataParallel over Gloo (env:// init).
run_bench.py also runs it with GLIBC_TUNABLES set to the C++ runtime's malloc
settings (worker/include/ddprun/worker/host_allocator.h)."""
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    warmup, steps, batch = (int(a) for a in sys.argv[1:4])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    ddp = nn.parallel.DistributedDataParallel(net)
    sgd = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))

    def step():
        sgd.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        sgd.step()

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def median(v):
        return sorted(v)[len(v) // 2]

    def timed(sync):
        ms, cpu, flt = [], [], []
        for i in range(warmup + steps):
            dist.barrier()
            f0 = faults()
            c0 = time.process_time()
            t0 = time.perf_counter()
            if sync:
                step()
            else:
                with ddp.no_sync():
                    step()
            t1 = time.perf_counter()
            c1 = time.process_time()
            f1 = faults()
            if i >= warmup:
                flt.append(f1 - f0)
                cpu.append((c1 - c0) * 1000)
                ms.append((t1 - t0) * 1000)
        return median(ms), median(cpu), median(flt)

    sync_ms, sync_cpu, sync_flt = timed(True)
    nosync_ms, nosync_cpu, nosync_flt = timed(False)
    if dist.get_rank() == 0:
        print(json.dumps({"impl": "python", "world": dist.get_world_size(),
                          "step_ms": round(sync_ms, 3),
                          "nosync_ms": round(nosync_ms, 3),
                          "step_cpu_ms": round(sync_cpu, 3),
                          "nosync_cpu_ms": round(nosync_cpu, 3),
                          "step_faults": sync_flt,
                          "nosync_faults": nosync_flt,
                          "threads": torch.get_num_threads(),
                          "malloc_tuned": "glibc.malloc." in
                          os.environ.get("GLIBC_TUNABLES", "")}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

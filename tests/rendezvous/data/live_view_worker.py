"""A small DDP-style worker for the live view's tests: Gloo all-reduces
in a loop, reporting each step to ddprun (ddprun_steps.step(loss=...,
samples_per_s=..., total_steps=...)). Runs until its total or until it is
stopped."""
import os
import time

import torch
import torch.distributed as dist

import ddprun_steps

TOTAL = int(os.environ.get("LIVE_VIEW_TOTAL_STEPS", "100000"))
STEP_S = float(os.environ.get("LIVE_VIEW_STEP_S", "0.05"))
BATCH = 32

dist.init_process_group("gloo")
world = dist.get_world_size()
t = torch.ones(16)
last = time.monotonic()
for step in range(TOTAL):
    dist.all_reduce(t)
    time.sleep(STEP_S)
    now = time.monotonic()
    loss = 2.0 / (1.0 + 0.01 * step)
    ddprun_steps.step(loss=loss, samples_per_s=BATCH * world / (now - last),
                      total_steps=TOTAL)
    last = now
dist.destroy_process_group()

#!/usr/bin/env python3
"""Runs a Python twin (twins.py) of a bench/model_step C++ training step.

  twin_bench.py --trainer survival [--device cpu|cuda[:N]]
      [--precision fp32|bf16|fp16] [--warmup 5] [--steps 20] [--threads 1]
      [--adam-foreach default|off]
      -> one JSON line, the fields of model_step_bench's
  twin_bench.py --trainer T --compare FILE [--device D]
      -> loads the weights and the batch model_step_bench --export wrote,
         runs as many steps from seed 1 and compares losses, parameters and
         buffers with the C++ ones; exit 1 when they differ
Bad input: one line on stderr, exit 2."""
import argparse
import contextlib
import json
import sys
import time

import torch

from twins import STEPS, TRAINERS, StepPrecision, TwinStep

def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return "cpu"


def bench(args, device):
    torch.manual_seed(args.seed)
    step = STEPS[args.trainer](device, args.precision)
    params = list(step.model.parameters())
    buffers = list(step.model.buffers())
    first_loss = last_loss = 0.0
    for _ in range(args.warmup):
        first_loss = step.step()
    _synchronize(device)
    times = []
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        last_loss = step.step()
        _synchronize(device)
        times.append(time.perf_counter() - t0)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    samples = args.steps * step.samples_per_step
    return {"side": "python", "trainer": args.trainer, "device": str(device),
            "device_name": _device_name(device), "precision": args.precision,
            "torch_version": torch.__version__, "threads": torch.get_num_threads(),
            "adam_foreach": args.adam_foreach,
            "params": sum(p.numel() for p in params), "param_tensors": len(params),
            "param_shapes": [list(p.shape) for p in params],
            "buffer_shapes": [list(b.shape) for b in buffers],
            "samples_per_step": step.samples_per_step, "warmup": args.warmup,
            "steps": args.steps, "seconds": wall, "samples_per_s": samples / wall,
            "ms_per_step": 1e3 * wall / args.steps,
            "median_step_ms": 1e3 * sorted(times)[len(times) // 2],
            "cpu_ms_per_step": 1e3 * cpu / args.steps,
            "first_loss": first_loss, "last_loss": last_loss}


def _max_abs_diff(ours, theirs):
    return max([(a.detach().cpu().double() - b.double()).abs().max().item()
                for a, b in zip(ours, theirs) if a.numel()] + [0.0])


def _load_in_order(name, tensors, values):
    ours = [list(t.shape) for t in tensors]
    theirs = [list(v.shape) for v in values]
    if ours != theirs:
        for i, (a, b) in enumerate(zip(ours, theirs)):
            if a != b:
                raise AssertionError(f"{name} {i}: twin shape {a}, C++ shape {b}")
        raise AssertionError(f"twin has {len(ours)} {name} tensors, C++ {len(theirs)}")
    with torch.no_grad():
        for t, v in zip(tensors, values):
            t.copy_(v)


def compare(args, device):
    """Runs the twin from the C++ weights and batch; returns the report."""
    # Our own file from this run. torch::pickle_save tags typed containers
    # (torch.jit._pickle.restore_type_tag), which weights_only loading (the
    # default from torch 2.6) refuses.
    ref = torch.load(args.compare, weights_only=False)
    if ref["trainer"] != args.trainer:
        raise AssertionError(f"{args.compare} is an export of {ref['trainer']}, "
                             f"not {args.trainer}")
    batch = [b.to(device) for b in ref["batch"]]
    step = STEPS[args.trainer](device, args.precision, batch)
    params, buffers = list(step.model.parameters()), list(step.model.buffers())
    _load_in_order("parameter", params, ref["params"])
    _load_in_order("buffer", buffers, ref["buffers"])
    torch.manual_seed(1)
    losses = [step.step() for _ in ref["losses"]]
    loss_diff = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses, ref["losses"]))
    param_diff = _max_abs_diff(params, ref["params_after"])
    buffer_diff = _max_abs_diff(buffers, ref["buffers_after"])
    # Same ops on the same data: on CPU the differences are rounding only.
    # cuDNN may pick other algorithms (and TF32) per process, hence the
    # looser bound there. A different architecture, loss or optimizer
    # setting moves the first loss or the updated weights by far more.
    tol = 1e-2 if device.type == "cuda" else 1e-4
    report = {"trainer": args.trainer, "steps": len(losses), "losses": losses,
              "cpp_losses": list(ref["losses"]), "max_loss_rel_diff": loss_diff,
              "max_param_abs_diff": param_diff, "max_buffer_abs_diff": buffer_diff,
              "tolerance": tol}
    report["ok"] = loss_diff <= tol and param_diff <= tol and buffer_diff <= tol
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trainer", required=True, choices=TRAINERS)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--adam-foreach", choices=("default", "off"), default="default",
                    help="off: Adam one parameter at a time, as LibTorch's (torch "
                         "defaults to the multi-tensor Adam on CUDA)")
    ap.add_argument("--compare", metavar="FILE",
                    help="check the twin against model_step_bench --export FILE")
    args = ap.parse_args()
    try:
        device = torch.device(args.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"--device {args.device}: this torch sees no CUDA device")
        if args.steps < 1 or args.warmup < 0 or args.threads < 0:
            raise ValueError("--steps must be >= 1, --warmup and --threads >= 0")
        StepPrecision(args.precision, device)
    except (ValueError, RuntimeError) as e:
        print(f"twins.py: error: {e}", file=sys.stderr)
        return 2
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    TwinStep.adam_foreach = False if args.adam_foreach == "off" else None
    if args.compare:
        try:
            report = compare(args, device)
        except AssertionError as e:
            print(json.dumps({"trainer": args.trainer, "ok": False, "error": str(e)}))
            return 1
        print(json.dumps(report))
        return 0 if report["ok"] else 1
    print(json.dumps(bench(args, device)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

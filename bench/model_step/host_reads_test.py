#!/usr/bin/env python3
"""ctest bench/model_step/twin_host_reads: a warm twin step reads back from
the device what the C++ step reads, no more (issue 44, finding 4).

The C++ survival and segmentation steps read one value a step, the loss
they return (bench/model_step/{survival,segmentation}_step.cc): the
warm-started batch norm keeps its batch count on the host and the Cox loss
keeps its event count and tie groups on the device (examples/frame/
norm_layer.cc, examples/survival/cox_loss.cc). Their twins did not (one
num_batches_tracked.item() per norm layer per step, the events and the tie
groups read back in the loss), which slowed the Python side of every
C++/Python ratio. Counted as the twin code's own calls of Tensor.item()
and Tensor.tolist() (torch's Adam reads its CPU step counters with
.item(); LibTorch's keeps them as integers: not a device read, not
counted) over 3 steps after 12 warm ones (past the 9 batches whose count
the norm still reads), on the CPU in fp32. The ddpm and vqa twins' counts
are printed, not checked.

  host_reads_test.py        exit 0 pass, 1 fail, 77 no torch"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKED = {"survival": 1, "segmentation": 1}  # host reads per step, as C++


def host_reads(trainer, steps=3, warm=12):
    import torch
    import twins
    torch.manual_seed(1)
    step = twins.STEPS[trainer](torch.device("cpu"), "fp32")
    for _ in range(warm):
        step.step()
    count = [0]
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "tolist")}

    def counting(original):
        def read(self, *args, **kwargs):
            if sys._getframe(1).f_code.co_filename == twins.__file__:
                count[0] += 1
            return original(self, *args, **kwargs)
        return read

    try:
        for name, original in originals.items():
            setattr(torch.Tensor, name, counting(original))
        for _ in range(steps):
            step.step()
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    return count[0] / steps


def main():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("no torch: skipped")
        return 77
    sys.path.insert(0, HERE)
    failures = []
    for trainer in ("survival", "segmentation", "vqa", "ddpm"):
        reads = host_reads(trainer)
        want = CHECKED.get(trainer)
        verdict = "" if want is None else (" (C++: %d)" % want)
        print("%s: %.1f host reads per step%s" % (trainer, reads, verdict))
        if want is not None and reads != want:
            failures.append(trainer)
    if failures:
        print("FAIL: %s read more than the C++ step" % ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

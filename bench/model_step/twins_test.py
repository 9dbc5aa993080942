#!/usr/bin/env python3
"""ctest bench/model_step/check_detects_drift: twin_bench.py --compare must fail
when a twin drifts from its C++ model in ways a parameter count cannot see.

Against one real model_step_bench --export of the survival step: the
unchanged twin matches; a twin without the warm-started batch-norm momentum
(same parameters, other running statistics), one with another learning
rate (same forward, other updated weights) and one with another width
(other shapes) each fail.

  twins_test.py --bin-dir BUILD/bin        exit 0 pass, 1 fail, 77 no torch"""
import argparse
import os
import subprocess
import sys
import tempfile
from types import SimpleNamespace
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("no torch: skipped")
        return 77
    sys.path.insert(0, HERE)
    import twin_bench
    import twins

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "survival.pt")
        subprocess.run([os.path.join(a.bin_dir, "model_step_bench"), "--trainer", "survival",
                        "--steps", "2", "--export", path], check=True)
        args = SimpleNamespace(trainer="survival", compare=path, precision="fp32")
        device = torch.device("cpu")

        def verdict(label, expect_ok):
            try:
                r = twin_bench.compare(args, device)
                ok = r["ok"]
                detail = (f"loss {r['max_loss_rel_diff']:.1e}, weights "
                          f"{r['max_param_abs_diff']:.1e}, buffers "
                          f"{r['max_buffer_abs_diff']:.1e}")
            except AssertionError as e:
                ok, detail = False, str(e)
            print(f"{label}: {'match' if ok else 'differs'} ({detail})")
            if ok != expect_ok:
                failures.append(label)

        verdict("unchanged twin", True)
        with mock.patch.object(twins, "_warm_momentum", lambda bn: None):
            verdict("plain batch-norm momentum", False)
        adam = torch.optim.Adam
        with mock.patch.object(twins.torch.optim, "Adam",
                               lambda params, lr, **kw: adam(params, lr=lr * 1.5, **kw)):
            verdict("learning rate x1.5", False)
        net = twins.ResNet3d
        with mock.patch.object(twins, "ResNet3d", lambda: net(width=4)):
            verdict("width 4 instead of 8", False)
    if failures:
        print(f"FAILED: the check did not see: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A worker for python_elastic_test.py's "drop" case: 4 ranks all-reduce
256 KiB a step through ddprun_elastic's run_step; rank 1 exits at the start
of step DIE_AT while the others are inside that step's all-reduce. No rank is
replaced (the stand-in runs with --max_replacements 0), so every survivor
re-forms, waits the heal timeout for a generation that never comes, and
gives up, printing when. A survivor that kept its failed group's connections
open while waiting would hold the one peer that is blocked on it (not on
the dead rank) for the whole heal timeout, and that peer would give up one
heal timeout after the others.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

import ddprun_elastic

DIE_AT = 20


def main():
    elastic = ddprun_elastic.Elastic(backend="gloo")
    progress = {"step": 0}
    elastic.track("progress", progress)
    elastic.start()
    data = torch.ones(1 << 16)
    try:
        while progress["step"] < 10 * DIE_AT:
            step = progress["step"] + 1

            def compute():
                if elastic.rank == 1 and step == DIE_AT:
                    os._exit(9)
                dist.all_reduce(data)
                data.fill_(1)

            def apply(_):
                progress["step"] = step

            elastic.run_step(step, compute, apply)
    except ddprun_elastic.ElasticError as error:
        print("rank %d gave up at %.3f: %s" % (elastic.rank, time.time(),
                                              error), flush=True)
        return 3
    print("rank %d finished" % elastic.rank, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""torch.distributed.launch's worker without --use_env (torch's
bin/test_script_local_rank.py, rewritten): --local_rank (or --local-rank)
is required and must equal LOCAL_RANK."""
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", "--local-rank", type=int, required=True)
args = parser.parse_args()
if args.local_rank != int(os.environ["LOCAL_RANK"]):
    raise SystemExit("--local_rank %d but LOCAL_RANK %s" %
                     (args.local_rank, os.environ["LOCAL_RANK"]))
print("End execution")

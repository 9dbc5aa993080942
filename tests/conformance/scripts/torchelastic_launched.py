"""torch's bin/test_script_is_torchelastic_launched.py, rewritten: writes
torch.distributed.is_torchelastic_launched() to --out-file."""
import argparse

import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--out-file", "--out_file", required=True)
args = parser.parse_args()
with open(args.out_file, "w") as f:
    f.write(str(dist.is_torchelastic_launched()))

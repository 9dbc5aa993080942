"""Worker of torch's launcher tests (their bin/test_script.py, rewritten):
every variable an elastic agent must give its workers has to be present,
then the worker touches a file named after its RANK, or raises with
--fail. Imports nothing from torch."""
import argparse
import os
import pathlib

REQUIRED = ["LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
            "LOCAL_WORLD_SIZE", "WORLD_SIZE", "ROLE_WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
            "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
            "OMP_NUM_THREADS", "TEST_SENTINEL_PARENT",
            "TORCHELASTIC_ERROR_FILE"]

parser = argparse.ArgumentParser()
parser.add_argument("--fail", action="store_true")
parser.add_argument("--touch-file-dir", "--touch_file_dir", dest="dir")
args = parser.parse_args()
missing = [k for k in REQUIRED if k not in os.environ]
if missing:
    raise SystemExit("missing variables: %s" % " ".join(missing))
for k in REQUIRED:
    print("%s = %s" % (k, os.environ[k]))
if os.environ["TEST_SENTINEL_PARENT"] != "FOOBAR":
    raise SystemExit("the launcher's environment did not reach the worker")
if args.fail:
    raise RuntimeError("raising exception since --fail flag was set")
path = os.path.join(args.dir, os.environ["RANK"])
pathlib.Path(path).touch()
print("Success, created %s" % path)

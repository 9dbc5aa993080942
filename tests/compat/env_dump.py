"""Worker for the side-by-side tests: records its environment and argv.

Writes <COMPAT_OUT>/env_<RANK>_<pid>.json and exits 0. Imports nothing from
torch so that it starts in milliseconds under either launcher.
"""
import json
import os
import sys

out_dir = os.environ["COMPAT_OUT"]
path = os.path.join(out_dir, "env_%s_%d.json" % (os.environ.get("RANK", "x"),
                                                os.getpid()))
with open(path + ".tmp", "w") as f:
    json.dump({"env": dict(os.environ), "argv": sys.argv[1:]}, f)
os.rename(path + ".tmp", path)

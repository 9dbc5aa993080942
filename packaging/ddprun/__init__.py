"""ddprun: a C++ torchrun replacement. This package carries the launcher
binaries (bin/, with their libraries in lib/); the console scripts ddprun,
ddprun-launch, ddprun-accelerate, ddprun-deepspeed and ddprun-rendezvous,
and `python -m ddprun`, run them. It imports no torch: the workers use the
torch of their interpreter (PYTHON_EXEC, else python3)."""
import os

from ddprun._version import __version__

BIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")

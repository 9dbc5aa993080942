"""`python -m ddprun ...` is `ddprun ...` (torchrun's command line)."""
from ddprun._launcher import ddprun

ddprun()

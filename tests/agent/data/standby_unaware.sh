#!/bin/sh
# A program that does not know ddprun's standby protocol
# (--standby_workers): started as a standby (DDPRUN_STANDBY_FD set) it notes
# whether it had a rank to act as, then exits 3 at once; as a rank it says
# its rank after a while and exits 0.
if [ -n "$DDPRUN_STANDBY_FD" ]; then
  echo "standby pid $$ RANK=${RANK-unset} MASTER_PORT=${MASTER_PORT-unset}" \
    >> "$DDPRUN_TEST_OUT/standby.txt"
  exit 3
fi
sleep 2
echo "rank $RANK done"

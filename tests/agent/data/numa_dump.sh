#!/bin/sh
# Writes what the kernel says of this worker's binding to
# $DDPRUN_TEST_OUT/numa_<LOCAL_RANK>: its Cpus_allowed_list and
# Mems_allowed_list (/proc/<pid>/status) and the memory policy of its first
# mapping (/proc/<pid>/numa_maps), <pid> being this shell: the worker.
out="$DDPRUN_TEST_OUT/numa_$LOCAL_RANK"
{
  grep -E '^(Cpus|Mems)_allowed_list' "/proc/$$/status"
  echo "policy: $(head -1 "/proc/$$/numa_maps" | cut -d' ' -f2)"
} > "$out.tmp" && mv "$out.tmp" "$out"

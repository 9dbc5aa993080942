#!/bin/sh
# Lines for --duplicate_stdout_filters / --duplicate_stderr_filters.
echo "epoch 1 loss,x=3 rank $RANK"
echo "loss 1.0 rank $RANK"
echo "acc 0.5 rank $RANK"
echo "noise rank $RANK"
echo "Error: disk full rank $RANK" >&2
echo "warning rank $RANK" >&2

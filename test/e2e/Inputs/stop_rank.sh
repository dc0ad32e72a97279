#!/bin/bash
# stop_rank.sh SIGNAL RANK PATTERN: sends SIGNAL to the cleave process of MPI
# rank RANK whose command line matches PATTERN, once it exists (up to 20 s)
# and has had a second to start training.
sig=$1; rank=$2; pattern=$3
for _ in $(seq 200); do
  for pid in $(pgrep -f "$pattern"); do
    if tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
      sleep 1
      kill -s "$sig" "$pid" && exit 0
    fi
  done
  sleep 0.1
done
echo "no rank $rank of '$pattern' found" >&2
exit 1

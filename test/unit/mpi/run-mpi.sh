#!/bin/sh
# run-mpi.sh MPIRUN RANKS PROGRAM [ARGS...]: runs PROGRAM as RANKS MPI ranks,
# with more ranks than cores allowed and, when run as root, root allowed.
mpirun=$1
ranks=$2
shift 2
if [ "$(id -u)" = 0 ]; then
  exec "$mpirun" --oversubscribe --bind-to none --allow-run-as-root \
    -np "$ranks" "$@"
fi
exec "$mpirun" --oversubscribe --bind-to none -np "$ranks" "$@"

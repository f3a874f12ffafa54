/*
 * Preloaded before libfaketime into the clock-step cluster (scripts/clusters.sh).
 *
 * libfaketime marks the calling thread "do not fake" while it waits inside its own select(),
 * and clears the mark when the call returns. PostgreSQL 15's postmaster waits in select() and
 * forks background workers from the signal handler that interrupts the wait: each child starts
 * with the mark set and never sees the fake clock, while client backends (forked from the main
 * loop) do. idgen's registry writer is such a worker. This select() waits without libfaketime,
 * so every process of the cluster reads the same clock.
 */
#define _GNU_SOURCE
#include <sys/select.h>
#include <sys/syscall.h>
#include <unistd.h>

int select(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
    return (int) syscall(SYS_select, nfds, readfds, writefds, exceptfds, timeout);
}

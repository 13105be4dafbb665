/* cpus.h - how many CPUs this process may use (not "threads.h": that is C11's).
 *
 * Not the number of cores in the machine: the CPUs of the affinity mask
 * (taskset, cpusets), capped by a cgroup CPU quota (containers: docker
 * --cpus, systemd CPUQuota=), rounded up. Pure queries: they read /proc and
 * /sys and change nothing. The CPU backend takes its thread count from
 * col_cpus_available() once per backend object; programs may also give it
 * to OpenMP (apps/procsetup.c). */
#ifndef COL_CPUS_H
#define COL_CPUS_H

/* CPUs this process may run on: the affinity mask, capped by the cgroup CPU
 * quota; at least 1. */
int col_cpus_available(void);

/* The CPU limit of a cgroup quota in whole CPUs (rounded up), or 0 if there
 * is none. root: where the cgroup file systems are mounted
 * ("/sys/fs/cgroup"); self: the text of /proc/self/cgroup. Reads cgroup v2
 * (cpu.max) and v1 (cpu.cfs_quota_us / cpu.cfs_period_us) at every level
 * from the process's cgroup up to the root; the smallest limit counts. */
int col_cgroup_cpu_limit(const char *root, const char *self);

#endif

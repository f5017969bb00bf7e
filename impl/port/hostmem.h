/* The memory this process may still take: the host's (/proc/meminfo),
 * and its memory cgroup's where one sets a limit (v1 or v2; the tightest
 * of the cgroup and its ancestors). A tensor's shard (port_posix.c) and
 * the twin's memory floor are held to it: in a container whose cgroup
 * allows less than the host has, a shard sized by the host's memory made
 * the cgroup's OOM killer end the server with SIGKILL. Plain files, no
 * library. */
#ifndef RKV_PORT_HOSTMEM_H
#define RKV_PORT_HOSTMEM_H

#include <stdint.h>

/* Bytes; 0: unknown. root prefixes /proc and /sys ("" or NULL: this
 * host's; tests give a made-up tree). */
struct port_hostmem {
    uint64_t avail_bytes, total_bytes; /* MemAvailable, MemTotal */
    /* cg_limit_bytes 0: no cgroup limit; else the limit of the level (the
     * cgroup or an ancestor) with the least left, and cg_used_bytes what
     * that level holds less its page cache. cg_min_limit_bytes: the
     * smallest limit of them all (v2 sets each level's own). */
    uint64_t cg_limit_bytes, cg_used_bytes, cg_min_limit_bytes;
};
/* 0, or -RKV_EIO when /proc/meminfo could not be read (the cgroup's may be). */
int rkv_hostmem_read(const char *root, struct port_hostmem *m);
/* Bytes left before the host or the cgroup runs out; UINT64_MAX unknown. */
uint64_t rkv_hostmem_left(const struct port_hostmem *m);
/* 1 when the cgroup, not the host, is what runs out first. */
int rkv_hostmem_cgroup_binds(const struct port_hostmem *m);
/* The memory this process could have at most: MemTotal or the cgroup's
 * limit, the smaller; 0 unknown. */
uint64_t rkv_hostmem_size(const struct port_hostmem *m);

#endif

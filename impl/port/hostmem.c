/* How much more memory this process may take before it is killed: the
 * host's MemAvailable, and, where a memory cgroup limits the process (a
 * CI container, a batch job's allocation), what that cgroup has left. In
 * a container with a 4 GiB limit on a 24 GiB host the cgroup's OOM killer
 * strikes while MemAvailable still reads 20 GiB: a floor on MemAvailable
 * alone never saw it coming (the twin's memory floor, sim_world_event;
 * a tensor's shard, port_posix.c posix_shm_size).
 *
 * Read from files only (no libcgroup): cgroup v1's memory controller and
 * cgroup v2, each where /proc/self/cgroup places this process, or at the
 * mount's root when that path is not visible (a container without a
 * cgroup namespace shows the host's path). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "port/hostmem.h"
#include "util/util.h"

#define HM_PATH_MAX 1024

/* One "key value" number of a file ("MemAvailable: 123 kB",
 * "total_inactive_file 456"), scaled by mult; 0 when absent. */
static int hm_key(const char *path, const char *key, uint64_t mult, uint64_t *v)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    size_t n = strlen(key);
    int rc = -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long x;
        if (!strncmp(line, key, n) && (line[n] == ' ' || line[n] == ':' || line[n] == '\t') &&
            sscanf(line + n + 1, "%llu", &x) == 1) {
            *v = (uint64_t)x * mult;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

/* A file holding one number, or "max" (v2's no limit: *v = UINT64_MAX). */
static int hm_num(const char *dir, const char *name, uint64_t *v)
{
    char path[HM_PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
        return -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[64] = "";
    int ok = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    unsigned long long x;
    if (ok && !strncmp(buf, "max", 3)) {
        *v = UINT64_MAX;
        return 0;
    }
    if (!ok || sscanf(buf, "%llu", &x) != 1)
        return -1;
    *v = (uint64_t)x;
    return 0;
}

/* Memory a cgroup holds that reclaim cannot give back: its usage less its
 * file pages (both LRU lists: the kernel reclaims active page cache too
 * before it kills, and MemAvailable counts it as available on the host's
 * side). Inactive pages alone were counted first: a job that had streamed
 * its dataset through the page cache read as out of memory, mostly active
 * cache, and its tensors were refused. tmpfs and shared memory are on the
 * anonymous lists, so they count as used. prefix: "total_" (v1) or "". */
static uint64_t hm_unreclaimable(const char *dir, uint64_t usage, const char *prefix)
{
    char path[HM_PATH_MAX], key[64];
    uint64_t inactive = 0, active = 0;
    if ((size_t)snprintf(path, sizeof(path), "%s/memory.stat", dir) < sizeof(path)) {
        snprintf(key, sizeof(key), "%sinactive_file", prefix);
        (void)hm_key(path, key, 1, &inactive);
        snprintf(key, sizeof(key), "%sactive_file", prefix);
        (void)hm_key(path, key, 1, &active);
    }
    uint64_t file = inactive + active;
    return file < usage ? usage - file : 0;
}

/* This process's path in the hierarchy whose /proc/self/cgroup line has
 * controllers `ctl` ("memory" among v1's comma lists; "" for v2's "0::"). */
static int hm_cgroup_path(const char *root, const char *ctl, char *out, size_t len)
{
    char path[HM_PATH_MAX];
    snprintf(path, sizeof(path), "%s/proc/self/cgroup", root);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[HM_PATH_MAX];
    int rc = -1;
    while (rc < 0 && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        const char *ctls = c1 + 1;
        int match = 0;
        if (!*ctl)
            match = !*ctls && !strncmp(line, "0:", 2);
        else
            for (char *save = NULL, *t = strtok_r((char *)ctls, ",", &save); t && !match;
                 t = strtok_r(NULL, ",", &save))
                match = !strcmp(t, ctl);
        if (match && strlen(c2 + 1) < len) {
            strcpy(out, c2 + 1);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* The directory of this process's cgroup under mount, or the mount itself
 * when that path is not there; -1 when neither has the file `probe`. */
static int hm_cgroup_dir(const char *mount, const char *cg, const char *probe, char *dir,
                         size_t len)
{
    uint64_t x;
    if ((size_t)snprintf(dir, len, "%s%s", mount, strcmp(cg, "/") ? cg : "") < len &&
        hm_num(dir, probe, &x) == 0)
        return 0;
    if ((size_t)snprintf(dir, len, "%s", mount) < len && hm_num(dir, probe, &x) == 0)
        return 0;
    return -1;
}

/* cgroup v1: memory.stat's hierarchical_memory_limit is already the
 * smallest limit of the cgroup and its ancestors. */
static int hm_v1(const char *root, struct port_hostmem *m)
{
    char cg[HM_PATH_MAX], mount[HM_PATH_MAX], dir[HM_PATH_MAX], path[HM_PATH_MAX];
    snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup/memory", root);
    if (hm_cgroup_path(root, "memory", cg, sizeof(cg)) < 0 ||
        hm_cgroup_dir(mount, cg, "memory.usage_in_bytes", dir, sizeof(dir)) < 0)
        return -1;
    uint64_t limit = 0, usage = 0;
    if (hm_num(dir, "memory.usage_in_bytes", &usage) < 0)
        return -1;
    /* Without use_hierarchy (or an old kernel) only the cgroup's own. */
    if ((size_t)snprintf(path, sizeof(path), "%s/memory.stat", dir) >= sizeof(path) ||
        hm_key(path, "hierarchical_memory_limit", 1, &limit) < 0)
        if (hm_num(dir, "memory.limit_in_bytes", &limit) < 0)
            return -1;
    /* "No limit" is the page counter's largest value, 2^63 less a page. */
    if (limit >= (1ull << 62))
        return 0;
    m->cg_limit_bytes = limit;
    m->cg_used_bytes = hm_unreclaimable(dir, usage, "total_");
    m->cg_min_limit_bytes = limit;
    return 0;
}

/* cgroup v2: limits are per level, so the tightest of the cgroup and its
 * ancestors up to the mount. */
static int hm_v2(const char *root, struct port_hostmem *m)
{
    char cg[HM_PATH_MAX], mount[HM_PATH_MAX], dir[HM_PATH_MAX], probe[HM_PATH_MAX + 32];
    if (hm_cgroup_path(root, "", cg, sizeof(cg)) < 0)
        return -1;
    snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup", root);
    FILE *f = NULL;
    if ((size_t)snprintf(probe, sizeof(probe), "%s/cgroup.controllers", mount) < sizeof(probe))
        f = fopen(probe, "r");
    if (f)
        fclose(f);
    else
        snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup/unified", root); /* hybrid */
    if (hm_cgroup_dir(mount, cg, "memory.current", dir, sizeof(dir)) < 0)
        return -1;
    size_t mlen = strlen(mount);
    uint64_t best_left = UINT64_MAX;
    for (;;) {
        uint64_t max, cur;
        if (hm_num(dir, "memory.max", &max) == 0 && max != UINT64_MAX &&
            hm_num(dir, "memory.current", &cur) == 0) {
            if (!m->cg_min_limit_bytes || max < m->cg_min_limit_bytes)
                m->cg_min_limit_bytes = max;
            uint64_t used = hm_unreclaimable(dir, cur, "");
            uint64_t left = used < max ? max - used : 0;
            if (left < best_left) {
                best_left = left;
                m->cg_limit_bytes = max;
                m->cg_used_bytes = used;
            }
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= mlen || !slash || (size_t)(slash - dir) < mlen)
            break;
        *slash = 0;
    }
    return 0;
}

int rkv_hostmem_read(const char *root, struct port_hostmem *m)
{
    char path[HM_PATH_MAX];
    *m = (struct port_hostmem){0};
    if (!root)
        root = "";
    snprintf(path, sizeof(path), "%s/proc/meminfo", root);
    int rc = hm_key(path, "MemAvailable", 1024, &m->avail_bytes) < 0 ? -RKV_EIO : 0;
    (void)hm_key(path, "MemTotal", 1024, &m->total_bytes);
    if (hm_v1(root, m) < 0)
        (void)hm_v2(root, m);
    return rc;
}

/* What the cgroup has left (UINT64_MAX: no limit). */
static uint64_t hm_cgroup_left(const struct port_hostmem *m)
{
    if (!m->cg_limit_bytes)
        return UINT64_MAX;
    return m->cg_used_bytes < m->cg_limit_bytes ? m->cg_limit_bytes - m->cg_used_bytes : 0;
}

uint64_t rkv_hostmem_left(const struct port_hostmem *m)
{
    uint64_t host = m->avail_bytes ? m->avail_bytes : UINT64_MAX, cg = hm_cgroup_left(m);
    return cg < host ? cg : host;
}

int rkv_hostmem_cgroup_binds(const struct port_hostmem *m)
{
    return m->cg_limit_bytes && (!m->avail_bytes || hm_cgroup_left(m) < m->avail_bytes);
}

uint64_t rkv_hostmem_size(const struct port_hostmem *m)
{
    uint64_t lim = m->cg_min_limit_bytes;
    if (lim && (!m->total_bytes || lim < m->total_bytes))
        return lim;
    return m->total_bytes;
}

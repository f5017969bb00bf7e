/* A memory cgroup for a test: a run or a node in a container whose limit
 * is below what the host has (test_twin's memory floor, test_api_edges'
 * shard check). Needs root and cgroup v1's memory controller or a v2
 * cgroup that delegates memory; tests skip elsewhere. */
#ifndef RKV_TEST_MEM_CGROUP_H
#define RKV_TEST_MEM_CGROUP_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A memory cgroup under this process's own, limited to limit_mib (cgroup
 * v1's memory controller, or v2 where this process's cgroup delegates
 * memory). 0 and its directory, or -1 where none can be made here (not
 * root, no such hierarchy). */
static inline int mem_cgroup_make(unsigned limit_mib, char *dir, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return -1;
    char line[1024], v1[1024] = "", v2[1024] = "";
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        if (!strcmp(line, "0") && !c1[1])
            snprintf(v2, sizeof(v2), "%s", c2 + 1);
        else if (strstr(c1 + 1, "memory"))
            snprintf(v1, sizeof(v1), "%s", c2 + 1);
    }
    fclose(f);
    char lim[32], file[1200];
    if (*v1) {
        snprintf(dir, len, "/sys/fs/cgroup/memory%s/rkv-test-%d", strcmp(v1, "/") ? v1 : "",
                 (int)getpid());
        snprintf(file, sizeof(file), "%s/memory.limit_in_bytes", dir);
    } else if (*v2) {
        snprintf(dir, len, "/sys/fs/cgroup%s/rkv-test-%d", strcmp(v2, "/") ? v2 : "",
                 (int)getpid());
        snprintf(file, sizeof(file), "%s/memory.max", dir);
    } else
        return -1;
    if (mkdir(dir, 0755) < 0)
        return -1;
    snprintf(lim, sizeof(lim), "%llu", (unsigned long long)limit_mib << 20);
    f = fopen(file, "w");
    if (!f || fputs(lim, f) < 0 || fclose(f) != 0) {
        rmdir(dir);
        return -1;
    }
    return 0;
}

/* Moves the calling process into the cgroup made by mem_cgroup_make. */
static inline int mem_cgroup_enter(const char *dir)
{
    char file[1200];
    snprintf(file, sizeof(file), "%s/cgroup.procs", dir);
    FILE *f = fopen(file, "w");
    if (!f)
        return -1;
    int ok = fprintf(f, "%d\n", (int)getpid()) > 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

#endif

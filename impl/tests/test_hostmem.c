/* The memory this process may still take (impl/port/hostmem.c), read from
 * a made-up /proc and /sys: the host's MemAvailable alone; a cgroup v1
 * memory limit (hierarchical, page cache not counted); cgroup v2 limits
 * on the cgroup and an ancestor (the tighter wins); a hybrid host (v2 at
 * /sys/fs/cgroup/unified); a container whose /proc/self/cgroup path is not
 * under its mount; and "no limit" in both versions' spellings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "rkv.h"
#include "port/hostmem.h"

#define MIB (1ull << 20)

static char root[64];

/* Writes root/rel (making its directories) with text. */
static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0755);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/rkv-hostmem-%d", (int)getpid());
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (system(cmd) != 0)
        return -1;
    mkdir(root, 0755);
    put("proc/meminfo", "MemTotal:       24576000 kB\nMemFree:  1000 kB\n"
                        "MemAvailable:   20480000 kB\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_host_only(void **state)
{
    (void)state;
    put("proc/self/cgroup", "0::/\n");
    struct port_hostmem m;
    assert_int_equal(rkv_hostmem_read(root, &m), 0);
    assert_int_equal(m.avail_bytes, 20480000ull * 1024);
    assert_int_equal(m.total_bytes, 24576000ull * 1024);
    assert_int_equal(m.cg_limit_bytes, 0);
    assert_int_equal(rkv_hostmem_left(&m), m.avail_bytes);
    assert_int_equal(rkv_hostmem_size(&m), m.total_bytes);
    assert_false(rkv_hostmem_cgroup_binds(&m));
}

/* v1, as on this project's CI machines: the limit 1 GiB set on the job's
 * cgroup, 700 MiB used of which 200 MiB inactive page cache and 100 MiB
 * active: both reclaimable (active cache counted as used refused a job's
 * tensors after it had streamed its dataset through the cache). */
static void test_v1_limit(void **state)
{
    (void)state;
    put("proc/self/cgroup", "5:devices:/\n4:memory:/jobs/j1\n0::/\n");
    put("sys/fs/cgroup/memory/jobs/j1/memory.usage_in_bytes", "734003200\n");
    put("sys/fs/cgroup/memory/jobs/j1/memory.limit_in_bytes", "1073741824\n");
    put("sys/fs/cgroup/memory/jobs/j1/memory.stat",
        "cache 1\nrss 2\nhierarchical_memory_limit 1073741824\ntotal_inactive_file "
        "209715200\ntotal_active_file 104857600\ninactive_file 5\nactive_file 7\n");
    struct port_hostmem m;
    assert_int_equal(rkv_hostmem_read(root, &m), 0);
    assert_int_equal(m.cg_limit_bytes, 1024 * MIB);
    assert_int_equal(m.cg_used_bytes, 400 * MIB);
    assert_int_equal(rkv_hostmem_left(&m), 624 * MIB);
    assert_int_equal(rkv_hostmem_size(&m), 1024 * MIB);
    assert_true(rkv_hostmem_cgroup_binds(&m));
    /* A limit on an ancestor shows as the hierarchical one. */
    put("sys/fs/cgroup/memory/jobs/j1/memory.limit_in_bytes", "9223372036854771712\n");
    put("sys/fs/cgroup/memory/jobs/j1/memory.stat",
        "hierarchical_memory_limit 805306368\ntotal_inactive_file 0\n");
    assert_int_equal(rkv_hostmem_read(root, &m), 0);
    assert_int_equal(m.cg_limit_bytes, 768 * MIB);
    assert_int_equal(rkv_hostmem_left(&m), 68 * MIB);
    /* No limit anywhere: the page counter's largest value. */
    put("sys/fs/cgroup/memory/jobs/j1/memory.stat",
        "hierarchical_memory_limit 9223372036854771712\ntotal_inactive_file 0\n");
    assert_int_equal(rkv_hostmem_read(root, &m), 0);
    assert_int_equal(m.cg_limit_bytes, 0);
    assert_int_equal(rkv_hostmem_left(&m), m.avail_bytes);
}

/* v2: 2 GiB on the cgroup, 1.5 GiB on its parent, none at the top; and a
 * controller list in the v1 line that names memory among others. */
static void test_v2_limits(void **state)
{
    (void)state;
    put("proc/self/cgroup", "0::/ci/job/step\n");
    put("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
    put("sys/fs/cgroup/memory.current", "5000000000\n"); /* the root has no memory.max */
    put("sys/fs/cgroup/ci/memory.max", "max\n");
    put("sys/fs/cgroup/ci/memory.current", "1000\n");
    put("sys/fs/cgroup/ci/job/memory.max", "1610612736\n");
    put("sys/fs/cgroup/ci/job/memory.current", "1073741824\n");
    put("sys/fs/cgroup/ci/job/memory.stat",
        "anon 1\nactive_file 52428800\ninactive_file 52428800\nshmem 9\n");
    put("sys/fs/cgroup/ci/job/step/memory.max", "2147483648\n");
    put("sys/fs/cgroup/ci/job/step/memory.current", "1073741824\n");
    struct port_hostmem m;
    assert_int_equal(rkv_hostmem_read(root, &m), 0);
    assert_int_equal(m.cg_limit_bytes, 1536 * MIB); /* the parent's: 612 MiB left against 1 GiB */
    assert_int_equal(m.cg_used_bytes, 924 * MIB);
    assert_int_equal(rkv_hostmem_left(&m), 612 * MIB);
    assert_int_equal(rkv_hostmem_size(&m), 1536 * MIB);
    /* The smallest limit sizes what the process may have, whichever level
     * has the least left: a child of 1 GiB under a parent of 1.5 GiB with
     * 100 MiB left is 1 GiB in size. */
    put("sys/fs/cgroup/ci/job/step/memory.max", "1073741824\n");
    put("sys/fs/cgroup/ci/job/step/memory.current", "0\n");
    put("sys/fs/cgroup/ci/job/memory.current", "1572864000\n");
    put("sys/fs/cgroup/ci/job/memory.stat", "anon 1\n");
    assert_int_equal(rkv_hostmem_read(root, &m), 0);
    assert_int_equal(m.cg_limit_bytes, 1536 * MIB);
    assert_int_equal(rkv_hostmem_left(&m), 36 * MIB);
    assert_int_equal(rkv_hostmem_size(&m), 1024 * MIB);
    /* A container without a cgroup namespace: its /proc/self/cgroup path
     * is the host's, not under the mount; the mount's root is its own. */
    teardown(NULL);
    setup(NULL);
    put("proc/self/cgroup", "0::/system.slice/docker-abc.scope\n");
    put("sys/fs/cgroup/cgroup.controllers", "memory\n");
    put("sys/fs/cgroup/memory.max", "4294967296\n");
    put("sys/fs/cgroup/memory.current", "4093640704\n"); /* 3904 MiB */
    assert_int_equal(rkv_hostmem_read(root, &m), 0);
    assert_int_equal(m.cg_limit_bytes, 4096 * MIB);
    assert_int_equal(rkv_hostmem_left(&m), 192 * MIB);
    assert_true(rkv_hostmem_cgroup_binds(&m));
}

/* A hybrid host: v1 controllers without memory, v2 at .../unified. */
static void test_hybrid(void **state)
{
    (void)state;
    put("proc/self/cgroup", "3:cpu,cpuacct:/a\n0::/user/s1\n");
    put("sys/fs/cgroup/unified/user/s1/memory.max", "536870912\n");
    put("sys/fs/cgroup/unified/user/s1/memory.current", "268435456\n");
    struct port_hostmem m;
    assert_int_equal(rkv_hostmem_read(root, &m), 0);
    assert_int_equal(m.cg_limit_bytes, 512 * MIB);
    assert_int_equal(rkv_hostmem_left(&m), 256 * MIB);
    /* Nothing readable at all: unknown, and nothing watched on it. */
    teardown(NULL);
    mkdir(root, 0755);
    assert_int_equal(rkv_hostmem_read(root, &m), -RKV_EIO);
    assert_int_equal(rkv_hostmem_left(&m), UINT64_MAX);
    assert_int_equal(rkv_hostmem_size(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_host_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hybrid, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the POSIX port and the PRNG. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "under_sanitizer.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mem_cgroup.h"
#include "proc_state.h"
#include "port/port.h"
#include "rkv.h"

#define MS 1000000ULL

static struct rkv_port *port_new(const char *node, int level)
{
    struct rkv_port *p = NULL;
    assert_int_equal(rkv_port_posix_create(node, level, 42, &p), 0);
    assert_non_null(p);
    return p;
}

/* ---- rng ---- */

static void test_rng_deterministic(void **state)
{
    (void)state;
    struct rkv_rng a, b, c;
    rkv_rng_seed(&a, 7, 1);
    rkv_rng_seed(&b, 7, 1);
    rkv_rng_seed(&c, 7, 2);
    int differs = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rkv_rng_next(&a);
        assert_int_equal(x, rkv_rng_next(&b));
        differs |= x != rkv_rng_next(&c);
    }
    assert_true(differs);
    /* Swapping seed and stream must give another sequence. */
    rkv_rng_seed(&a, 1, 7);
    rkv_rng_seed(&b, 7, 1);
    assert_int_not_equal(rkv_rng_next(&a), rkv_rng_next(&b));
    assert_int_equal(rkv_mix64(12345), rkv_mix64(12345));
    assert_int_not_equal(rkv_mix64(1), rkv_mix64(2));
}

/* Reference outputs of xoshiro256** from the state {1, 2, 3, 4}. */
static void test_rng_known_answer(void **state)
{
    (void)state;
    struct rkv_rng r = {.s = {1, 2, 3, 4}};
    static const uint64_t want[] = {11520, 0, 1509978240, 1215971899390074240ULL};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        assert_int_equal(rkv_rng_next(&r), want[i]);
}

static void test_rng_below_range(void **state)
{
    (void)state;
    struct rkv_rng r;
    rkv_rng_seed(&r, 99, 0);
    unsigned seen[7] = {0};
    for (int i = 0; i < 7000; i++) {
        uint64_t v = rkv_rng_below(&r, 7);
        assert_true(v < 7);
        seen[v]++;
    }
    /* Each value expected 1000 times; 700 is > 9 sigma away. */
    for (int i = 0; i < 7; i++)
        assert_true(seen[i] > 700 && seen[i] < 1300);
    for (int i = 0; i < 100; i++)
        assert_int_equal(rkv_rng_below(&r, 1), 0);
    uint64_t big = (UINT64_MAX / 3) * 2 + 1; /* worst case for rejection */
    for (int i = 0; i < 1000; i++)
        assert_true(rkv_rng_below(&r, big) < big);
    for (int i = 0; i < 1000; i++) {
        double d = rkv_rng_double(&r);
        assert_true(d >= 0.0 && d < 1.0);
    }
}

static void test_port_rng_from_node(void **state)
{
    (void)state;
    struct rkv_port *a = port_new("s0.0", RKV_LOG_ERROR);
    struct rkv_port *b = port_new("s0.0", RKV_LOG_ERROR);
    struct rkv_port *c = port_new("s0.1", RKV_LOG_ERROR);
    uint64_t x = rkv_rng_next(&a->rng);
    assert_int_equal(x, rkv_rng_next(&b->rng));
    assert_int_not_equal(x, rkv_rng_next(&c->rng));
    a->ops->destroy(a);
    b->ops->destroy(b);
    c->ops->destroy(c);
}

/* ---- tasks, mutex, cond ---- */

struct flag_ctx {
    struct rkv_port *p;
    struct rkv_mutex *m;
    struct rkv_cond *c;
    int flag;
};

static void set_flag_task(void *arg)
{
    struct flag_ctx *fc = arg;
    fc->p->ops->sleep_ns(fc->p, 5 * MS);
    fc->p->ops->mutex_lock(fc->m);
    fc->flag = 1;
    fc->p->ops->cond_signal(fc->c);
    fc->p->ops->mutex_unlock(fc->m);
}

static void test_task_and_cond_signal(void **state)
{
    (void)state;
    struct rkv_port *p = port_new("t", RKV_LOG_ERROR);
    struct flag_ctx fc = {.p = p};
    assert_int_equal(p->ops->mutex_create(p, &fc.m), 0);
    assert_int_equal(p->ops->cond_create(p, &fc.c), 0);
    struct rkv_task *t = NULL;
    assert_int_equal(p->ops->task_start(p, "setter", set_flag_task, &fc, &t), 0);
    uint64_t deadline = p->ops->now_ns(p) + 2000 * MS;
    p->ops->mutex_lock(fc.m);
    while (!fc.flag && p->ops->now_ns(p) < deadline)
        p->ops->cond_wait(fc.c, fc.m, 100 * MS);
    int flag = fc.flag;
    p->ops->mutex_unlock(fc.m);
    assert_int_equal(p->ops->task_join(p, t), 0);
    assert_int_equal(flag, 1);
    p->ops->cond_destroy(fc.c);
    p->ops->mutex_destroy(fc.m);
    p->ops->destroy(p);
}

/* mutex_held says whether the calling task holds the mutex: not before,
 * yes after lock, not for another task meanwhile, not while a cond_wait
 * has given it up (the other task takes it then), and yes again after. */
struct held_probe {
    struct rkv_port *p;
    struct rkv_mutex *m;
    struct rkv_cond *c;
    int held_by_other; /* what the other task saw while we held it */
    atomic_int seen;
    int held_inside; /* ... and once it took it, during our cond_wait */
    int done;
};

static void held_task(void *arg)
{
    struct held_probe *h = arg;
    h->held_by_other = h->p->ops->mutex_held(h->m);
    atomic_store(&h->seen, 1);
    h->p->ops->mutex_lock(h->m);
    h->held_inside = h->p->ops->mutex_held(h->m);
    h->done = 1;
    h->p->ops->cond_signal(h->c);
    h->p->ops->mutex_unlock(h->m);
}

static void test_mutex_held(void **state)
{
    (void)state;
    struct held_probe h = {.p = port_new("t", RKV_LOG_ERROR), .held_by_other = -1};
    struct rkv_port *p = h.p;
    assert_int_equal(p->ops->mutex_create(p, &h.m), 0);
    assert_int_equal(p->ops->cond_create(p, &h.c), 0);
    assert_false(p->ops->mutex_held(h.m));
    p->ops->mutex_lock(h.m);
    assert_true(p->ops->mutex_held(h.m));
    struct rkv_task *t;
    assert_int_equal(p->ops->task_start(p, "holder", held_task, &h, &t), 0);
    while (!atomic_load(&h.seen)) /* holding the mutex all along */
        p->ops->sleep_ns(p, MS);
    while (!h.done)
        p->ops->cond_wait(h.c, h.m, 1000 * MS);
    assert_true(p->ops->mutex_held(h.m));
    p->ops->mutex_unlock(h.m);
    assert_false(p->ops->mutex_held(h.m));
    assert_int_equal(p->ops->task_join(p, t), 0);
    assert_int_equal(h.held_by_other, 0);
    assert_int_equal(h.held_inside, 1);
    p->ops->cond_destroy(h.c);
    p->ops->mutex_destroy(h.m);
    p->ops->destroy(p);
}

static void test_cond_timeout(void **state)
{
    (void)state;
    struct rkv_port *p = port_new("t", RKV_LOG_ERROR);
    struct rkv_mutex *m;
    struct rkv_cond *c;
    assert_int_equal(p->ops->mutex_create(p, &m), 0);
    assert_int_equal(p->ops->cond_create(p, &c), 0);
    p->ops->mutex_lock(m);
    uint64_t t0 = p->ops->now_ns(p);
    int rc;
    /* Spurious wake-ups return 0; retry within the same overall window. */
    for (int i = 0; i < 10; i++) {
        rc = p->ops->cond_wait(c, m, 50 * MS);
        if (rc != 0)
            break;
    }
    uint64_t dt = p->ops->now_ns(p) - t0;
    p->ops->mutex_unlock(m);
    assert_int_equal(rc, -RKV_ETIMEDOUT);
    assert_true(dt >= 50 * MS);
    assert_true(dt < 2000 * MS);
    p->ops->cond_destroy(c);
    p->ops->mutex_destroy(m);
    p->ops->destroy(p);
}

static void test_sleep_and_clock(void **state)
{
    (void)state;
    struct rkv_port *p = port_new("t", RKV_LOG_ERROR);
    uint64_t t0 = p->ops->now_ns(p);
    p->ops->sleep_ns(p, 10 * MS);
    p->ops->yield(p);
    uint64_t dt = p->ops->now_ns(p) - t0;
    assert_true(dt >= 10 * MS && dt < 2000 * MS);
    p->ops->destroy(p);
}

/* ---- shm ---- */

/* The state letter /proc/PID/stat gives process pid ('Z' a zombie). */
static char proc_state(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    char st = proc_stat_state(path);
    assert_true(st != 0);
    return st;
}

/* Process liveness, which durable locks and the machine segment's maker
 * rely on: this process is alive; a child that ended is not, reaped or a
 * zombie; and an id whose pid is alive but whose start time is another's
 * is not (a pid alone named another process once reused, or one of
 * another pid namespace sharing /dev/shm). */
static void test_proc_alive(void **state)
{
    (void)state;
    struct rkv_port *p = port_new("t", RKV_LOG_ERROR);
    uint64_t self = p->ops->proc_self(p);
    assert_int_equal(self & ((1u << 22) - 1), (uint64_t)getpid());
    assert_true(self >> 22 != 0); /* /proc is there: the start time is in it */
    assert_int_equal(p->ops->proc_self(p), self);
    assert_true(p->ops->proc_alive(p, self));
    assert_false(p->ops->proc_alive(p, self + (1ull << 22))); /* same pid, started later */
    assert_true(p->ops->proc_alive(p, (uint64_t)getpid()));   /* no start time: the pid decides */
    assert_false(p->ops->proc_alive(p, 0));
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        uint64_t id = p->ops->proc_self(p); /* the child's, not the cached parent's */
        _exit(write(ready[1], &id, sizeof(id)) == sizeof(id) ? 0 : 1);
    }
    uint64_t id = 0;
    assert_int_equal(read(ready[0], &id, sizeof(id)), sizeof(id));
    close(ready[0]);
    close(ready[1]);
    assert_int_equal(id & ((1u << 22) - 1), (uint64_t)child);
    assert_true(id != self);
    for (int i = 0; i < 10000 && proc_state(child) != 'Z'; i++) /* exited, not reaped */
        usleep(1000);
    /* Its main thread shows Z while its other threads (ThreadSanitizer's
     * own) still end, and a process with threads that run lives: dead once
     * they have ended. */
    int alive = 1;
    for (int i = 0; i < 2000 && (alive = p->ops->proc_alive(p, id)); i++)
        usleep(1000);
    assert_false(alive);
    assert_int_equal(waitpid(child, NULL, 0), child);
    assert_false(p->ops->proc_alive(p, id));
    p->ops->destroy(p);
}

static void *sleep_long(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

/* A process whose main thread ended (pthread_exit) while others run shows
 * state Z in /proc/PID/stat: it was judged dead, and a row lock one of its
 * threads held was taken over while that thread still wrote the row (a
 * reviewer's experiment). It lives: alive. */
static void test_proc_alive_without_its_main_thread(void **state)
{
    (void)state;
    /* The child starts a thread, which ThreadSanitizer does not follow in
     * a child of a process that has run threads. */
    if (UNDER_TSAN)
        skip();
    struct rkv_port *p = port_new("t", RKV_LOG_ERROR);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, sleep_long, NULL) != 0)
            _exit(1);
        uint64_t id = p->ops->proc_self(p);
        if (write(ready[1], &id, sizeof(id)) != sizeof(id))
            _exit(1);
        pthread_exit(NULL);
    }
    uint64_t id = 0;
    assert_int_equal(read(ready[0], &id, sizeof(id)), sizeof(id));
    close(ready[0]);
    close(ready[1]);
    int zombie_main = 0; /* until its main thread is gone */
    for (int i = 0; i < 5000 && !(zombie_main = proc_state(child) == 'Z'); i++)
        usleep(1000);
    int alive = p->ops->proc_alive(p, id);
    /* Ended before any assertion: a failed one left it pausing for ever. */
    assert_int_equal(kill(child, SIGKILL), 0);
    assert_int_equal(waitpid(child, NULL, 0), child);
    assert_true(zombie_main);
    assert_true(alive);
    assert_false(p->ops->proc_alive(p, id));
    p->ops->destroy(p);
}

static void test_shm(void **state)
{
    (void)state;
    struct rkv_port *p = port_new("t", RKV_LOG_ERROR);
    char name[64];
    snprintf(name, sizeof(name), "/rkv-test-port-%d", (int)getpid());
    p->ops->shm_unlink(p, name); /* a leftover of a crashed run */
    void *a = NULL, *b = NULL;
    assert_int_equal(p->ops->shm_map(p, name, 0, 0, &a), -RKV_EINVAL);
    assert_int_equal(p->ops->shm_map(p, name, 4096, 0, &a), -RKV_ENOTENSOR);
    assert_int_equal(p->ops->shm_map(p, name, 4096, 1, &a), 0);
    for (int i = 0; i < 4096; i++)
        assert_int_equal(((unsigned char *)a)[i], 0);
    memcpy(a, "shared", 7);
    void *dup = NULL;
    assert_int_equal(p->ops->shm_map(p, name, 4096, 1, &dup), -RKV_EEXIST);
    assert_int_equal(p->ops->shm_map(p, name, 4096, 0, &b), 0);
    assert_ptr_not_equal(a, b);
    assert_string_equal((char *)b, "shared");
    /* A segment bigger than /dev/shm's free space (or memory) is refused
     * before it is sized and populated (200 TiB: without the check the
     * mapping fails for lack of address space, with -RKV_EIO), and leaves
     * nothing behind. */
    char huge_name[80];
    snprintf(huge_name, sizeof(huge_name), "%s-huge", name);
    void *huge = NULL;
    assert_int_equal(p->ops->shm_map(p, huge_name, (size_t)200 << 40, 1, &huge), -RKV_ENOMEM);
    assert_null(huge);
    assert_int_equal(p->ops->shm_map(p, huge_name, 4096, 0, &huge), -RKV_ENOTENSOR);
    /* Attaching with a larger size than exists must fail, not SIGBUS later. */
    void *big = NULL;
    assert_int_equal(p->ops->shm_map(p, name, 8192, 0, &big), -RKV_EIO);
    assert_null(big);
    p->ops->shm_unmap(p, b, 4096);
    p->ops->shm_unmap(p, a, 4096);
    p->ops->shm_unlink(p, name);
    p->ops->shm_unlink(p, name); /* absent: ignored */
    assert_int_equal(p->ops->shm_map(p, name, 4096, 0, &a), -RKV_ENOTENSOR);
    p->ops->destroy(p);
}

/* The space check of a new segment, made stale on purpose: this test is
 * linked with -Wl,--wrap=fstatvfs (CMakeLists.txt), and while stale_room
 * is set the shared-memory filesystem looks empty, as it did to a job that
 * checked just before another job filled it. */
static int stale_room;
int __real_fstatvfs(int fd, struct statvfs *vs);
int __wrap_fstatvfs(int fd, struct statvfs *vs)
{
    int rc = __real_fstatvfs(fd, vs);
    if (rc == 0 && stale_room)
        vs->f_bavail = vs->f_blocks;
    return rc;
}

/* Regression: a segment sized while the filesystem still had room, which
 * another job took before the pages were touched, was sparse: its first
 * touch past the room was SIGBUS (in a push, in every process mapping
 * it). Its room is reserved at creation now, or it is refused. Runs in a
 * child with a 1 MiB tmpfs on /dev/shm in its own mount namespace (root
 * only: skipped otherwise). */
static void test_shm_room_taken_after_the_check(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGBUS, SIG_DFL); /* cmocka's handler would turn it into a failed step */
        if (unshare(CLONE_NEWNS) != 0)
            _exit(77);
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("rkv-test", "/dev/shm", "tmpfs", 0, "size=1m") != 0)
            _exit(78);
        struct rkv_port *p = NULL;
        if (rkv_port_posix_create("t", RKV_LOG_ERROR, 42, &p) != 0)
            _exit(79);
        void *a = NULL, *b = NULL;
        /* Another job's 768 KiB, then this one's 512 KiB, checked against
         * an empty filesystem. */
        if (p->ops->shm_map(p, "/rkv-test-other", 768 << 10, 1, &a) != 0)
            _exit(80);
        stale_room = 1;
        int rc = p->ops->shm_map(p, "/rkv-test-mine", 512 << 10, 1, &b);
        stale_room = 0;
        if (rc == 0) {
            memset(b, 1, 512 << 10); /* SIGBUS without the reservation */
            _exit(81);
        }
        if (rc != -RKV_ENOMEM)
            _exit(82);
        if (p->ops->shm_map(p, "/rkv-test-mine", 4096, 0, &b) != -RKV_ENOTENSOR)
            _exit(83); /* the refused one left behind */
        /* Once the other job is gone it fits. */
        p->ops->shm_unmap(p, a, 768 << 10);
        p->ops->shm_unlink(p, "/rkv-test-other");
        if (p->ops->shm_map(p, "/rkv-test-mine", 512 << 10, 1, &b) != 0)
            _exit(84);
        memset(b, 1, 512 << 10);
        p->ops->shm_unmap(p, b, 512 << 10);
        p->ops->shm_unlink(p, "/rkv-test-mine");
        p->ops->destroy(p);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status) && (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 78)) {
        print_message("skipped: no private mount namespace with a tmpfs (needs root)\n");
        return;
    }
    if (WIFSIGNALED(status))
        fail_msg("the segment's child died of signal %d (SIGBUS is %d)", WTERMSIG(status), SIGBUS);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("the segment's child failed at step %d", WEXITSTATUS(status));
}

/* The memory a node sizes its defaults by (the slot memory it grants is
 * a quarter of it) is its memory cgroup's limit where that is below the
 * host's: it was the host's 24 GiB in a 256 MiB cgroup, so a server let
 * its peers make it pin 4 GiB of slots. Runs in a child in a 256 MiB
 * cgroup (root only: skipped otherwise). */
static void test_mem_bytes_is_the_cgroup_limit(void **state)
{
    (void)state;
    char dir[1100];
    if (mem_cgroup_make(256, dir, sizeof(dir)) < 0)
        skip();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rkv_port *p = NULL;
        if (mem_cgroup_enter(dir) < 0 || rkv_port_posix_create("t", RKV_LOG_ERROR, 42, &p) != 0)
            _exit(20);
        uint64_t b = p->ops->mem_bytes(p);
        p->ops->destroy(p);
        if (b != 256ull << 20) {
            fprintf(stderr, "mem_bytes %llu\n", (unsigned long long)b);
            _exit(21);
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    rmdir(dir);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- logging ---- */

static void test_log_line(void **state)
{
    (void)state;
    struct rkv_port *p = port_new("w3", RKV_LOG_WARN);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fds[1], STDERR_FILENO) >= 0);
    RKV_LOGD(p, "filtered %d", 1);
    RKV_LOGW(p, "hello %d", 42);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fds[1]);
    char buf[256] = "";
    ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    assert_true(n > 0);
    buf[n] = 0;
    unsigned long s, us;
    char tail[64];
    assert_int_equal(sscanf(buf, "[%lu.%6lu] %63[^\n]", &s, &us, tail), 3);
    assert_string_equal(tail, "WARN w3: hello 42");
    assert_non_null(strchr(buf, '\n'));
    assert_null(strstr(buf, "filtered"));
    assert_int_equal(strchr(buf, '\n') - buf + 1, n); /* exactly one line */
    p->ops->destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng_deterministic),
        cmocka_unit_test(test_rng_known_answer),
        cmocka_unit_test(test_rng_below_range),
        cmocka_unit_test(test_port_rng_from_node),
        cmocka_unit_test(test_task_and_cond_signal),
        cmocka_unit_test(test_cond_timeout),
        cmocka_unit_test(test_mutex_held),
        cmocka_unit_test(test_sleep_and_clock),
        cmocka_unit_test(test_shm),
        cmocka_unit_test(test_mem_bytes_is_the_cgroup_limit),
        cmocka_unit_test(test_shm_room_taken_after_the_check),
        cmocka_unit_test(test_proc_alive),
        cmocka_unit_test(test_proc_alive_without_its_main_thread),
        cmocka_unit_test(test_log_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

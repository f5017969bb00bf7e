/* A two-machine cluster in one test process over loopback TCP: one server
 * per machine (cluster_config_spm: up to 2; a thread each), workers joining
 * from the test, or a server forked into a process of its own. Shared by
 * test_store, test_zero_copy, test_api_edges and test_dgl; include after
 * cmocka.h and rkv.h. Each
 * binary names its own port range and shm tag, so parallel ctest runs do
 * not collide. */
#ifndef RKV_TEST_TWO_MACHINES_H
#define RKV_TEST_TWO_MACHINES_H

#include <arpa/inet.h>
#include <dirent.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define TM_MAX_SPM 2

struct cluster {
    struct rkv_machine machines[2];
    struct rkv_config cfg;
    uint32_t spm;
    struct rkv_server *srv[2][TM_MAX_SPM];
    pthread_t thr[2][TM_MAX_SPM];
    int in_process[2];
};

/* n consecutive free ports in [lo, lo + span), below the ephemeral range
 * (see rkv demo). */
static uint16_t free_base_port(uint16_t lo, uint16_t span, int n)
{
    static uint32_t x; /* test-only: successive calls pick different ports */
    x = x * 1103515245u + 12345u + (uint32_t)getpid();
    for (int attempt = 0; attempt < 200; attempt++, x = x * 1103515245u + 12345u) {
        uint16_t base = (uint16_t)(lo + (x >> 8) % span);
        int ok = 1;
        for (int k = 0; k < n && ok; k++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in a = {.sin_family = AF_INET,
                                    .sin_port = htons((uint16_t)(base + k)),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
            close(fd);
        }
        if (ok)
            return base;
    }
    fail_msg("no free ports");
    return 0;
}

static void *server_main(void *arg)
{
    rkv_server_run(arg);
    return NULL;
}

/* Two machines with spm servers each, one worker on machine 0; rows of
 * machine 1 always cross the network. Ports come from the binary's range
 * (TWO_MACHINES_PORT_LO, _SPAN), segments are named after TWO_MACHINES_TAG. */
static void cluster_config_spm(struct cluster *c, uint32_t timeout_ms, uint32_t spm)
{
    assert_true(spm >= 1 && spm <= TM_MAX_SPM);
    memset(c, 0, sizeof(*c));
    c->spm = spm;
    uint16_t base = free_base_port(TWO_MACHINES_PORT_LO, TWO_MACHINES_PORT_SPAN, 2 * (int)spm);
    for (uint32_t m = 0; m < 2; m++) {
        snprintf(c->machines[m].host, sizeof(c->machines[m].host), "127.0.0.1");
        c->machines[m].base_port = (uint16_t)(base + m * spm);
        c->machines[m].servers = spm;
    }
    rkv_config_defaults(&c->cfg);
    c->cfg.n_machines = 2;
    c->cfg.machines = c->machines;
    c->cfg.n_workers = 1;
    c->cfg.timeout_ms = timeout_ms;
    c->cfg.connect_retry_ms = 5000;
    c->cfg.log_level = 0;
    snprintf(c->cfg.shm_prefix, sizeof(c->cfg.shm_prefix), "%s-%d-%u", TWO_MACHINES_TAG,
             (int)getpid(), base);
}

static inline void cluster_config(struct cluster *c, uint32_t timeout_ms)
{
    cluster_config_spm(c, timeout_ms, 1);
}

/* Every server of machine m. */
static void cluster_start_server(struct cluster *c, uint32_t m)
{
    struct rkv_config cfg = c->cfg;
    cfg.machine_id = m;
    char err[256];
    for (uint32_t l = 0; l < c->spm; l++) {
        int rc = rkv_server_create(&cfg, l, &c->srv[m][l], err, sizeof(err));
        if (rc < 0)
            fail_msg("%s", err);
        assert_int_equal(pthread_create(&c->thr[m][l], NULL, server_main, c->srv[m][l]), 0);
    }
    c->in_process[m] = 1;
}

static void cluster_stop(struct cluster *c)
{
    for (int m = 0; m < 2; m++) {
        if (!c->in_process[m])
            continue;
        for (uint32_t l = 0; l < c->spm; l++) {
            pthread_join(c->thr[m][l], NULL);
            rkv_server_destroy(c->srv[m][l]);
        }
    }
}

static inline struct rkv_client *client_join(struct cluster *c)
{
    struct rkv_client *cli;
    char err[256];
    int rc = rkv_client_create(&c->cfg, &cli, err, sizeof(err));
    if (rc < 0)
        fail_msg("client: %s", err);
    return cli;
}

/* A forked server a failed assertion left behind (stopped, maybe): killed
 * at exit (main registers kill_stray_child with atexit), or ctest would
 * wait for it forever. Test-only global. */
static pid_t stray_child;

static inline void kill_stray_child(void)
{
    if (stray_child > 0)
        kill(stray_child, SIGKILL);
}

/* A killed server leaves its machine's segments (as a crash does); the
 * test that killed it removes them, or every run of the suite would add
 * some to /dev/shm. */
static inline void forget_machine_shm(const struct cluster *c, uint32_t m)
{
    char head[64];
    int n = snprintf(head, sizeof(head), "%s-m%u-", c->cfg.shm_prefix, m);
    DIR *d = opendir("/dev/shm");
    if (!d || n <= 0)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, head, (size_t)n) == 0) {
            char name[300];
            snprintf(name, sizeof(name), "/%s", e->d_name);
            shm_unlink(name);
        }
    }
    closedir(d);
}

/* Kills machine m's forked server (fork_server) and removes what it left. */
static inline void kill_forked_server(const struct cluster *c, pid_t child, uint32_t m)
{
    kill(child, SIGKILL);
    assert_int_equal(waitpid(child, NULL, 0), child);
    stray_child = 0;
    forget_machine_shm(c, m);
}

/* Forks machine m's server process and waits until it listens (or failed
 * to). Fork while the test process has one thread. */
static inline pid_t fork_server(struct cluster *c, uint32_t m)
{
    /* A test that failed midway left its server running, and holding the
     * output ctest reads to the end: end it. */
    if (stray_child > 0) {
        kill_stray_child();
        waitpid(stray_child, NULL, 0);
        stray_child = 0;
    }
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        struct rkv_config cfg = c->cfg;
        cfg.machine_id = m;
        struct rkv_server *s;
        char err[256];
        char ok = rkv_server_create(&cfg, 0, &s, err, sizeof(err)) == 0;
        if (write(ready[1], &ok, 1) != 1 || !ok)
            _exit(3);
        close(ready[1]);
        rkv_server_run(s);
        rkv_server_destroy(s);
        _exit(0);
    }
    close(ready[1]);
    stray_child = pid;
    char ok = 0;
    ssize_t r = read(ready[0], &ok, 1);
    close(ready[0]);
    if (r != 1 || !ok) {
        waitpid(pid, NULL, 0);
        fail_msg("the forked server could not start (port taken?)");
    }
    return pid;
}

#endif

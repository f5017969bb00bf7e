/* Durable mode: the snapshot file format (round trip, and a torn, corrupted
 * or foreign file refused with a message that says which and why), pushes
 * applied once across a retried acknowledgement and a restart, and a
 * machine lost under a stream of pushes from worker processes over TCP:
 * with durable mode and retries every acknowledged push is there exactly
 * once; without, survivors fail fast with -RKV_EPEERDEAD. */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "nic/nic_tcp.h"
#include "port/port_file.h"
#include "rkv.h"
#include "store/coord.h"
#include "store/crc32c_tables.h"
#include "store/snapshot.h"
#include "store/wal.h"

/* ---- helpers ---- */

/* Processes a test forked and has not reaped yet: a failed assertion
 * leaves the test early, and teardown must not leave servers running. */
static pid_t children[16];

static void child_add(pid_t pid)
{
    for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++) {
        if (!children[i]) {
            children[i] = pid;
            return;
        }
    }
    fail_msg("too many children");
}

static void child_forget(pid_t pid)
{
    for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++)
        if (children[i] == pid)
            children[i] = 0;
}

/* This binary is linked with -Wl,--wrap=rkv_peer_user (CMakeLists.txt):
 * a node's down notification (cli_on_peer, the server's) asks the engine
 * for the dead peer's owner first, so holding that call holds the
 * notification. The engine marks a peer dead, then tells its owner in the
 * progress task's next batch: in between, a client's send is refused
 * while it does not know the server died, and it maps a shard a restarted
 * server has replaced. Under load these windows opened by chance in CI
 * (test_list_retried_after_server0_restart, "list: server 0: peer
 * disconnected or died"); down_hold(ms) holds every notification of this
 * process (not of forked servers) for that long from now. */
void *__real_rkv_peer_user(const struct rkv_peer *peer);
void *__wrap_rkv_peer_user(const struct rkv_peer *peer);
static _Atomic uint64_t down_hold_until_ns;
static atomic_uint down_held; /* notifications held since down_hold */
static _Atomic pid_t test_pid;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void down_hold(unsigned ms)
{
    atomic_store(&test_pid, getpid());
    atomic_store(&down_held, 0);
    atomic_store(&down_hold_until_ns, mono_ns() + ms * 1000000ull);
}

void *__wrap_rkv_peer_user(const struct rkv_peer *peer)
{
    uint64_t until = atomic_load(&down_hold_until_ns), now;
    /* Cheapest first; the unlocked read of the peer's flag comes only
     * inside a hold (no TSan run forks like this binary does). */
    if (until && (now = mono_ns()) < until && getpid() == atomic_load(&test_pid) &&
        rkv_peer_dead(peer)) {
        struct timespec ts = {.tv_sec = (time_t)((until - now) / 1000000000ull),
                              .tv_nsec = (long)((until - now) % 1000000000ull)};
        while (nanosleep(&ts, &ts) < 0)
            ;
        atomic_fetch_add(&down_held, 1);
    }
    return __real_rkv_peer_user(peer);
}

static int reap_children(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++) {
        if (children[i]) {
            kill(children[i], SIGKILL);
            waitpid(children[i], NULL, 0);
            children[i] = 0;
        }
    }
    return 0;
}

static uint16_t free_base_port(void)
{
    static uint32_t x; /* test-only: successive calls pick different ports */
    x = x * 1103515245u + 12345u + (uint32_t)getpid();
    for (int attempt = 0; attempt < 200; attempt++, x = x * 1103515245u + 12345u) {
        uint16_t base = (uint16_t)(21000 + (x >> 8) % 2998); /* this binary's range */
        int ok = 1;
        for (int k = 0; k < 2 && ok; k++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            int one = 1;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
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

static void make_tmpdir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/rkv-durable-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Shows the lines of a server log that tell what durability did. */
static void print_log_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "restarted") || strstr(line, "re-joined") || strstr(line, "durable") ||
            strstr(line, "without reapplying"))
            printf("%s: %s", strrchr(path, '/') + 1, line);
    fclose(f);
}

/* Shows a whole log (a server's that ended otherwise than expected). */
static void show_log(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof(line), f))
        printf("%s: %s", strrchr(path, '/') + 1, line);
    fclose(f);
}

static int file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

/* ---- the file format ---- */

static void test_crc32c(void **state)
{
    (void)state;
    static const char v[] = "123456789";
    assert_int_equal(rkv_crc32c(0, v, 9), 0xe3069283u); /* the standard check value */
    assert_int_equal(rkv_crc32c(rkv_crc32c(0, v, 4), v + 4, 5), 0xe3069283u);
    assert_int_equal(rkv_crc32c(0, v, 0), 0);
    /* Every path of the hardware CRC (three interleaved streams of 8 KiB
     * and of 256 bytes, then 8 bytes, then bytes), at odd offsets and
     * resumed mid-buffer, against a bitwise CRC. */
    size_t max = 3 * 8192 * 2 + 3 * 256 * 2 + 77;
    uint8_t *buf = malloc(max + 8);
    assert_non_null(buf);
    for (size_t i = 0; i < max + 8; i++)
        buf[i] = (uint8_t)(rkv_mix64(i) >> 7);
    static const size_t lens[] = {0,           1,
                                  7,           8,
                                  255,         256,
                                  767,         768,
                                  769,         3 * 8192 - 1,
                                  3 * 8192,    3 * 8192 + 3 * 256 + 9,
                                  6 * 8192 + 5};
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        for (size_t off = 0; off < 8; off += 3) {
            const uint8_t *p = buf + off;
            size_t n = lens[k] < max ? lens[k] : max;
            uint32_t want = 0xffffffffu;
            for (size_t i = 0; i < n; i++) {
                want ^= p[i];
                for (int b = 0; b < 8; b++)
                    want = want & 1 ? (want >> 1) ^ 0x82f63b78u : want >> 1;
            }
            want = ~want;
            assert_int_equal(rkv_crc32c(0, p, n), want);
            assert_int_equal(rkv_crc32c(rkv_crc32c(0, p, n / 3), p + n / 3, n - n / 3), want);
            /* Two pieces' CRCs, computed apart (a snapshot's rows and
             * state are), combined. */
            assert_int_equal(rkv_crc32c_combine(rkv_crc32c(0, p, n / 3),
                                                rkv_crc32c(0, p + n / 3, n - n / 3), n - n / 3),
                             want);
        }
    }
    assert_int_equal(rkv_crc32c_combine(0x12345678u, 0, 0), 0x12345678u);
    free(buf);
}

/* The raw CRC-32C register s advanced over len zero bytes, bit by bit. */
static uint32_t crc_zeros_bitwise(uint32_t s, size_t len)
{
    for (size_t i = 0; i < 8 * len; i++)
        s = s & 1 ? (s >> 1) ^ 0x82f63b78u : s >> 1;
    return s;
}

/* Every entry of the generated tables that combine the interleaved CRC's
 * streams (few of them are met by any one buffer). */
static void test_crc32c_tables(void **state)
{
    (void)state;
    const uint32_t(*tabs[2])[256] = {crc32c_long, crc32c_short};
    const size_t lens[2] = {CRC32C_LONG, CRC32C_SHORT};
    for (int t = 0; t < 2; t++) {
        uint32_t bit[32];
        for (int b = 0; b < 32; b++)
            bit[b] = crc_zeros_bitwise(1u << b, lens[t]);
        for (int k = 0; k < 4; k++) {
            for (uint32_t n = 0; n < 256; n++) {
                uint32_t x = n << (8 * k), want = 0;
                for (int b = 0; b < 32; b++)
                    if (x >> b & 1)
                        want ^= bit[b];
                if (tabs[t][k][n] != want)
                    fail_msg("table %d [%d][%u]: 0x%08x, expected 0x%08x", t, k, n, tabs[t][k][n],
                             want);
            }
        }
    }
}

/* Two tensors (an explicit book; optimizer state) and three clients. */
struct snap_fixture {
    char dir[64], path[128];
    uint64_t seqs[3];
    uint32_t book[6];
    uint64_t local[6];
    float data1[3 * 2];
    double data2[2 * 3], state2[2 * 3];
    struct rkv_snap_tensor ts[2];
    struct rkv_snap s;
    uint8_t *buf;
    size_t len;
};

static void fixture_build(struct snap_fixture *f)
{
    memset(f, 0, sizeof(*f));
    make_tmpdir(f->dir, sizeof(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/rkv-m1.snap", f->dir);
    uint64_t seqs[3] = {7, (3ull << RKV_SEQ_TAG_SHIFT) | 99, 0};
    memcpy(f->seqs, seqs, sizeof(seqs));
    uint32_t book[6] = {0, 1, 1, 0, 1, 0};
    memcpy(f->book, book, sizeof(book));
    uint64_t local[6] = {2, 1, 0, 0, 2, 1}; /* a user-given local index */
    memcpy(f->local, local, sizeof(local));
    for (int i = 0; i < 6; i++) {
        f->data1[i] = (float)i + 0.5f;
        f->data2[i] = -(double)i;
        f->state2[i] = 100.0 + i;
    }
    struct rkv_wire_tensor d1 = {.name = "emb",
                                 .dtype = RKV_F32,
                                 .policy = RKV_PART_EXPLICIT,
                                 .row_len = 2,
                                 .rows = 6,
                                 .init_seed = 5,
                                 .book_len = 6};
    struct rkv_wire_tensor d2 = {.name = "w",
                                 .dtype = RKV_F64,
                                 .policy = RKV_PART_RANGE,
                                 .row_len = 3,
                                 .rows = 4,
                                 .with_state = 1,
                                 .init = 1};
    f->ts[0] = (struct rkv_snap_tensor){.id = 1,
                                        .local_rows = 3,
                                        .row_bytes = 8,
                                        .book_len = 6,
                                        .desc = d1,
                                        .book = f->book,
                                        .has_local = 1,
                                        .local = (const uint8_t *)f->local,
                                        .data = (const uint8_t *)f->data1};
    f->ts[1] = (struct rkv_snap_tensor){.id = 3,
                                        .with_state = 1,
                                        .local_rows = 2,
                                        .row_bytes = 24,
                                        .desc = d2,
                                        .data = (const uint8_t *)f->data2,
                                        .state = (const uint8_t *)f->state2};
    f->s = (struct rkv_snap){.machine = 1,
                             .lineage = 0xabcdef,
                             .generation = 42,
                             .wall_ns = 1700000000000000000ull,
                             .fingerprint = 0x1234,
                             .n_clients = 3,
                             .last_seq = f->seqs,
                             .n_tensors = 2,
                             .tensors = f->ts};
    uint64_t bytes;
    assert_int_equal(rkv_snap_size(&f->s, &bytes), 0);
    f->len = (size_t)bytes;
    f->buf = malloc(f->len);
    assert_non_null(f->buf);
    rkv_snap_encode(&f->s, f->buf);
    rkv_snap_seal(f->buf, f->len);
}

static void fixture_write(struct snap_fixture *f, const uint8_t *buf, size_t len)
{
    char err[256];
    uint32_t fsyncs = 0;
    int rc = rkv_file_replace(f->dir, "rkv-m1.snap", "rkv-m1.snap.tmp", buf, len, &fsyncs, err,
                              sizeof(err));
    if (rc < 0)
        fail_msg("%s", err);
    assert_int_equal(fsyncs, 2); /* the file, then the directory */
}

static void fixture_free(struct snap_fixture *f)
{
    free(f->buf);
    remove_tree(f->dir);
}

static void test_snapshot_roundtrip(void **state)
{
    (void)state;
    struct snap_fixture f;
    fixture_build(&f);
    fixture_write(&f, f.buf, f.len);
    struct rkv_snap got;
    char err[256];
    int rc = rkv_snap_read(f.path, 1, &got, err, sizeof(err));
    if (rc < 0)
        fail_msg("%s", err);
    assert_int_equal(got.machine, 1);
    assert_int_equal(got.lineage, 0xabcdef);
    assert_int_equal(got.generation, 42);
    assert_int_equal(got.wall_ns, 1700000000000000000ull);
    assert_int_equal(got.fingerprint, 0x1234);
    assert_int_equal(got.n_clients, 3);
    assert_memory_equal(got.last_seq, f.seqs, sizeof(f.seqs));
    assert_int_equal(got.n_tensors, 2);
    const struct rkv_snap_tensor *a = &got.tensors[0], *b = &got.tensors[1];
    assert_int_equal(a->id, 1);
    assert_string_equal(a->desc.name, "emb");
    assert_int_equal(a->desc.policy, RKV_PART_EXPLICIT);
    assert_int_equal(a->book_len, 6);
    assert_memory_equal(a->book, f.book, sizeof(f.book));
    assert_int_equal(a->has_local, 1);
    assert_memory_equal(a->local, f.local, sizeof(f.local));
    assert_memory_equal(a->data, f.data1, sizeof(f.data1));
    assert_null(a->state);
    assert_int_equal(b->id, 3);
    assert_string_equal(b->desc.name, "w");
    assert_int_equal(b->desc.init, 1);
    assert_int_equal(b->with_state, 1);
    assert_null(b->book);
    assert_int_equal(b->has_local, 0);
    assert_null(b->local);
    assert_memory_equal(b->data, f.data2, sizeof(f.data2));
    assert_memory_equal(b->state, f.state2, sizeof(f.state2));
    rkv_snap_free(&got);
    /* Another machine's file is refused. */
    assert_int_equal(rkv_snap_read(f.path, 0, &got, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, "holds machine 1, not 0"));
    /* No file: a distinct code, so a server knows to start a new lineage. */
    remove_tree(f.dir);
    assert_int_equal(rkv_snap_read(f.path, 1, &got, err, sizeof(err)), -RKV_ENOTENSOR);
    free(f.buf);
}

static void expect_refused(struct snap_fixture *f, const uint8_t *buf, size_t len, const char *why)
{
    fixture_write(f, buf, len);
    struct rkv_snap got;
    char err[256] = "";
    assert_int_equal(rkv_snap_read(f->path, 1, &got, err, sizeof(err)), -RKV_EIO);
    if (!strstr(err, why) || !strstr(err, f->path))
        fail_msg("expected '%s' naming %s, got: %s", why, f->path, err);
}

static void test_snapshot_truncated(void **state)
{
    (void)state;
    struct snap_fixture f;
    fixture_build(&f);
    expect_refused(&f, f.buf, f.len - 1, "truncated");
    expect_refused(&f, f.buf, f.len / 2, "(torn write?)");
    expect_refused(&f, f.buf, 10, "shorter than its 72-byte header");
    expect_refused(&f, f.buf, 0, "truncated");
    fixture_free(&f);
}

static void test_snapshot_flipped_byte(void **state)
{
    (void)state;
    struct snap_fixture f;
    fixture_build(&f);
    uint8_t *bad = malloc(f.len);
    assert_non_null(bad);
    /* Every byte of the body, one at a time, is caught by the body CRC. */
    for (size_t i = RKV_SNAP_HDR_BYTES; i < f.len; i += 7) {
        memcpy(bad, f.buf, f.len);
        bad[i] ^= 0x10;
        expect_refused(&f, bad, f.len, "checksum mismatch over its");
    }
    /* And a header field by the header's own. */
    memcpy(bad, f.buf, f.len);
    bad[20] ^= 1; /* lineage */
    expect_refused(&f, bad, f.len, "header checksum mismatch");
    memcpy(bad, f.buf, f.len);
    bad[0] ^= 1;
    expect_refused(&f, bad, f.len, "not an rkv snapshot");
    free(bad);
    fixture_free(&f);
}

/* A snapshot of format version 1 (before copy LSNs: one copy of
 * everything at once) still reads, with no copy LSNs (nothing to skip at
 * replay); version 2 carries them. */
static void test_snapshot_version1_read(void **state)
{
    (void)state;
    struct snap_fixture f;
    fixture_build(&f);
    struct rkv_snap got;
    char err[256];
    assert_int_equal(rkv_snap_decode(f.path, f.buf, f.len, 1, &got, err, sizeof(err)), 0);
    assert_int_equal(got.version, 2);
    assert_int_equal(got.tensors[0].chunk_rows, 3); /* one chunk, copied at LSN 0 */
    assert_non_null(got.tensors[0].copy_lsn);
    free(got.tensors);
    f.s.version = 1;
    uint64_t bytes;
    assert_int_equal(rkv_snap_size(&f.s, &bytes), 0);
    assert_int_equal(bytes, f.len - 2 * 8 - 2 * 8); /* no chunk_rows, no LSN, per tensor */
    uint8_t *v1 = malloc((size_t)bytes);
    assert_non_null(v1);
    rkv_snap_encode(&f.s, v1);
    rkv_snap_seal(v1, (size_t)bytes);
    fixture_write(&f, v1, (size_t)bytes);
    if (rkv_snap_read(f.path, 1, &got, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(got.version, 1);
    assert_int_equal(got.n_tensors, 2);
    assert_int_equal(got.tensors[1].chunk_rows, 0);
    assert_null(got.tensors[1].copy_lsn);
    assert_memory_equal(got.tensors[1].state, f.state2, sizeof(f.state2));
    rkv_snap_free(&got);
    free(v1);
    fixture_free(&f);
}

static void test_snapshot_wrong_version(void **state)
{
    (void)state;
    struct snap_fixture f;
    fixture_build(&f);
    uint32_t v = 3;
    memcpy(f.buf + 8, &v, 4);
    rkv_snap_seal(f.buf, f.len); /* a well-formed file of a future version */
    expect_refused(&f, f.buf, f.len, "format version 3, this build reads versions 1 to 2");
    /* A byte of the version field flipped: "format version 16711682" said
     * nothing of the damage (an outside tester). */
    f.buf[10] ^= 0xff;
    expect_refused(&f, f.buf, f.len, "does not match: a damaged header");
    fixture_free(&f);
}

/* ---- exactly once, across a retry and a restart (servers in this process) ---- */

struct cluster {
    char dir[64];
    struct rkv_machine machines[2];
    struct rkv_config cfg;
    struct rkv_server *srv[2];
    pthread_t thr0;
};

struct client_arg {
    const struct rkv_config *cfg;
    struct rkv_client *cli;
    char err[256];
};

static void *client_create_main(void *arg)
{
    struct client_arg *a = arg;
    if (rkv_client_create(a->cfg, &a->cli, a->err, sizeof(a->err)) < 0)
        a->cli = NULL;
    return NULL;
}

static void *server_main(void *arg)
{
    rkv_server_run(arg);
    return NULL;
}

struct run_flag {
    struct rkv_server *srv;
    atomic_int done;
};

static void *server_run_flag(void *arg)
{
    struct run_flag *f = arg;
    rkv_server_run(f->srv);
    atomic_store(&f->done, 1);
    return NULL;
}

static void cluster_config(struct cluster *c, int durable, int dynamic)
{
    memset(c, 0, sizeof(*c));
    uint16_t base = free_base_port();
    for (int m = 0; m < 2; m++) {
        snprintf(c->machines[m].host, sizeof(c->machines[m].host), "%s",
                 m == 1 && dynamic ? "" : "127.0.0.1");
        c->machines[m].base_port = (uint16_t)(base + m);
        c->machines[m].servers = 1;
    }
    rkv_config_defaults(&c->cfg);
    c->cfg.n_machines = 2;
    c->cfg.machines = c->machines;
    c->cfg.n_workers = 1;
    c->cfg.timeout_ms = 5000;
    c->cfg.connect_retry_ms = 5000;
    c->cfg.log_level = 0;
    snprintf(c->cfg.shm_prefix, sizeof(c->cfg.shm_prefix), "rkvd-%d-%u", (int)getpid(), base);
    if (durable) {
        make_tmpdir(c->dir, sizeof(c->dir));
        snprintf(c->cfg.durable_dir, sizeof(c->cfg.durable_dir), "%s", c->dir);
    }
}

/* Server 1 gets no run thread: its engine serves anyway, and destroying it
 * models the machine's loss (connections drop, its shared memory goes). */
static struct rkv_server *server_create(struct cluster *c, uint32_t m)
{
    struct rkv_config cfg = c->cfg;
    cfg.machine_id = m;
    struct rkv_server *srv;
    char err[256];
    if (rkv_server_create(&cfg, 0, &srv, err, sizeof(err)) < 0)
        fail_msg("server %u: %s", m, err);
    return srv;
}

/* A client speaking the wire protocol itself, to send one push twice. */
struct rawcli {
    struct rkv_port *port;
    struct rkv_nic *nic;
    struct rkv_engine *eng;
    struct rkv_peer *peer;
    struct rkv_mutex *mu;
    struct rkv_cond *cv;
    int status, type, got;
};

static void raw_on_msg(void *user, struct rkv_peer *peer, const struct rkv_msg *m)
{
    struct rawcli *r = user;
    (void)peer;
    r->port->ops->mutex_lock(r->mu);
    r->status = m->h.status;
    r->type = m->h.type;
    r->got++;
    r->port->ops->cond_broadcast(r->cv);
    r->port->ops->mutex_unlock(r->mu);
}

static void raw_open(struct rawcli *r, const struct rkv_config *cfg, uint32_t machine)
{
    const struct rkv_machine *target = &cfg->machines[machine];
    memset(r, 0, sizeof(*r));
    assert_int_equal(rkv_port_posix_create("raw", 0, 3, &r->port), 0);
    assert_int_equal(rkv_nic_tcp_ops.open(r->port, NULL, &r->nic), 0);
    struct rkv_engine_cfg ec = {.node_id = RKV_CLIENT_NODE_BASE,
                                .rx_depth = 64,
                                .ctrl_buf_bytes = 8192,
                                .max_slots = 64,
                                .max_slot_bytes = 1 << 30};
    char err[128];
    assert_int_equal(
        rkv_engine_create(r->port, r->nic, &ec, raw_on_msg, NULL, r, &r->eng, err, sizeof(err)), 0);
    assert_int_equal(r->port->ops->mutex_create(r->port, &r->mu), 0);
    assert_int_equal(r->port->ops->cond_create(r->port, &r->cv), 0);
    assert_int_equal(rkv_engine_start(r->eng), 0);
    assert_int_equal(rkv_engine_connect(r->eng, "127.0.0.1", target->base_port, 2000, &r->peer), 0);
    /* A server takes the client id from the connection's HELLO, never from
     * a push's sender field: say it is client 0, as the pushes claim. */
    size_t len = RKV_PROTO_HDR_BYTES + 64;
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(r->eng, len, &tx), 0);
    struct rkv_hdr h = {.type = RKV_MSG_HELLO, .req_id = 1, .sender = RKV_CLIENT_NODE_BASE};
    struct rkv_wire_hello w = {.machine_id = machine,
                               .want_id = 0,
                               .nonce = 7,
                               .cluster = rkv_cfg_fingerprint(cfg),
                               .rx_depth = cfg->rx_depth,
                               .ctrl_buf_bytes = cfg->ctrl_buf_bytes};
    len = rkv_proto_enc_hello(rkv_engine_tx_buf(tx), &h, &w);
    assert_int_equal(rkv_engine_send(r->eng, r->peer, tx, len), 0);
    r->port->ops->mutex_lock(r->mu);
    while (r->got == 0)
        assert_int_equal(r->port->ops->cond_wait(r->cv, r->mu, 5000000000ull), 0);
    assert_int_equal(r->type, RKV_MSG_HELLO_REPLY);
    r->port->ops->mutex_unlock(r->mu);
}

static void raw_close(struct rawcli *r)
{
    rkv_engine_destroy(r->eng);
    r->nic->ops->close(r->nic);
    r->port->ops->cond_destroy(r->cv);
    r->port->ops->mutex_destroy(r->mu);
    r->port->ops->destroy(r->port);
}

/* A SUM of `v` into every element of row `id` of f32 tensor 1, as client 0
 * with sequence `seq`; returns the reply's status. */
static int raw_push(struct rawcli *r, uint64_t id, float v, uint64_t seq)
{
    float row[4] = {v, v, v, v};
    size_t len = RKV_PROTO_HDR_BYTES + 8 + sizeof(row);
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(r->eng, len, &tx), 0);
    struct rkv_hdr h = {.type = RKV_MSG_PUSH,
                        .req_id = seq,
                        .tensor_id = 1,
                        .sender = RKV_CLIENT_NODE_BASE + 0,
                        .count = 1,
                        .row_bytes = sizeof(row),
                        .op = RKV_OP_SUM};
    int before = r->got;
    assert_int_equal(rkv_proto_enc_push(rkv_engine_tx_buf(tx), &h, &id, row), len);
    assert_int_equal(rkv_engine_send(r->eng, r->peer, tx, len), 0);
    r->port->ops->mutex_lock(r->mu);
    while (r->got == before)
        assert_int_equal(r->port->ops->cond_wait(r->cv, r->mu, 5000000000ull), 0);
    int st = r->type == RKV_MSG_PUSH_ACK ? 0 : r->status;
    r->port->ops->mutex_unlock(r->mu);
    return st;
}

static float pull_row60(struct rkv_client *cli)
{
    uint64_t id = 60;
    float got[4];
    int rc = rkv_client_pull(cli, "t", &id, 1, got);
    if (rc < 0)
        fail_msg("pull: %s", rkv_client_errmsg(cli));
    return got[0];
}

static const struct rkv_tensor_desc T_F32 = {
    .name = "t", .dtype = RKV_F32, .rows = 100, .row_len = 4, .policy = RKV_PART_RANGE};

/* The checking client lives on client_machine: 0, its pulls of row 60 are
 * remote and retried; 1, they read machine 1's shard directly, which the
 * restart makes anew. */
static void run_exactly_once(uint32_t client_machine)
{
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.retry_ms = 5000; /* the checking client rides over server 1's restart */
    c.srv[0] = server_create(&c, 0);
    assert_int_equal(pthread_create(&c.thr0, NULL, server_main, c.srv[0]), 0);
    c.srv[1] = server_create(&c, 1);
    struct rkv_client *cli;
    char err[256];
    struct rkv_config ccfg = c.cfg;
    ccfg.machine_id = client_machine;
    if (rkv_client_create(&ccfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    /* The raw connection stands for client 0 retrying: it claims the id at
     * server 1 before the client's own connection does, so it holds it
     * there (another claimant's pushes are not deduplicated under the id:
     * server.c srv_dedup_id). */
    const uint64_t tag = 0x5aull << RKV_SEQ_TAG_SHIFT;
    struct rawcli r;
    raw_open(&r, &c.cfg, 1);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    assert_int_equal(raw_push(&r, 60, 1.0f, tag | 5), 0);
    assert_int_equal(raw_push(&r, 60, 1.0f, tag | 5), 0); /* ack lost, client retried */
    assert_true(pull_row60(cli) == 1.0f);
    raw_close(&r);

    /* The machine is lost and comes back from its snapshot, before the
     * client hears of it (every notification held): a remote pull meets a
     * dead connection, a local one a shard made anew. First server 1 hears
     * of the raw client's hang-up: held, it would hold server 1's progress
     * task, its destroy would wait for it, and the hold would be over
     * before its connections closed. */
    usleep(300 * 1000);
    down_hold(1000);
    rkv_server_destroy(c.srv[1]);
    c.srv[1] = server_create(&c, 1);
    raw_open(&r, &c.cfg, 1);                              /* first again: it holds the claim */
    assert_true(pull_row60(cli) == 1.0f);                 /* the client reconnects (retry_ms) */
    assert_int_equal(raw_push(&r, 60, 1.0f, tag | 5), 0); /* the sequence survived */
    assert_true(pull_row60(cli) == 1.0f);
    assert_int_equal(raw_push(&r, 60, 1.0f, tag | 4), 0); /* older: applied already */
    assert_true(pull_row60(cli) == 1.0f);
    assert_int_equal(raw_push(&r, 60, 2.0f, tag | 6), 0);
    assert_true(pull_row60(cli) == 3.0f);
    /* Another tag is a new incarnation of client 0: its stream starts over. */
    assert_int_equal(raw_push(&r, 60, 4.0f, (0x77ull << RKV_SEQ_TAG_SHIFT) | 1), 0);
    assert_true(pull_row60(cli) == 7.0f);
    raw_close(&r);

    /* Lost again; the client sees it go but has nothing for the restarted
     * server, and yet stopping the servers stops it too. */
    rkv_server_destroy(c.srv[1]);
    usleep(200 * 1000);
    c.srv[1] = server_create(&c, 1);
    struct run_flag f1 = {.srv = c.srv[1]};
    pthread_t thr1;
    assert_int_equal(pthread_create(&thr1, NULL, server_run_flag, &f1), 0);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    for (int i = 0; i < 500 && !atomic_load(&f1.done); i++)
        usleep(10 * 1000);
    assert_true(atomic_load(&f1.done));
    pthread_join(thr1, NULL);
    rkv_client_destroy(cli);
    pthread_join(c.thr0, NULL);
    rkv_server_destroy(c.srv[0]);
    rkv_server_destroy(c.srv[1]);
    remove_tree(c.dir);
}

static void test_exactly_once_across_restart(void **state)
{
    (void)state;
    run_exactly_once(0);
}

/* A worker on the lost machine reads the restored shard, not the old one. */
static void test_colocated_client_follows_restart(void **state)
{
    (void)state;
    run_exactly_once(1);
}

/* A corrupted snapshot stops the restart with the reason; nothing half-loaded. */
static void test_corrupt_snapshot_refused_at_restart(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    char path[128];
    snprintf(path, sizeof(path), "%s/rkv-m1.snap", c.dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("RKVSNAP but not really", f);
    fclose(f);
    struct rkv_config cfg = c.cfg;
    cfg.machine_id = 1;
    struct rkv_server *srv;
    char err[256];
    assert_int_equal(rkv_server_create(&cfg, 0, &srv, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "shorter than its 72-byte header"));
    snprintf(cfg.durable_dir, sizeof(cfg.durable_dir), "%s/missing", c.dir);
    assert_int_equal(rkv_server_create(&cfg, 0, &srv, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "missing: No such file or directory"));
    remove_tree(c.dir);
}

/* A client without durable mode would write co-located rows around the
 * snapshots: it is refused at HELLO, saying why. */
static void test_durable_mismatch_refused(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.connect_retry_ms = 1000;
    c.cfg.timeout_ms = 1000;
    struct rkv_server *s0 = server_create(&c, 0);
    struct rkv_config plain = c.cfg;
    plain.durable_dir[0] = 0;
    struct rkv_client *cli;
    char err[256];
    assert_int_equal(rkv_client_create(&plain, &cli, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "durable mode differ"));
    rkv_server_destroy(s0);
    remove_tree(c.dir);
}

/* ---- a machine lost under worker processes pushing over TCP ---- */

#define E2E_ROWS 64u
#define E2E_HALF (E2E_ROWS / 2) /* rows below live on machine 0 */
#define E2E_LEN 4u
#define E2E_ITERS 300u
#define E2E_KILL_AFTER 120u /* acknowledged push calls, all workers together */

static const struct rkv_tensor_desc T_SUM = {.name = "sum",
                                             .dtype = RKV_F64,
                                             .rows = E2E_ROWS,
                                             .row_len = E2E_LEN,
                                             .policy = RKV_PART_RANGE};
static const struct rkv_tensor_desc T_ASG = {
    .name = "asg", .dtype = RKV_I64, .rows = E2E_ROWS, .row_len = 2, .policy = RKV_PART_RANGE};

/* Iteration i of worker w sums into one row of each machine. */
static void e2e_sum_rows(uint32_t w, uint32_t i, uint64_t ids[2])
{
    ids[0] = i % E2E_HALF;
    ids[1] = E2E_HALF + (i * 7 + w) % E2E_HALF;
}

static double e2e_value(uint32_t w, uint32_t i, uint32_t j)
{
    return (double)(w * 1000 + i + 1) * (j + 1);
}

/* Set while another thread of this process is inside a client call: a
 * server forked then carries that call's allocations, which
 * LeakSanitizer would report as its own at exit. */
static int spawn_mid_call;
static const char *spawn_cut_marker; /* set: the server registers sum_then_cut */
/* Set: SIGTERM stops the server as the rkv binary's does (rkv_server_stop
 * from a thread that waits for it, then destroy), not the default kill. */
static int spawn_graceful;

static void *graceful_main(void *arg)
{
    sigset_t set;
    int sig;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    if (sigwait(&set, &sig) == 0)
        rkv_server_stop(arg);
    return NULL;
}

/* Custom op CUT_OP: a sum, after which the first server to apply one
 * (the one that removes the marker file, user) cuts every socket of its
 * process, so that its acknowledgement never goes: a server that died
 * right after the apply, its row lock let go. */
#define CUT_OP RKV_OP_CUSTOM
static void sum_then_cut(enum rkv_dtype dt, void *row, void *state, const void *in, size_t n_elems,
                         double param, void *user)
{
    (void)dt;
    (void)state;
    (void)param;
    float *r = row;
    const float *v = in;
    for (size_t i = 0; i < n_elems; i++)
        r[i] += v[i];
    if (!user || unlink((const char *)user) != 0)
        return;
    for (int fd = 3; fd < 4096; fd++) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
            shutdown(fd, SHUT_RDWR);
    }
}

static pid_t spawn_server(const struct rkv_config *cfg0, uint32_t m, uint32_t local,
                          const char *log_path)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid != 0) {
        child_add(pid);
        return pid;
    }
    if (log_path && !freopen(log_path, "w", stderr))
        _exit(4);
    struct rkv_config cfg = *cfg0;
    cfg.machine_id = m;
    cfg.log_level = 2;
    struct rkv_server *srv;
    char err[256];
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    if (spawn_graceful) /* before the server's threads: they inherit it */
        pthread_sigmask(SIG_BLOCK, &term, NULL);
    if (rkv_server_create(&cfg, local, &srv, err, sizeof(err)) < 0) {
        fprintf(stderr, "server %u.%u: %s\n", m, local, err);
        fflush(stderr); /* a file now: _exit would drop what is buffered */
        _exit(3);
    }
    if (spawn_cut_marker &&
        rkv_server_register_handler(srv, CUT_OP, sum_then_cut, (void *)spawn_cut_marker) < 0)
        _exit(5);
    pthread_t stopper;
    if (spawn_graceful && pthread_create(&stopper, NULL, graceful_main, srv) != 0)
        _exit(6);
    rkv_server_run(srv);
    rkv_server_destroy(srv);
    if (spawn_mid_call)
        _exit(0);
    exit(0); /* not _exit: LeakSanitizer checks the server too */
}

static int e2e_fail(struct rkv_client *cli, const char *what)
{
    fprintf(stderr, "worker %u: %s: %s\n", rkv_client_id(cli), what, rkv_client_errmsg(cli));
    return 3;
}

/* Worker 0 checks every row: each push summed exactly once, the last assign kept. */
static int e2e_verify(struct rkv_client *cli, uint32_t n_workers)
{
    double expect[E2E_ROWS][E2E_LEN] = {{0}}, got[E2E_ROWS][E2E_LEN];
    for (uint32_t w = 0; w < n_workers; w++) {
        for (uint32_t i = 0; i < E2E_ITERS; i++) {
            uint64_t ids[2];
            e2e_sum_rows(w, i, ids);
            for (int k = 0; k < 2; k++)
                for (uint32_t j = 0; j < E2E_LEN; j++)
                    expect[ids[k]][j] += e2e_value(w, i, j);
        }
    }
    uint64_t all[E2E_ROWS];
    for (uint32_t r = 0; r < E2E_ROWS; r++)
        all[r] = r;
    if (rkv_client_pull(cli, "sum", all, E2E_ROWS, got) < 0)
        return e2e_fail(cli, "pull sum");
    int bad = 0;
    for (uint32_t r = 0; r < E2E_ROWS; r++)
        for (uint32_t j = 0; j < E2E_LEN; j++)
            if (got[r][j] != expect[r][j] && bad++ < 5)
                fprintf(stderr, "sum row %u[%u]: %.1f, expected %.1f\n", r, j, got[r][j],
                        expect[r][j]);
    int64_t asg[E2E_ROWS][2];
    if (rkv_client_pull(cli, "asg", all, E2E_ROWS, asg) < 0)
        return e2e_fail(cli, "pull asg");
    for (uint32_t w = 0; w < n_workers; w++) {
        for (uint32_t k = 0; k < 2; k++) {
            uint32_t r = w + k * E2E_HALF;
            if ((asg[r][0] != E2E_ITERS || asg[r][1] != -(int64_t)E2E_ITERS) && bad++ < 10)
                fprintf(stderr, "asg row %u: %lld %lld, expected %u\n", r, (long long)asg[r][0],
                        (long long)asg[r][1], E2E_ITERS);
        }
    }
    return bad ? 1 : 0;
}

static int e2e_worker(const struct rkv_config *cfg, int progress_fd)
{
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(cfg, &cli, err, sizeof(err)) < 0) {
        fprintf(stderr, "worker: %s\n", err);
        return 3;
    }
    uint32_t w = rkv_client_id(cli);
    int code = 0;
    if (w == 0 && (rkv_client_init_data(cli, &T_SUM) < 0 || rkv_client_init_data(cli, &T_ASG) < 0))
        code = e2e_fail(cli, "init");
    if (code == 0 && rkv_client_barrier(cli) < 0)
        code = e2e_fail(cli, "barrier");
    for (uint32_t i = 0; i < E2E_ITERS && code == 0; i++) {
        uint64_t ids[2];
        double rows[2][E2E_LEN];
        e2e_sum_rows(w, i, ids);
        for (int k = 0; k < 2; k++)
            for (uint32_t j = 0; j < E2E_LEN; j++)
                rows[k][j] = e2e_value(w, i, j);
        uint64_t own[2] = {w, E2E_HALF + w};
        int64_t asg[2][2] = {{i + 1, -(int64_t)(i + 1)}, {i + 1, -(int64_t)(i + 1)}};
        if (rkv_client_push(cli, "sum", ids, 2, rows, RKV_OP_SUM, 0) < 0)
            code = e2e_fail(cli, "push sum");
        else if (rkv_client_push(cli, "asg", own, 2, asg, RKV_OP_ASSIGN, 0) < 0)
            code = e2e_fail(cli, "push asg");
        else if (write(progress_fd, "+", 1) != 1)
            code = 3;
    }
    if (code == 0 && rkv_client_barrier(cli) < 0)
        code = e2e_fail(cli, "barrier after pushes");
    if (code == 0 && w == 0)
        code = e2e_verify(cli, cfg->n_workers);
    /* Everybody checked before anyone stops the servers. */
    if (rkv_client_barrier(cli) == 0 && w == 0)
        rkv_client_shutdown_servers(cli);
    rkv_client_destroy(cli);
    return code;
}

static void unlink_machine_shards(const struct rkv_config *cfg, uint32_t m)
{
    char name[128];
    for (uint32_t t = 1; t <= 2; t++) {
        snprintf(name, sizeof(name), "/%s-m%u-t%u", cfg->shm_prefix, m, t);
        shm_unlink(name);
    }
}

/* Whether any of machine m's segments (its meta, tensors 1 and 2) is in
 * /dev/shm. */
static int machine_shm_present(const struct rkv_config *cfg, uint32_t m)
{
    char name[128];
    snprintf(name, sizeof(name), "/dev/shm/%s-m%u-meta", cfg->shm_prefix, m);
    int n = access(name, F_OK) == 0;
    for (uint32_t t = 1; t <= 2; t++) {
        snprintf(name, sizeof(name), "/dev/shm/%s-m%u-t%u", cfg->shm_prefix, m, t);
        n += access(name, F_OK) == 0;
    }
    return n;
}

static void unlink_machine_shm(const struct rkv_config *cfg, uint32_t m)
{
    char name[128];
    snprintf(name, sizeof(name), "/%s-m%u-meta", cfg->shm_prefix, m);
    shm_unlink(name);
    for (uint32_t t = 1; t <= 2; t++) {
        snprintf(name, sizeof(name), "/%s-m%u-t%u", cfg->shm_prefix, m, t);
        shm_unlink(name);
    }
}

/* Waits (up to 20 s) until a server listens on m's first port: a client
 * call with a short retry budget (shutdown's 2 s) is made once the
 * restarted server can answer, however slowly the host started it. */
static void wait_listening(const struct rkv_machine *m)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(m->base_port)};
    assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &a.sin_addr), 1);
    for (int i = 0; i < 2000; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        close(fd);
        if (ok)
            return;
        usleep(10 * 1000);
    }
    fail_msg("nothing listens on port %u after 20 s", m->base_port);
}

/* Waits up to 120 s (valgrind and coverage on a loaded host included)
 * for a server to end: one that never does fails its test, which the
 * teardown then kills, instead of holding the whole binary until ctest's
 * timeout with no test named (CI met that once). */
static int wait_exit(pid_t pid)
{
    int st = 0;
    pid_t got = 0;
    for (int i = 0; i < 12000 && (got = waitpid(pid, &st, WNOHANG)) == 0; i++)
        usleep(10 * 1000);
    if (got == 0)
        fail_msg("process %d has not ended after 120 s", (int)pid);
    assert_int_equal(got, pid);
    child_forget(pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Regression: outside durable mode, with retry_ms, a push whose server
 * went after applying it and before acknowledging it was sent again to a
 * sibling of the same machine (they serve the same memory), which applied
 * it again, and the call returned 0: +7 for 6 acknowledged pushes of +1
 * (an outside tester, the acknowledgement held back by strace). Nothing
 * records what a machine applied outside durable mode: such a push is
 * not retried, and the call says it may have been applied. */
static void test_push_maybe_applied_not_retried(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 0, 0);
    c.machines[1].servers = 2;
    c.cfg.retry_ms = 5000;
    char marker[128];
    snprintf(marker, sizeof(marker), "/tmp/rkv-cut-%d", (int)getpid());
    FILE *f = fopen(marker, "w");
    assert_non_null(f);
    fclose(f);
    spawn_cut_marker = marker;
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s10 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    pid_t s11 = spawn_server(&c.cfg, 1, 1, "/dev/null");
    spawn_cut_marker = NULL;
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_register_handler(cli, CUT_OP, sum_then_cut, NULL), 0);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    uint64_t id = 60; /* machine 1's */
    float v[4] = {42, 42, 42, 42}, got[4];
    int rc = rkv_client_push(cli, "t", &id, 1, v, CUT_OP, 0);
    int cut = access(marker, F_OK) != 0;
    unlink(marker);
    if (!cut)
        fail_msg("no server applied the push: %d %s", rc, rkv_client_errmsg(cli));
    if (rc != -RKV_EPEERDEAD || !strstr(rkv_client_errmsg(cli), "may have applied"))
        fail_msg("push whose server went after applying it: %d %s", rc, rkv_client_errmsg(cli));
    /* Applied once; the machine's other server serves it (a pull is
     * retried there). */
    if ((rc = rkv_client_pull(cli, "t", &id, 1, got)) < 0)
        fail_msg("pull: %s", rkv_client_errmsg(cli));
    if (got[0] != 42)
        fail_msg("row 60 holds %g after one push of 42", got[0]);
    rkv_client_destroy(cli);
    kill(s0, SIGKILL);
    kill(s10, SIGKILL);
    kill(s11, SIGKILL);
    wait_exit(s0);
    wait_exit(s10);
    wait_exit(s11);
    unlink_machine_shm(&c.cfg, 0);
    unlink_machine_shm(&c.cfg, 1);
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* lose_memory: the machine is lost (its shared memory goes with the
 * process); otherwise only the server process dies and its restart finds
 * the machine's memory (resume). */
static void run_crash_under_pushes(int lose_memory, uint32_t servers1)
{
    struct cluster c;
    cluster_config(&c, 1, 1); /* machine 1 announces itself to server 0 */
    c.machines[1].servers = servers1;
    c.cfg.n_workers = 2;
    c.cfg.retry_ms = 15000;
    char log0[128], log1[2][128], log1b[2][128];
    snprintf(log0, sizeof(log0), "%s/s0.log", c.dir);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, log0);
    pid_t s1[2];
    for (uint32_t l = 0; l < servers1; l++) {
        snprintf(log1[l], sizeof(log1[l]), "%s/s1.%u.log", c.dir, l);
        snprintf(log1b[l], sizeof(log1b[l]), "%s/s1.%u-restarted.log", c.dir, l);
        s1[l] = spawn_server(&c.cfg, 1, l, log1[l]);
    }
    int progress[2];
    assert_int_equal(pipe(progress), 0);
    pid_t w[2];
    for (int k = 0; k < 2; k++) {
        w[k] = fork();
        assert_true(w[k] >= 0);
        if (w[k] > 0)
            child_add(w[k]);
        if (w[k] == 0) {
            close(progress[0]);
            exit(e2e_worker(&c.cfg, progress[1]));
        }
    }
    close(progress[1]);
    char b;
    for (uint32_t n = 0; n < E2E_KILL_AFTER; n++)
        assert_int_equal(read(progress[0], &b, 1), 1);
    /* Machine 1 is lost mid-stream: its processes (and its memory). */
    for (uint32_t l = 0; l < servers1; l++)
        assert_int_equal(kill(s1[l], SIGKILL), 0);
    for (uint32_t l = 0; l < servers1; l++)
        assert_int_equal(wait_exit(s1[l]), 128 + SIGKILL);
    if (lose_memory == 1)
        unlink_machine_shm(&c.cfg, 1);
    if (lose_memory >= 2) /* only its shards: killed while it removed them at a stop */
        unlink_machine_shards(&c.cfg, 1);
    usleep(300 * 1000); /* workers meet the dead servers and keep retrying */
    pid_t s1b[2];
    /* 3: the machine's other server restarts first (it waits for the
     * first one's restore: it served the segment and failed). */
    for (uint32_t k = 0; k < servers1; k++) {
        uint32_t l = lose_memory == 3 ? servers1 - 1 - k : k;
        s1b[l] = spawn_server(&c.cfg, 1, l, log1b[l]);
        if (lose_memory == 3 && k + 1 < servers1)
            usleep(500 * 1000);
    }
    while (read(progress[0], &b, 1) == 1)
        ;
    close(progress[0]);
    assert_int_equal(wait_exit(w[0]), 0);
    assert_int_equal(wait_exit(w[1]), 0);
    assert_int_equal(wait_exit(s0), 0);
    print_log_lines(log0);
    for (uint32_t l = 0; l < servers1; l++) {
        assert_int_equal(wait_exit(s1b[l]), 0);
        print_log_lines(log1[l]);
        print_log_lines(log1b[l]);
        if (lose_memory && l == 0) {
            assert_true(file_contains(log1b[l], "restarted from snapshot"));
            assert_true(
                file_contains(log1b[l], "its logs are replayed next, to every push acknowledged"));
        } else {
            /* Killed between two applies, its memory is served as it is;
             * killed in the middle of one (as happens now and then under
             * a loaded host), a lone server rolls the machine back to the
             * snapshot, and one beside others keeps it and says so: every
             * acknowledged push is there either way, as checked below. */
            assert_true(
                file_contains(log1b[l], "restarted: serving machine 1's shared memory") ||
                file_contains(log1b[l], "but it died applying a push: rolled the machine back") ||
                file_contains(log1b[l], "and died applying pushes of"));
        }
        char rejoined[64];
        snprintf(rejoined, sizeof(rejoined), "server %u re-joined", 1 + l);
        assert_true(file_contains(log0, rejoined));
    }
    /* Machine 0's rows have only co-located writers, and yet every push
     * (2 x 2 x E2E_ITERS) and both INITs waited for server 0's snapshots:
     * durable mode routes them through it instead of the shared memory. */
    assert_true(file_contains(log0, "server 0 durable: 1202 acknowledgements waited"));
    remove_tree(c.dir);
    unlink_machine_shm(&c.cfg, 1); /* in case an assertion above left them */
}

/* Regression: a SIGTERM (a clean stop) of a machine's first server beside
 * a sibling that still served the machine removed the machine's memory
 * under the sibling, and the stopped server's restart was refused ("the
 * machine's shared memory is gone ... still runs"): an outside tester, where
 * kill -9 and a restart worked. The last server of a machine to stop
 * removes its memory; the first one restarts beside the sibling and every
 * acknowledged push is there (e2e_verify). */
static void test_first_server_stopped_beside_sibling_durable(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 1);
    c.machines[1].servers = 2;
    c.cfg.n_workers = 2;
    c.cfg.retry_ms = 15000;
    char log0[128], log10[128], log10b[128], log11[128];
    snprintf(log0, sizeof(log0), "%s/s0.log", c.dir);
    snprintf(log10, sizeof(log10), "%s/s1.0.log", c.dir);
    snprintf(log10b, sizeof(log10b), "%s/s1.0-restarted.log", c.dir);
    snprintf(log11, sizeof(log11), "%s/s1.1.log", c.dir);
    spawn_graceful = 1;
    pid_t s0 = spawn_server(&c.cfg, 0, 0, log0);
    pid_t s10 = spawn_server(&c.cfg, 1, 0, log10);
    pid_t s11 = spawn_server(&c.cfg, 1, 1, log11);
    int progress[2];
    assert_int_equal(pipe(progress), 0);
    pid_t w[2];
    for (int k = 0; k < 2; k++) {
        w[k] = fork();
        assert_true(w[k] >= 0);
        if (w[k] > 0)
            child_add(w[k]);
        if (w[k] == 0) {
            close(progress[0]);
            exit(e2e_worker(&c.cfg, progress[1]));
        }
    }
    close(progress[1]);
    char b;
    for (uint32_t n = 0; n < E2E_KILL_AFTER; n++)
        assert_int_equal(read(progress[0], &b, 1), 1);
    assert_int_equal(kill(s10, SIGTERM), 0);
    assert_int_equal(wait_exit(s10), 0);
    /* Its sibling still serves the machine: nothing of it is removed. */
    assert_int_equal(machine_shm_present(&c.cfg, 1), 3);
    pid_t s10b = spawn_server(&c.cfg, 1, 0, log10b);
    spawn_graceful = 0;
    while (read(progress[0], &b, 1) == 1)
        ;
    close(progress[0]);
    int w0 = wait_exit(w[0]), w1 = wait_exit(w[1]);
    int e0 = wait_exit(s0), e10b = wait_exit(s10b), e11 = wait_exit(s11);
    print_log_lines(log10);
    print_log_lines(log10b);
    print_log_lines(log11);
    assert_int_equal(w0, 0);
    assert_int_equal(w1, 0);
    assert_int_equal(e0, 0);
    assert_int_equal(e10b, 0);
    assert_int_equal(e11, 0);
    assert_true(file_contains(log10b, "restarted: serving machine 1's shared memory"));
    /* The last of the machine's servers to stop removed its memory. */
    assert_int_equal(machine_shm_present(&c.cfg, 1), 0);
    assert_int_equal(machine_shm_present(&c.cfg, 0), 0);
    remove_tree(c.dir);
}

/* Server 0 alone on machine 0, machine 1's two servers (local 0 in
 * c->srv[1], local 1 in *s11) and a client of machine 1 (cfg1) that made
 * tensor "t", all in this process. */
static struct rkv_client *two_server_machine(struct cluster *c, struct rkv_config *cfg1,
                                             struct rkv_server **s11)
{
    c->machines[1].servers = 2;
    c->srv[0] = server_create(c, 0);
    *cfg1 = c->cfg;
    cfg1->machine_id = 1;
    char err[512];
    struct rkv_client *cli = NULL;
    if (rkv_server_create(cfg1, 0, &c->srv[1], err, sizeof(err)) < 0 ||
        rkv_server_create(cfg1, 1, s11, err, sizeof(err)) < 0 ||
        rkv_client_create(cfg1, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    return cli;
}

/* The same outside durable mode, servers in this process: a co-located
 * worker's pushes went on failing -RKV_ESHUTDOWN once the machine's first
 * server stopped, though its sibling still served the machine. Now they
 * go on; the first server's restart beside the sibling is refused (made
 * anew, the machine would be two), and the sibling's stop removes it. */
static void test_first_server_stopped_beside_sibling(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 0, 0);
    struct rkv_config cfg1;
    struct rkv_server *s11 = NULL, *again = NULL;
    char err[512];
    struct rkv_client *cli = two_server_machine(&c, &cfg1, &s11);
    uint64_t id = 60; /* machine 1's: written in its shared memory */
    float one[4] = {1, 1, 1, 1};
    assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    rkv_server_destroy(c.srv[1]);
    assert_int_equal(machine_shm_present(&c.cfg, 1), 2); /* its meta and tensor 1 */
    if (rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0) < 0)
        fail_msg("push beside the machine's running second server: %s", rkv_client_errmsg(cli));
    assert_true(pull_row60(cli) == 2.0f);
    int rc = rkv_server_create(&cfg1, 0, &again, err, sizeof(err));
    if (rc != -RKV_EEXIST || !strstr(err, "local server 1 of machine 1") ||
        !strstr(err, "still serves it"))
        fail_msg("restart beside a running sibling outside durable mode: %d %s", rc, err);
    rkv_server_destroy(s11);
    assert_int_equal(machine_shm_present(&c.cfg, 1), 0);
    rc = rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0);
    if (rc != -RKV_ESHUTDOWN)
        fail_msg("push into a machine whose servers all stopped: %d %s", rc,
                 rkv_client_errmsg(cli));
    rkv_client_destroy(cli);
    rkv_server_destroy(c.srv[0]);
    assert_int_equal(machine_shm_present(&c.cfg, 0), 0);
}

/* Regression: in durable mode with retry_ms, once one server of a machine
 * stopped cleanly (a SIGTERM) beside a sibling that still served it, every
 * pull of a worker on that machine waited retry_ms for it and failed
 * "server 2 of this machine still gone", for as long as it stayed down
 * (an outside tester). Only a crashed one's restart is waited for. */
static void test_colocated_pull_beside_a_stopped_sibling_durable(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.retry_ms = 3000;
    struct rkv_config cfg1;
    struct rkv_server *s11 = NULL;
    struct rkv_client *cli = two_server_machine(&c, &cfg1, &s11);
    uint64_t id = 60; /* machine 1's: pulled from its shared memory */
    float one[4] = {1, 1, 1, 1};
    assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_true(pull_row60(cli) == 1.0f);
    rkv_server_destroy(s11);
    usleep(300 * 1000);                   /* the client sees its connection end */
    assert_true(pull_row60(cli) == 1.0f); /* it failed after waiting retry_ms */
    assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_true(pull_row60(cli) == 2.0f);
    rkv_client_destroy(cli);
    rkv_server_destroy(c.srv[1]);
    rkv_server_destroy(c.srv[0]);
    assert_int_equal(machine_shm_present(&c.cfg, 1), 0);
    remove_tree(c.dir);
}

/* Regression: outside durable mode, a machine's second server restarted
 * beside its running first one was accepted, holding none of the
 * machine's tensors: the clients' requests routed to it failed "unknown
 * tensor id", and a shutdown could not reach it (an outside tester). It is
 * refused, as the first server's restart is; a first start of it, before
 * or after the tensors were made, is not. */
static void test_second_server_restart_beside_first_refused(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 0, 0);
    c.machines[1].servers = 2;
    c.srv[0] = server_create(&c, 0);
    struct rkv_config cfg1 = c.cfg;
    cfg1.machine_id = 1;
    struct rkv_server *s11 = NULL, *again = NULL;
    char err[512];
    if (rkv_server_create(&cfg1, 0, &c.srv[1], err, sizeof(err)) < 0)
        fail_msg("%s", err);
    struct rkv_client *cli;
    struct client_arg ca = {.cfg = &cfg1};
    pthread_t ct; /* its init_data waits for the second server to come */
    assert_int_equal(pthread_create(&ct, NULL, client_create_main, &ca), 0);
    usleep(100 * 1000);
    if (rkv_server_create(&cfg1, 1, &s11, err, sizeof(err)) < 0)
        fail_msg("a first start of the second server: %s", err);
    pthread_join(ct, NULL);
    if (!(cli = ca.cli))
        fail_msg("%s", ca.err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    rkv_server_destroy(s11);
    int rc = rkv_server_create(&cfg1, 1, &again, err, sizeof(err));
    if (rc != -RKV_EEXIST || !strstr(err, "local server 0 of machine 1") ||
        !strstr(err, "local server 1 served it before"))
        fail_msg("second server restarted beside the first outside durable mode: %d %s", rc, err);
    rkv_client_destroy(cli);
    rkv_server_destroy(c.srv[1]);
    rkv_server_destroy(c.srv[0]);
    assert_int_equal(machine_shm_present(&c.cfg, 1), 0);
}

/* Regression: a server killed while it removed its machine's memory at a
 * clean stop (the shards gone, the machine segment left) could not be
 * restarted: it served the segment and failed "cannot map ... (unknown
 * tensor)" at every start (an outside tester). The machine is restored
 * from its snapshot as when all of its memory is lost. */
static void test_machine_shards_lost_segment_left_durable(void **state)
{
    (void)state;
    run_crash_under_pushes(2, 1);
}

static void test_machine_shards_lost_sibling_restarts_first_durable(void **state)
{
    (void)state;
    run_crash_under_pushes(3, 2);
}

static void test_machine_lost_under_pushes_durable(void **state)
{
    (void)state;
    run_crash_under_pushes(1, 1);
}

/* Two servers share machine 1: they serialize their snapshots, and after
 * the loss the first restores the file while the second waits for it. */
static void test_machine_of_two_servers_lost_durable(void **state)
{
    (void)state;
    run_crash_under_pushes(1, 2);
}

static void test_server_crash_under_pushes_durable(void **state)
{
    (void)state;
    run_crash_under_pushes(0, 1);
}

/* What a server of machine 1 (killed) leaves when it dies applying a push
 * of row 60: client 0's entry locked under server 1.0's tag (local id 0 +
 * 1), half the row written. */
static void leave_torn_push(const struct cluster *c)
{
    char err[256];
    struct rkv_port *port;
    assert_int_equal(rkv_port_posix_create("test", 0, 1, &port), 0);
    struct rkv_mach mc;
    assert_int_equal(rkv_mach_attach(port, c->cfg.shm_prefix, 1, 1, 9, &mc, err, sizeof(err)), 0);
    atomic_store(&mc.hdr->clients[0].lock, 1);
    struct rkv_shard sh;
    char name[96];
    rkv_shard_name(name, sizeof(name), c->cfg.shm_prefix, 1, 1);
    assert_int_equal(rkv_shard_map(port, name, 50, 16, 0, 0, 0, &sh, err, sizeof(err)), 0);
    ((float *)(void *)sh.data)[10 * 4] = 99.0f;                       /* row 60 is local row 10 */
    atomic_store(&sh.hdr->locks[rkv_mix64(10) % RKV_SHARD_LOCKS], 1); /* and its row lock */
    rkv_shard_unmap(&sh);
    rkv_mach_close(&mc);
    port->ops->destroy(port);
}

/* Two machines, one server each, a client with retries whose push of 1s
 * into row 60 (machine 1's) was acknowledged; then machine 1's server is
 * killed leaving that push torn (leave_torn_push). Returns server 0. */
static pid_t tear_machine1(struct cluster *c, uint32_t retry_ms, struct rkv_client **cli_p)
{
    cluster_config(c, 1, 0);
    c->cfg.retry_ms = retry_ms;
    pid_t s0 = spawn_server(&c->cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c->cfg, 1, 0, "/dev/null");
    char err[256];
    if (rkv_client_create(&c->cfg, cli_p, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(*cli_p, &T_F32), 0);
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    assert_int_equal(rkv_client_push(*cli_p, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_int_equal(kill(s1, SIGKILL), 0);
    assert_int_equal(wait_exit(s1), 128 + SIGKILL);
    leave_torn_push(c);
    return s0;
}

/* The server died in the middle of applying a push (a client entry and a
 * row are left as it left them): alone on its machine, its restart rolls
 * the surviving memory back to the snapshot instead of serving a push
 * that is there in part. */
static void test_torn_push_rolled_back(void **state)
{
    (void)state;
    struct cluster c;
    struct rkv_client *cli;
    pid_t s0 = tear_machine1(&c, 5000, &cli);
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    char log1b[128];
    snprintf(log1b, sizeof(log1b), "%s/s1-restarted.log", c.dir);
    pid_t s1b = spawn_server(&c.cfg, 1, 0, log1b);
    float got[4];
    assert_int_equal(rkv_client_pull(cli, "t", &id, 1, got), 0); /* reconnects */
    assert_memory_equal(got, one, sizeof(one));
    assert_true(file_contains(log1b, "rolled the machine back to snapshot"));
    /* Every stripe answers (the dead server's row lock was freed). */
    uint64_t all[50];
    float rows[50 * 4];
    for (int i = 0; i < 50; i++)
        all[i] = 50 + (uint64_t)i;
    assert_int_equal(rkv_client_push(cli, "t", all, 50, rows, RKV_OP_ASSIGN, 0), 0);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1b), 0);
    remove_tree(c.dir);
}

/* The same, but the restart's replay over the rolled-back memory is
 * refused (machine 1's log is a directory for a while): the memory held
 * the snapshot's rows without the log's, the torn flag was cleared, and
 * the next start served it as "every push acknowledged so far". The
 * acknowledged sum vanished without a word. It must restore and replay. */
static void test_torn_rollback_refused_then_restored(void **state)
{
    (void)state;
    struct cluster c;
    struct rkv_client *cli;
    pid_t s0 = tear_machine1(&c, 10000, &cli);
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    /* Machine 1's log (rkv-m1.G.wal, the push's record in it) out of the
     * way, a directory in its place. */
    char wal[512] = "", aside[560];
    DIR *d = opendir(c.dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, "rkv-m1.", 7) == 0 && e->d_name[7] >= '1' && e->d_name[7] <= '9' &&
            strstr(e->d_name, ".wal"))
            snprintf(wal, sizeof(wal), "%s/%s", c.dir, e->d_name);
    closedir(d);
    assert_true(wal[0]);
    snprintf(aside, sizeof(aside), "%s.aside", wal);
    assert_int_equal(rename(wal, aside), 0);
    assert_int_equal(mkdir(wal, 0755), 0);
    char log1b[128], log1c[128];
    snprintf(log1b, sizeof(log1b), "%s/s1-refused.log", c.dir);
    pid_t s1b = spawn_server(&c.cfg, 1, 0, log1b);
    int st = wait_exit(s1b);
    if (st == 0)
        show_log(log1b);
    assert_int_not_equal(st, 0);
    if (!file_contains(log1b, "not a regular file"))
        show_log(log1b);
    assert_true(file_contains(log1b, "not a regular file"));
    assert_int_equal(rmdir(wal), 0);
    assert_int_equal(rename(aside, wal), 0);
    snprintf(log1c, sizeof(log1c), "%s/s1-restored.log", c.dir);
    pid_t s1c = spawn_server(&c.cfg, 1, 0, log1c);
    float got[4];
    assert_int_equal(rkv_client_pull(cli, "t", &id, 1, got), 0); /* reconnects */
    if (memcmp(got, one, sizeof(one)) != 0) {
        show_log(log1c);
        fail_msg("row 60 after the restart: %g, the acknowledged sum was 1", got[0]);
    }
    assert_true(file_contains(log1c, "restarted from snapshot"));
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1c), 0);
    remove_tree(c.dir);
}

/* Without durable mode (and without retries) the same loss is a prompt,
 * named error, not a hang until the 20 s request timeout. */
static void test_machine_lost_without_durable_fails_fast(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 0, 0);
    c.cfg.timeout_ms = 20000;
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    uint64_t ids[2] = {10, 60};
    float rows[8] = {1, 1, 1, 1, 2, 2, 2, 2};
    assert_int_equal(rkv_client_push(cli, "t", ids, 2, rows, RKV_OP_SUM, 0), 0);
    assert_int_equal(kill(s1, SIGKILL), 0);
    assert_int_equal(wait_exit(s1), 128 + SIGKILL);
    unlink_machine_shm(&c.cfg, 1);
    uint64_t t0 = mono_ms();
    int rc = 0;
    /* The first push may still be on its way when the connection drops. */
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = rkv_client_push(cli, "t", ids, 2, rows, RKV_OP_SUM, 0);
    uint64_t took = mono_ms() - t0;
    assert_int_equal(rc, -RKV_EPEERDEAD);
    /* Half the timeout, not a figure: a loaded host (ASan, two cores) is
     * slow, but a hang until the timeout is another thing. */
    assert_true(took < c.cfg.timeout_ms / 2);
    assert_non_null(strstr(rkv_client_errmsg(cli), "server 1"));
    /* Server 0 is stopped all the same; the dead one is named. */
    assert_int_equal(rkv_client_shutdown_servers(cli), -RKV_EPEERDEAD);
    assert_non_null(strstr(rkv_client_errmsg(cli), "could not ask server 1 to exit (1 in all"));
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
}

/* One durable directory, one cluster at a time: two clusters started on
 * one empty directory both ran, each overwriting the other's log and
 * snapshot, until one's restart was refused ("written by another cluster
 * configuration") with what it had acknowledged lost. The second is now
 * refused at its create, before it touches a file; once the first is gone
 * the directory is free again. */
static void test_durable_dir_one_cluster_at_a_time(void **state)
{
    (void)state;
    struct cluster a, b;
    cluster_config(&a, 1, 0);
    cluster_config(&b, 1, 0);
    remove_tree(b.dir);
    memcpy(b.dir, a.dir, sizeof(b.dir));
    snprintf(b.cfg.durable_dir, sizeof(b.cfg.durable_dir), "%s", a.dir);
    snprintf(b.cfg.shm_prefix, sizeof(b.cfg.shm_prefix), "rkvd-%d-b", (int)getpid());
    a.srv[0] = server_create(&a, 0);
    struct rkv_config cfg = b.cfg;
    cfg.machine_id = 0;
    struct rkv_server *srv = NULL;
    char err[512] = "";
    assert_int_equal(rkv_server_create(&cfg, 0, &srv, err, sizeof(err)), -RKV_EEXIST);
    if (!strstr(err, "rkv-m0.lock is held by a running process of another cluster (a server, or a "
                     "process forked from one: rkv cluster ") ||
        !strstr(err, "two clusters cannot share a durable directory"))
        fail_msg("%s", err);
    /* Not machine 0's files: another machine's claim is its own. */
    cfg.machine_id = 1;
    assert_int_equal(rkv_server_create(&cfg, 0, &srv, err, sizeof(err)), 0);
    rkv_server_destroy(srv);
    rkv_server_destroy(a.srv[0]);
    cfg.machine_id = 0;
    if (rkv_server_create(&cfg, 0, &srv, err, sizeof(err)) < 0)
        fail_msg("the directory is free again: %s", err);
    rkv_server_destroy(srv);
    /* The same server started twice (a launcher's retry): the second
     * process is refused before it touches a file; it attached the
     * machine's memory, wrote a snapshot and a log, and only then found
     * its port taken. */
    a.srv[0] = server_create(&a, 0);
    pid_t dup_pid = fork();
    assert_true(dup_pid >= 0);
    if (dup_pid == 0) {
        cfg = a.cfg;
        cfg.machine_id = 0;
        int rc = rkv_server_create(&cfg, 0, &srv, err, sizeof(err));
        if (rc != -RKV_EEXIST || !strstr(err, "server 0 (machine 0, local 0) runs already: ") ||
            !strstr(err, "rkv-m0.s0.lock is held by a running process")) {
            fprintf(stderr, "the same server twice: %d %s\n", rc, err);
            _exit(21);
        }
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(dup_pid, &st, 0), dup_pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    rkv_server_destroy(a.srv[0]);
    remove_tree(a.dir);
}

/* A shard of another build's header layout (the lock holders moved the
 * rows 32 KiB on) is refused by name, not read and written at this
 * build's offsets. And a restarted server's reclaim of its predecessor's
 * row locks leaves a word whose recorded holder lives (a waiter that took
 * it over, or another incarnation under that tag): freeing it let a third
 * process in beside it (a reviewer's). A dead holder's word is freed. */
static void test_shard_layout_and_reclaim(void **state)
{
    (void)state;
    struct rkv_port *port;
    assert_int_equal(rkv_port_posix_create("test", 0, 1, &port), 0);
    char name[96], err[512];
    snprintf(name, sizeof(name), "/rkvt%d-m0-t1", (int)getpid());
    struct rkv_shard sh, sh2;
    assert_int_equal(rkv_shard_map(port, name, 8, 16, 0, 0, 1, &sh, err, sizeof(err)), 0);
    assert_true(sh.track);
    uint64_t ok = sh.hdr->magic;
    sh.hdr->magic = RKV_SHARD_MAGIC; /* the builds' before the layout byte */
    assert_int_equal(rkv_shard_map(port, name, 8, 16, 0, 0, 0, &sh2, err, sizeof(err)),
                     -RKV_EEXIST);
    if (!strstr(err, "was made by another build of rkv (its header is laid out otherwise)"))
        fail_msg("%s", err);
    sh.hdr->magic = ok;
    /* Word of row 3 held under tag 2, its holder this (live) process. */
    uint32_t i = (uint32_t)(rkv_mix64(3) % RKV_SHARD_LOCKS);
    atomic_store(&sh.hdr->locks[i], 2);
    atomic_store(&sh.hdr->holders[i], port->ops->proc_self(port));
    sh.owner = 2;
    assert_int_equal(rkv_shard_reclaim(&sh), 0);
    assert_int_equal(atomic_load(&sh.hdr->locks[i]), 2);
    /* Its holder dead (a reaped child): freed, and its record with it. */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    assert_int_equal(waitpid(child, NULL, 0), child);
    atomic_store(&sh.hdr->holders[i], (uint64_t)child);
    assert_int_equal(rkv_shard_reclaim(&sh), 1);
    assert_int_equal(atomic_load(&sh.hdr->locks[i]), 0);
    assert_int_equal(atomic_load(&sh.hdr->holders[i]), 0);
    rkv_shard_unmap(&sh);
    port->ops->shm_unlink(port, name);
    port->ops->destroy(port);
}

/* A machine segment made by another build (its header laid out otherwise:
 * here an earlier build's magic, without the layout bits) is refused by
 * name, not read with this build's layout: a machine's servers restarted
 * one by one across an upgrade would have shared it. */
static void test_machine_segment_of_another_build_refused(void **state)
{
    (void)state;
    struct rkv_port *port;
    assert_int_equal(rkv_port_posix_create("test", 0, 1, &port), 0);
    char prefix[32], err[512];
    snprintf(prefix, sizeof(prefix), "rkvt%d", (int)getpid());
    struct rkv_mach mc, mc2;
    assert_int_equal(rkv_mach_create(port, prefix, 3, 2, 77, 1, &mc, err, sizeof(err)), 0);
    assert_int_equal(rkv_mach_attach(port, prefix, 3, 2, 2, &mc2, err, sizeof(err)), 0);
    rkv_mach_close(&mc2);
    mc.hdr->magic = RKV_MACH_MAGIC; /* the magic of the builds before the layout bits */
    assert_int_equal(rkv_mach_attach(port, prefix, 3, 2, 2, &mc2, err, sizeof(err)), -RKV_EEXIST);
    if (!strstr(err, "was made by another build of rkv (header layout 0, this build's"))
        fail_msg("%s", err);
    mc.hdr->magic = 0x1234; /* not a machine segment at all */
    assert_int_equal(rkv_mach_attach(port, prefix, 3, 2, 2, &mc2, err, sizeof(err)), -RKV_EEXIST);
    assert_non_null(strstr(err, "is of another cluster"));
    char name[96];
    rkv_mach_name(name, sizeof(name), prefix, 3);
    rkv_mach_close(&mc);
    port->ops->shm_unlink(port, name);
    port->ops->destroy(port);
}

/* The machine segment's servers: the last to leave removes it, and a
 * server attaching while the last one removes it, or just before, makes
 * one of the two back off, never neither (the machine would be removed
 * under the one that attached). */
static void test_machine_removed_by_its_last_server(void **state)
{
    (void)state;
    struct rkv_port *port;
    assert_int_equal(rkv_port_posix_create("test", 0, 1, &port), 0);
    char prefix[32], err[512], path[128];
    snprintf(prefix, sizeof(prefix), "rkvl%d", (int)getpid());
    snprintf(path, sizeof(path), "/dev/shm/%s-m3-meta", prefix);
    struct rkv_mach mc, mc2;
    assert_int_equal(rkv_mach_create(port, prefix, 3, 2, 77, 1, &mc, err, sizeof(err)), 0);
    assert_int_equal(rkv_mach_attach(port, prefix, 3, 2, 2, &mc2, err, sizeof(err)), 0);
    assert_int_equal(rkv_mach_leave(&mc), 0); /* its sibling serves on */
    rkv_mach_close(&mc);
    /* The first server made anew beside it: refused, naming it. */
    struct rkv_mach mc3;
    assert_int_equal(rkv_mach_create(port, prefix, 3, 2, 77, 1, &mc3, err, sizeof(err)),
                     -RKV_EEXIST);
    if (!strstr(err, "local server 1 of machine 3"))
        fail_msg("%s", err);
    assert_int_equal(rkv_mach_leave(&mc2), 1);
    /* A restart attached between the leave and the removal: left to it. */
    assert_int_equal(rkv_mach_attach(port, prefix, 3, 2, 1, &mc, err, sizeof(err)), 0);
    rkv_mach_remove(&mc2, prefix, 3, 0, 1);
    assert_int_equal(access(path, F_OK), 0);
    rkv_mach_close(&mc2);
    /* The removal began first: the attach backs off. */
    assert_int_equal(rkv_mach_leave(&mc), 1);
    atomic_store(&mc.hdr->removing, 1);
    assert_int_equal(rkv_mach_attach(port, prefix, 3, 2, 2, &mc2, err, sizeof(err)),
                     -RKV_ENOTENSOR);
    assert_non_null(strstr(err, "is being removed"));
    atomic_store(&mc.hdr->removing, 0);
    rkv_mach_remove(&mc, prefix, 3, 0, 1);
    assert_int_equal(access(path, F_OK), -1);
    rkv_mach_close(&mc);
    port->ops->destroy(port);
}

/* Makes tensor `id`'s shard (one row) on machine 3 and publishes it in mc's
 * table; its /dev/shm path goes to path. */
static void publish_one(struct rkv_port *port, struct rkv_mach *mc, const char *prefix, uint32_t id,
                        char *path, size_t path_len)
{
    char name[96], err[256];
    rkv_shard_name(name, sizeof(name), prefix, 3, id);
    snprintf(path, path_len, "/dev/shm%s", name);
    struct rkv_tensor t = {.meta = {.id = id, .rows = 1, .row_len = 2, .dtype = RKV_F32},
                           .row_bytes = 8};
    snprintf(t.meta.name, sizeof(t.meta.name), "t%u", id);
    if (rkv_shard_map(port, name, 1, 8, 0, 0, 1, &t.shard, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    rkv_mach_publish(mc, &t);
    rkv_shard_unmap(&t.shard);
}

/* The walks of a machine's tensor table stop at the highest id ever
 * written (tensor_top), not at RKV_MAX_TENSORS: each read all 34 pages of
 * the table. A shard of a high, sparse id must still be found, by the last
 * server's removal and by the removal of a crashed run's segment. */
static void test_machine_walks_reach_the_highest_tensor(void **state)
{
    (void)state;
    struct rkv_port *port;
    assert_int_equal(rkv_port_posix_create("test", 0, 1, &port), 0);
    char prefix[32], err[512], p1[128], p700[128];
    snprintf(prefix, sizeof(prefix), "rkvw%d", (int)getpid());
    struct rkv_mach mc;
    assert_int_equal(rkv_mach_create(port, prefix, 3, 2, 0, 1, &mc, err, sizeof(err)), 0);
    publish_one(port, &mc, prefix, 1, p1, sizeof(p1));
    publish_one(port, &mc, prefix, 700, p700, sizeof(p700));
    assert_int_equal(atomic_load(&mc.hdr->tensor_top), 700);
    assert_int_equal(rkv_mach_leave(&mc), 1);
    rkv_mach_remove(&mc, prefix, 3, 0, 1);
    rkv_mach_close(&mc);
    assert_int_equal(access(p1, F_OK), -1);
    assert_int_equal(access(p700, F_OK), -1);
    /* A run that crashed after publishing: the next create removes its
     * segment and both shards. */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        struct rkv_port *cp;
        struct rkv_mach cm;
        char cerr[512];
        if (rkv_port_posix_create("child", 0, 1, &cp) < 0 ||
            rkv_mach_create(cp, prefix, 3, 2, 0, 1, &cm, cerr, sizeof(cerr)) < 0)
            _exit(1);
        publish_one(cp, &cm, prefix, 1, p1, sizeof(p1));
        publish_one(cp, &cm, prefix, 700, p700, sizeof(p700));
        _exit(0); /* no leave, no close: a crash */
    }
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(access(p700, F_OK), 0);
    assert_int_equal(rkv_mach_create(port, prefix, 3, 2, 0, 1, &mc, err, sizeof(err)), 0);
    assert_int_equal(access(p1, F_OK), -1);
    assert_int_equal(access(p700, F_OK), -1);
    assert_int_equal(atomic_load(&mc.hdr->tensor_top), 0);
    assert_int_equal(rkv_mach_leave(&mc), 1);
    rkv_mach_remove(&mc, prefix, 3, 0, 1);
    rkv_mach_close(&mc);
    port->ops->destroy(port);
}

/* ---- the write-ahead log ---- */

/* Servers 0 and 1 in processes, a client here that made tensor "t" and
 * pushed `n` acknowledged SUMs of 1 into row 60 (machine 1); then server 1
 * is killed with its machine's memory, before any checkpoint but the
 * tensor's. */
struct wal_run {
    struct cluster c;
    pid_t s0;
    struct rkv_client *cli;
    char log_path[160]; /* machine 1's log */
};

static void wal_run_crash(struct wal_run *w, int n)
{
    cluster_config(&w->c, 1, 0);
    w->c.cfg.retry_ms = 5000;
    w->s0 = spawn_server(&w->c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&w->c.cfg, 1, 0, "/dev/null");
    char err[256];
    if (rkv_client_create(&w->c.cfg, &w->cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(w->cli, &T_F32), 0);
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    for (int i = 0; i < n; i++)
        assert_int_equal(rkv_client_push(w->cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_int_equal(kill(s1, SIGKILL), 0);
    assert_int_equal(wait_exit(s1), 128 + SIGKILL);
    unlink_machine_shm(&w->c.cfg, 1);
    /* The tensor's INIT was checkpoint (generation) 1: the pushes are in log 1. */
    snprintf(w->log_path, sizeof(w->log_path), "%s/rkv-m1.1.wal", w->c.dir);
    struct stat st;
    assert_int_equal(stat(w->log_path, &st), 0);
    assert_int_equal((uint64_t)st.st_size,
                     RKV_WAL_HDR_BYTES + (uint64_t)n * rkv_wal_record_bytes(1, 16));
}

static void wal_run_end(struct wal_run *w, pid_t s1)
{
    assert_int_equal(rkv_client_shutdown_servers(w->cli), 0);
    rkv_client_destroy(w->cli);
    assert_int_equal(wait_exit(w->s0), 0);
    if (s1 > 0)
        assert_int_equal(wait_exit(s1), 0);
    remove_tree(w->c.dir);
}

static void append_bytes(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* Machine 1 lost again: server s1 killed with the machine's memory, and a
 * new one started (its log in s1-again.log). */
static pid_t wal_lose_machine_again(struct wal_run *w, pid_t s1)
{
    char log[128];
    assert_int_equal(kill(s1, SIGKILL), 0);
    assert_int_equal(wait_exit(s1), 128 + SIGKILL);
    unlink_machine_shm(&w->c.cfg, 1);
    snprintf(log, sizeof(log), "%s/s1-again.log", w->c.dir);
    return spawn_server(&w->c.cfg, 1, 0, log);
}

/* Killed with its memory: the restart replays the log after the snapshot,
 * every acknowledged push once; then the client goes on. */
static void test_wal_replayed_after_kill(void **state)
{
    (void)state;
    struct wal_run w;
    wal_run_crash(&w, 5);
    char log1b[128];
    snprintf(log1b, sizeof(log1b), "%s/s1-restarted.log", w.c.dir);
    pid_t s1b = spawn_server(&w.c.cfg, 1, 0, log1b);
    assert_true(pull_row60(w.cli) == 5.0f);
    assert_true(file_contains(log1b, "1 logs, 5 records (5 rows"));
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    assert_int_equal(rkv_client_push(w.cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_true(pull_row60(w.cli) == 6.0f);
    wal_run_end(&w, s1b);
}

/* The lineage in a log's header (its records carry its low 32 bits). */
static uint64_t log_lineage(const char *path)
{
    uint8_t hdr[RKV_WAL_HDR_BYTES];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(hdr, 1, sizeof(hdr), f), sizeof(hdr));
    fclose(f);
    uint64_t v;
    memcpy(&v, hdr + 16, 8);
    return v;
}

static void write_at(const char *path, uint64_t off, const void *buf, size_t len)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* A record of 1 row of 16 bytes (9s into row 60) for log_path at lsn. */
static size_t row60_record(uint8_t *rec, const char *log_path, uint64_t lsn, uint64_t durable,
                           uint64_t lineage)
{
    static const uint64_t ids[1] = {60};
    static const float row[4] = {9, 9, 9, 9};
    struct rkv_wal_push p = {.tensor_id = 1,
                             .client = 0,
                             .seq = ~0ull >> 1,
                             .op = RKV_OP_SUM,
                             .count = 1,
                             .ids = ids,
                             .rows = (const uint8_t *)row};
    (void)log_path;
    rkv_wal_encode_record(rec, &p, sizeof(row), lsn, durable, lineage);
    return rkv_wal_record_bytes(1, sizeof(row));
}

/* An append a crash interrupted (a record of this log whose body runs past
 * the end): the records end before it, with a log line, everything before
 * it kept; it is voided so that no later record follows it. */
static void test_wal_torn_tail_cut(void **state)
{
    (void)state;
    struct wal_run w;
    wal_run_crash(&w, 3);
    uint8_t rec[256];
    uint64_t end = RKV_WAL_HDR_BYTES + 3 * rkv_wal_record_bytes(1, 16);
    size_t n = row60_record(rec, w.log_path, RKV_WAL_LSN(1, end), RKV_WAL_LSN(1, end),
                            log_lineage(w.log_path));
    append_bytes(w.log_path, rec, n - 5);
    char log1b[128], want[160];
    snprintf(log1b, sizeof(log1b), "%s/s1-restarted.log", w.c.dir);
    pid_t s1b = spawn_server(&w.c.cfg, 1, 0, log1b);
    assert_true(pull_row60(w.cli) == 3.0f);
    snprintf(want, sizeof(want),
             "ends at byte %llu with a record that does not read whole (its 24-byte body runs past "
             "the end of the file",
             (unsigned long long)end);
    assert_true(file_contains(log1b, want));
    assert_true(file_contains(log1b, "1 torn appends left behind"));
    wal_run_end(&w, s1b);
}

/* A record in the middle that fails its checksum while a later record says
 * it was durable: the restart is refused, naming the file, the offset and
 * what. */
static void test_wal_corrupt_record_refused(void **state)
{
    (void)state;
    struct wal_run w;
    wal_run_crash(&w, 3);
    uint64_t rb = rkv_wal_record_bytes(1, 16);
    uint64_t off = RKV_WAL_HDR_BYTES + rb + RKV_WAL_REC_BYTES + 9;
    FILE *f = fopen(w.log_path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
    fputc(c ^ 0x40, f);
    fclose(f);
    struct rkv_config cfg = w.c.cfg;
    cfg.machine_id = 1;
    struct rkv_server *srv;
    char err[512], want[200];
    assert_int_equal(rkv_server_create(&cfg, 0, &srv, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, w.log_path));
    /* Push 3 was appended once push 2 was acknowledged, so durable. */
    snprintf(want, sizeof(want),
             "record at byte %llu: checksum mismatch over its 24-byte body (corrupted record: "
             "the record at byte %llu was appended once the log was durable up to byte %llu)",
             (unsigned long long)(RKV_WAL_HDR_BYTES + rb),
             (unsigned long long)(RKV_WAL_HDR_BYTES + 2 * rb),
             (unsigned long long)(RKV_WAL_HDR_BYTES + 2 * rb));
    if (!strstr(err, want))
        fail_msg("%s", err);
    /* Put right, the restart works and loses nothing. */
    f = fopen(w.log_path, "r+b");
    assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
    fputc(c, f);
    fclose(f);
    unlink_machine_shm(&w.c.cfg, 1);
    pid_t s1b = spawn_server(&w.c.cfg, 1, 0, "/dev/null");
    assert_true(pull_row60(w.cli) == 3.0f);
    wal_run_end(&w, s1b);
}

/* Past the end of a reused log lie records of the file's earlier use, each
 * with a valid checksum: one of another generation (or another lineage) at
 * the very place the next record would be is not replayed. */
static void test_wal_stale_record_not_replayed(void **state)
{
    (void)state;
    struct wal_run w;
    wal_run_crash(&w, 3);
    uint8_t rec[256];
    uint64_t end = RKV_WAL_HDR_BYTES + 3 * rkv_wal_record_bytes(1, 16);
    uint64_t lineage = log_lineage(w.log_path);
    /* As log 1's file would hold it had it been log 5 of an earlier life. */
    size_t n = row60_record(rec, w.log_path, RKV_WAL_LSN(5, end), RKV_WAL_LSN(5, end), lineage);
    write_at(w.log_path, end, rec, n);
    char log1b[128];
    snprintf(log1b, sizeof(log1b), "%s/s1-restarted.log", w.c.dir);
    pid_t s1b = spawn_server(&w.c.cfg, 1, 0, log1b);
    assert_true(pull_row60(w.cli) == 3.0f);
    assert_true(file_contains(log1b, "1 logs, 3 records (3 rows"));
    assert_true(file_contains(log1b, "0 torn appends"));
    /* An append overwrites it; then a record of log 1 of another lineage
     * (an older run's file) where the next would go: not replayed either. */
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    assert_int_equal(rkv_client_push(w.cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_int_equal(kill(s1b, SIGKILL), 0);
    assert_int_equal(wait_exit(s1b), 128 + SIGKILL);
    end += n;
    row60_record(rec, w.log_path, RKV_WAL_LSN(1, end), RKV_WAL_LSN(1, end), lineage + 1);
    write_at(w.log_path, end, rec, n);
    unlink_machine_shm(&w.c.cfg, 1);
    snprintf(log1b, sizeof(log1b), "%s/s1-again.log", w.c.dir);
    s1b = spawn_server(&w.c.cfg, 1, 0, log1b);
    assert_true(pull_row60(w.cli) == 4.0f);
    assert_true(file_contains(log1b, "1 logs, 4 records (4 rows"));
    wal_run_end(&w, s1b);
}

/* A crash kept a record B of this log but not the record before it: the
 * log ends before B, and B, never acknowledged, must not read again once
 * an acknowledged push of the same size fills the gap and the next crash
 * comes (the recovery voids every record of the log past its end). */
static void test_wal_record_past_end_not_replayed_later(void **state)
{
    (void)state;
    struct wal_run w;
    wal_run_crash(&w, 3);
    uint8_t rec[256];
    uint64_t end = RKV_WAL_HDR_BYTES + 3 * rkv_wal_record_bytes(1, 16);
    uint64_t lineage = log_lineage(w.log_path);
    /* B one record past the end; zeros where the one before it would be. */
    size_t n = row60_record(rec, w.log_path, RKV_WAL_LSN(1, end + rkv_wal_record_bytes(1, 16)),
                            RKV_WAL_LSN(1, end), lineage);
    write_at(w.log_path, end + n, rec, n);
    char log1b[128];
    snprintf(log1b, sizeof(log1b), "%s/s1-restarted.log", w.c.dir);
    pid_t s1b = spawn_server(&w.c.cfg, 1, 0, log1b);
    assert_true(pull_row60(w.cli) == 3.0f);
    assert_true(file_contains(log1b, "1 records past its end"));
    /* C, acknowledged, where the missing record was; then a crash. */
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    assert_int_equal(rkv_client_push(w.cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    s1b = wal_lose_machine_again(&w, s1b);
    float got = pull_row60(w.cli);
    if (got != 4.0f)
        fail_msg("row 60 is %g after the second crash, not 4 (B's 9 replayed after C)", got);
    wal_run_end(&w, s1b);
}

/* A log file of 0 bytes after the logs that hold records (a checkpoint of
 * an older build died creating it): recovery replays the records before
 * it, makes the empty log a log and appends go on; a second crash loses
 * nothing. The windowed reader once handed recovery no header for a
 * 0-byte file and recovery returned "done" without opening a log: every
 * push after the restart failed ("no log to append to"). */
static void test_wal_empty_log_file_after_records(void **state)
{
    (void)state;
    struct wal_run w;
    wal_run_crash(&w, 3);
    char empty[200];
    snprintf(empty, sizeof(empty), "%s/rkv-m1.2.wal", w.c.dir);
    FILE *f = fopen(empty, "wb");
    assert_non_null(f);
    fclose(f);
    char log1b[128];
    snprintf(log1b, sizeof(log1b), "%s/s1-restarted.log", w.c.dir);
    pid_t s1b = spawn_server(&w.c.cfg, 1, 0, log1b);
    assert_true(pull_row60(w.cli) == 3.0f);
    assert_true(file_contains(log1b, "empty (0 bytes"));
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    int rc = rkv_client_push(w.cli, "t", &id, 1, one, RKV_OP_SUM, 0);
    if (rc != 0) {
        print_log_lines(log1b);
        fail_msg("push after the restart: %d (%s)", rc, rkv_client_errmsg(w.cli));
    }
    assert_true(pull_row60(w.cli) == 4.0f);
    s1b = wal_lose_machine_again(&w, s1b);
    float got = pull_row60(w.cli);
    if (got != 4.0f)
        fail_msg("row 60 is %g after the second crash, not 4", got);
    wal_run_end(&w, s1b);
}

static off_t file_size(const char *dir, const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* A prewrite no log could use is refused by name, before any file. */
static void test_wal_prewrite_too_large_refused(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.durable_log_prewrite = 1ull << 40;
    struct rkv_server *srv = NULL;
    char err[256];
    assert_int_equal(rkv_server_create(&c.cfg, 0, &srv, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "durable_log_prewrite is 1099511627776 bytes"));
    remove_tree(c.dir);
}

/* Logs written with zeros ahead (durable_log_prewrite) and reused: each
 * tensor's INIT is a checkpoint that begins a log from a spare, the third
 * one log 1's file with log 1's records still in it past the new ones. A
 * crash replays the new ones only, however the file came. */
static void test_wal_recovery_across_reused_logs(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.retry_ms = 5000;
    c.cfg.durable_log_prewrite = 64 << 10;
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    /* Log 1 was made with 64 KiB of zeros, and a spare as large. */
    assert_int_equal(file_size(c.dir, "rkv-m1.1.wal"), 64 << 10);
    assert_int_equal(file_size(c.dir, "rkv-m1.free0.wal"), 64 << 10);
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    for (int i = 0; i < 5; i++)
        assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    struct rkv_tensor_desc d = T_F32;
    snprintf(d.name, sizeof(d.name), "u");
    assert_int_equal(rkv_client_init_data(cli, &d), 0); /* log 2: the spare */
    for (int i = 0; i < 2; i++)
        assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    snprintf(d.name, sizeof(d.name), "v");
    assert_int_equal(rkv_client_init_data(cli, &d), 0); /* log 3: log 1's file */
    assert_int_equal(file_size(c.dir, "rkv-m1.1.wal"), -1);
    assert_int_equal(file_size(c.dir, "rkv-m1.2.wal"), -1);
    assert_int_equal(file_size(c.dir, "rkv-m1.3.wal"), 64 << 10);
    for (int i = 0; i < 2; i++)
        assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_int_equal(kill(s1, SIGKILL), 0);
    assert_int_equal(wait_exit(s1), 128 + SIGKILL);
    unlink_machine_shm(&c.cfg, 1);
    /* And an append the crash interrupted after them: its header whole, 10
     * bytes of its body, then log 1's old bytes where the rest should be. */
    char log3[256];
    snprintf(log3, sizeof(log3), "%s/rkv-m1.3.wal", c.dir);
    uint64_t end = RKV_WAL_HDR_BYTES + 2 * rkv_wal_record_bytes(1, 16);
    uint8_t rec[256];
    row60_record(rec, log3, RKV_WAL_LSN(3, end), RKV_WAL_LSN(3, end), log_lineage(log3));
    write_at(log3, end, rec, RKV_WAL_REC_BYTES + 10);
    char log1[128];
    snprintf(log1, sizeof(log1), "%s/s1b.log", c.dir);
    pid_t s1b = spawn_server(&c.cfg, 1, 0, log1);
    assert_true(pull_row60(cli) == 9.0f);
    /* Log 1's pushes 3 to 5 past them, as much records with their CRCs as
     * the new ones, neither applied nor even read as already applied. */
    char want[160];
    snprintf(want, sizeof(want),
             "after snapshot generation 3: 1 logs, 2 records (2 rows, 0 of them in the "
             "snapshot's copy already, %llu bytes, 0 already applied), 1 torn appends",
             (unsigned long long)end);
    assert_true(file_contains(log1, want));
    snprintf(want, sizeof(want),
             "ends at byte %llu with a record that does not read whole (checksum mismatch over its "
             "24-byte body",
             (unsigned long long)end);
    assert_true(file_contains(log1, want));
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1b), 0);
    /* Its clean stop's checkpoint made log 4 from a spare. */
    assert_true(file_contains(log1, "1 logs made from a spare, 0 files new"));
    remove_tree(c.dir);
}

/* A log of format version 1 holding records is refused with what to do; one
 * holding none (a clean stop's) is made anew. */
static void test_wal_version1(void **state)
{
    (void)state;
    struct wal_run w;
    wal_run_crash(&w, 3);
    uint8_t hdr[RKV_WAL_HDR_BYTES];
    FILE *f = fopen(w.log_path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(hdr, 1, sizeof(hdr), f), sizeof(hdr));
    fclose(f);
    uint32_t v1 = 1, crc;
    memcpy(hdr + 8, &v1, 4);
    crc = rkv_crc32c(0, hdr, 60);
    memcpy(hdr + 60, &crc, 4);
    write_at(w.log_path, 0, hdr, sizeof(hdr));
    struct rkv_config cfg = w.c.cfg;
    cfg.machine_id = 1;
    struct rkv_server *srv;
    char err[512];
    assert_int_equal(rkv_server_create(&cfg, 0, &srv, err, sizeof(err)), -RKV_EIO);
    if (!strstr(err, "format version 1 holding records"))
        fail_msg("%s", err);
    assert_int_equal(truncate(w.log_path, RKV_WAL_HDR_BYTES), 0);
    unlink_machine_shm(&w.c.cfg, 1);
    char log1b[128];
    snprintf(log1b, sizeof(log1b), "%s/s1-restarted.log", w.c.dir);
    pid_t s1b = spawn_server(&w.c.cfg, 1, 0, log1b);
    assert_true(pull_row60(w.cli) == 0.0f); /* the pushes went with the records */
    assert_true(file_contains(log1b, "format version 1 holding no records, made anew"));
    wal_run_end(&w, s1b);
}

/* A clean stop checkpoints (the next start replays nothing); pushes after
 * it go to the next log, which a crash then replays after that snapshot. */
static void test_wal_checkpoint_then_crash(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.retry_ms = 5000;
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    struct rkv_server *s1 = server_create(&c, 1);
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    for (int i = 0; i < 4; i++)
        assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    rkv_server_destroy(s1); /* a clean stop: checkpoint 2, log 1 removed */
    char path[160];
    struct stat st;
    snprintf(path, sizeof(path), "%s/rkv-m1.1.wal", c.dir);
    assert_int_equal(stat(path, &st), -1);
    snprintf(path, sizeof(path), "%s/rkv-m1.2.wal", c.dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, RKV_WAL_HDR_BYTES);
    char log1[128];
    snprintf(log1, sizeof(log1), "%s/s1b.log", c.dir);
    pid_t s1b = spawn_server(&c.cfg, 1, 0, log1);
    assert_true(pull_row60(cli) == 4.0f);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_int_equal(kill(s1b, SIGKILL), 0);
    assert_int_equal(wait_exit(s1b), 128 + SIGKILL);
    assert_true(file_contains(log1, "0 records"));
    unlink_machine_shm(&c.cfg, 1);
    snprintf(log1, sizeof(log1), "%s/s1c.log", c.dir);
    pid_t s1c = spawn_server(&c.cfg, 1, 0, log1);
    assert_true(pull_row60(cli) == 7.0f);
    assert_true(file_contains(log1, "after snapshot generation 2: 1 logs, 3 records"));
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1c), 0);
    remove_tree(c.dir);
}

/* A forked child that takes locks of machine 1 (hold) and then waits,
 * holding them; returns once it holds them. */
static pid_t spawn_holder(const struct cluster *c, void (*hold)(const struct cluster *c))
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        hold(c);
        if (write(ready[1], "+", 1) != 1)
            _exit(3);
        for (;;)
            pause();
    }
    child_add(holder);
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
    close(ready[0]);
    close(ready[1]);
    return holder;
}

/* A process that takes locks of machine 1 (hold, in a forked child) and
 * is killed holding them, before anyone reaps it (a zombie holds nothing
 * either): a push of row 60 (machine 1's local row 10) must still go
 * through, and server 1's log say `want`. durable: the cluster's mode. */
static void dead_holder_case(int durable, void (*hold)(const struct cluster *c), const char *want)
{
    struct cluster c;
    cluster_config(&c, durable, 0);
    if (!durable)
        make_tmpdir(c.dir, sizeof(c.dir)); /* for the log */
    /* A lock held for good fails the push at this timeout. No bound on how
     * soon it goes through: under three suites on two cores the push once
     * took past 4 s (the take-over itself looks every 20 ms). */
    c.cfg.timeout_ms = 30000;
    c.cfg.log_level = 1;
    char log1[128];
    snprintf(log1, sizeof(log1), "%s/s1.log", c.dir);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, log1);
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    pid_t holder = spawn_holder(&c, hold);
    assert_int_equal(kill(holder, SIGKILL), 0);
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_true(pull_row60(cli) == 1.0f);
    assert_true(file_contains(log1, want));
    if (strstr(want, "took over a lock")) { /* naming its pid, not the packed id */
        char named[64];
        snprintf(named, sizeof(named), "held by process %d, which died", (int)holder);
        assert_true(file_contains(log1, named));
    }
    assert_int_equal(wait_exit(holder), 128 + SIGKILL);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1), 0);
    remove_tree(c.dir);
}

/* As a server killed between a log append and its apply: the log lock,
 * client 0's entry and row 60's row lock, all under its tag 7. */
static void hold_as_server(const struct cluster *c)
{
    char err[256];
    struct rkv_port *port;
    struct rkv_mach mc;
    struct rkv_shard sh;
    char name[96];
    rkv_shard_name(name, sizeof(name), c->cfg.shm_prefix, 1, 1);
    if (rkv_port_posix_create("holder", 0, 1, &port) < 0 ||
        rkv_mach_attach(port, c->cfg.shm_prefix, 1, 1, 7, &mc, err, sizeof(err)) < 0 ||
        rkv_shard_map(port, name, 50, 16, 0, 0, 0, &sh, err, sizeof(err)) < 0)
        _exit(3);
    rkv_live_lock(port, &mc.hdr->wal_lock, &mc.hdr->wal_holder, NULL, 7);
    atomic_store(&mc.hdr->clients[0].lock, 7);
    atomic_store(&sh.hdr->locks[rkv_mix64(10) % RKV_SHARD_LOCKS], 7);
}

/* As a co-located client does (its tag, rkv_shard_lock), frozen inside its
 * push of row 60. */
static void hold_as_client(const struct cluster *c)
{
    char err[256];
    struct rkv_port *port;
    struct rkv_shard sh;
    char name[96];
    rkv_shard_name(name, sizeof(name), c->cfg.shm_prefix, 1, 1);
    if (rkv_port_posix_create("holder", 0, 1, &port) < 0 ||
        rkv_shard_map(port, name, 50, 16, 0, 0, 0, &sh, err, sizeof(err)) < 0)
        _exit(3);
    sh.owner = RKV_CLIENT_NODE_BASE + 5;
    rkv_shard_lock(&sh, 10);
}

/* A process that dies holding the machine's log lock (it was killed
 * between an append and its apply, holding a client entry and a row lock
 * too): the machine's servers take the lock over, and free those, instead
 * of stalling every push for good. */
static void test_dead_lock_holder_taken_over(void **state)
{
    (void)state;
    dead_holder_case(1, hold_as_server, "took over a lock (tag 7)");
}

/* A co-located client killed inside a push (an OOM kill) holds its row's
 * lock: the machine's server takes it over instead of spinning on it for
 * ever, which held every later request to that server (and the server's
 * own exit) until it was killed. Not durable: a client then applies its
 * machine's rows itself. */
static void test_dead_client_row_lock_taken_over(void **state)
{
    (void)state;
    dead_holder_case(0, hold_as_client, "took a row lock (tag 65541) over from process");
}

/* Regression: a co-located worker stopped (SIGSTOP, a debugger) inside a
 * push holds its row's lock, alive: another co-located worker's push and
 * pull of a row under that lock waited as long as it stayed stopped (an
 * outside tester: 29 s with timeout_ms 3000), its take-over being only for
 * a dead holder. They now fail -RKV_ETIMEDOUT after timeout_ms, naming the
 * holder; once the holder is gone its lock is taken over as before. */
static void test_stopped_row_lock_holder_times_out(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 0, 0);
    c.cfg.timeout_ms = 1000;
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_config ccfg = c.cfg;
    ccfg.machine_id = 1; /* row 60 is in its shared memory */
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&ccfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    pid_t holder = spawn_holder(&c, hold_as_client);
    assert_int_equal(kill(holder, SIGSTOP), 0);
    alarm(120); /* before the fix both calls waited for as long as it stays stopped */
    uint64_t ids[2] = {61, 60}; /* local rows 11 and 10: another lock word, then the held one */
    float rows[2][4] = {{1, 1, 1, 1}, {1, 1, 1, 1}}, got[2][4];
    int rc = rkv_client_push(cli, "t", ids, 2, rows, RKV_OP_SUM, 0);
    char named[160];
    snprintf(named, sizeof(named),
             "is locked in this machine's shared memory by worker 5 (process %d)", (int)holder);
    if (rc != -RKV_ETIMEDOUT || !strstr(rkv_client_errmsg(cli), named) ||
        !strstr(rkv_client_errmsg(cli), "the 1 before it (in the call's order) were applied"))
        fail_msg("push of a row a stopped worker holds: %d %s", rc, rkv_client_errmsg(cli));
    rc = rkv_client_pull(cli, "t", ids, 2, got);
    if (rc != -RKV_ETIMEDOUT || !strstr(rkv_client_errmsg(cli), named))
        fail_msg("pull of a row a stopped worker holds: %d %s", rc, rkv_client_errmsg(cli));
    alarm(0);
    assert_int_equal(kill(holder, SIGKILL), 0);
    assert_int_equal(wait_exit(holder), 128 + SIGKILL);
    /* Its lock is taken over now: row 61 holds the push's first row, row 60
     * nothing of it. */
    assert_int_equal(rkv_client_pull(cli, "t", ids, 2, got), 0);
    assert_true(got[0][0] == 1.0f && got[1][0] == 0.0f);
    assert_int_equal(rkv_client_push(cli, "t", ids, 2, rows, RKV_OP_SUM, 0), 0);
    assert_int_equal(rkv_client_pull(cli, "t", ids, 2, got), 0);
    assert_true(got[0][0] == 2.0f && got[1][0] == 1.0f);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1), 0);
}

/* A worker of machine 0 pushes and pulls rows of machine 1 while a
 * co-located worker of machine 1 is stopped (SIGSTOP) holding the lock of
 * row 60. Machine 1's server waited for that lock without a bound, and so
 * stalled, with every client of it, for as long as the holder stayed
 * stopped: the clients' requests timed out naming nobody (an outside
 * tester; in durable mode behind the machine's log lock, every push of the
 * machine). Both are refused now after half of timeout_ms, before anything
 * is applied or logged, naming the holder. */
static void stopped_holder_refused(int durable)
{
    struct cluster c;
    cluster_config(&c, durable, 0);
    c.cfg.timeout_ms = 2000;
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_client *cli; /* machine 0's: rows 50..99 are machine 1's */
    char err[256];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    pid_t holder = spawn_holder(&c, hold_as_client);
    assert_int_equal(kill(holder, SIGSTOP), 0);
    alarm(120); /* before the fix the push waited for as long as the holder stays stopped */
    uint64_t ids[2] = {61, 60}; /* local rows 11 and 10: another lock word, then the held one */
    float rows[2][4] = {{1, 1, 1, 1}, {1, 1, 1, 1}}, got[2][4];
    char named[160];
    snprintf(named, sizeof(named),
             "row 60 is locked in machine 1's shared memory by worker 5 (process %d)", (int)holder);
    int rc = rkv_client_push(cli, "t", ids, 2, rows, RKV_OP_SUM, 0);
    if (rc != -RKV_ETIMEDOUT || !strstr(rkv_client_errmsg(cli), named) ||
        !strstr(rkv_client_errmsg(cli), "nothing of this push was applied"))
        fail_msg("push of a row a stopped worker holds: %d %s", rc, rkv_client_errmsg(cli));
    rc = rkv_client_pull(cli, "t", ids, 2, got);
    if (rc != -RKV_ETIMEDOUT || !strstr(rkv_client_errmsg(cli), named) ||
        !strstr(rkv_client_errmsg(cli), "nothing of this pull was read"))
        fail_msg("pull of a row a stopped worker holds: %d %s", rc, rkv_client_errmsg(cli));
    alarm(0);
    assert_int_equal(kill(holder, SIGKILL), 0);
    assert_int_equal(wait_exit(holder), 128 + SIGKILL);
    /* Nothing of it was applied; the same push now goes through whole. */
    assert_int_equal(rkv_client_pull(cli, "t", ids, 2, got), 0);
    assert_true(got[0][0] == 0.0f && got[1][0] == 0.0f);
    assert_int_equal(rkv_client_push(cli, "t", ids, 2, rows, RKV_OP_SUM, 0), 0);
    assert_int_equal(rkv_client_pull(cli, "t", ids, 2, got), 0);
    assert_true(got[0][0] == 1.0f && got[1][0] == 1.0f);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1), 0);
}

static void test_stopped_row_lock_holder_refused_durable(void **state)
{
    (void)state;
    stopped_holder_refused(1);
}

static void test_stopped_row_lock_holder_refused_by_server(void **state)
{
    (void)state;
    stopped_holder_refused(0);
}

/* ---- a custom op in the log ---- */

/* Not commutative: a replay in another order, or twice, gives another row. */
static void h_double_add(enum rkv_dtype dt, void *row, void *state, const void *in, size_t n_elems,
                         double param, void *user)
{
    (void)state, (void)param, (void)user;
    assert_int_equal(dt, RKV_F32);
    float *r = row;
    const float *x = in;
    for (size_t i = 0; i < n_elems; i++)
        r[i] = r[i] * 2 + x[i];
}

/* Server `local` of machine m that registers fn as RKV_OP_CUSTOM (unless
 * NULL) between create and run, as an application does. Exits 3 when
 * create or run fails, after logging why. */
static pid_t spawn_handler_server(const struct rkv_config *cfg0, uint32_t m, uint32_t local,
                                  rkv_handler_fn fn, const char *log_path)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid != 0) {
        child_add(pid);
        return pid;
    }
    if (!freopen(log_path, "w", stderr))
        _exit(4);
    struct rkv_config cfg = *cfg0;
    cfg.machine_id = m;
    cfg.log_level = 2;
    struct rkv_server *srv;
    char err[256];
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    if (spawn_graceful) /* before the server's threads: they inherit it */
        pthread_sigmask(SIG_BLOCK, &term, NULL);
    if (rkv_server_create(&cfg, local, &srv, err, sizeof(err)) < 0) {
        fprintf(stderr, "create: %s\n", err);
        fflush(stderr); /* a file now: _exit would drop what is buffered */
        _exit(3);
    }
    if (fn && rkv_server_register_handler(srv, RKV_OP_CUSTOM, fn, NULL) < 0)
        _exit(4);
    int rc = rkv_server_run(srv);
    if (rc < 0)
        fprintf(stderr, "run: %s\n", rkv_server_errmsg(srv));
    rkv_server_destroy(srv);
    exit(rc < 0 ? 3 : 0);
}

/* Server 0 of machine m, with h_double_add registered or not. */
static pid_t spawn_custom_server(const struct rkv_config *cfg0, uint32_t m, int with_handler,
                                 const char *log_path)
{
    return spawn_handler_server(cfg0, m, 0, with_handler ? h_double_add : NULL, log_path);
}

static void push_row60(struct rkv_client *cli, int op, float v)
{
    uint64_t id = 60;
    float row[4] = {v, v, v, v};
    if (rkv_client_push(cli, "t", &id, 1, row, op, 0) < 0)
        fail_msg("push op %d: %s", op, rkv_client_errmsg(cli));
}

/* Pushes of a registered C handler are in the log like any other; a
 * restart replays them once the application registered the handler
 * (rkv_server_run), and refuses, saying which op and what to do, when it
 * did not. */
/* test_push_torn_mid_row_finished_once's handler: a sum that, at the
 * first row of the machine whose input starts with 7 (the marker file is
 * made by whoever gets there first), adds that first element only and
 * dies: its server is killed with a row half applied, the rows before it
 * applied, the rows after it not. Every other call is a plain sum. */
static char torn_marker[600];

static void h_sum_dies_once(enum rkv_dtype dt, void *row, void *state, const void *in,
                            size_t n_elems, double param, void *user)
{
    (void)state, (void)param, (void)user;
    assert_int_equal(dt, RKV_F32);
    float *r = row;
    const float *x = in;
    if (x[0] == 7.0f && torn_marker[0]) {
        int fd = open(torn_marker, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd >= 0) {
            r[0] += x[0];
            raise(SIGKILL);
        }
    }
    for (size_t i = 0; i < n_elems; i++)
        r[i] += x[i];
}

struct torn_push {
    struct rkv_client *cli;
    uint64_t ids[5];
    float rows[5 * 4];
    int rc;
};

static void *torn_push_main(void *arg)
{
    struct torn_push *p = arg;
    p->rc = rkv_client_push(p->cli, "t", p->ids, 5, p->rows, RKV_OP_CUSTOM, 0);
    return NULL;
}

/* Which of machine 1's two servers died in the push (h_sum_dies_once),
 * reaped and forgotten; its status in *st. Fails after 20 s. */
static int wait_one_of_two_dead(const pid_t s1[2], int *st)
{
    for (int i = 0; i < 2000; i++) {
        for (int l = 0; l < 2; l++)
            if (waitpid(s1[l], st, WNOHANG) == s1[l]) {
                child_forget(s1[l]);
                return l;
            }
        usleep(10 * 1000);
    }
    fail_msg("no server of machine 1 died in the push within 20 s");
    return -1;
}

/* Durable mode, machine 1 of two servers: one of them is killed inside a
 * push, with two of its five rows applied and the third half applied.
 * Its sibling keeps the machine's memory, so nothing rolls it back; the
 * client's retry (to the restarted server, where its pushes were pinned)
 * used to find its sequence unmarked and applied the whole push again:
 * rows 55 and 56 held 2, row 57 21 (an outside tester saw "expected 23,
 * got 19" in a scenario). The push's log record and the apply journal
 * finish it exactly once. */
static void test_push_torn_mid_row_finished_once(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.machines[1].servers = 2;
    c.cfg.retry_ms = 20000;
    snprintf(torn_marker, sizeof(torn_marker), "%s/died", c.dir);
    char logs[3][128];
    for (int l = 0; l < 3; l++)
        snprintf(logs[l], sizeof(logs[l]), "%s/s1.%d.log", c.dir, l);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1[2];
    for (uint32_t l = 0; l < 2; l++)
        s1[l] = spawn_handler_server(&c.cfg, 1, l, h_sum_dies_once, logs[l]);
    struct torn_push p = {.ids = {55, 56, 57, 58, 59}};
    char err[256];
    if (rkv_client_create(&c.cfg, &p.cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_register_handler(p.cli, RKV_OP_CUSTOM, h_sum_dies_once, NULL), 0);
    assert_int_equal(rkv_client_init_data(p.cli, &T_F32), 0);
    for (int i = 0; i < 5 * 4; i++)
        p.rows[i] = i / 4 == 2 ? 7.0f : 1.0f;
    pthread_t thr;
    assert_int_equal(pthread_create(&thr, NULL, torn_push_main, &p), 0);
    /* One of machine 1's servers dies in the handler. */
    int st = 0, dead = wait_one_of_two_dead(s1, &st);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    s1[dead] = spawn_handler_server(&c.cfg, 1, (uint32_t)dead, h_sum_dies_once, logs[2]);
    assert_int_equal(pthread_join(thr, NULL), 0);
    if (p.rc != 0)
        fail_msg("the retried push: %s", rkv_client_errmsg(p.cli));
    float got[5 * 4];
    assert_int_equal(rkv_client_pull(p.cli, "t", p.ids, 5, got), 0);
    for (int i = 0; i < 5 * 4; i++)
        if (got[i] != p.rows[i]) {
            print_log_lines(logs[1 - dead]);
            print_log_lines(logs[2]);
            fail_msg("row %d element %d: %g, pushed once %g", 55 + i / 4, i % 4, got[i], p.rows[i]);
        }
    int said = file_contains(logs[1 - dead], "finished it from its log record") ||
               file_contains(logs[2], "finished it from its log record");
    if (!said) {
        print_log_lines(logs[1 - dead]);
        print_log_lines(logs[2]);
    }
    assert_true(said);
    assert_int_equal(rkv_client_shutdown_servers(p.cli), 0);
    rkv_client_destroy(p.cli);
    assert_int_equal(wait_exit(s0), 0);
    for (int l = 0; l < 2; l++)
        assert_int_equal(wait_exit(s1[l]), 0);
    torn_marker[0] = 0;
    remove_tree(c.dir);
}

/* Machine 1 of two servers: one is killed inside a push, holding the
 * lock of the row it was applying (row 57, half applied), and is not
 * restarted. Its sibling serves on: the push's retry goes there; a pull of that row through it used
 * to wait for ever on the dead server's lock, which only a restart freed, and every later request
 * to the sibling with it (in durable mode the sibling's next push too, holding the machine's log
 * lock). Now the sibling frees a dead sibling's row locks, in durable mode once it has finished the
 * push from its log record. */
static void run_sibling_dead_in_a_push(int durable)
{
    struct cluster c;
    cluster_config(&c, durable, 0);
    if (!durable)
        make_tmpdir(c.dir, sizeof(c.dir)); /* the logs and the marker only */
    c.machines[1].servers = 2;
    /* Non-durable: no retry, so the calls after the death go past the dead
     * server at once or fail. */
    c.cfg.retry_ms = durable ? 1000 : 0;
    c.cfg.timeout_ms = 3000;
    snprintf(torn_marker, sizeof(torn_marker), "%s/died", c.dir);
    char logs[2][128];
    for (int l = 0; l < 2; l++)
        snprintf(logs[l], sizeof(logs[l]), "%s/s1.%d.log", c.dir, l);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1[2];
    for (uint32_t l = 0; l < 2; l++)
        s1[l] = spawn_handler_server(&c.cfg, 1, l, h_sum_dies_once, logs[l]);
    struct torn_push p = {.ids = {55, 56, 57, 58, 59}};
    char err[256];
    if (rkv_client_create(&c.cfg, &p.cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_register_handler(p.cli, RKV_OP_CUSTOM, h_sum_dies_once, NULL), 0);
    assert_int_equal(rkv_client_init_data(p.cli, &T_F32), 0);
    for (int i = 0; i < 5 * 4; i++)
        p.rows[i] = i / 4 == 2 ? 7.0f : 1.0f;
    pthread_t thr;
    assert_int_equal(pthread_create(&thr, NULL, torn_push_main, &p), 0);
    int st = 0, dead = wait_one_of_two_dead(s1, &st);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* Durable: the push's retry goes to the live sibling (it waited out
     * retry_ms reconnecting to the dead one, and failed), where it is
     * acknowledged, the push finished once from its record. */
    assert_int_equal(pthread_join(thr, NULL), 0);
    if (durable && p.rc != 0) {
        print_log_lines(logs[1 - dead]);
        fail_msg("the retried push: %s", rkv_client_errmsg(p.cli));
    }
    /* Every pull comes back through the live sibling: the client knows
     * the other died, and calls go past it (half of them failed, or waited
     * out retry_ms reconnecting to it); the sibling frees the dead one's
     * row locks (a pull of row 57 timed out, and every later request to
     * the sibling with it). */
    for (int k = 0; k < 8; k++) {
        float got[5 * 4];
        if (rkv_client_pull(p.cli, "t", p.ids, 5, got) < 0) {
            print_log_lines(logs[1 - dead]);
            fail_msg("pull %d: %s", k, rkv_client_errmsg(p.cli));
        }
        /* Durable: finished from its record, or by the retry through the
         * sibling, each row pushed once. Non-durable makes no such promise
         * for a push its server died in (the retry may apply it again). */
        for (int i = 0; durable && i < 5 * 4; i++) {
            if (got[i] != p.rows[i]) {
                print_log_lines(logs[1 - dead]);
                fail_msg("row %d element %d: %g, pushed once %g", 55 + i / 4, i % 4, got[i],
                         p.rows[i]);
            }
        }
    }
    if (!file_contains(logs[1 - dead], "died holding")) {
        print_log_lines(logs[1 - dead]);
        fail_msg("the live server did not say it freed the dead one's row locks");
    }
    assert_int_equal(kill(s1[1 - dead], SIGKILL), 0);
    assert_int_equal(wait_exit(s1[1 - dead]), 128 + SIGKILL);
    assert_int_equal(kill(s0, SIGKILL), 0);
    assert_int_equal(wait_exit(s0), 128 + SIGKILL);
    rkv_client_destroy(p.cli);
    for (uint32_t m = 0; m < 2; m++) /* killed: nobody else removes them */
        unlink_machine_shm(&c.cfg, m);
    torn_marker[0] = 0;
    remove_tree(c.dir);
}

static void test_sibling_dead_in_a_push(void **state)
{
    (void)state;
    run_sibling_dead_in_a_push(0);
}

static void test_sibling_dead_in_a_durable_push(void **state)
{
    (void)state;
    run_sibling_dead_in_a_push(1);
}

struct colocated_pull {
    struct rkv_client *cli;
    uint64_t ids[5];
    float got[5 * 4];
    int rc;
    atomic_int done;
};

static struct rkv_config colocated_cfg;
static char colocated_err[256];

static void *colocated_create_main(void *arg)
{
    struct colocated_pull *p = arg;
    p->rc = rkv_client_create(&colocated_cfg, &p->cli, colocated_err, sizeof(colocated_err));
    return NULL;
}

static void *colocated_pull_main(void *arg)
{
    struct colocated_pull *p = arg;
    p->rc = rkv_client_pull(p->cli, "t", p->ids, 5, p->got);
    atomic_store(&p->done, 1);
    return NULL;
}

/* Machine 1 of two servers, not durable: one is killed inside a push,
 * holding the lock of row 57, and is not restarted; the push is not
 * retried, so no server touches the row again. A worker on machine 1
 * reads its rows from the shared memory: its pull of row 57 spun on the
 * dead server's lock for ever. Now it looks up the holder's process in
 * the machine's segment and frees the dead server's locks. */
static void run_colocated_client_beside_a_dead_server(int durable)
{
    struct cluster c;
    cluster_config(&c, durable, 0);
    if (!durable)
        make_tmpdir(c.dir, sizeof(c.dir)); /* the marker only */
    c.machines[1].servers = 2;
    c.cfg.n_workers = 2; /* the pusher and the co-located worker */
    c.cfg.timeout_ms = 3000;
    snprintf(torn_marker, sizeof(torn_marker), "%s/died", c.dir);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1[2];
    for (uint32_t l = 0; l < 2; l++)
        s1[l] = spawn_handler_server(&c.cfg, 1, l, h_sum_dies_once, "/dev/null");
    /* Both workers join before either may go on (hello). */
    colocated_cfg = c.cfg;
    colocated_cfg.machine_id = 1;
    static struct colocated_pull p = {.ids = {55, 56, 57, 58, 59}};
    atomic_store(&p.done, 0);
    pthread_t thr;
    assert_int_equal(pthread_create(&thr, NULL, colocated_create_main, &p), 0);
    struct rkv_config pcfg = c.cfg;
    pcfg.retry_ms = 0; /* once: the push fails with its server */
    struct rkv_client *pusher;
    char err[256];
    if (rkv_client_create(&pcfg, &pusher, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(pthread_join(thr, NULL), 0);
    if (p.rc < 0)
        fail_msg("%s", colocated_err);
    assert_int_equal(rkv_client_register_handler(pusher, RKV_OP_CUSTOM, h_sum_dies_once, NULL), 0);
    assert_int_equal(rkv_client_init_data(pusher, &T_F32), 0);
    uint64_t ids[5] = {55, 56, 57, 58, 59};
    float rows[5 * 4];
    for (int i = 0; i < 5 * 4; i++)
        rows[i] = i / 4 == 2 ? 7.0f : 1.0f;
    assert_true(rkv_client_push(pusher, "t", ids, 5, rows, RKV_OP_CUSTOM, 0) < 0);
    int st = 0, dead = wait_one_of_two_dead(s1, &st);
    assert_int_equal(pthread_create(&thr, NULL, colocated_pull_main, &p), 0);
    for (int i = 0; i < 2000 && !atomic_load(&p.done); i++)
        usleep(10 * 1000);
    if (!atomic_load(&p.done))
        fail_msg("the co-located worker's pull did not end in 20 s (spinning on a dead server's "
                 "row lock?)");
    assert_int_equal(pthread_join(thr, NULL), 0);
    if (p.rc != 0)
        fail_msg("pull: %s", rkv_client_errmsg(p.cli));
    /* Not durable: rows 55 and 56 applied before the server died, 58 and
     * 59 never, row 57 as the dead server left it (no promise). Durable:
     * the live sibling finishes the push from its log record, though no
     * request came to it (its run thread looks every second), and the
     * row it died in stays locked until it is put back or finished: this
     * pull, which waited on it, reads each row whole (as before the push
     * or after it; rows after it may not be applied yet), and a later one
     * reads each row pushed exactly once. */
    for (int i = 0; i < 5 * 4; i++) {
        float want = !durable ? (i < 8 ? 1.0f : 0.0f) : p.got[i] == 0.0f ? 0.0f : rows[i];
        if ((durable || i / 4 != 2) && (p.got[i] != want || p.got[i] != p.got[i / 4 * 4]))
            fail_msg("row %d element %d: %g, want %g (whole)", 55 + i / 4, i % 4, p.got[i], want);
    }
    for (int k = 0; durable; k++) {
        int done = 1;
        for (int i = 0; i < 5 * 4; i++)
            done &= p.got[i] == rows[i];
        if (done)
            break;
        if (k == 100)
            fail_msg("the push the dead server was applying is not finished after 10 s (row %d "
                     "element 0: %g)",
                     57, p.got[8]);
        usleep(100 * 1000);
        if (rkv_client_pull(p.cli, "t", p.ids, 5, p.got) < 0)
            fail_msg("pull: %s", rkv_client_errmsg(p.cli));
    }
    rkv_client_destroy(p.cli);
    rkv_client_destroy(pusher);
    assert_int_equal(kill(s1[1 - dead], SIGKILL), 0);
    assert_int_equal(wait_exit(s1[1 - dead]), 128 + SIGKILL);
    assert_int_equal(kill(s0, SIGKILL), 0);
    assert_int_equal(wait_exit(s0), 128 + SIGKILL);
    for (uint32_t m = 0; m < 2; m++) /* killed: nobody else removes them */
        unlink_machine_shm(&c.cfg, m);
    torn_marker[0] = 0;
    remove_tree(c.dir);
}

static void test_colocated_client_beside_a_dead_server(void **state)
{
    (void)state;
    run_colocated_client_beside_a_dead_server(0);
}

static void test_colocated_client_beside_a_server_dead_in_a_durable_push(void **state)
{
    (void)state;
    run_colocated_client_beside_a_dead_server(1);
}

/* Not durable: a worker on machine 1 pushes into its machine's shared
 * memory directly. With machine 1's only server killed, its pushes went
 * on landing in memory nobody serves, and its barrier succeeded: the
 * barrier's promise (every worker's pushes visible) broken without a word
 * (an outside tester). The barrier now fails, naming the machine. */
static void test_barrier_fails_over_unserved_local_pushes(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 0, 0);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_config lcfg = c.cfg;
    lcfg.machine_id = 1;
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&lcfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    push_row60(cli, RKV_OP_SUM, 1);
    assert_int_equal(rkv_client_barrier(cli), 0); /* served */
    assert_int_equal(kill(s1, SIGKILL), 0);
    assert_int_equal(wait_exit(s1), 128 + SIGKILL);
    push_row60(cli, RKV_OP_SUM, 1); /* into the shared memory: nobody serves it */
    int rc = rkv_client_barrier(cli);
    if (rc != -RKV_EPEERDEAD || !strstr(rkv_client_errmsg(cli), "every server of machine 1"))
        fail_msg("barrier: %d %s", rc, rkv_client_errmsg(cli));
    rkv_client_destroy(cli);
    assert_int_equal(kill(s0, SIGKILL), 0);
    assert_int_equal(wait_exit(s0), 128 + SIGKILL);
    for (uint32_t m = 0; m < 2; m++)
        unlink_machine_shm(&c.cfg, m);
}

static void test_custom_op_replayed_after_restart(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.retry_ms = 15000;
    char log1[128], log1b[128], log1c[128];
    snprintf(log1, sizeof(log1), "%s/s1.log", c.dir);
    snprintf(log1b, sizeof(log1b), "%s/s1-no-handler.log", c.dir);
    snprintf(log1c, sizeof(log1c), "%s/s1-restarted.log", c.dir);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_custom_server(&c.cfg, 1, 1, log1);
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_register_handler(cli, RKV_OP_CUSTOM, h_double_add, NULL), 0);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    /* Row 60 (machine 1): 0 -> 1 -> 1*2+3 = 5 -> 6 -> 6*2+1 = 13, every
     * push acknowledged, so in the log. */
    push_row60(cli, RKV_OP_SUM, 1);
    push_row60(cli, RKV_OP_CUSTOM, 3);
    push_row60(cli, RKV_OP_SUM, 1);
    push_row60(cli, RKV_OP_CUSTOM, 1);
    assert_true(pull_row60(cli) == 13.0f);
    /* Machine 1 is lost: the restart has the snapshot (no push) and the log. */
    assert_int_equal(kill(s1, SIGKILL), 0);
    assert_int_equal(wait_exit(s1), 128 + SIGKILL);
    unlink_machine_shm(&c.cfg, 1);
    /* Without the handler: run refuses the log, naming the op. */
    s1 = spawn_custom_server(&c.cfg, 1, 0, log1b);
    int st = wait_exit(s1);
    print_log_lines(log1b);
    assert_int_equal(st, 3);
    assert_true(file_contains(log1b, "holds a push of custom op 16"));
    assert_true(file_contains(log1b, "register its handler with rkv_server_register_handler "
                                     "before rkv_server_run"));
    /* With it: the replay pauses at create and finishes at run. */
    s1 = spawn_custom_server(&c.cfg, 1, 1, log1c);
    assert_true(pull_row60(cli) == 13.0f);
    push_row60(cli, RKV_OP_CUSTOM, 1); /* and it serves the op again: 27 */
    assert_true(pull_row60(cli) == 27.0f);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s1), 0);
    assert_int_equal(wait_exit(s0), 0);
    print_log_lines(log1c);
    assert_true(file_contains(log1c, "holds a push of custom op 16"));
    assert_true(file_contains(log1c, "4 records (4 rows"));
    remove_tree(c.dir);
    unlink_machine_shm(&c.cfg, 1);
}

/* ---- server 0 restarts (its coordination record, store/coord.h) ---- */

/* Server 0 crashes (lose_memory: with its machine, whose only process it
 * is: the workers live on machine 1) under the workers' pushes and comes
 * back; the workers re-join under their ids, retry what met the dead
 * server, pass their barriers, and every row is exact. */
static void run_server0_crash(int lose_memory)
{
    struct cluster c;
    cluster_config(&c, 1, 1); /* machine 1 announces itself: server 0 must remember it */
    c.cfg.n_workers = 2;
    c.cfg.retry_ms = 15000;
    char log0[128], log0b[128], log1[128];
    snprintf(log0, sizeof(log0), "%s/s0.log", c.dir);
    snprintf(log0b, sizeof(log0b), "%s/s0-restarted.log", c.dir);
    snprintf(log1, sizeof(log1), "%s/s1.log", c.dir);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, log0);
    pid_t s1 = spawn_server(&c.cfg, 1, 0, log1);
    struct rkv_config wcfg = c.cfg;
    wcfg.machine_id = 1; /* machine 0 holds server 0 alone: it can be lost whole */
    int progress[2];
    assert_int_equal(pipe(progress), 0);
    pid_t w[2];
    for (int k = 0; k < 2; k++) {
        w[k] = fork();
        assert_true(w[k] >= 0);
        if (w[k] > 0)
            child_add(w[k]);
        if (w[k] == 0) {
            close(progress[0]);
            exit(e2e_worker(&wcfg, progress[1]));
        }
    }
    close(progress[1]);
    char b;
    for (uint32_t n = 0; n < E2E_KILL_AFTER; n++)
        assert_int_equal(read(progress[0], &b, 1), 1);
    assert_int_equal(kill(s0, SIGKILL), 0);
    assert_int_equal(wait_exit(s0), 128 + SIGKILL);
    if (lose_memory)
        unlink_machine_shm(&c.cfg, 0);
    usleep(300 * 1000); /* workers meet the dead server 0 and keep retrying */
    pid_t s0b = spawn_server(&c.cfg, 0, 0, log0b);
    while (read(progress[0], &b, 1) == 1)
        ;
    close(progress[0]);
    int st0 = wait_exit(w[0]), st1 = wait_exit(w[1]);
    print_log_lines(log0b);
    assert_int_equal(st0, 0);
    assert_int_equal(st1, 0);
    assert_int_equal(wait_exit(s0b), 0);
    assert_int_equal(wait_exit(s1), 0);
    assert_true(file_contains(log0b, "server 0 restarted: 2 client ids, 1 completed barriers and "
                                     "2 of 2 server addresses restored"));
    /* With its memory kept, server 0 serves it, or, when the kill met it
     * applying a push, rolls the machine back to its snapshot: both keep
     * every acknowledged push (the workers checked that above). */
    if (lose_memory)
        assert_true(file_contains(log0b, "restarted from snapshot"));
    else
        assert_true(file_contains(log0b, "restarted: serving machine 0's shared memory") ||
                    file_contains(log0b, "died applying a push: rolled the machine back"));
    assert_true(file_contains(log0b, "client 0 re-joined"));
    assert_true(file_contains(log0b, "client 1 re-joined"));
    remove_tree(c.dir);
    unlink_machine_shm(&c.cfg, 0); /* in case an assertion above left them */
}

static void test_server0_crash_under_pushes_durable(void **state)
{
    (void)state;
    run_server0_crash(0);
}

static void test_server0_machine_lost_under_pushes_durable(void **state)
{
    (void)state;
    run_server0_crash(1);
}

/* A coordination record that fails its check is refused at server 0's
 * restart, with the file and the reason, never half-used. */
static void test_corrupt_coord_record_refused(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    assert_int_equal(rkv_client_barrier(cli), 0);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1), 0);
    char path[512];
    snprintf(path, sizeof(path), "%s/rkv-coord", c.dir);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 24, SEEK_SET), 0); /* the barrier count */
    int b = fgetc(f);
    assert_int_equal(b, 1);
    assert_int_equal(fseek(f, 24, SEEK_SET), 0);
    fputc(b ^ 0x40, f);
    fclose(f);
    struct rkv_config cfg = c.cfg;
    struct rkv_server *srv = NULL;
    assert_int_equal(rkv_server_create(&cfg, 0, &srv, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "CRC-32C mismatch"));
    /* Refused before the snapshot's restore: it left machine 0's memory in
     * /dev/shm. */
    int left = machine_shm_present(&c.cfg, 0);
    unlink_machine_shm(&c.cfg, 0);
    remove_tree(c.dir);
    assert_int_equal(left, 0);
}

/* stderr, where a server in this process logs, into path until
 * stderr_restore(saved). */
static FILE *stderr_to(const char *path)
{
    FILE *saved = fdopen(dup(2), "w");
    assert_non_null(saved);
    assert_non_null(freopen(path, "w", stderr));
    return saved;
}

static void stderr_restore(FILE *saved)
{
    fflush(stderr);
    assert_int_equal(dup2(fileno(saved), 2), 2);
    fclose(saved);
}

/* Files removed by hand, from outside: server 0's coordination record
 * gone beside a snapshot with tensors (clients made them, so it held their
 * ids) is refused by name; it read "no client ids were handed out before
 * the crash" and the clients that lived on met "client ids are not handed
 * out yet". And a machine that ran in the directory before and lost every
 * file of its own warns that it starts empty (it said so at INFO only). */
static void test_lost_files_said(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_client *cli;
    char err[512];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    assert_int_equal(rkv_client_barrier(cli), 0);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1), 0);
    char path[512];
    snprintf(path, sizeof(path), "%s/rkv-coord", c.dir);
    assert_int_equal(unlink(path), 0);
    struct rkv_config cfg = c.cfg;
    struct rkv_server *srv = NULL;
    assert_int_equal(rkv_server_create(&cfg, 0, &srv, err, sizeof(err)), -RKV_ECONFIG);
    if (!strstr(err, "coordination record") || !strstr(err, "is missing, but its snapshot holds"))
        fail_msg("%s", err);
    int left = machine_shm_present(&c.cfg, 0); /* refused before the restore */
    unlink_machine_shm(&c.cfg, 0);
    assert_int_equal(left, 0);
    /* Machine 1 loses every file of its own: its claim stays. */
    static const char *const gone[] = {"rkv-m1.snap", "rkv-m1.0.wal", "rkv-m1.1.wal",
                                       "rkv-m1.new.wal"};
    for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", c.dir, gone[i]);
        unlink(path);
    }
    char log1[600];
    snprintf(log1, sizeof(log1), "%s/s1.log", c.dir);
    cfg.machine_id = 1;
    cfg.log_level = 1;
    FILE *saved = stderr_to(log1);
    int rc = rkv_server_create(&cfg, 0, &srv, err, sizeof(err));
    stderr_restore(saved);
    if (rc < 0)
        fail_msg("%s", err);
    rkv_server_destroy(srv);
    assert_true(file_contains(log1, "machine 1 ran in"));
    assert_true(file_contains(log1, "it starts empty"));
    remove_tree(c.dir);
    unlink_machine_shm(&c.cfg, 1);
}

/* Durable machines 0 (one server) and 1 (servers1), every server a
 * process (pid[m][l]), and a client that retries a dead server and has
 * made T_F32, whose snapshot machine 1 then holds. */
static struct rkv_client *durable_pair_with_tensor(struct cluster *c, uint32_t servers1,
                                                   pid_t pid[2][2])
{
    cluster_config(c, 1, 0);
    c->machines[1].servers = servers1;
    c->cfg.retry_ms = 10000; /* the client redials machine 1 after its restart */
    pid[0][0] = spawn_server(&c->cfg, 0, 0, "/dev/null");
    for (uint32_t l = 0; l < servers1; l++)
        pid[1][l] = spawn_server(&c->cfg, 1, l, "/dev/null");
    struct rkv_client *cli;
    char err[512];
    if (rkv_client_create(&c->cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    assert_int_equal(rkv_client_barrier(cli), 0);
    return cli;
}

/* Kills a server of machine 1 (pid) and removes the machine's shared memory. */
static void machine1_server_lost(struct cluster *c, pid_t pid)
{
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(wait_exit(pid), 128 + SIGKILL);
    unlink_machine_shm(&c->cfg, 1);
}

/* Machine 1's shared memory removed from /dev/shm while both its servers
 * ran (systemd-logind's RemoveIPC at a logout), then its first server
 * killed and started again: it restored the snapshot into new memory while
 * its sibling served the removed one, and what the sibling acknowledged
 * went where no pull read it (an outside tester: 218 of 256 rows wrong,
 * for good). The restart is refused while the sibling runs. */
static void test_restore_refused_while_a_sibling_serves_removed_memory(void **state)
{
    (void)state;
    struct cluster c;
    pid_t pid[2][2];
    struct rkv_client *cli = durable_pair_with_tensor(&c, 2, pid);
    pid_t s0 = pid[0][0], s10 = pid[1][0], s11 = pid[1][1];
    machine1_server_lost(&c, s10);
    char err[1024];
    struct rkv_config cfg = c.cfg;
    cfg.machine_id = 1;
    struct rkv_server *srv = NULL;
    int rc = rkv_server_create(&cfg, 0, &srv, err, sizeof(err));
    if (rc != -RKV_EEXIST || !strstr(err, "still runs, on memory removed under it") ||
        !strstr(err, "its server 2 (local 1"))
        fail_msg("rc %d: %s", rc, err);
    /* With the sibling stopped too, the machine comes back whole. */
    assert_int_equal(kill(s11, SIGKILL), 0);
    assert_int_equal(wait_exit(s11), 128 + SIGKILL);
    s11 = spawn_server(&c.cfg, 1, 1, "/dev/null"); /* first: it waits for the restore */
    usleep(200 * 1000);
    s10 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    wait_listening(&c.machines[1]);
    struct rkv_tensor_meta meta;
    assert_int_equal(rkv_client_meta(cli, "t", &meta), 0);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s10), 0);
    assert_int_equal(wait_exit(s11), 0);
    remove_tree(c.dir);
    unlink_machine_shm(&c.cfg, 1);
}

/* Machine 1 restarted on another (empty) durable directory: it started
 * fresh, and a worker's init_data of a tensor the cluster had made (as a
 * restarted trainer calls it) made its rows anew as zeros where pushes were
 * acknowledged, in silence (an outside tester). Its INIT says the cluster
 * made the tensor before, and the machine refuses, naming its directory. */
static void test_machine_on_another_directory_refuses_a_made_tensor(void **state)
{
    (void)state;
    struct cluster c;
    pid_t pid[2][2];
    struct rkv_client *cli = durable_pair_with_tensor(&c, 1, pid);
    pid_t s0 = pid[0][0], s1 = pid[1][0];
    uint64_t ids[1] = {90}; /* machine 1's */
    float row[4] = {1, 2, 3, 4};
    assert_int_equal(rkv_client_push(cli, "t", ids, 1, row, RKV_OP_ASSIGN, 0), 0);
    machine1_server_lost(&c, s1);
    struct rkv_config other = c.cfg;
    char dir2[256];
    make_tmpdir(dir2, sizeof(dir2));
    snprintf(other.durable_dir, sizeof(other.durable_dir), "%s", dir2);
    s1 = spawn_server(&other, 1, 0, "/dev/null");
    wait_listening(&c.machines[1]);
    int rc = rkv_client_init_data(cli, &T_F32);
    const char *msg = rkv_client_errmsg(cli);
    if (rc != -RKV_ECONFIG ||
        !strstr(msg, "was made by this cluster before, but machine 1 does "
                     "not hold it") ||
        !strstr(msg, dir2))
        fail_msg("rc %d: %s", rc, msg);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1), 0);
    remove_tree(c.dir);
    remove_tree(dir2);
    unlink_machine_shm(&c.cfg, 1);
}

/* A log written ahead (durable_log_prewrite) on a disk without the room
 * fails the create naming the file, and takes what it wrote with it: its
 * zeros were left filling the disk, and every later write found none. On a
 * 4 MiB tmpfs in a forked child's own mount namespace (root only). */
static void test_prewrite_on_a_full_disk_leaves_nothing(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    struct cluster c;
    cluster_config(&c, 1, 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount("tmpfs", c.dir, "tmpfs", 0, "size=4m") < 0)
            _exit(77);
        c.cfg.durable_log_prewrite = 64ull << 20;
        struct rkv_server *s0 = server_create(&c, 0), *s1 = server_create(&c, 1);
        struct rkv_client *cli;
        char err[512] = "";
        if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0) {
            fprintf(stderr, "client: %s\n", err);
            _exit(20);
        }
        /* The first log is made at the first INIT. */
        int rc = rkv_client_init_data(cli, &T_F32);
        if (rc >= 0 || !strstr(rkv_client_errmsg(cli), ".new.wal")) {
            fprintf(stderr, "prewrite on a full disk: %d %s\n", rc, rkv_client_errmsg(cli));
            _exit(21);
        }
        rkv_client_destroy(cli);
        rkv_server_destroy(s1);
        rkv_server_destroy(s0);
        char path[600];
        for (int m = 0; m < 2; m++) {
            snprintf(path, sizeof(path), "%s/rkv-m%d.new.wal", c.dir, m);
            if (access(path, F_OK) == 0)
                _exit(22);
        }
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    remove_tree(c.dir);
    unlink_machine_shm(&c.cfg, 0);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77)
        skip();
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* A worker past n_workers in durable mode is told that the ids are kept
 * across restarts (rkv-coord): the hint "a job that starts over restarts
 * the servers too" sent a user who had restarted them round in a circle. */
static void test_ids_used_up_durable_hint(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.srv[0] = server_create(&c, 0);
    c.srv[1] = server_create(&c, 1);
    struct rkv_client *a, *b = NULL;
    char err[512];
    if (rkv_client_create(&c.cfg, &a, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_create(&c.cfg, &b, err, sizeof(err)), -RKV_ELIMIT);
    if (!strstr(err, "durable mode keeps them across restarts, in the directory's rkv-coord"))
        fail_msg("%s", err);
    rkv_client_destroy(a);
    rkv_server_destroy(c.srv[1]);
    rkv_server_destroy(c.srv[0]);
    remove_tree(c.dir);
}

/* The record of the client ids could not be written (a full disk): the
 * joining client is refused, and the id is not used up. It was: every
 * later client was told all ids were handed out "in the directory's
 * rkv-coord", which did not exist, until server 0 restarted (an outside
 * tester). A directory where the record's temporary file goes makes the
 * write fail. */
static void test_ids_not_used_up_by_a_failed_record(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.srv[0] = server_create(&c, 0);
    c.srv[1] = server_create(&c, 1);
    char tmp[600], err[512];
    snprintf(tmp, sizeof(tmp), "%s/rkv-coord.tmp", c.dir);
    assert_int_equal(mkdir(tmp, 0700), 0);
    struct rkv_client *a = NULL;
    assert_int_equal(rkv_client_create(&c.cfg, &a, err, sizeof(err)), -RKV_EIO);
    if (!strstr(err, "rkv-coord.tmp"))
        fail_msg("%s", err);
    assert_int_equal(rmdir(tmp), 0);
    if (rkv_client_create(&c.cfg, &a, err, sizeof(err)) < 0)
        fail_msg("the id was used up by the join that was not recorded: %s", err);
    rkv_client_destroy(a);
    rkv_server_destroy(c.srv[1]);
    rkv_server_destroy(c.srv[0]);
    remove_tree(c.dir);
}

/* A fresh directory, two servers on machine 0, the second one first (a
 * launcher starts them together): server 0 shares the claim server 1
 * made, and that is no sign that the machine ran there before; it warned
 * that its rows might be lost (a reviewer's). */
static void test_fresh_directory_no_lost_rows_warning(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.machines[0].servers = 2;
    c.cfg.n_machines = 1; /* machine 1's port is machine 0's second one */
    c.cfg.log_level = 1;
    char log0[600];
    snprintf(log0, sizeof(log0), "%s/s0.log", c.dir);
    struct rkv_config cfg = c.cfg;
    struct rkv_server *second = NULL, *first = NULL;
    char err[512];
    FILE *saved = stderr_to(log0);
    int rc1 = rkv_server_create(&cfg, 1, &second, err, sizeof(err));
    int rc0 = rc1 < 0 ? rc1 : rkv_server_create(&cfg, 0, &first, err, sizeof(err));
    stderr_restore(saved);
    if (rc0 < 0)
        fail_msg("%s", err);
    rkv_server_destroy(first);
    rkv_server_destroy(second);
    if (file_contains(log0, "ran in"))
        fail_msg("a fresh directory read as one this machine ran in before");
    remove_tree(c.dir);
}

/* buf's trailing CRC-32C made right after a change. */
static void coord_recrc(uint8_t *buf, size_t len)
{
    uint32_t crc = rkv_crc32c(0, buf, len - 4);
    memcpy(buf + len - 4, &crc, 4);
}

/* The coordination record's per-client flags: "left" round-trips, a
 * version 1 record (zero there) reads as no client left, and an unknown
 * flag is refused. */
static void test_coord_client_flags(void **state)
{
    (void)state;
    struct rkv_coord_client cl[2] = {{.machine = 0, .flags = RKV_COORD_LEFT, .nonce = 11},
                                     {.machine = 1, .flags = 0, .nonce = 12}},
                            got[2];
    struct rkv_coord_addr ad[1] = {{0}}, gad[1];
    struct rkv_coord c = {.fingerprint = 7,
                          .n_workers = 2,
                          .n_servers = 1,
                          .ids_given = 2,
                          .barriers_done = 3,
                          .clients = cl,
                          .addrs = ad};
    size_t len = rkv_coord_bytes(2, 1);
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    rkv_coord_encode(&c, 1, buf);
    struct rkv_coord d = {
        .fingerprint = 7, .n_workers = 2, .n_servers = 1, .clients = got, .addrs = gad};
    char err[256];
    assert_int_equal(rkv_coord_decode(buf, len, "rec", &d, err, sizeof(err)), 0);
    assert_int_equal(got[0].flags, RKV_COORD_LEFT);
    assert_int_equal(got[1].flags, 0);
    assert_int_equal(got[1].nonce, 12);
    assert_int_equal(d.has_committed, 1);
    /* A version 1 record: no committed tensors (every one counts), zero
     * where the flags are. */
    len -= RKV_COORD_COMMIT_BYTES;
    uint32_t v = 1, z = 0;
    memcpy(buf + 8, &v, 4);
    memcpy(buf + 48 + 4, &z, 4);
    coord_recrc(buf, len);
    assert_int_equal(rkv_coord_decode(buf, len, "rec", &d, err, sizeof(err)), 0);
    assert_int_equal(got[0].flags, 0);
    assert_int_equal(d.has_committed, 0);
    v = 2;
    memcpy(buf + 48 + 16 + 4, &v, 4);
    coord_recrc(buf, len);
    assert_int_equal(rkv_coord_decode(buf, len, "rec", &d, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, "rec: client 1's flags 0x2 are malformed"));
    free(buf);
}

/* The snapshot cut at every length, one more byte, and every bit of every
 * byte flipped: each refused (-RKV_EIO) naming the file, never read. */
static void test_snapshot_every_cut_and_bit(void **state)
{
    (void)state;
    struct snap_fixture f;
    fixture_build(&f);
    uint8_t *bad = malloc(f.len + 1);
    assert_non_null(bad);
    char err[256];
    struct rkv_snap got;
    for (size_t n = 0; n <= f.len + 1; n++) {
        if (n == f.len)
            continue;
        memcpy(bad, f.buf, f.len);
        bad[f.len] = 0;
        err[0] = 0;
        int rc = rkv_snap_decode(f.path, bad, n, 1, &got, err, sizeof(err));
        if (rc != -RKV_EIO || !strstr(err, f.path))
            fail_msg("cut at %zu of %zu: rc %d: %s", n, f.len, rc, err);
    }
    for (size_t i = 0; i < f.len * 8; i++) {
        memcpy(bad, f.buf, f.len);
        bad[i / 8] ^= (uint8_t)(1u << (i % 8));
        err[0] = 0;
        int rc = rkv_snap_decode(f.path, bad, f.len, 1, &got, err, sizeof(err));
        if (rc != -RKV_EIO || !strstr(err, f.path))
            fail_msg("bit %zu of byte %zu flipped: rc %d: %s", i % 8, i / 8, rc, err);
    }
    free(bad);
    fixture_free(&f);
}

/* Server 0's coordination record cut at every length and every bit of it
 * flipped: refused as corrupted (-RKV_EIO), never read, and never taken
 * for another configuration's record (-RKV_ECONFIG), which a first start
 * removes as an earlier run's. A record of another configuration, whole,
 * still is one. */
static void test_coord_every_cut_and_bit(void **state)
{
    (void)state;
    struct rkv_coord_client cl[2] = {{.machine = 0, .nonce = 11}, {.machine = 1, .nonce = 12}},
                            got[2];
    struct rkv_coord_addr ad[2] = {{.port = 7000, .host = "10.0.0.1"}, {0}}, gad[2];
    struct rkv_coord c = {.fingerprint = 7,
                          .n_workers = 2,
                          .n_servers = 2,
                          .ids_given = 2,
                          .barriers_done = 3,
                          .clients = cl,
                          .addrs = ad};
    size_t len = rkv_coord_bytes(2, 2);
    uint8_t *buf = malloc(len), *bad = malloc(len);
    assert_non_null(buf);
    assert_non_null(bad);
    rkv_coord_encode(&c, 1, buf);
    struct rkv_coord d = {
        .fingerprint = 7, .n_workers = 2, .n_servers = 2, .clients = got, .addrs = gad};
    char err[256];
    assert_int_equal(rkv_coord_decode(buf, len, "rec", &d, err, sizeof(err)), 0);
    for (size_t n = 0; n < len; n++) {
        err[0] = 0;
        int rc = rkv_coord_decode(buf, n, "rec", &d, err, sizeof(err));
        if (rc != -RKV_EIO || strncmp(err, "rec", 3) != 0)
            fail_msg("cut at %zu of %zu: rc %d: %s", n, len, rc, err);
    }
    for (size_t i = 0; i < len * 8; i++) {
        memcpy(bad, buf, len);
        bad[i / 8] ^= (uint8_t)(1u << (i % 8));
        err[0] = 0;
        int rc = rkv_coord_decode(bad, len, "rec", &d, err, sizeof(err));
        if (rc != -RKV_EIO || strncmp(err, "rec", 3) != 0)
            fail_msg("bit %zu of byte %zu flipped: rc %d: %s", i % 8, i / 8, rc, err);
    }
    struct rkv_coord other = {.fingerprint = 8, .n_workers = 2, .n_servers = 2};
    assert_int_equal(rkv_coord_decode(buf, len, "rec", &other, err, sizeof(err)), -RKV_ECONFIG);
    struct rkv_coord_client cl3[3] = {{0}};
    struct rkv_coord c3 = {
        .fingerprint = 7, .n_workers = 3, .n_servers = 2, .clients = cl3, .addrs = ad};
    size_t len3 = rkv_coord_bytes(3, 2);
    uint8_t *buf3 = malloc(len3);
    assert_non_null(buf3);
    rkv_coord_encode(&c3, 1, buf3);
    assert_int_equal(rkv_coord_decode(buf3, len3, "rec", &d, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "another cluster configuration"));
    free(buf3);
    free(bad);
    free(buf);
}

/* A raw client of server 0 that joins (id handed out once all joined). */
static void raw_join_send(struct rawcli *r, const struct rkv_config *cfg, uint64_t nonce)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(rkv_port_posix_create("raw", 0, 3, &r->port), 0);
    assert_int_equal(rkv_nic_tcp_ops.open(r->port, NULL, &r->nic), 0);
    struct rkv_engine_cfg ec = {.node_id = RKV_CLIENT_NODE_BASE,
                                .rx_depth = 64,
                                .ctrl_buf_bytes = 8192,
                                .max_slots = 64,
                                .max_slot_bytes = 1 << 20};
    char err[128];
    assert_int_equal(
        rkv_engine_create(r->port, r->nic, &ec, raw_on_msg, NULL, r, &r->eng, err, sizeof(err)), 0);
    assert_int_equal(r->port->ops->mutex_create(r->port, &r->mu), 0);
    assert_int_equal(r->port->ops->cond_create(r->port, &r->cv), 0);
    assert_int_equal(rkv_engine_start(r->eng), 0);
    assert_int_equal(
        rkv_engine_connect(r->eng, "127.0.0.1", cfg->machines[0].base_port, 2000, &r->peer), 0);
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(r->eng, 256, &tx), 0);
    struct rkv_hdr h = {.type = RKV_MSG_HELLO, .req_id = 1, .sender = RKV_CLIENT_NODE_BASE};
    struct rkv_wire_hello w = {.want_id = RKV_ID_NONE,
                               .nonce = nonce,
                               .cluster = rkv_cfg_fingerprint(cfg),
                               .rx_depth = cfg->rx_depth,
                               .ctrl_buf_bytes = cfg->ctrl_buf_bytes};
    size_t len = rkv_proto_enc_hello(rkv_engine_tx_buf(tx), &h, &w);
    assert_int_equal(rkv_engine_send(r->eng, r->peer, tx, len), 0);
}

/* Waits up to wait_ms for the reply after `before` replies: its type, or 0. */
static int raw_reply(struct rawcli *r, int before, uint64_t wait_ms, int *status_p)
{
    uint64_t end = mono_ms() + wait_ms;
    r->port->ops->mutex_lock(r->mu);
    while (r->got == before && mono_ms() < end)
        r->port->ops->cond_wait(r->cv, r->mu, 50000000ull);
    int type = r->got > before ? r->type : 0;
    if (status_p)
        *status_p = r->status;
    r->port->ops->mutex_unlock(r->mu);
    return type;
}

static int raw_barrier_send(struct rawcli *r, uint32_t number)
{
    struct rkv_tx *tx;
    assert_int_equal(rkv_engine_tx_alloc(r->eng, RKV_PROTO_HDR_BYTES, &tx), 0);
    struct rkv_hdr h = {.type = RKV_MSG_BARRIER, .req_id = 100 + number, .count = number};
    r->port->ops->mutex_lock(r->mu);
    int before = r->got;
    r->port->ops->mutex_unlock(r->mu);
    size_t len = rkv_proto_enc_empty(rkv_engine_tx_buf(tx), &h);
    assert_int_equal(rkv_engine_send(r->eng, r->peer, tx, len), 0);
    return before;
}

/* A client whose first HELLO server 0 answered in its record but not on
 * the wire (it died in between) asks again after the restart: the nonce
 * it joined with gets it the id it was given; another nonce gets none. */
static void test_join_again_after_server0_restart(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    assert_int_equal(kill(s0, SIGKILL), 0);
    assert_int_equal(wait_exit(s0), 128 + SIGKILL);
    char path[512];
    snprintf(path, sizeof(path), "%s/rkv-coord", c.dir);
    uint8_t *rec;
    size_t len;
    assert_int_equal(rkv_file_read(path, &rec, &len, err, sizeof(err)), 0);
    assert_true(len >= 64);
    uint64_t nonce;
    memcpy(&nonce, rec + 48 + 8, 8); /* client 0's join nonce (coord.h) */
    free(rec);
    struct rkv_config cfg0 = c.cfg;
    struct rkv_server *s0b = server_create(&c, 0);
    struct rawcli other, again;
    raw_join_send(&other, &cfg0, nonce ^ 1);
    int st = 0;
    assert_int_equal(raw_reply(&other, 0, 5000, &st), RKV_MSG_ERROR);
    assert_int_equal(st, -RKV_ELIMIT);
    raw_join_send(&again, &cfg0, nonce);
    assert_int_equal(raw_reply(&again, 0, 5000, &st), RKV_MSG_HELLO_REPLY);
    raw_close(&again);
    raw_close(&other);
    rkv_client_destroy(cli);
    rkv_server_destroy(s0b);
    assert_int_equal(kill(s1, SIGKILL), 0);
    wait_exit(s1);
    remove_tree(c.dir);
    unlink_machine_shm(&c.cfg, 0);
    unlink_machine_shm(&c.cfg, 1);
}

/* An init_data that failed (a machine's server down) left the tensor in
 * server 0's snapshot; a restarted server 0 took every tensor of it as
 * committed: list() showed it, and the same init_data tried again was
 * refused, "machine 1 does not hold it: its durable directory ... is not
 * the one it ran on" (an outside tester): only an empty directory got out.
 * Server 0's coordination record now says which tensors were committed. */
static void test_failed_init_not_committed_by_a_restart(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.retry_ms = 4000; /* the client re-joins the restarted server 0 */
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    assert_int_equal(kill(s1, SIGKILL), 0);
    assert_int_equal(wait_exit(s1), 128 + SIGKILL);
    struct rkv_tensor_desc emb = T_F32;
    snprintf(emb.name, sizeof(emb.name), "emb");
    assert_true(rkv_client_init_data(cli, &emb) < 0);
    assert_int_equal(kill(s0, SIGKILL), 0);
    assert_int_equal(wait_exit(s0), 128 + SIGKILL);
    unlink_machine_shm(&c.cfg, 0);
    unlink_machine_shm(&c.cfg, 1);
    s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    wait_listening(&c.machines[0]);
    wait_listening(&c.machines[1]);
    struct rkv_tensor_meta metas[4];
    size_t n = 0;
    if (rkv_client_list(cli, metas, 4, &n) < 0)
        fail_msg("list: %s", rkv_client_errmsg(cli));
    assert_int_equal(n, 1);
    assert_string_equal(metas[0].name, "t");
    if (rkv_client_init_data(cli, &emb) < 0)
        fail_msg("init_data again: %s", rkv_client_errmsg(cli));
    uint64_t ids[2] = {3, 70};
    float rows[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[8];
    assert_int_equal(rkv_client_push(cli, "emb", ids, 2, rows, RKV_OP_SUM, 0), 0);
    assert_int_equal(rkv_client_pull(cli, "emb", ids, 2, got), 0);
    assert_memory_equal(got, rows, sizeof(rows));
    assert_int_equal(rkv_client_list(cli, metas, 4, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1), 0);
    remove_tree(c.dir);
}

enum after_restart { ASK_LIST, ASK_META, ASK_BARRIER, ASK_SHUTDOWN };

/* Kills server 0 under a client with retry_ms and restarts it; the
 * client's down notification is held (above) long enough that the next
 * request's send meets the dead connection before the client knows: the
 * request must still be sent again to the restarted server 0. */
static void server0_restart_then(enum after_restart ask)
{
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.retry_ms = 10000;
    /* META: asked by a second worker, since the one that made the tensor
     * knows it (init_data keeps it) and asks nobody. */
    if (ask == ASK_META)
        c.cfg.n_workers = 2;
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_client *cli;
    char err[256];
    struct client_arg other = {.cfg = &c.cfg};
    pthread_t t;
    if (ask == ASK_META)
        assert_int_equal(pthread_create(&t, NULL, client_create_main, &other), 0);
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    if (ask == ASK_META) {
        assert_int_equal(pthread_join(t, NULL), 0);
        if (!other.cli)
            fail_msg("second worker: %s", other.err);
    }
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    struct rkv_client *maker = cli;
    if (ask == ASK_META)
        cli = other.cli;
    /* Shutdown's budget is 2 s: released within it, with time to redial. */
    down_hold(ask == ASK_SHUTDOWN ? 800 : 1500);
    assert_int_equal(kill(s0, SIGKILL), 0);
    assert_int_equal(wait_exit(s0), 128 + SIGKILL);
    unlink_machine_shm(&c.cfg, 0);
    s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    wait_listening(&c.machines[0]);
    int rc;
    struct rkv_tensor_meta metas[4];
    size_t n = 0;
    switch (ask) {
    case ASK_LIST:
        rc = rkv_client_list(cli, metas, 4, &n);
        break;
    case ASK_META:
        n = 1;
        rc = rkv_client_meta(cli, "t", &metas[0]);
        break;
    case ASK_BARRIER:
        n = 1;
        rc = rkv_client_barrier(cli);
        strcpy(metas[0].name, "t");
        break;
    default:
        n = 1;
        rc = rkv_client_shutdown_servers(cli);
        strcpy(metas[0].name, "t");
        break;
    }
    if (rc < 0)
        fail_msg("after server 0's restart: %s", rkv_client_errmsg(cli));
    /* The hold happened (server 1 may have stopped inside it too). */
    assert_true(atomic_load(&down_held) >= 1);
    assert_int_equal(n, 1);
    assert_string_equal(metas[0].name, "t");
    if (ask != ASK_SHUTDOWN)
        assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    if (maker != cli)
        rkv_client_destroy(maker);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1), 0);
    remove_tree(c.dir);
}

/* LIST goes to server 0 alone: with retry_ms, one that meets server 0
 * killed is sent again once it restarted, as META and BARRIER are. */
static void test_list_retried_after_server0_restart(void **state)
{
    (void)state;
    server0_restart_then(ASK_LIST);
}

static void test_meta_retried_after_server0_restart(void **state)
{
    (void)state;
    server0_restart_then(ASK_META);
}

static void test_barrier_retried_after_server0_restart(void **state)
{
    (void)state;
    server0_restart_then(ASK_BARRIER);
}

/* Shutdown asks every server, a restarted one too (it would outlive the
 * job): a send refused before the client heard of the death is retried. */
static void test_shutdown_reaches_restarted_server0(void **state)
{
    (void)state;
    server0_restart_then(ASK_SHUTDOWN);
}

/* Two workers on machine 1 while its server restarts, before they hear of
 * it (every notification held): one pushes (durable: through a server, so
 * the replaced shard is no reason to refuse it), the other only ever
 * pulled (its machine's rows come from the shard, so it never connected
 * to server 1) and must still map the restored shard, not read the old. */
static void test_colocated_workers_follow_an_unheard_restart(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.n_workers = 2;
    c.cfg.retry_ms = 5000;
    c.srv[0] = server_create(&c, 0);
    assert_int_equal(pthread_create(&c.thr0, NULL, server_main, c.srv[0]), 0);
    c.srv[1] = server_create(&c, 1);
    struct rkv_config ccfg = c.cfg;
    ccfg.machine_id = 1;
    struct client_arg b = {.cfg = &ccfg};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, client_create_main, &b), 0);
    struct rkv_client *a;
    char err[256];
    if (rkv_client_create(&ccfg, &a, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (!b.cli)
        fail_msg("second worker: %s", b.err);
    assert_int_equal(rkv_client_init_data(a, &T_F32), 0);
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1}, two[4] = {2, 2, 2, 2};
    assert_int_equal(rkv_client_push(a, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_true(pull_row60(b.cli) == 1.0f); /* from the shard: no connection to server 1 */
    down_hold(1000);
    rkv_server_destroy(c.srv[1]);
    c.srv[1] = server_create(&c, 1);
    if (rkv_client_push(a, "t", &id, 1, two, RKV_OP_SUM, 0) < 0)
        fail_msg("push after the restart: %s", rkv_client_errmsg(a));
    assert_true(pull_row60(b.cli) == 3.0f);
    assert_true(pull_row60(a) == 3.0f);
    assert_true(atomic_load(&down_held) >= 1);
    assert_int_equal(rkv_client_shutdown_servers(a), 0);
    rkv_client_destroy(a);
    rkv_client_destroy(b.cli);
    pthread_join(c.thr0, NULL);
    rkv_server_destroy(c.srv[0]);
    rkv_server_destroy(c.srv[1]);
    remove_tree(c.dir);
}

/* Not durable: machine 1's server killed and started again. Its new run
 * makes the machine segment anew and removes the crashed run's shards,
 * which the co-located worker still mapped: its pushes were acknowledged
 * into a shard nobody else read, and after a barrier two workers saw
 * different rows, with no error anywhere (an outside tester). The shards
 * are marked moved first: the worker's next push fails, naming why. */
static void test_colocated_worker_told_of_a_restart_not_durable(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 0, 0);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_config ccfg = c.cfg;
    ccfg.machine_id = 1;
    struct rkv_client *cli;
    char err[256];
    if (rkv_client_create(&ccfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    uint64_t id = 60; /* machine 1's: from the shard this worker maps */
    float one[4] = {1, 1, 1, 1};
    assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_int_equal(kill(s1, SIGKILL), 0);
    assert_int_equal(wait_exit(s1), 128 + SIGKILL);
    s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    wait_listening(&c.machines[1]);
    int rc = rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0);
    if (rc != -RKV_EPEERDEAD || !strstr(rkv_client_errmsg(cli), "was replaced or removed"))
        fail_msg("push after the restart: %d %s", rc, rkv_client_errmsg(cli));
    float got[4];
    assert_int_equal(rkv_client_pull(cli, "t", &id, 1, got), -RKV_EPEERDEAD);
    /* Its connection to server 1 died with the first run (no retry_ms):
     * the shutdown cannot ask the new one; the test stops it. */
    (void)rkv_client_shutdown_servers(cli);
    rkv_client_destroy(cli);
    kill(s0, SIGKILL);
    kill(s1, SIGKILL);
    wait_exit(s0);
    wait_exit(s1);
    unlink_machine_shm(&c.cfg, 0);
    unlink_machine_shm(&c.cfg, 1);
}

/* A machine whose snapshot was removed by hand, its logs left: refused at
 * the server's create, naming the log, where a new run used to start in
 * silence (the pushes gone, the old logs written over). */
static void test_snapshot_removed_refused(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.srv[0] = server_create(&c, 0);
    assert_int_equal(pthread_create(&c.thr0, NULL, server_main, c.srv[0]), 0);
    c.srv[1] = server_create(&c, 1);
    struct rkv_client *cli;
    char err[512];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(cli, &T_F32), 0);
    uint64_t id = 60;
    float one[4] = {1, 1, 1, 1};
    assert_int_equal(rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0), 0);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    pthread_join(c.thr0, NULL);
    rkv_server_destroy(c.srv[0]);
    rkv_server_destroy(c.srv[1]);
    char path[600];
    snprintf(path, sizeof(path), "%s/rkv-m1.snap", c.dir);
    assert_int_equal(unlink(path), 0);
    struct rkv_config cfg = c.cfg;
    cfg.machine_id = 1;
    struct rkv_server *srv = NULL;
    int rc = rkv_server_create(&cfg, 0, &srv, err, sizeof(err));
    if (rc != -RKV_ECONFIG || !strstr(err, "rkv-m1.") || !strstr(err, "no snapshot"))
        fail_msg("rc %d: %s", rc, err);
    assert_null(srv);
    remove_tree(c.dir);
}

/* The durable directory's disk fills up (a 1 MiB tmpfs; root only, else
 * skipped): a push that cannot be logged is refused naming the file and the
 * disk, never acknowledged or applied; the servers keep serving, and take
 * pushes again once space is freed; an init_data that needs a snapshot
 * the disk cannot hold fails the same way. Killed and restarted, machine 1
 * holds every acknowledged push. (Each held when tried; kept as the
 * promise's test.) */
static void test_full_disk_refused_acked_kept(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* mounting a tmpfs needs root */
    struct cluster c;
    cluster_config(&c, 1, 0);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=1m rkv-full-test '%s' 2>/dev/null", c.dir);
    if (system(cmd) != 0) { /* a container without CAP_SYS_ADMIN */
        remove_tree(c.dir);
        skip();
    }
    c.cfg.retry_ms = 5000;
    /* room freed later: the disk is full of logs then, none of which may go */
    char filler[300];
    snprintf(filler, sizeof(filler), "%s/filler", c.dir);
    FILE *f = fopen(filler, "w");
    assert_non_null(f);
    static char block[128 << 10];
    assert_int_equal(fwrite(block, 1, sizeof(block), f), sizeof(block));
    assert_int_equal(fclose(f), 0);
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct rkv_client *cli;
    char err[512];
    if (rkv_client_create(&c.cfg, &cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    const struct rkv_tensor_desc wide = {
        .name = "t", .dtype = RKV_F32, .rows = 100, .row_len = 256, .policy = RKV_PART_RANGE};
    assert_int_equal(rkv_client_init_data(cli, &wide), 0);
    static float one[256], got[256];
    for (int k = 0; k < 256; k++)
        one[k] = 1.0f;
    uint64_t id = 60; /* machine 1's */
    int rc = 0, acked = 0;
    while (acked < 100000 && (rc = rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0)) == 0)
        acked++;
    if (rc != -RKV_EIO || !strstr(rkv_client_errmsg(cli), "rkv-m1.") ||
        !strstr(rkv_client_errmsg(cli), "No space left on device"))
        fail_msg("after %d pushes: rc %d: %s", acked, rc, rkv_client_errmsg(cli));
    assert_true(acked > 100); /* the log took most of the disk */
    /* refused, not applied; pulls are served */
    assert_int_equal(rkv_client_pull(cli, "t", &id, 1, got), 0);
    assert_true(got[0] == (float)acked && got[255] == (float)acked);
    const struct rkv_tensor_desc more = {
        .name = "u", .dtype = RKV_F32, .rows = 100, .row_len = 4, .policy = RKV_PART_RANGE};
    rc = rkv_client_init_data(cli, &more);
    if (rc != -RKV_EIO || !strstr(rkv_client_errmsg(cli), "No space left on device"))
        fail_msg("init_data on a full disk: rc %d: %s", rc, rkv_client_errmsg(cli));
    assert_int_equal(unlink(filler), 0);
    for (int i = 0; i < 10; i++, acked++)
        if (rkv_client_push(cli, "t", &id, 1, one, RKV_OP_SUM, 0) < 0)
            fail_msg("push after space was freed: %s", rkv_client_errmsg(cli));
    /* the machine is lost and comes back from its snapshot and log */
    assert_int_equal(kill(s1, SIGKILL), 0);
    assert_int_equal(wait_exit(s1), 128 + SIGKILL);
    unlink_machine_shm(&c.cfg, 1);
    s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    if (rkv_client_pull(cli, "t", &id, 1, got) < 0)
        fail_msg("pull after the restart: %s", rkv_client_errmsg(cli));
    if (got[0] != (float)acked || got[255] != (float)acked)
        fail_msg("row 60 holds %g after the restart; %d pushes were acknowledged", got[0], acked);
    assert_int_equal(rkv_client_shutdown_servers(cli), 0);
    rkv_client_destroy(cli);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1), 0);
    snprintf(cmd, sizeof(cmd), "umount '%s'", c.dir);
    assert_int_equal(system(cmd), 0);
    remove_tree(c.dir);
}

struct shutdown_arg {
    struct rkv_client *cli;
    int rc;
    char err[512];
};

static void *shutdown_main(void *arg)
{
    struct shutdown_arg *a = arg;
    a->rc = rkv_client_shutdown_servers(a->cli);
    snprintf(a->err, sizeof(a->err), "%s", rkv_client_errmsg(a->cli));
    return NULL;
}

/* Server 0 takes the SHUTDOWN into its socket and dies before it answers
 * (stopped, then killed), and comes back: the send had succeeded, the
 * wait ends with the connection lost, and the restarted server 0 must be
 * asked again (CI's coverage run met this order under load: "shutdown:
 * server 0: connection lost"). */
static void test_shutdown_asks_again_a_server_that_died_unanswering(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.retry_ms = 10000;
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct shutdown_arg a = {0};
    char err[256];
    if (rkv_client_create(&c.cfg, &a.cli, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(rkv_client_init_data(a.cli, &T_F32), 0);
    /* Stopped before the SHUTDOWN is sent: kill() returns before every
     * thread stopped, and on a loaded host server 0's engine answered the
     * SHUTDOWN in between, then died lingering, and its restart was never
     * asked (CI's coverage run: the test waited for it to exit for ever). */
    assert_int_equal(kill(s0, SIGSTOP), 0);
    int st;
    assert_int_equal(waitpid(s0, &st, WUNTRACED), s0);
    assert_true(WIFSTOPPED(st));
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, shutdown_main, &a), 0);
    /* Which comes first, the send or the kill, is the host's to decide;
     * this makes the send first likely, and either order must end well. */
    usleep(300 * 1000);
    assert_int_equal(kill(s0, SIGKILL), 0);
    assert_int_equal(wait_exit(s0), 128 + SIGKILL);
    unlink_machine_shm(&c.cfg, 0);
    char log0[128];
    snprintf(log0, sizeof(log0), "%s/s0-restarted.log", c.dir);
    spawn_mid_call = 1;
    s0 = spawn_server(&c.cfg, 0, 0, log0);
    spawn_mid_call = 0;
    assert_int_equal(pthread_join(t, NULL), 0);
    if (a.rc < 0)
        fail_msg("shutdown: %s", a.err);
    rkv_client_destroy(a.cli);
    int st0 = wait_exit(s0);
    if (st0 != 0) {
        show_log(log0);
        fail_msg("the restarted server 0 ended with status %d", st0);
    }
    assert_int_equal(wait_exit(s1), 0);
    remove_tree(c.dir);
}

/* Client id's flags in the coordination record (coord.h), or -1. */
static int coord_flags(const char *dir, uint32_t id)
{
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/rkv-coord", dir);
    uint8_t *rec;
    size_t len;
    if (rkv_file_read(path, &rec, &len, err, sizeof(err)) < 0)
        return -1;
    int flags = -1;
    if (len >= 48 + 16 * (size_t)(id + 1)) {
        uint32_t v;
        memcpy(&v, rec + 48 + 16 * id + 4, 4);
        flags = (int)v;
    }
    free(rec);
    return flags;
}

/* A client that left before server 0 was killed and restarted is still
 * gone for the restarted one: a barrier of the others fails at once,
 * naming it, as it did before the crash, instead of waiting for it. */
static void test_barrier_after_server0_restart_knows_who_left(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 1, 0);
    c.cfg.n_workers = 2;
    c.cfg.retry_ms = 10000;
    c.cfg.timeout_ms = 30000;
    pid_t s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    pid_t s1 = spawn_server(&c.cfg, 1, 0, "/dev/null");
    struct client_arg b = {.cfg = &c.cfg};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, client_create_main, &b), 0);
    struct rkv_client *a;
    char err[256];
    if (rkv_client_create(&c.cfg, &a, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    pthread_join(t, NULL);
    if (!b.cli)
        fail_msg("%s", b.err);
    uint32_t gone = rkv_client_id(b.cli);
    rkv_client_destroy(b.cli);
    /* Server 0 records the departure when it sees the connection go. */
    for (int i = 0; i < 300 && coord_flags(c.dir, gone) != 1; i++)
        usleep(10000);
    assert_int_equal(kill(s0, SIGKILL), 0);
    assert_int_equal(wait_exit(s0), 128 + SIGKILL);
    unlink_machine_shm(&c.cfg, 0);
    s0 = spawn_server(&c.cfg, 0, 0, "/dev/null");
    uint64_t t0 = mono_ms();
    assert_int_equal(rkv_client_barrier(a), -RKV_EPEERDEAD);
    char want[64];
    snprintf(want, sizeof(want), "client %u left", gone);
    if (!strstr(rkv_client_errmsg(a), want))
        fail_msg("%s", rkv_client_errmsg(a));
    /* Not the request's timeout (half of it: the restarted server 0 may
     * start slowly on a loaded host). */
    assert_true(mono_ms() - t0 < c.cfg.timeout_ms / 2);
    assert_int_equal(rkv_client_shutdown_servers(a), 0);
    rkv_client_destroy(a);
    assert_int_equal(wait_exit(s0), 0);
    assert_int_equal(wait_exit(s1), 0);
    remove_tree(c.dir);
}

/* Barriers are numbered: a client asking again for one that completed
 * (its reply was lost: server 0 died after sending the others') is
 * answered at once instead of waiting in the next one, and a number ahead
 * of the next barrier is refused. */
static void test_barrier_numbers(void **state)
{
    (void)state;
    struct cluster c;
    cluster_config(&c, 0, 0);
    c.cfg.n_workers = 2;
    struct rkv_server *s0 = server_create(&c, 0), *s1 = server_create(&c, 1);
    struct rawcli a, b;
    raw_join_send(&a, &c.cfg, 11);
    raw_join_send(&b, &c.cfg, 22);
    assert_int_equal(raw_reply(&a, 0, 5000, NULL), RKV_MSG_HELLO_REPLY);
    assert_int_equal(raw_reply(&b, 0, 5000, NULL), RKV_MSG_HELLO_REPLY);
    int ba = raw_barrier_send(&a, 1), bb = raw_barrier_send(&b, 1);
    assert_int_equal(raw_reply(&a, ba, 5000, NULL), RKV_MSG_BARRIER_REPLY);
    assert_int_equal(raw_reply(&b, bb, 5000, NULL), RKV_MSG_BARRIER_REPLY);
    /* The retry of barrier 1: answered without b. */
    ba = raw_barrier_send(&a, 1);
    assert_int_equal(raw_reply(&a, ba, 3000, NULL), RKV_MSG_BARRIER_REPLY);
    int st = 0;
    ba = raw_barrier_send(&a, 3);
    assert_int_equal(raw_reply(&a, ba, 3000, &st), RKV_MSG_ERROR);
    assert_int_equal(st, -RKV_EINVAL);
    /* Barrier 2 waits for both. */
    ba = raw_barrier_send(&a, 2);
    assert_int_equal(raw_reply(&a, ba, 300, NULL), 0);
    bb = raw_barrier_send(&b, 2);
    assert_int_equal(raw_reply(&b, bb, 5000, NULL), RKV_MSG_BARRIER_REPLY);
    assert_int_equal(raw_reply(&a, ba, 5000, NULL), RKV_MSG_BARRIER_REPLY);
    raw_close(&a);
    raw_close(&b);
    rkv_server_destroy(s1);
    rkv_server_destroy(s0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_crc32c, reap_children),
        cmocka_unit_test_teardown(test_push_maybe_applied_not_retried, reap_children),
        cmocka_unit_test_teardown(test_crc32c_tables, reap_children),
        cmocka_unit_test_teardown(test_snapshot_roundtrip, reap_children),
        cmocka_unit_test_teardown(test_snapshot_truncated, reap_children),
        cmocka_unit_test_teardown(test_snapshot_flipped_byte, reap_children),
        cmocka_unit_test_teardown(test_snapshot_wrong_version, reap_children),
        cmocka_unit_test_teardown(test_snapshot_version1_read, reap_children),
        cmocka_unit_test_teardown(test_corrupt_snapshot_refused_at_restart, reap_children),
        cmocka_unit_test_teardown(test_durable_mismatch_refused, reap_children),
        cmocka_unit_test_teardown(test_machine_lost_without_durable_fails_fast, reap_children),
        cmocka_unit_test_teardown(test_machine_lost_under_pushes_durable, reap_children),
        cmocka_unit_test_teardown(test_first_server_stopped_beside_sibling_durable, reap_children),
        cmocka_unit_test_teardown(test_first_server_stopped_beside_sibling, reap_children),
        cmocka_unit_test_teardown(test_second_server_restart_beside_first_refused, reap_children),
        cmocka_unit_test_teardown(test_colocated_pull_beside_a_stopped_sibling_durable,
                                  reap_children),
        cmocka_unit_test_teardown(test_machine_shards_lost_segment_left_durable, reap_children),
        cmocka_unit_test_teardown(test_machine_shards_lost_sibling_restarts_first_durable,
                                  reap_children),
        cmocka_unit_test_teardown(test_server_crash_under_pushes_durable, reap_children),
        cmocka_unit_test_teardown(test_machine_of_two_servers_lost_durable, reap_children),
        cmocka_unit_test_teardown(test_torn_push_rolled_back, reap_children),
        cmocka_unit_test_teardown(test_torn_rollback_refused_then_restored, reap_children),
        cmocka_unit_test_teardown(test_exactly_once_across_restart, reap_children),
        cmocka_unit_test_teardown(test_colocated_client_follows_restart, reap_children),
        cmocka_unit_test_teardown(test_wal_replayed_after_kill, reap_children),
        cmocka_unit_test_teardown(test_wal_torn_tail_cut, reap_children),
        cmocka_unit_test_teardown(test_wal_corrupt_record_refused, reap_children),
        cmocka_unit_test_teardown(test_wal_stale_record_not_replayed, reap_children),
        cmocka_unit_test_teardown(test_wal_record_past_end_not_replayed_later, reap_children),
        cmocka_unit_test_teardown(test_wal_empty_log_file_after_records, reap_children),
        cmocka_unit_test(test_machine_segment_of_another_build_refused),
        cmocka_unit_test(test_machine_removed_by_its_last_server),
        cmocka_unit_test(test_machine_walks_reach_the_highest_tensor),
        cmocka_unit_test(test_shard_layout_and_reclaim),
        cmocka_unit_test_teardown(test_wal_version1, reap_children),
        cmocka_unit_test_teardown(test_wal_recovery_across_reused_logs, reap_children),
        cmocka_unit_test(test_wal_prewrite_too_large_refused),
        cmocka_unit_test_teardown(test_list_retried_after_server0_restart, reap_children),
        cmocka_unit_test_teardown(test_meta_retried_after_server0_restart, reap_children),
        cmocka_unit_test_teardown(test_barrier_retried_after_server0_restart, reap_children),
        cmocka_unit_test_teardown(test_shutdown_reaches_restarted_server0, reap_children),
        cmocka_unit_test_teardown(test_shutdown_asks_again_a_server_that_died_unanswering,
                                  reap_children),
        cmocka_unit_test(test_colocated_workers_follow_an_unheard_restart),
        cmocka_unit_test(test_colocated_worker_told_of_a_restart_not_durable),
        cmocka_unit_test(test_snapshot_removed_refused),
        cmocka_unit_test_teardown(test_full_disk_refused_acked_kept, reap_children),
        cmocka_unit_test(test_coord_client_flags),
        cmocka_unit_test(test_snapshot_every_cut_and_bit),
        cmocka_unit_test(test_coord_every_cut_and_bit),
        cmocka_unit_test_teardown(test_barrier_after_server0_restart_knows_who_left, reap_children),
        cmocka_unit_test_teardown(test_wal_checkpoint_then_crash, reap_children),
        cmocka_unit_test_teardown(test_dead_lock_holder_taken_over, reap_children),
        cmocka_unit_test_teardown(test_dead_client_row_lock_taken_over, reap_children),
        cmocka_unit_test_teardown(test_stopped_row_lock_holder_times_out, reap_children),
        cmocka_unit_test_teardown(test_stopped_row_lock_holder_refused_durable, reap_children),
        cmocka_unit_test_teardown(test_stopped_row_lock_holder_refused_by_server, reap_children),
        cmocka_unit_test(test_durable_dir_one_cluster_at_a_time),
        cmocka_unit_test_teardown(test_lost_files_said, reap_children),
        cmocka_unit_test_teardown(test_restore_refused_while_a_sibling_serves_removed_memory,
                                  reap_children),
        cmocka_unit_test_teardown(test_machine_on_another_directory_refuses_a_made_tensor,
                                  reap_children),
        cmocka_unit_test(test_prewrite_on_a_full_disk_leaves_nothing),
        cmocka_unit_test(test_ids_used_up_durable_hint),
        cmocka_unit_test(test_ids_not_used_up_by_a_failed_record),
        cmocka_unit_test(test_fresh_directory_no_lost_rows_warning),
        cmocka_unit_test_teardown(test_barrier_numbers, reap_children),
        cmocka_unit_test_teardown(test_join_again_after_server0_restart, reap_children),
        cmocka_unit_test_teardown(test_failed_init_not_committed_by_a_restart, reap_children),
        cmocka_unit_test_teardown(test_corrupt_coord_record_refused, reap_children),
        cmocka_unit_test_teardown(test_custom_op_replayed_after_restart, reap_children),
        cmocka_unit_test_teardown(test_push_torn_mid_row_finished_once, reap_children),
        cmocka_unit_test_teardown(test_sibling_dead_in_a_push, reap_children),
        cmocka_unit_test_teardown(test_sibling_dead_in_a_durable_push, reap_children),
        cmocka_unit_test_teardown(test_colocated_client_beside_a_dead_server, reap_children),
        cmocka_unit_test_teardown(test_barrier_fails_over_unserved_local_pushes, reap_children),
        cmocka_unit_test_teardown(test_colocated_client_beside_a_server_dead_in_a_durable_push,
                                  reap_children),
        cmocka_unit_test_teardown(test_server0_crash_under_pushes_durable, reap_children),
        cmocka_unit_test_teardown(test_server0_machine_lost_under_pushes_durable, reap_children),
    };
    /* RKV_TEST_FILTER=test_wal_* (a glob) runs only what it names. */
    const char *filter = getenv("RKV_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

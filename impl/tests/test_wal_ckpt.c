/* Checkpoints of the write-ahead log at the level of the files (no
 * network): a snapshot written over the blocks of the one before it, one
 * checkpoint asked per log that grew too long, and the log read at
 * recovery in bounded memory. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "port/port.h"
#include "port/port_file.h"
#include "rkv.h"
#include "store/handlers.h"
#include "store/snapshot.h"
#include "store/store_int.h"
#include "store/wal.h"
#include "under_sanitizer.h"
#include "util/util.h"

#define LINEAGE 0x1234u

/* One machine's segment, its snapshot writer and its log, in this process. */
struct fix {
    char dir[64], snap[128], tmp[128];
    struct rkv_machine machines[1];
    struct rkv_config cfg;
    struct rkv_port *port;
    struct rkv_mach mc;
    struct rkv_snap_writer sw;
    struct rkv_wal w;
    struct rkv_tensor_table tensors;
    int wal_on, wal_started;
};

static void fix_open(struct fix *f, uint64_t prewrite)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/rkv-walck-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->machines[0].host, sizeof(f->machines[0].host), "127.0.0.1");
    f->machines[0].base_port = 1;
    f->machines[0].servers = 1;
    rkv_config_defaults(&f->cfg);
    f->cfg.n_machines = 1;
    f->cfg.machines = f->machines;
    f->cfg.n_workers = 2;
    f->cfg.durable_log_prewrite = prewrite;
    snprintf(f->cfg.shm_prefix, sizeof(f->cfg.shm_prefix), "rkvwc-%d", (int)getpid());
    snprintf(f->cfg.durable_dir, sizeof(f->cfg.durable_dir), "%s", f->dir);
    snprintf(f->snap, sizeof(f->snap), "%s/rkv-m0.snap", f->dir);
    snprintf(f->tmp, sizeof(f->tmp), "%s/rkv-m0.snap.tmp0", f->dir);
    char err[256];
    assert_int_equal(rkv_port_posix_create("walck", 0, 1, &f->port), 0);
    if (rkv_mach_create(f->port, f->cfg.shm_prefix, 0, 2, LINEAGE, 1, &f->mc, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    rkv_snap_writer_init(&f->sw, f->port, &f->mc, &f->cfg, 0);
}

/* The machine's log (generation 1, made by the recovery of nothing) and the
 * checkpoint task, as a durable server sets them up. */
static void fix_wal(struct fix *f)
{
    char err[256];
    struct rkv_wal_replay r = {0};
    rkv_wal_init(&f->w, f->port, &f->mc, &f->tensors, &f->cfg);
    rkv_wal_hook(&f->w, &f->sw);
    f->wal_on = 1;
    if (rkv_wal_recover(&f->w, LINEAGE, 1, &f->tensors, NULL, 0, &r, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    if (rkv_wal_start(&f->w, &f->sw, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    f->wal_started = 1;
}

static void fix_close(struct fix *f)
{
    if (f->wal_started)
        rkv_wal_stop(&f->w);
    if (f->wal_on)
        rkv_wal_free(&f->w);
    rkv_snap_writer_free(&f->sw);
    rkv_mach_close(&f->mc);
    rkv_mach_unlink(f->port, f->cfg.shm_prefix, 0);
    f->port->ops->destroy(f->port);
    rkv_file_remove_dir(f->dir);
}

static ino_t inode_of(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        fail_msg("%s: missing", path);
    return st.st_ino;
}

static uint64_t generation_of(const char *path)
{
    struct rkv_snap s;
    char err[256];
    if (rkv_snap_read(path, 0, &s, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    uint64_t g = s.generation;
    rkv_snap_free(&s);
    return g;
}

/* Each snapshot is written into the file of the one before it (kept under
 * the temp name by the swap), not into a new file: on this kind of disk
 * the blocks of a new file made a 1 GiB shard's checkpoint take 7-10 s
 * instead of ~0.3 s. The previous snapshot stays whole under the temp name
 * until the next one overwrites it; the snapshot's name always holds a
 * whole one. */
static void test_snapshot_written_over_the_previous(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    char err[256];
    assert_int_equal(rkv_snap_commit(&f.sw, 0, err, sizeof(err)), 0);
    assert_int_equal(generation_of(f.snap), 1);
    assert_int_equal(rkv_snap_commit(&f.sw, 1, err, sizeof(err)), 0);
    assert_int_equal(generation_of(f.snap), 2);
    assert_int_equal(generation_of(f.tmp), 1); /* the previous, whole */
    ino_t spare = inode_of(f.tmp), current = inode_of(f.snap);
    assert_int_equal(rkv_snap_commit(&f.sw, 2, err, sizeof(err)), 0);
    assert_int_equal(generation_of(f.snap), 3);
    assert_true(inode_of(f.snap) == spare); /* written over generation 1's blocks */
    assert_true(inode_of(f.tmp) == current);
    assert_int_equal(generation_of(f.tmp), 2);
    fix_close(&f);
}

/* A push a dead server was applying, not finished yet (the apply journal
 * names its record), is in the rows in part: a checkpoint then would keep
 * that part for good, its record lying before the copy's LSN. It is
 * refused, saying why, and the next one after the push is finished goes
 * through. */
static void test_checkpoint_waits_for_a_torn_push(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    char err[256];
    assert_int_equal(rkv_snap_commit(&f.sw, 0, err, sizeof(err)), 0);
    atomic_store(&f.mc.hdr->jr_lsn, RKV_WAL_LSN(1, RKV_WAL_HDR_BYTES));
    assert_int_equal(rkv_snap_commit(&f.sw, 1, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, "died applying a push that is not finished yet"));
    assert_int_equal(generation_of(f.snap), 1);
    atomic_store(&f.mc.hdr->jr_lsn, 0);
    assert_int_equal(rkv_snap_commit(&f.sw, 1, err, sizeof(err)), 0);
    assert_int_equal(generation_of(f.snap), 2);
    fix_close(&f);
}

/* A server killed inside a push (here: a process that entered the apply
 * lock as server slot 2 and was killed there) left its reader flag set,
 * and a checkpoint's copy waited on it for ever, holding every live
 * server's next push behind it. The copy takes a dead process's flag
 * away. (Without that, alarm ends the test.) */
static void test_checkpoint_not_held_by_a_dead_reader(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    char err[256];
    assert_int_equal(rkv_snap_commit(&f.sw, 0, err, sizeof(err)), 0);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rkv_port *port;
        struct rkv_mach mc;
        if (rkv_port_posix_create("reader", 0, 1, &port) < 0 ||
            rkv_mach_attach(port, f.cfg.shm_prefix, 0, 2, 2, &mc, err, sizeof(err)) < 0)
            _exit(3);
        rkv_mach_apply_begin(&mc);
        if (write(ready[1], "x", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    char x;
    assert_int_equal(read(ready[0], &x, 1), 1);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(atomic_load(&f.mc.hdr->readers[1]), 1);
    alarm(30);
    assert_int_equal(rkv_snap_commit(&f.sw, 1, err, sizeof(err)), 0);
    alarm(0);
    assert_int_equal(generation_of(f.snap), 2);
    assert_int_equal(atomic_load(&f.mc.hdr->readers[1]), 0);
    close(ready[0]);
    close(ready[1]);
    fix_close(&f);
}

/* A crash while a snapshot is written over its spare leaves the spare
 * half written (here: junk, longer than a snapshot): the snapshot's name
 * still holds the last whole one, and the next snapshot writes over the
 * junk, cut to its own length first (the decoder refuses trailing bytes). */
static void test_snapshot_over_half_written_spare(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    char err[256];
    assert_int_equal(rkv_snap_commit(&f.sw, 0, err, sizeof(err)), 0);
    FILE *t = fopen(f.tmp, "wb");
    assert_non_null(t);
    static const uint8_t junk[100000] = {1};
    assert_int_equal(fwrite(junk, 1, sizeof(junk), t), sizeof(junk));
    fclose(t);
    assert_int_equal(generation_of(f.snap), 1); /* what a restart would read */
    assert_int_equal(rkv_snap_commit(&f.sw, 1, err, sizeof(err)), 0);
    assert_int_equal(generation_of(f.snap), 2);
    fix_close(&f);
}

/* With durable_log_prewrite, the first snapshot leaves a temp file as long
 * as itself ready, so that even the second one overwrites blocks. */
static void test_snapshot_spare_written_ahead(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 64 << 10);
    char err[256];
    assert_int_equal(rkv_snap_commit(&f.sw, 0, err, sizeof(err)), 0);
    struct stat snap, tmp;
    assert_int_equal(stat(f.snap, &snap), 0);
    assert_int_equal(stat(f.tmp, &tmp), 0);
    assert_int_equal(tmp.st_size, snap.st_size);
    ino_t spare = tmp.st_ino;
    assert_int_equal(rkv_snap_commit(&f.sw, 1, err, sizeof(err)), 0);
    assert_true(inode_of(f.snap) == spare);
    fix_close(&f);
}

/* rkv_file_swap_in: the old file stays under the temp name; with no old
 * file it is a rename; with no new one, an error naming both. */
static void test_file_swap_in(void **state)
{
    (void)state;
    char dir[64], a[128], b[128], err[256];
    snprintf(dir, sizeof(dir), "/tmp/rkv-swap-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof(a), "%s/a", dir);
    snprintf(b, sizeof(b), "%s/b", dir);
    FILE *fa = fopen(a, "w");
    assert_non_null(fa);
    fputs("new", fa);
    fclose(fa);
    assert_int_equal(rkv_file_swap_in(a, b, err, sizeof(err)), 0); /* b did not exist */
    struct stat st;
    assert_int_equal(stat(a, &st), -1);
    assert_int_equal(stat(b, &st), 0);
    assert_int_equal(st.st_size, 3);
    fa = fopen(a, "w");
    assert_non_null(fa);
    fputs("newer", fa);
    fclose(fa);
    assert_int_equal(rkv_file_swap_in(a, b, err, sizeof(err)), 0);
    assert_int_equal(stat(b, &st), 0);
    assert_int_equal(st.st_size, 5);
    assert_int_equal(stat(a, &st), 0);
    assert_int_equal(st.st_size, 3); /* the old one, kept */
    unlink(a);
    assert_int_equal(rkv_file_swap_in(a, b, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, "/a to "));
    rkv_file_remove_dir(dir);
}

/* Whether the checkpoint task finished every round asked of it. */
static int ckpt_idle(struct fix *f)
{
    const struct rkv_port_ops *o = f->port->ops;
    o->mutex_lock(f->w.ck.mu);
    int idle = f->w.ck.done == f->w.ck.asked;
    o->mutex_unlock(f->w.ck.mu);
    return idle;
}

/* A group commit that finds the log past its checkpoint size while a
 * checkpoint is on its way (its generation taken, the log not switched
 * yet) asks for none more: the one under way lets the log go. Asking for
 * one "after the snapshot that began last" made every checkpoint of a
 * large shard write it twice in a row. */
static void test_one_checkpoint_per_long_log(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    fix_wal(&f);
    struct rkv_mach_hdr *h = f.mc.hdr;
    char err[256];
    /* Another server's checkpoint, generation 2, has begun: it holds the
     * snapshot lock and has raised snap_started; the log (generation 1)
     * reads as past its checkpoint size. */
    rkv_live_lock(f.port, &h->snap_lock, &h->snap_holder, NULL, 2);
    atomic_store(&h->snap_started, 2);
    atomic_store(&h->wal_end, RKV_WAL_LSN(1, RKV_WAL_HDR_BYTES + RKV_WAL_CHECKPOINT_BYTES + 8));
    assert_int_equal(rkv_wal_commit(&f.w, 0, 0, err, sizeof(err)), 0);
    /* It completes (and switched the log). */
    atomic_store(&h->snap_durable, 2);
    rkv_live_unlock(&h->snap_lock, &h->snap_holder);
    for (int i = 0; i < 1000 && !ckpt_idle(&f); i++)
        usleep(10000);
    assert_true(ckpt_idle(&f));
    assert_int_equal(f.sw.n_written, 0);
    assert_int_equal(f.sw.n_shared, 1);
    fix_close(&f);
}

/* The process's address space now, in bytes (/proc/self/statm). */
static uint64_t vm_bytes(void)
{
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%lu", &pages), 1);
    fclose(f);
    return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* A log file far larger than its records (written ahead, or a reused
 * spare: durable_log_prewrite accepts up to 1 TiB) is read at recovery
 * through a window: with the address space capped 128 MiB above what the
 * process uses, recovering a 384 MiB log file succeeds (it read the file
 * whole before, and a 1 TiB prewrite asked for 1 TiB at restart). The cap
 * is left out under AddressSanitizer, which reserves terabytes. */
static void test_recovery_memory_bounded(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    char err[256], log1[160];
    struct rkv_wal_replay r = {0};
    rkv_wal_init(&f.w, f.port, &f.mc, &f.tensors, &f.cfg);
    f.wal_on = 1;
    assert_int_equal(rkv_wal_recover(&f.w, LINEAGE, 1, &f.tensors, NULL, 0, &r, err, sizeof(err)),
                     0);
    snprintf(log1, sizeof(log1), "%s/rkv-m0.1.wal", f.dir);
    assert_int_equal(truncate(log1, 384ull << 20), 0); /* zeros, as written ahead */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {.rlim_cur = vm_bytes() + (128ull << 20),
                            .rlim_max = vm_bytes() + (128ull << 20)};
        if (!UNDER_ASAN && setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(3);
        struct rkv_wal w2;
        rkv_wal_init(&w2, f.port, &f.mc, &f.tensors, &f.cfg);
        memset(&r, 0, sizeof(r));
        int rc = rkv_wal_recover(&w2, LINEAGE, 1, &f.tensors, NULL, 0, &r, err, sizeof(err));
        if (rc < 0)
            fprintf(stderr, "recovery: %s\n", err);
        _exit(rc == 0 && r.logs == 1 && r.records == 0 &&
                      r.end_lsn == RKV_WAL_LSN(1, RKV_WAL_HDR_BYTES)
                  ? 0
                  : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    fix_close(&f);
}

/* Tensor 1 of the fixture's machine: `rows` rows of `row_len` floats, all
 * local, published in the machine's table (snapshots hold it). */
static struct rkv_tensor *fix_tensor_shape(struct fix *f, uint64_t rows, uint32_t row_len,
                                           int with_state)
{
    char err[256], name[96];
    struct rkv_wire_tensor wt = {.dtype = RKV_F32,
                                 .policy = RKV_PART_RANGE,
                                 .row_len = row_len,
                                 .rows = rows,
                                 .with_state = (uint32_t)with_state};
    snprintf(wt.name, sizeof(wt.name), "t");
    struct rkv_tensor *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    if (rkv_tensor_from_wire(&wt, NULL, 1, 1, t, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    rkv_shard_name(name, sizeof(name), f->cfg.shm_prefix, 0, 1);
    if (rkv_shard_map(f->port, name, rows, t->row_bytes, with_state, 0, 1, &t->shard, err,
                      sizeof(err)) < 0)
        fail_msg("%s", err);
    t->shard.owner = 1;
    t->mapped = 1;
    assert_int_equal(rkv_tensor_put(&f->tensors, 1, t), 0);
    rkv_mach_publish(&f->mc, t);
    return t;
}

static struct rkv_tensor *fix_tensor_rows(struct fix *f, uint64_t rows, int with_state)
{
    return fix_tensor_shape(f, rows, 256, with_state);
}

static struct rkv_tensor *fix_tensor(struct fix *f)
{
    return fix_tensor_rows(f, 16, 0);
}

static void fix_tensor_free(struct fix *f)
{
    char name[96];
    struct rkv_tensor *t = rkv_tensor_at(&f->tensors, 1);
    rkv_shard_unmap(&t->shard);
    rkv_shard_name(name, sizeof(name), f->cfg.shm_prefix, 0, 1);
    f->port->ops->shm_unlink(f->port, name);
    rkv_tensor_free(t);
    free(t);
    rkv_tensor_table_free(&f->tensors);
}

/* A push of row `row` (every element v), sum, untracked. */
static void push_row(struct fix *f, struct rkv_tensor *t, uint64_t row, float v)
{
    float vals[256];
    char err[256];
    for (int i = 0; i < 256; i++)
        vals[i] = v;
    struct rkv_wal_push p = {.tensor_id = 1,
                             .client = UINT32_MAX,
                             .op = RKV_OP_SUM,
                             .count = 1,
                             .ids = &row,
                             .rows = (const uint8_t *)vals};
    int dup = 0;
    if (rkv_wal_push(&f->w, t, NULL, &p, &dup, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(dup, 0);
}

static uint64_t file_u64(const char *path, uint64_t off)
{
    uint8_t b[8];
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, (long)off, SEEK_SET), 0);
    assert_int_equal(fread(b, 1, 8, fp), 8);
    fclose(fp);
    uint64_t v;
    memcpy(&v, b, 8);
    return v;
}

/* Recovery looks for records of a log past its end (to refuse a log whose
 * synced record no longer reads, and to void unsynced ones) up to the
 * high-water mark in the log's header, not through the whole file: a log
 * written ahead (durable_log_prewrite, up to 1 TiB) was read whole at
 * every restart. Here a 64 MiB file whose mark is 64 KiB past the header:
 * the scan reads 64 KiB (64 MiB before). */
static void test_recovery_scan_stops_at_high_water_mark(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    char err[256], log1[160];
    struct rkv_wal_replay r = {0};
    rkv_wal_init(&f.w, f.port, &f.mc, &f.tensors, &f.cfg);
    f.w.hwm_step = 64 << 10;
    f.wal_on = 1;
    assert_int_equal(rkv_wal_recover(&f.w, LINEAGE, 1, &f.tensors, NULL, 0, &r, err, sizeof(err)),
                     0);
    snprintf(log1, sizeof(log1), "%s/rkv-m0.1.wal", f.dir);
    assert_int_equal(file_u64(log1, 48), RKV_WAL_HDR_BYTES + (64 << 10));
    assert_int_equal(truncate(log1, 64ull << 20), 0); /* zeros, as written ahead */
    memset(&r, 0, sizeof(r));
    assert_int_equal(rkv_wal_recover(&f.w, LINEAGE, 1, &f.tensors, NULL, 0, &r, err, sizeof(err)),
                     0);
    assert_int_equal(r.logs, 1);
    assert_int_equal(r.end_lsn, RKV_WAL_LSN(1, RKV_WAL_HDR_BYTES));
    assert_int_equal(r.scanned, 64 << 10);
    fix_close(&f);
}

/* The mark moves ahead of the appends: an append that would pass it first
 * rewrites the header (synced), so that a record a crash left on disk past
 * the records' end (record 2 here, its predecessor lost) is always below
 * the mark, found and voided by recovery. Without the raise, record 2 lay
 * past the mark and stayed: once appends after the recovery filled the gap
 * before it, the next recovery would replay it, never acknowledged. */
static void test_appends_raise_high_water_mark(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    char err[256], log1[160];
    struct rkv_wal_replay r = {0};
    struct rkv_tensor *t = fix_tensor(&f);
    rkv_wal_init(&f.w, f.port, &f.mc, &f.tensors, &f.cfg);
    f.w.hwm_step = 4096;
    f.wal_on = 1;
    assert_int_equal(rkv_wal_recover(&f.w, LINEAGE, 1, &f.tensors, NULL, 0, &r, err, sizeof(err)),
                     0);
    snprintf(log1, sizeof(log1), "%s/rkv-m0.1.wal", f.dir);
    size_t rec = rkv_wal_record_bytes(1, 1024);
    for (int i = 0; i < 12; i++) {
        push_row(&f, t, (uint64_t)i % 16, 1.0f);
        uint64_t end = RKV_WAL_OFF(atomic_load(&f.mc.hdr->wal_end));
        assert_true(file_u64(log1, 48) >= end); /* on disk before the record */
    }
    assert_true(f.w.n_hwm_raises >= 3);
    /* A group commit raises it ahead, half a step before appends need it:
     * its fdatasync is the commit's. */
    for (int i = 0;
         i < 8 && file_u64(log1, 48) - RKV_WAL_OFF(atomic_load(&f.mc.hdr->wal_end)) >= 2048; i++)
        push_row(&f, t, 3, 1.0f);
    uint64_t raises = f.w.n_hwm_raises, syncs = f.w.n_syncs;
    uint64_t end = RKV_WAL_OFF(atomic_load(&f.mc.hdr->wal_end));
    assert_true(file_u64(log1, 48) - end < 2048);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0);
    assert_int_equal(file_u64(log1, 48), end + 4096);
    assert_int_equal(f.w.n_hwm_raises, raises + 1);
    assert_int_equal(f.w.n_syncs, syncs + 1);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0); /* nothing new: nothing */
    assert_int_equal(f.w.n_hwm_raises, raises + 1);
    /* A crash kept records 0, 2.. but not record 1. */
    uint64_t r1 = RKV_WAL_HDR_BYTES + rec, r2 = r1 + rec;
    FILE *fp = fopen(log1, "r+b");
    assert_non_null(fp);
    static const uint8_t zeros[RKV_WAL_REC_BYTES];
    assert_int_equal(fseek(fp, (long)r1, SEEK_SET), 0);
    assert_int_equal(fwrite(zeros, 1, sizeof(zeros), fp), sizeof(zeros));
    fclose(fp);
    assert_true(file_u64(log1, r2) != 0);
    memset(t->shard.data, 0, 16 * t->row_bytes);
    memset(&r, 0, sizeof(r));
    assert_int_equal(rkv_wal_recover(&f.w, LINEAGE, 1, &f.tensors, NULL, 0, &r, err, sizeof(err)),
                     0);
    assert_int_equal(r.records, 1);
    assert_int_equal(r.end_lsn, RKV_WAL_LSN(1, r1));
    for (int i = 2; i < 12; i++) /* every later record voided (and those after) */
        assert_int_equal(file_u64(log1, r1 + (uint64_t)(i - 1) * rec), 0);
    fix_tensor_free(&f);
    fix_close(&f);
}

/* Pushes (op, client 0, tracked) into tensor 1 until told to stop. */
struct pusher {
    struct fix *f;
    struct rkv_tensor *t;
    uint64_t rows;
    int op;
    _Atomic uint64_t n;
    atomic_int stop;
};

static void pusher_one(struct pusher *p)
{
    float vals[256];
    char err[256];
    uint64_t n = atomic_load(&p->n), row = (n * 7919) % p->rows;
    for (int i = 0; i < 256; i++)
        vals[i] = 0.25f * (float)(n % 5 + 1) + (float)i;
    struct rkv_wal_push w = {.tensor_id = 1,
                             .client = 0,
                             .seq = (1ull << RKV_SEQ_TAG_SHIFT) | (n + 1),
                             .op = p->op,
                             .param = 0.01,
                             .count = 1,
                             .ids = &row,
                             .rows = (const uint8_t *)vals};
    int dup = 1;
    if (rkv_wal_push(&p->f->w, p->t, NULL, &w, &dup, err, sizeof(err)) < 0 || dup)
        fail_msg("push %llu: %s", (unsigned long long)n, err);
    atomic_store(&p->n, n + 1);
}

static void *pusher_main(void *arg)
{
    struct pusher *p = arg;
    while (!atomic_load(&p->stop))
        pusher_one(p);
    return NULL;
}

/* Rolls the machine back to snapshot file `path` and replays its logs:
 * the tensor's rows and client 0's sequence must be `want`'s. */
static void recover_and_compare(struct fix *f, const char *path, const uint8_t *want, size_t bytes,
                                uint64_t want_seq, struct rkv_wal_replay *r)
{
    struct rkv_snap snap;
    char err[256];
    if (rkv_snap_read(path, 0, &snap, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    if (rkv_snap_rollback(&snap, f->port, f->cfg.shm_prefix, &f->mc, err, sizeof(err)) < 0 ||
        rkv_wal_set_copies(&f->w, &snap, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    memset(r, 0, sizeof(*r));
    if (rkv_wal_recover(&f->w, LINEAGE, snap.generation, &f->tensors, NULL, 0, r, err,
                        sizeof(err)) < 0)
        fail_msg("%s", err);
    rkv_snap_free(&snap);
    assert_int_equal(f->mc.hdr->clients[0].last_seq, want_seq);
    const struct rkv_shard *sh = &rkv_tensor_at(&f->tensors, 1)->shard;
    size_t half = sh->state ? bytes / 2 : bytes;
    for (size_t i = 0; i < bytes; i++) {
        uint8_t got = i < half ? sh->data[i] : sh->state[i - half];
        if (got != want[i])
            fail_msg("%s: %s byte %zu (row %zu) differs after replay: a push applied twice or "
                     "never",
                     path, i < half ? "data" : "state", i % half,
                     (i % half) / rkv_tensor_at(&f->tensors, 1)->row_bytes);
    }
}

/* A second server of the machine, restarted, maps the shards at its
 * start: at its shutdown checkpoint the machine's first server may have
 * stopped and removed their names already, and mapping them only then
 * failed "cannot map ... (unknown tensor)" (an outside tester). */
static void test_restarted_writer_maps_at_its_start(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    fix_tensor(&f);
    char err[256], name[96];
    struct rkv_mach mc2;
    if (rkv_mach_attach(f.port, f.cfg.shm_prefix, 0, 2, 2, &mc2, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    struct rkv_snap_writer primed, late;
    rkv_snap_writer_init(&primed, f.port, &mc2, &f.cfg, 1);
    rkv_snap_writer_init(&late, f.port, &mc2, &f.cfg, 1);
    rkv_snap_writer_map(&primed);
    rkv_shard_name(name, sizeof(name), f.cfg.shm_prefix, 0, 1);
    rkv_shard_retire(f.port, name); /* the first server stopped */
    assert_true(rkv_snap_commit(&late, 0, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "cannot map"));
    if (rkv_snap_commit(&primed, 0, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(generation_of(f.snap), 1);
    rkv_snap_writer_free(&late);
    rkv_snap_writer_free(&primed);
    rkv_mach_close(&mc2);
    fix_tensor_free(&f);
    fix_close(&f);
}

/* A server killed between taking the log's lock word and recording
 * itself as its holder left the word held with no holder to find dead:
 * every other server waited for ever (test_torn_pushes_finished_by_a_live_
 * server hung so once in a loaded run). The word's tag names the slot,
 * whose process is recorded at attach. (Without that, alarm ends it.) */
static void test_lock_of_a_holder_dead_before_recording_itself(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    fix_tensor(&f);
    fix_wal(&f);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rkv_port *port;
        struct rkv_mach mc;
        char e[256];
        if (rkv_port_posix_create("dier", 0, 1, &port) < 0 ||
            rkv_mach_attach(port, f.cfg.shm_prefix, 0, 2, 2, &mc, e, sizeof(e)) < 0)
            _exit(3);
        unsigned zero = 0; /* the word taken, the holder not yet recorded */
        if (!atomic_compare_exchange_strong(&mc.hdr->wal_lock, &zero, 2))
            _exit(4);
        raise(SIGKILL);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(atomic_load(&f.mc.hdr->wal_lock), 2);
    assert_int_equal(atomic_load(&f.mc.hdr->wal_holder), 0);
    char err[256];
    alarm(30);
    if (rkv_wal_trim(&f.w, NULL, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    alarm(0);
    assert_int_equal(atomic_load(&f.mc.hdr->wal_lock), 0);
    fix_tensor_free(&f);
    fix_close(&f);
}

/* test_torn_row_kept_from_readers_until_finished: a sum that, in the
 * child, adds the first half of a row whose input is 7 and dies there. */
static int torn_row_child;

static void h_sum_dies_half_way(enum rkv_dtype dt, void *row, void *state, const void *in,
                                size_t n_elems, double param, void *user)
{
    (void)dt, (void)state, (void)param, (void)user;
    float *r = row;
    const float *x = in;
    size_t upto = torn_row_child && x[0] == 7.0f ? n_elems / 2 : n_elems;
    for (size_t i = 0; i < upto; i++)
        r[i] += x[i];
    if (upto < n_elems)
        raise(SIGKILL);
}

struct torn_reader {
    struct rkv_shard sh; /* a sibling server's view: tag 3, no holder_dead */
    uint64_t row;
    float got[256];
};

static void *torn_reader_main(void *arg)
{
    struct torn_reader *r = arg;
    rkv_shard_lock(&r->sh, r->row);
    memcpy(r->got, r->sh.data + r->row * r->sh.row_bytes, sizeof(r->got));
    rkv_shard_unlock(&r->sh, r->row);
    return NULL;
}

/* A server (child, slot 2) dies half way through a row of a custom push,
 * holding that row's lock; a sibling's pull of the row waits on it. The
 * finisher (here a trim, as a live server's next push) must take that
 * lock over and put the row back or finish it before anyone reads it: it
 * used to free the dead server's row locks first, and a waiting pull
 * could read the row half applied (the first 128 elements 7, the rest 0)
 * while the finisher was still reading the push's record. A finisher
 * that cannot finish yet (no handler) leaves the lock held. */
static void test_torn_row_kept_from_readers_until_finished(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    struct rkv_tensor *t = fix_tensor(&f);
    fix_wal(&f);
    struct rkv_handler_table ht = {0};
    assert_int_equal(rkv_handler_register(&ht, RKV_OP_CUSTOM, h_sum_dies_half_way, NULL), 0);
    uint64_t ids[3] = {1, 3, 5};
    static float vals[3 * 256];
    for (int i = 0; i < 3 * 256; i++)
        vals[i] = i / 256 == 1 ? 7.0f : 1.0f;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        torn_row_child = 1;
        f.mc.owner = 2;
        t->shard.owner = 2;
        char e[256];
        struct rkv_wal_push p = {.tensor_id = 1,
                                 .client = 0,
                                 .seq = (1ull << RKV_SEQ_TAG_SHIFT) | 1,
                                 .op = RKV_OP_CUSTOM,
                                 .count = 3,
                                 .ids = ids,
                                 .rows = (const uint8_t *)vals};
        int dup = 0;
        (void)rkv_wal_push(&f.w, t, &ht, &p, &dup, e, sizeof(e));
        _exit(3); /* the handler kills it first */
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_true(atomic_load(&f.mc.hdr->jr_lsn) != 0);
    int held = -1; /* the dead server's word: row 3's */
    for (int i = 0; i < (int)RKV_SHARD_LOCKS; i++)
        if (atomic_load(&t->shard.hdr->locks[i]) == 2)
            held = i;
    assert_true(held >= 0);
    /* A finisher without the handler takes the log's lock over and leaves
     * the push to a server that has it: the row's word must stay held. */
    char err[256];
    alarm(30);
    if (rkv_wal_trim(&f.w, NULL, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_true(atomic_load(&f.mc.hdr->jr_lsn) != 0);
    assert_int_equal(atomic_load(&t->shard.hdr->locks[held]), 2);
    struct torn_reader r = {.sh = t->shard, .row = 3};
    r.sh.owner = 3;
    r.sh.holder_dead = NULL;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, torn_reader_main, &r), 0);
    usleep(50 * 1000);
    if (rkv_wal_trim(&f.w, &ht, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(pthread_join(th, NULL), 0);
    alarm(0);
    assert_int_equal(atomic_load(&f.mc.hdr->jr_lsn), 0);
    /* Whole: before the push (the segment put back, all 0) or after it
     * (all 7), never the dead server's half. */
    for (int e = 0; e < 256; e++)
        if (r.got[e] != r.got[0] || (r.got[0] != 0.0f && r.got[0] != 7.0f))
            fail_msg("the pull read row 3 half applied: element 0 %g, element %d %g", r.got[0], e,
                     r.got[e]);
    for (uint64_t k = 0; k < 3; k++)
        for (int e = 0; e < 256; e++)
            assert_true(((float *)(void *)(t->shard.data + ids[k] * t->row_bytes))[e] ==
                        vals[k * 256 + e]);
    fix_tensor_free(&f);
    fix_close(&f);
}

/* Push n of test_torn_pushes_finished_by_a_live_server: adagrad into
 * TORN_IDS rows of 2 journal segments each (8 KiB), the last id the first
 * again (a row twice in one push), client 0's sequence n. */
#define TORN_ROWS 64u
#define TORN_LEN 2048u
#define TORN_IDS 4u
static void torn_push_args(uint64_t n, uint64_t *ids, float *vals)
{
    for (uint32_t k = 0; k < TORN_IDS; k++) {
        ids[k] = k + 1 < TORN_IDS ? (n * 5 + k * 9) % TORN_ROWS : ids[0];
        for (uint32_t e = 0; e < TORN_LEN; e++)
            vals[k * TORN_LEN + e] = 0.001f * (float)((n + k + e) % 17) - 0.008f;
    }
}

static void torn_push(struct fix *f, struct rkv_tensor *t, uint64_t n)
{
    uint64_t ids[TORN_IDS];
    static float vals[TORN_IDS * TORN_LEN];
    char err[256];
    torn_push_args(n, ids, vals);
    struct rkv_wal_push p = {.tensor_id = 1,
                             .client = 0,
                             .seq = (1ull << RKV_SEQ_TAG_SHIFT) | n,
                             .op = RKV_OP_ADAGRAD,
                             .param = 0.5,
                             .count = TORN_IDS,
                             .ids = ids,
                             .rows = (const uint8_t *)vals};
    int dup = 1;
    if (rkv_wal_push(&f->w, t, NULL, &p, &dup, err, sizeof(err)) < 0 || dup)
        _exit(5);
}

/* Servers of one machine are separate processes over one shared memory:
 * here a child process (server slot 2) pushes until it is killed, at a
 * different moment each round, and the parent (slot 1, a live server)
 * takes the log's lock over as its next push would. Each round the rows
 * and optimizer state must be exactly every push the machine marked
 * applied, once, in order: a push the child died in is finished from its
 * record (the segment in flight put back first), or was never applied.
 * Before the apply journal a push killed half way was left in part and its
 * sequence unmarked, and the client's retry applied it again. */
static void test_torn_pushes_finished_by_a_live_server(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    struct rkv_tensor *t = fix_tensor_shape(&f, TORN_ROWS, TORN_LEN, 1);
    fix_wal(&f);
    size_t rb = t->row_bytes, bytes = TORN_ROWS * rb;
    uint8_t *want = calloc(2, bytes);
    assert_non_null(want);
    uint64_t applied = 0, ids[TORN_IDS];
    static float vals[TORN_IDS * TORN_LEN];
    int torn = 0;
    for (int round = 0; round < 24; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            f.mc.owner = 2;
            t->shard.owner = 2;
            for (uint64_t n = applied + 1;; n++)
                torn_push(&f, t, n);
        }
        usleep(1000 + (useconds_t)round * 400);
        assert_int_equal(kill(pid, SIGKILL), 0);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st));
        torn += atomic_load(&f.mc.hdr->jr_lsn) != 0;
        char err[256];
        if (rkv_wal_trim(&f.w, NULL, err, sizeof(err)) < 0)
            fail_msg("%s", err);
        assert_int_equal(atomic_load(&f.mc.hdr->jr_lsn), 0);
        uint64_t last = f.mc.hdr->clients[0].last_seq & ((1ull << RKV_SEQ_TAG_SHIFT) - 1);
        assert_true(last >= applied);
        for (uint64_t n = applied + 1; n <= last; n++) {
            torn_push_args(n, ids, vals);
            for (uint32_t k = 0; k < TORN_IDS; k++)
                rkv_handler_run(NULL, RKV_OP_ADAGRAD, RKV_F32, want + ids[k] * rb,
                                want + bytes + ids[k] * rb, vals + k * TORN_LEN, TORN_LEN, 0.5);
        }
        applied = last;
        if (memcmp(t->shard.data, want, bytes) != 0 || memcmp(t->shard.state, want + bytes, bytes))
            fail_msg("round %d: the rows are not pushes 1..%llu each applied once", round,
                     (unsigned long long)applied);
    }
    /* Most of a push's time is its apply: some kills land there. */
    if (torn == 0)
        fail_msg("no kill of 24 landed inside a push");
    print_message("%d of 24 kills inside a push, %llu pushes\n", torn, (unsigned long long)applied);
    free(want);
    fix_tensor_free(&f);
    fix_close(&f);
}

/* A checkpoint copies the shard chunk by chunk while pushes go on (a whole
 * copy under the copy lock stopped every push for ~90 ms per GiB, and held
 * a buffer as large as the shard): here 32 chunks of 1 MiB, with a thread
 * pushing sums into rows all over the shard throughout. A crash after it:
 * the snapshot and its log give back exactly the rows and sequences the
 * pushes left, each push applied once, the rows a chunk's copy holds
 * skipped (without the copy LSNs, the replay added them a second time). A
 * crash before its swap: the snapshot before it and both logs give the
 * same. */
static void run_fuzzy_checkpoint(int op, int with_state)
{
    struct fix f;
    fix_open(&f, 0);
    uint64_t rows = with_state ? 16 << 10 : 32 << 10;
    struct rkv_tensor *t = fix_tensor_rows(&f, rows, with_state);
    fix_wal(&f);
    struct rkv_mach_hdr *h = f.mc.hdr;
    char err[256], log_prev[160], spare[160];
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    uint64_t gen = atomic_load(&h->snap_durable);
    struct pusher p = {.f = &f, .t = t, .rows = rows, .op = op};
    for (int i = 0; i < 2000; i++) /* in log gen */
        pusher_one(&p);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pusher_main, &p), 0);
    while (atomic_load(&p.n) < 4000)
        usleep(100);
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    /* The pusher never syncs: what is durable now the checkpoint made so. */
    uint64_t durable_at_swap = atomic_load(&h->wal_durable);
    uint64_t at_end = atomic_load(&p.n);
    while (atomic_load(&p.n) < at_end + 1000) /* and some after it */
        usleep(100);
    atomic_store(&p.stop, 1);
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&h->snap_durable), gen + 1);
    size_t half = (size_t)(rows * t->row_bytes), bytes = with_state ? 2 * half : half;
    uint8_t *want = malloc(bytes);
    assert_non_null(want);
    memcpy(want, t->shard.data, half);
    if (with_state)
        memcpy(want + half, t->shard.state, half);
    uint64_t want_seq = h->clients[0].last_seq;
    assert_int_equal(want_seq, (1ull << RKV_SEQ_TAG_SHIFT) | atomic_load(&p.n));
    struct rkv_wal_replay r;
    recover_and_compare(&f, f.snap, want, bytes, want_seq, &r);
    /* The log before the page: every push a chunk holds was durable in the
     * log before the snapshot took its name, else a crash losing the log's
     * tail left pushes in the snapshot that no record or sequence accounts
     * for, and a client's retry of one was applied twice. */
    if (f.w.copies[1].lsn_max > durable_at_swap)
        fail_msg("a chunk copied at byte %llu of log %llu, but the log was durable only to byte "
                 "%llu when the snapshot was swapped in",
                 (unsigned long long)RKV_WAL_OFF(f.w.copies[1].lsn_max),
                 (unsigned long long)RKV_WAL_GEN(f.w.copies[1].lsn_max),
                 (unsigned long long)RKV_WAL_OFF(durable_at_swap));
    assert_int_equal(r.logs, 1);
    assert_true(r.rows_in_copy > 0);         /* pushes met chunks copied after them */
    assert_true(r.rows_in_copy < r.records); /* and chunks copied before them */
    /* Before the swap: the previous snapshot (kept under the temp name)
     * and its log (kept as a spare) are what a crash would have left. */
    snprintf(log_prev, sizeof(log_prev), "%s/rkv-m0.%llu.wal", f.dir, (unsigned long long)gen);
    snprintf(spare, sizeof(spare), "%s/rkv-m0.free0.wal", f.dir);
    assert_int_equal(rename(spare, log_prev), 0);
    assert_int_equal(generation_of(f.tmp), gen);
    recover_and_compare(&f, f.tmp, want, bytes, want_seq, &r);
    assert_int_equal(r.logs, 2);
    assert_int_equal(r.records, atomic_load(&p.n));
    assert_int_equal(r.rows_in_copy, 0);
    free(want);
    fix_tensor_free(&f);
    fix_close(&f);
}

static void test_fuzzy_checkpoint_under_pushes(void **state)
{
    (void)state;
    run_fuzzy_checkpoint(RKV_OP_SUM, 0);
}

/* The same with an optimizer's state (adagrad: each chunk's rows and
 * state copied together, the state's CRC combined with the rows'). */
static void test_fuzzy_checkpoint_with_state(void **state)
{
    (void)state;
    run_fuzzy_checkpoint(RKV_OP_ADAGRAD, 1);
}

/* A failed sync of a log is healed by the next checkpoint that switched
 * logs after it (its snapshot holds what was unsure), never by the one
 * whose own log failed: that snapshot's chunks hold pushes of the failed
 * log, whose sequences it does not hold. It is not swapped in, the failure
 * stays, and the checkpoint after it heals. Once wal_failed was a bare
 * flag that any durable snapshot cleared. */
static void test_failed_sync_healed_only_by_a_later_switch(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    struct rkv_tensor *t = fix_tensor_rows(&f, 4096, 0);
    fix_wal(&f);
    struct rkv_mach_hdr *h = f.mc.hdr;
    char err[256];
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    uint64_t gen = atomic_load(&h->snap_durable);
    struct pusher p = {.f = &f, .t = t, .rows = 4096, .op = RKV_OP_SUM};
    for (int i = 0; i < 50; i++)
        pusher_one(&p);
    /* A sync of log gen + 1, the log the next checkpoint begins, failed
     * while that checkpoint copied. */
    atomic_store(&h->wal_failed, (unsigned)(gen + 1));
    int rc = rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err));
    assert_int_equal(rc, -RKV_EIO);
    assert_non_null(strstr(err, "failed during its checkpoint"));
    assert_int_equal(atomic_load(&h->snap_durable), gen);
    assert_int_equal(atomic_load(&h->wal_failed), gen + 1);
    assert_int_equal(generation_of(f.snap), gen);
    /* The next checkpoint switched after the failure: it heals. */
    assert_int_equal(rkv_wal_commit(&f.w, 0, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    assert_int_equal(atomic_load(&h->wal_failed), 0);
    assert_int_equal(atomic_load(&h->snap_durable), gen + 2);
    fix_tensor_free(&f);
    fix_close(&f);
}

/* The durable directory removed under a running server: the next sync
 * fails naming the deletion, and nothing is acknowledged after it (a
 * restart would read an empty directory: pushes acknowledged into the
 * unlinked log were lost without a word). */
static void test_deleted_log_not_acknowledged(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    struct rkv_tensor *t = fix_tensor_rows(&f, 64, 0);
    fix_wal(&f);
    char err[256];
    struct pusher p = {.f = &f, .t = t, .rows = 64, .op = RKV_OP_SUM};
    pusher_one(&p);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0);
    rkv_file_remove_dir(f.dir);
    pusher_one(&p);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, "was deleted while open"));
    /* Every later sync refuses too, though the last one reached the disk. */
    pusher_one(&p);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, "its log was found deleted"));
    /* Nor does a checkpoint heal it, even into the directory made again
     * (an outside tester): that one holds no coordination record and no
     * claim, and a restart on it was refused after pushes were
     * acknowledged there again. */
    assert_int_equal(mkdir(f.dir, 0700), 0);
    assert_int_equal(
        rkv_wal_commit(&f.w, 1, atomic_load(&f.mc.hdr->snap_started), err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, "nothing is acknowledged until its servers restart"));
    pusher_one(&p);
    assert_int_equal(
        rkv_wal_commit(&f.w, 0, atomic_load(&f.mc.hdr->snap_started), err, sizeof(err)), -RKV_EIO);
    fix_tensor_free(&f);
    fix_close(&f);
}

/* The directory removed before the first push: the log could not be
 * opened, and the client read -RKV_ENOTENSOR ("unknown tensor", the code of
 * a missing file) where the README promises -RKV_EIO (an outside tester). */
static void test_missing_log_is_an_io_error(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    struct rkv_tensor *t = fix_tensor_rows(&f, 64, 0);
    fix_wal(&f);
    /* As a server that has not opened the log yet (the recovery did). */
    for (struct rkv_wal_file *wf = &f.w.app; wf; wf = wf == &f.w.app ? &f.w.sync : NULL)
        if (wf->fd >= 0) {
            close(wf->fd);
            wf->fd = -1;
        }
    rkv_file_remove_dir(f.dir);
    char err[256];
    float vals[256] = {1};
    uint64_t row = 3;
    struct rkv_wal_push w = {.tensor_id = 1,
                             .client = 0,
                             .seq = (1ull << RKV_SEQ_TAG_SHIFT) | 1,
                             .op = RKV_OP_SUM,
                             .count = 1,
                             .ids = &row,
                             .rows = (const uint8_t *)vals};
    int dup = 0;
    assert_int_equal(rkv_wal_push(&f.w, t, NULL, &w, &dup, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, "is missing (the durable directory removed?)"));
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), -RKV_EIO);
    fix_tensor_free(&f);
    fix_close(&f);
}

/* A copy LSN names a place in the snapshot's own log (or is 0): another
 * log's is refused, naming the tensor and the chunk. */
static void test_copy_lsn_of_another_log_refused(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    rkv_wal_init(&f.w, f.port, &f.mc, &f.tensors, &f.cfg);
    f.wal_on = 1;
    uint8_t lsns[16];
    memcpy(lsns, &(uint64_t){RKV_WAL_LSN(2, 64)}, 8);
    memcpy(lsns + 8, &(uint64_t){RKV_WAL_LSN(3, 64)}, 8);
    struct rkv_snap_tensor t = {
        .id = 5, .local_rows = 4, .row_bytes = 8, .chunk_rows = 2, .copy_lsn = lsns};
    struct rkv_snap s = {.machine = 0, .generation = 2, .n_tensors = 1, .tensors = &t};
    char err[256];
    assert_int_equal(rkv_wal_set_copies(&f.w, &s, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, "tensor 5's chunk 1 was copied at a place in log 3"));
    assert_null(f.w.copies);
    s.generation = 3;
    memcpy(lsns, &(uint64_t){0}, 8);
    assert_int_equal(rkv_wal_set_copies(&f.w, &s, err, sizeof(err)), 0);
    assert_int_equal(f.w.copies[5].n_chunks, 2);
    assert_int_equal(f.w.copies[5].lsn_max, RKV_WAL_LSN(3, 64));
    fix_close(&f);
}

/* ---- damaged logs ----
 * A log of DMG_RECS one-row pushes (record i adds i + 1 to row i), synced
 * after every second one, so that records 2..5 each say the log was
 * durable up to an earlier record: record 2 up to byte off[2], records 4
 * and 5 up to off[4]. The last two are the last group commit's: nothing
 * on disk tells a synced pair from an unsynced one, so damage there reads
 * as a torn tail. Each probe writes a damaged copy and recovers it. */
#define DMG_RECS 6
#define DMG_ROW_LEN 2u

struct dmg {
    struct fix f;
    struct rkv_tensor *t;
    char log1[160];
    uint8_t *img; /* the undamaged log */
    size_t len;
    uint64_t off[DMG_RECS + 1]; /* record i at off[i]; the end at off[DMG_RECS] */
};

static void dmg_push(struct fix *f, struct rkv_tensor *t, uint64_t row, float v)
{
    float vals[DMG_ROW_LEN];
    char err[256];
    for (unsigned i = 0; i < DMG_ROW_LEN; i++)
        vals[i] = v;
    struct rkv_wal_push p = {.tensor_id = 1,
                             .client = UINT32_MAX,
                             .op = RKV_OP_SUM,
                             .count = 1,
                             .ids = &row,
                             .rows = (const uint8_t *)vals};
    int dup = 0;
    if (rkv_wal_push(&f->w, t, NULL, &p, &dup, err, sizeof(err)) < 0)
        fail_msg("%s", err);
}

static void read_whole(const char *path, uint8_t **buf_p, size_t *len_p)
{
    char err[256];
    if (rkv_file_read(path, buf_p, len_p, err, sizeof(err)) < 0)
        fail_msg("%s", err);
}

static void write_whole(const char *path, const uint8_t *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

static void dmg_open(struct dmg *d)
{
    char err[256];
    fix_open(&d->f, 0);
    d->t = fix_tensor_shape(&d->f, 16, DMG_ROW_LEN, 0);
    fix_wal(&d->f);
    for (int i = 0; i < DMG_RECS; i++) {
        dmg_push(&d->f, d->t, (uint64_t)i, (float)(i + 1));
        if (i % 2 == 1 && rkv_wal_sync(&d->f.w, err, sizeof(err)) < 0)
            fail_msg("%s", err);
    }
    rkv_wal_stop(&d->f.w);
    rkv_wal_free(&d->f.w);
    d->f.wal_on = d->f.wal_started = 0;
    snprintf(d->log1, sizeof(d->log1), "%s/rkv-m0.1.wal", d->f.dir);
    read_whole(d->log1, &d->img, &d->len);
    size_t rs = rkv_wal_record_bytes(1, DMG_ROW_LEN * 4);
    for (int i = 0; i <= DMG_RECS; i++)
        d->off[i] = RKV_WAL_HDR_BYTES + (uint64_t)i * rs;
    assert_int_equal(d->len, d->off[DMG_RECS]);
    assert_int_equal(rkv_get64(d->img + d->off[2] + 64), RKV_WAL_LSN(1, d->off[2]));
    assert_int_equal(rkv_get64(d->img + d->off[5] + 64), RKV_WAL_LSN(1, d->off[4]));
}

static void dmg_close(struct dmg *d)
{
    free(d->img);
    fix_tensor_free(&d->f);
    fix_close(&d->f);
}

/* Recovers log 1 holding buf, from empty rows: the return code, and in
 * *mask_p the records applied (bit i: record i). A row holding anything
 * but 0 or i + 1 is a wrong restore. */
static int dmg_recover(struct dmg *d, const uint8_t *buf, size_t len, unsigned *mask_p,
                       struct rkv_wal_replay *r, char *err, size_t err_len)
{
    write_whole(d->log1, buf, len);
    memset(d->t->shard.data, 0, 16 * d->t->row_bytes);
    struct rkv_wal w;
    rkv_wal_init(&w, d->f.port, &d->f.mc, &d->f.tensors, &d->f.cfg);
    memset(r, 0, sizeof(*r));
    int rc = rkv_wal_recover(&w, LINEAGE, 1, &d->f.tensors, NULL, 0, r, err, err_len);
    rkv_wal_free(&w);
    *mask_p = 0;
    for (unsigned i = 0; i < 16; i++) {
        float v;
        memcpy(&v, d->t->shard.data + i * d->t->row_bytes, 4);
        if (v == (float)(i + 1) && i < DMG_RECS)
            *mask_p |= 1u << i;
        else if (v != 0)
            fail_msg("row %u holds %g after recovery: a wrong restore", i, (double)v);
    }
    return rc;
}

/* The record holding byte b of the log (DMG_RECS: none). */
static int dmg_record_of(const struct dmg *d, uint64_t b)
{
    for (int i = 0; i < DMG_RECS; i++)
        if (b >= d->off[i] && b < d->off[i + 1])
            return i;
    return DMG_RECS;
}

/* Damage whose first byte lies in record i: refused, naming the log and
 * record i's offset, when a record after the damage says the log was
 * durable past it (records 0..3); else the records before i are kept and
 * the rest dropped as a torn tail would be. Never a crash, never another
 * prefix, never a row that no record accounts for. */
static void dmg_expect(struct dmg *d, const uint8_t *buf, size_t len, int i, const char *what)
{
    char err[512] = "", want[64];
    unsigned mask;
    struct rkv_wal_replay r;
    int rc = dmg_recover(d, buf, len, &mask, &r, err, sizeof(err));
    if (i < 4) {
        snprintf(want, sizeof(want), "record at byte %llu", (unsigned long long)d->off[i]);
        if (rc != -RKV_EIO || !strstr(err, d->log1) || !strstr(err, want))
            fail_msg("%s: rc %d, expected a refusal naming %s and '%s', got: %s", what, rc, d->log1,
                     want, err);
    } else if (rc != 0 || mask != (1u << i) - 1) {
        fail_msg("%s: rc %d, records applied %#x, expected %#x: %s", what, rc, mask, (1u << i) - 1,
                 err);
    }
}

/* The log cut at every length (a crash of a file system that lost the
 * tail, or an operator's copy cut short): what remains of the header is
 * refused, an empty file is a log never written to, and past the header
 * every complete record is kept, the partial one (if any) dropped. */
static void test_log_truncated_at_every_byte(void **state)
{
    (void)state;
    struct dmg d;
    dmg_open(&d);
    char err[512];
    struct rkv_wal_replay r;
    unsigned mask;
    for (size_t n = 0; n <= d.len; n++) {
        err[0] = 0;
        int rc = dmg_recover(&d, d.img, n, &mask, &r, err, sizeof(err));
        if (n > 0 && n < RKV_WAL_HDR_BYTES) {
            if (rc != -RKV_EIO || !strstr(err, "truncated") || !strstr(err, d.log1))
                fail_msg("cut at %zu: rc %d: %s", n, rc, err);
            continue;
        }
        int whole = n < RKV_WAL_HDR_BYTES ? 0 : dmg_record_of(&d, n);
        if (n == d.len)
            whole = DMG_RECS;
        if (rc != 0 || mask != (1u << whole) - 1)
            fail_msg("cut at %zu: rc %d, records applied %#x, expected %#x: %s", n, rc, mask,
                     (1u << whole) - 1, err);
        /* A record cut within its body is an interrupted append. */
        assert_int_equal(r.torn, n < d.len && n >= RKV_WAL_HDR_BYTES &&
                                     n - d.off[whole] >= RKV_WAL_REC_BYTES);
    }
    dmg_close(&d);
}

/* One bit flipped in every byte of the log (a bit of each byte in turn):
 * the header is refused, a record per dmg_expect. */
static void test_log_bit_flipped_at_every_byte(void **state)
{
    (void)state;
    struct dmg d;
    dmg_open(&d);
    uint8_t *bad = malloc(d.len);
    assert_non_null(bad);
    char err[512], what[64];
    unsigned mask;
    struct rkv_wal_replay r;
    for (size_t b = 0; b < d.len; b++) {
        memcpy(bad, d.img, d.len);
        bad[b] ^= (uint8_t)(1u << (b % 8));
        snprintf(what, sizeof(what), "bit %zu of byte %zu flipped", b % 8, b);
        if (b >= RKV_WAL_HDR_BYTES) {
            dmg_expect(&d, bad, d.len, dmg_record_of(&d, b), what);
            continue;
        }
        err[0] = 0;
        int rc = dmg_recover(&d, bad, d.len, &mask, &r, err, sizeof(err));
        if (rc != -RKV_EIO || !strstr(err, d.log1))
            fail_msg("%s: rc %d: %s", what, rc, err);
    }
    free(bad);
    dmg_close(&d);
}

/* A block of 64 zeros at every 8-byte place (a sector lost, a hole). */
static void test_log_zeroed_blocks(void **state)
{
    (void)state;
    struct dmg d;
    dmg_open(&d);
    uint8_t *bad = malloc(d.len);
    assert_non_null(bad);
    char what[64];
    for (size_t b = RKV_WAL_HDR_BYTES; b < d.len; b += 8) {
        memcpy(bad, d.img, d.len);
        memset(bad + b, 0, d.len - b < 64 ? d.len - b : 64);
        snprintf(what, sizeof(what), "64 zeros at byte %zu", b);
        dmg_expect(&d, bad, d.len, dmg_record_of(&d, b), what);
    }
    free(bad);
    dmg_close(&d);
}

/* Record i's header rewritten (its CRCs made good again): rows `count`. */
static void dmg_set_count(struct dmg *d, uint8_t *buf, int i, uint64_t count)
{
    uint8_t *rec = buf + d->off[i];
    rkv_put64(rec + 24, count);
    rkv_put32(rec + 76, rkv_crc32c(0, rec, 76));
}

/* Records whose header checks but whose length cannot be (an operator's
 * edit, or a writer's bug): no allocation of what it says, a refusal or a
 * torn tail; and records in another order, or twice. */
static void test_log_lengths_and_order(void **state)
{
    (void)state;
    struct dmg d;
    dmg_open(&d);
    uint8_t *bad = malloc(d.len);
    assert_non_null(bad);
    size_t rs = (size_t)(d.off[1] - d.off[0]);
    char err[512];
    unsigned mask;
    struct rkv_wal_replay r;
    static const uint64_t counts[] = {0, 1000, 1ull << 40, UINT64_MAX / 16, UINT64_MAX};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        memcpy(bad, d.img, d.len);
        dmg_set_count(&d, bad, 2, counts[k]);
        dmg_expect(&d, bad, d.len, 2, "record 2's count");
        memcpy(bad, d.img, d.len);
        dmg_set_count(&d, bad, 5, counts[k]);
        err[0] = 0;
        int rc = dmg_recover(&d, bad, d.len, &mask, &r, err, sizeof(err));
        /* 0 rows, or a size that overflows, cannot be; a body past the
         * end of the file is an interrupted append. */
        if (counts[k] == 0 || counts[k] == UINT64_MAX) {
            if (rc != -RKV_EIO || !strstr(err, "impossible sizes") || !strstr(err, d.log1))
                fail_msg("count %llu: rc %d: %s", (unsigned long long)counts[k], rc, err);
        } else if (rc != 0 || mask != 0x1f || r.torn != 1) {
            fail_msg("count %llu of the last record: rc %d, mask %#x: %s",
                     (unsigned long long)counts[k], rc, mask, err);
        }
    }
    /* Records 2 and 3 swapped, record 1 twice: the second copy is not at
     * its place, and a record after it says the log was durable there. */
    memcpy(bad, d.img, d.len);
    memcpy(bad + d.off[2], d.img + d.off[3], rs);
    memcpy(bad + d.off[3], d.img + d.off[2], rs);
    dmg_expect(&d, bad, d.len, 2, "records 2 and 3 swapped");
    memcpy(bad, d.img, d.len);
    memcpy(bad + d.off[2], d.img + d.off[1], rs);
    dmg_expect(&d, bad, d.len, 2, "record 1 again in place of record 2");
    /* The log again after itself (a copy appended twice): the second copy
     * names other places and is not read. */
    uint8_t *twice = malloc(2 * d.len);
    assert_non_null(twice);
    memcpy(twice, d.img, d.len);
    memcpy(twice + d.len, d.img, d.len);
    assert_int_equal(dmg_recover(&d, twice, 2 * d.len, &mask, &r, err, sizeof(err)), 0);
    assert_int_equal(mask, (1u << DMG_RECS) - 1);
    free(twice);
    free(bad);
    dmg_close(&d);
}

/* The log file replaced by a directory, or by a symlink (to the log file
 * itself): a clear refusal, not an empty log made in its place (which
 * would drop every record the file held). A symlink is not followed: a log
 * becomes a spare and a spare a log by renames, and the link's target was
 * then written over. */
static void test_log_not_a_file(void **state)
{
    (void)state;
    struct dmg d;
    dmg_open(&d);
    char err[512], aside[200];
    unsigned mask;
    struct rkv_wal_replay r;
    snprintf(aside, sizeof(aside), "%s/aside", d.f.dir);
    assert_int_equal(rename(d.log1, aside), 0);
    assert_int_equal(mkdir(d.log1, 0755), 0);
    struct rkv_wal w;
    rkv_wal_init(&w, d.f.port, &d.f.mc, &d.f.tensors, &d.f.cfg);
    memset(&r, 0, sizeof(r));
    int rc = rkv_wal_recover(&w, LINEAGE, 1, &d.f.tensors, NULL, 0, &r, err, sizeof(err));
    if (rc >= 0 || !strstr(err, d.log1))
        fail_msg("a directory in place of the log: rc %d: %s", rc, err);
    assert_int_equal(rmdir(d.log1), 0);
    assert_int_equal(symlink(aside, d.log1), 0);
    memset(&r, 0, sizeof(r));
    rc = rkv_wal_recover(&w, LINEAGE, 1, &d.f.tensors, NULL, 0, &r, err, sizeof(err));
    if (rc != -RKV_EIO || !strstr(err, d.log1) || !strstr(err, "symbolic link"))
        fail_msg("a symlink in place of the log: rc %d: %s", rc, err);
    assert_int_equal(r.records, 0);
    rkv_wal_free(&w);
    assert_int_equal(unlink(d.log1), 0);
    (void)mask;
    dmg_close(&d);
}

/* A spare log that is a symlink (to a file of someone else's) is not
 * used, and its target is left as it was: a checkpoint made its log from
 * the spare by writing the header through the link and renaming the link
 * to the log's name, and every push after it went into the target. */
static void test_spare_symlink_not_followed(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    struct rkv_tensor *t = fix_tensor_shape(&f, 16, DMG_ROW_LEN, 0);
    fix_wal(&f);
    char victim[128], spare[128], logg[128], err[256];
    snprintf(victim, sizeof(victim), "%s/victim", f.dir);
    snprintf(spare, sizeof(spare), "%s/rkv-m0.free0.wal", f.dir);
    uint8_t img[4096], *got;
    size_t len;
    for (size_t i = 0; i < sizeof(img); i++)
        img[i] = (uint8_t)(i * 7 + 1);
    write_whole(victim, img, sizeof(img));
    assert_int_equal(symlink(victim, spare), 0);
    struct rkv_mach_hdr *h = f.mc.hdr;
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    uint64_t gen = atomic_load(&h->snap_durable);
    dmg_push(&f, t, 1, 2);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0);
    read_whole(victim, &got, &len);
    if (len != sizeof(img) || memcmp(got, img, len) != 0)
        fail_msg("%s, the target of spare %s, was written (%zu bytes now)", victim, spare, len);
    free(got);
    struct stat st;
    snprintf(logg, sizeof(logg), "%s/rkv-m0.%llu.wal", f.dir, (unsigned long long)gen);
    assert_int_equal(lstat(logg, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    fix_tensor_free(&f);
    fix_close(&f);
}

static int exists_in(const char *dir, const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return lstat(path, &st) == 0;
}

/* A checkpoint lets go of every log of its machine below its generation,
 * past a gap too: an older build's failed checkpoint took the next number
 * (logs G and G + 2), and the walk down from the new generation stopped at
 * the first missing log, so that the logs below the gap stayed for good.
 * Files that are not this machine's logs, or above, are left alone. */
static void test_retire_past_a_gap(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    fix_tensor_shape(&f, 16, DMG_ROW_LEN, 0);
    fix_wal(&f);
    struct rkv_mach_hdr *h = f.mc.hdr;
    char err[256], path[160];
    for (int i = 0; i < 2; i++) /* logs 1 and 2 let go */
        assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)),
                         0);
    assert_int_equal(atomic_load(&h->snap_durable), 3);
    static const char *const left[] = {"rkv-m0.1.wal", "rkv-m1.1.wal", "rkv-m0.01.wal",
                                       "rkv-m0.1.wal.old", "rkv-m0.9.wal"};
    for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", f.dir, left[i]);
        write_whole(path, (const uint8_t *)"x", 1);
    }
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    assert_int_equal(atomic_load(&h->snap_durable), 4);
    if (exists_in(f.dir, "rkv-m0.1.wal"))
        fail_msg("log 1, below the gap at log 2, outlived checkpoint 4");
    assert_false(exists_in(f.dir, "rkv-m0.3.wal"));
    assert_true(exists_in(f.dir, "rkv-m0.4.wal"));
    for (size_t i = 1; i < sizeof(left) / sizeof(left[0]); i++)
        if (!exists_in(f.dir, left[i]))
            fail_msg("%s, not a log of machine 0 below generation 4, was removed", left[i]);
    fix_tensor_free(&f);
    fix_close(&f);
}

/* The ways a checkpoint can end without its log: it fails before making it
 * (FAILED: its temp file is a directory, so snap_file_open fails; so would
 * a full disk or no memory), or it dies between taking its number
 * (snap_started raised) and making it (DIED: killed, the machine's memory
 * outliving it). Either way the next checkpoint's log must follow the
 * current one without a gap: recovery reads logs gen, gen + 1, ... It took
 * the number after the lost one, and a crash before its swap left logs G
 * and G + 2: recovery replayed log G only and silently dropped every
 * acknowledged push of log G + 2 (FAILED), or refused the gap with every
 * push on disk (DIED, since recovery checks the chain). */
enum lost_ckpt { LOST_FAILED, LOST_DIED };

static void run_checkpoint_number_kept(enum lost_ckpt how)
{
    struct fix f;
    fix_open(&f, 0);
    struct rkv_tensor *t = fix_tensor_shape(&f, 16, DMG_ROW_LEN, 0);
    fix_wal(&f);
    struct rkv_mach_hdr *h = f.mc.hdr;
    char err[256], logg[160], spare[160];
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    uint64_t gen = atomic_load(&h->snap_durable);
    dmg_push(&f, t, 0, 1);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0);
    if (how == LOST_FAILED) {
        unlink(f.tmp);
        assert_int_equal(mkdir(f.tmp, 0755), 0);
        assert_true(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)) < 0);
        assert_int_equal(rmdir(f.tmp), 0);
    } else {
        atomic_store(&h->snap_started, gen + 1); /* the dead checkpoint's number */
    }
    dmg_push(&f, t, 1, 2);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0);
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    uint64_t next = atomic_load(&h->snap_durable);
    dmg_push(&f, t, 2, 3);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0);
    /* A crash before the swap: snapshot gen (under the temp name now) and
     * its log (a spare now, if the checkpoint let it go). */
    snprintf(logg, sizeof(logg), "%s/rkv-m0.%llu.wal", f.dir, (unsigned long long)gen);
    snprintf(spare, sizeof(spare), "%s/rkv-m0.free0.wal", f.dir);
    if (access(logg, F_OK) != 0)
        assert_int_equal(rename(spare, logg), 0);
    assert_int_equal(generation_of(f.tmp), gen);
    uint8_t want[3 * DMG_ROW_LEN * 4];
    memcpy(want, t->shard.data, sizeof(want));
    struct rkv_wal_replay r;
    recover_and_compare(&f, f.tmp, want, sizeof(want), 0, &r);
    assert_int_equal(r.records, 3);
    assert_int_equal(next, gen + 1); /* the lost checkpoint's number taken again */
    fix_tensor_free(&f);
    fix_close(&f);
}

static void test_failed_checkpoint_leaves_no_log_gap(void **state)
{
    (void)state;
    run_checkpoint_number_kept(LOST_FAILED);
}

static void test_dead_checkpoint_number_reused(void **state)
{
    (void)state;
    run_checkpoint_number_kept(LOST_DIED);
}

/* Log gen damaged before its last group commit (a record's header: the
 * records end there, the records after it are never acknowledged ones as
 * far as log gen tells) while log gen + 1 after it holds records: the
 * records lost in log gen were acknowledged, or at least the replay would
 * apply log gen + 1's pushes over a hole. Refused, as a torn end before a
 * log with records is, naming log gen and the offset; and refused again at
 * the next restart: the refusal once voided the damage's evidence first
 * (the records past the end, the torn append), and the restart after it
 * replayed over the hole without a word. */
static void run_damage_before_later_log(int torn)
{
    struct fix f;
    fix_open(&f, 0);
    struct rkv_tensor *t = fix_tensor_shape(&f, 16, DMG_ROW_LEN, 0);
    fix_wal(&f);
    struct rkv_mach_hdr *h = f.mc.hdr;
    char err[512], logg[160], want[96];
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    uint64_t gen = atomic_load(&h->snap_durable);
    for (int i = 0; i < DMG_RECS; i++) {
        dmg_push(&f, t, (uint64_t)i, (float)(i + 1));
        if (i % 2 == 1)
            assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0);
    }
    snprintf(logg, sizeof(logg), "%s/rkv-m0.%llu.wal", f.dir, (unsigned long long)gen);
    uint8_t *img;
    size_t len;
    read_whole(logg, &img, &len);
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    dmg_push(&f, t, 6, 7);
    dmg_push(&f, t, 7, 8);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0);
    /* A crash before the swap, with log gen damaged: record 4's header
     * (record 5 past the end), or record 5's body (a torn end). */
    size_t rs = rkv_wal_record_bytes(1, DMG_ROW_LEN * 4);
    uint64_t at = RKV_WAL_HDR_BYTES + (torn ? 5 : 4) * rs;
    img[at + (torn ? RKV_WAL_REC_BYTES : 8)] ^= 1;
    write_whole(logg, img, len);
    free(img);
    snprintf(want, sizeof(want), "byte %llu", (unsigned long long)at);
    for (int attempt = 0; attempt < 2; attempt++) {
        struct rkv_snap snap;
        if (rkv_snap_read(f.tmp, 0, &snap, err, sizeof(err)) < 0)
            fail_msg("%s", err);
        assert_int_equal(snap.generation, gen);
        if (rkv_snap_rollback(&snap, f.port, f.cfg.shm_prefix, &f.mc, err, sizeof(err)) < 0 ||
            rkv_wal_set_copies(&f.w, &snap, err, sizeof(err)) < 0)
            fail_msg("%s", err);
        rkv_snap_free(&snap);
        struct rkv_wal_replay r = {0};
        err[0] = 0;
        int rc = rkv_wal_recover(&f.w, LINEAGE, gen, &f.tensors, NULL, 0, &r, err, sizeof(err));
        if (rc != -RKV_EIO || !strstr(err, logg) || !strstr(err, want))
            fail_msg("restart %d: rc %d, %llu records replayed, expected a refusal naming %s "
                     "and %s: %s",
                     attempt, rc, (unsigned long long)r.records, logg, want, err);
    }
    fix_tensor_free(&f);
    fix_close(&f);
}

static void test_damage_before_later_log_refused(void **state)
{
    (void)state;
    run_damage_before_later_log(0);
}

static void test_torn_end_before_later_log_refused_again(void **state)
{
    (void)state;
    run_damage_before_later_log(1);
}

/* Rolls the machine back to snapshot file `path` and recovers its logs. */
static int recover_from(struct fix *f, const char *path, struct rkv_wal_replay *r, char *err,
                        size_t err_len)
{
    struct rkv_snap snap;
    if (rkv_snap_read(path, 0, &snap, err, err_len) < 0)
        fail_msg("%s", err);
    if (rkv_snap_rollback(&snap, f->port, f->cfg.shm_prefix, &f->mc, err, err_len) < 0 ||
        rkv_wal_set_copies(&f->w, &snap, err, err_len) < 0)
        fail_msg("%s", err);
    memset(r, 0, sizeof(*r));
    err[0] = 0;
    int rc =
        rkv_wal_recover(&f->w, LINEAGE, snap.generation, &f->tensors, NULL, 0, r, err, err_len);
    rkv_snap_free(&snap);
    return rc;
}

static void log_path(const struct fix *f, uint64_t g, char *buf, size_t len)
{
    snprintf(buf, len, "%s/rkv-m0.%llu.wal", f->dir, (unsigned long long)g);
}

/* Log g of the fixture's machine, of `lineage`, made by hand: its header
 * and one record, a sum of v into row `row`, appended when the machine's
 * log was durable up to `durable`. */
static void craft_log(struct fix *f, const struct rkv_tensor *t, uint64_t g, uint64_t lineage,
                      uint64_t row, float v, uint64_t durable)
{
    uint8_t buf[RKV_WAL_HDR_BYTES + 256];
    float vals[DMG_ROW_LEN];
    for (unsigned i = 0; i < DMG_ROW_LEN; i++)
        vals[i] = v;
    struct rkv_wal_push p = {.tensor_id = 1,
                             .client = UINT32_MAX,
                             .op = RKV_OP_SUM,
                             .count = 1,
                             .ids = &row,
                             .rows = (const uint8_t *)vals};
    size_t n = rkv_wal_record_bytes(1, t->row_bytes);
    assert_true(RKV_WAL_HDR_BYTES + n <= sizeof(buf));
    rkv_wal_encode_header(buf, 0, lineage, g, rkv_cfg_fingerprint(&f->cfg), 0);
    rkv_wal_encode_record(buf + RKV_WAL_HDR_BYTES, &p, t->row_bytes,
                          RKV_WAL_LSN(g, RKV_WAL_HDR_BYTES), durable, lineage);
    char path[160];
    log_path(f, g, path, sizeof(path));
    write_whole(path, buf, RKV_WAL_HDR_BYTES + n);
}

/* The snapshot's own log missing (moved away, deleted by hand) while the
 * snapshot was copied from it: refused by name before anything is applied
 * or made. An empty log was made in its place without a word, and the
 * pushes acknowledged after the snapshot were gone for good. */
static void test_own_log_missing_refused(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    struct rkv_tensor *t = fix_tensor_shape(&f, 16, DMG_ROW_LEN, 0);
    fix_wal(&f);
    struct rkv_mach_hdr *h = f.mc.hdr;
    char err[512], logg[160], aside[160];
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    uint64_t gen = atomic_load(&h->snap_durable);
    dmg_push(&f, t, 0, 1);
    dmg_push(&f, t, 1, 2);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0);
    log_path(&f, gen, logg, sizeof(logg));
    snprintf(aside, sizeof(aside), "%s/aside", f.dir);
    assert_int_equal(rename(logg, aside), 0);
    struct rkv_wal_replay r;
    int rc = recover_from(&f, f.snap, &r, err, sizeof(err));
    if (rc != -RKV_EIO || !strstr(err, logg) || !strstr(err, "is missing"))
        fail_msg("log %s moved away: rc %d, expected a refusal naming it: %s", logg, rc, err);
    assert_int_equal(r.records, 0);
    assert_int_equal(access(logg, F_OK), -1); /* nothing made in its place */
    /* Back in its place, it replays. */
    assert_int_equal(rename(aside, logg), 0);
    assert_int_equal(recover_from(&f, f.snap, &r, err, sizeof(err)), 0);
    assert_int_equal(r.records, 2);
    fix_tensor_free(&f);
    fix_close(&f);
}

static void write_file(const char *path, const void *buf, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

/* A machine with no snapshot starts a new run, and in durable mode its
 * logs go with the old one. Logs that say a snapshot was there (log 2 or
 * later: a clean stop leaves one of a header alone) or that hold records
 * are refused, naming the log: a snapshot removed by hand started over in
 * silence, and random bytes in rkv-m0.1.wal were written over. Log 1 of a
 * header alone (a first checkpoint dead before its snapshot) and a spare
 * are no reason. */
static void test_logs_without_snapshot_refused(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    rkv_wal_init(&f.w, f.port, &f.mc, &f.tensors, &f.cfg);
    f.wal_on = 1;
    char err[512], path[160], spare[200];
    uint8_t hdr[RKV_WAL_HDR_BYTES + RKV_WAL_REC_BYTES] = {0};
    rkv_wal_encode_header(hdr, 0, LINEAGE, 1, f.w.fingerprint, 0);
    assert_int_equal(rkv_wal_refuse_orphans(&f.w, err, sizeof(err)), 0); /* empty */
    log_path(&f, 1, path, sizeof(path));
    write_file(path, hdr, RKV_WAL_HDR_BYTES);
    snprintf(spare, sizeof(spare), "%s/rkv-m0.free0.wal", f.dir);
    write_file(spare, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123", 68);
    assert_int_equal(rkv_wal_refuse_orphans(&f.w, err, sizeof(err)), 0);
    write_file(path, hdr, sizeof(hdr)); /* zeros after the header: written ahead */
    assert_int_equal(rkv_wal_refuse_orphans(&f.w, err, sizeof(err)), 0);
    hdr[RKV_WAL_HDR_BYTES + 5] = 1; /* something past it */
    write_file(path, hdr, sizeof(hdr));
    int rc = rkv_wal_refuse_orphans(&f.w, err, sizeof(err));
    if (rc != -RKV_ECONFIG || !strstr(err, path) || !strstr(err, "holds records"))
        fail_msg("rc %d: %s", rc, err);
    assert_int_equal(unlink(path), 0);
    log_path(&f, 2, path, sizeof(path));
    rkv_wal_encode_header(hdr, 0, LINEAGE, 2, f.w.fingerprint, 0);
    write_file(path, hdr, RKV_WAL_HDR_BYTES);
    rc = rkv_wal_refuse_orphans(&f.w, err, sizeof(err));
    if (rc != -RKV_ECONFIG || !strstr(err, path) || !strstr(err, "generation 2"))
        fail_msg("rc %d: %s", rc, err);
    fix_close(&f);
}

/* A log missing after the snapshot's own (an older build's failed
 * checkpoint skipped its number, or a log deleted by hand) while a log
 * after it holds records of this lineage: refused naming both, before
 * anything is applied. The replay stopped at the gap, and the later log's
 * pushes were lost without a word (its file then written over by the
 * checkpoint that took its number). A later log of an older run's
 * lineage is no gap. */
static void test_log_gap_refused(void **state)
{
    (void)state;
    struct fix f;
    fix_open(&f, 0);
    struct rkv_tensor *t = fix_tensor_shape(&f, 16, DMG_ROW_LEN, 0);
    fix_wal(&f);
    struct rkv_mach_hdr *h = f.mc.hdr;
    char err[512], missing[160], later[160];
    assert_int_equal(rkv_wal_commit(&f.w, 1, atomic_load(&h->snap_started), err, sizeof(err)), 0);
    uint64_t gen = atomic_load(&h->snap_durable);
    dmg_push(&f, t, 0, 1);
    assert_int_equal(rkv_wal_sync(&f.w, err, sizeof(err)), 0);
    craft_log(&f, t, gen + 2, LINEAGE, 5, 6, RKV_WAL_LSN(gen + 2, RKV_WAL_HDR_BYTES));
    log_path(&f, gen + 1, missing, sizeof(missing));
    log_path(&f, gen + 2, later, sizeof(later));
    struct rkv_wal_replay r;
    int rc = recover_from(&f, f.snap, &r, err, sizeof(err));
    if (rc != -RKV_EIO || !strstr(err, missing) || !strstr(err, later))
        fail_msg("log %s missing before %s: rc %d, %llu records replayed, expected a refusal "
                 "naming both: %s",
                 missing, later, rc, (unsigned long long)r.records, err);
    assert_int_equal(r.records, 0);
    craft_log(&f, t, gen + 2, LINEAGE + 1, 5, 6, RKV_WAL_LSN(gen + 2, RKV_WAL_HDR_BYTES));
    assert_int_equal(recover_from(&f, f.snap, &r, err, sizeof(err)), 0);
    assert_int_equal(r.records, 1);
    /* A lineage bit flipped in the later log's header is damage, not an
     * older run's log: it was read as one, and its records skipped. */
    craft_log(&f, t, gen + 2, LINEAGE, 5, 6, RKV_WAL_LSN(gen + 2, RKV_WAL_HDR_BYTES));
    int fd = open(later, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b20;
    assert_int_equal(pread(fd, &b20, 1, 20), 1);
    b20 ^= 1;
    assert_int_equal(pwrite(fd, &b20, 1, 20), 1);
    close(fd);
    rc = recover_from(&f, f.snap, &r, err, sizeof(err));
    if (rc != -RKV_EIO || !strstr(err, later) || !strstr(err, "header checksum mismatch"))
        fail_msg("a damaged header read as another lineage's: rc %d: %s", rc, err);
    /* Another machine's log (two machines' logs swapped by hand) is no
     * older run's either: its lineage differs too, and it was called one. */
    craft_log(&f, t, gen + 2, LINEAGE + 1, 5, 6, RKV_WAL_LSN(gen + 2, RKV_WAL_HDR_BYTES));
    fd = open(later, O_RDWR);
    assert_true(fd >= 0);
    uint8_t hdr[64];
    assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
    rkv_put32(hdr + 12, 1);
    rkv_put32(hdr + 60, rkv_crc32c(0, hdr, 60));
    assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
    close(fd);
    rc = recover_from(&f, f.snap, &r, err, sizeof(err));
    if (rc != -RKV_EIO || !strstr(err, later) || !strstr(err, "holds machine 1, not 0"))
        fail_msg("machine 1's log read as an older run's: rc %d: %s", rc, err);
    fix_tensor_free(&f);
    fix_close(&f);
}

/* Log 1 holding buf recovered after a snapshot of generation 1 whose one
 * chunk (every row) was copied at copy_lsn. */
static int dmg_recover_copied(struct dmg *d, const uint8_t *buf, size_t len, uint64_t copy_lsn,
                              struct rkv_wal_replay *r, char *err, size_t err_len)
{
    write_whole(d->log1, buf, len);
    uint8_t lsns[8];
    rkv_put64(lsns, copy_lsn);
    struct rkv_snap_tensor st = {.id = 1,
                                 .local_rows = 16,
                                 .row_bytes = d->t->row_bytes,
                                 .chunk_rows = 16,
                                 .copy_lsn = lsns};
    struct rkv_snap s = {.machine = 0, .generation = 1, .n_tensors = 1, .tensors = &st};
    struct rkv_wal w;
    rkv_wal_init(&w, d->f.port, &d->f.mc, &d->f.tensors, &d->f.cfg);
    if (rkv_wal_set_copies(&w, &s, err, err_len) < 0)
        fail_msg("%s", err);
    memset(r, 0, sizeof(*r));
    err[0] = 0;
    int rc = rkv_wal_recover(&w, LINEAGE, 1, &d->f.tensors, NULL, 0, r, err, err_len);
    rkv_wal_free(&w);
    return rc;
}

/* The snapshot's own log cut at a record boundary below where the
 * snapshot's copy found its end (those records were synced before the
 * snapshot took its name): refused naming the log, the truncated file
 * before anything is applied. It read as a clean end, and the records cut
 * off, acknowledged, were lost without a word. A cut at or past the copy
 * cannot be told from a clean end (wal.h) and replays. */
static void test_own_log_cut_below_copy_refused(void **state)
{
    (void)state;
    struct dmg d;
    dmg_open(&d);
    char err[512], want[64];
    struct rkv_wal_replay r;
    uint64_t copy = RKV_WAL_LSN(1, d.off[4]);
    int rc = dmg_recover_copied(&d, d.img, (size_t)d.off[3], copy, &r, err, sizeof(err));
    snprintf(want, sizeof(want), "reached byte %llu", (unsigned long long)d.off[4]);
    if (rc != -RKV_EIO || !strstr(err, d.log1) || !strstr(err, want))
        fail_msg("log cut at byte %llu, copied at %llu: rc %d, %llu records replayed: %s",
                 (unsigned long long)d.off[3], (unsigned long long)d.off[4], rc,
                 (unsigned long long)r.records, err);
    assert_int_equal(r.records, 0);
    /* Zeros from record 3 on, the file as long as it was. */
    uint8_t *bad = malloc(d.len);
    assert_non_null(bad);
    memcpy(bad, d.img, d.len);
    memset(bad + d.off[3], 0, d.len - d.off[3]);
    rc = dmg_recover_copied(&d, bad, d.len, copy, &r, err, sizeof(err));
    if (rc != -RKV_EIO || !strstr(err, d.log1) || !strstr(err, want))
        fail_msg("log zeroed from byte %llu, copied at %llu: rc %d: %s",
                 (unsigned long long)d.off[3], (unsigned long long)d.off[4], rc, err);
    free(bad);
    for (int i = 4; i <= DMG_RECS; i++) {
        assert_int_equal(
            dmg_recover_copied(&d, d.img, (size_t)d.off[i], copy, &r, err, sizeof(err)), 0);
        assert_int_equal(r.records, i);
    }
    dmg_close(&d);
}

/* A log cut at a record boundary while the next log holds a record
 * appended once the log was durable past the cut (a checkpoint's switch:
 * the record's durable field still names the log before): refused naming
 * both. It read as a clean end and the next log's records applied over
 * the hole. */
static void test_log_cut_below_next_logs_durable_refused(void **state)
{
    (void)state;
    struct dmg d;
    dmg_open(&d);
    char err[512], log2[160], want[96];
    unsigned mask;
    struct rkv_wal_replay r;
    /* Log 2's record adds 0 (dmg_recover checks every row). */
    craft_log(&d.f, d.t, 2, LINEAGE, 0, 0, RKV_WAL_LSN(1, d.off[6]));
    log_path(&d.f, 2, log2, sizeof(log2));
    int rc = dmg_recover(&d, d.img, (size_t)d.off[4], &mask, &r, err, sizeof(err));
    snprintf(want, sizeof(want), "durable up to byte %llu", (unsigned long long)d.off[6]);
    if (rc != -RKV_EIO || !strstr(err, d.log1) || !strstr(err, log2) || !strstr(err, want))
        fail_msg("log 1 cut at byte %llu before log 2: rc %d, records applied %#x: %s",
                 (unsigned long long)d.off[4], rc, mask, err);
    /* Whole, it replays with log 2; so does a log 2 appended once log 1
     * was durable only up to the cut. */
    assert_int_equal(dmg_recover(&d, d.img, d.len, &mask, &r, err, sizeof(err)), 0);
    assert_int_equal(r.records, DMG_RECS + 1);
    craft_log(&d.f, d.t, 2, LINEAGE, 0, 0, RKV_WAL_LSN(1, d.off[4]));
    assert_int_equal(dmg_recover(&d, d.img, (size_t)d.off[4], &mask, &r, err, sizeof(err)), 0);
    assert_int_equal(r.records, 5);
    dmg_close(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_written_over_the_previous),
        cmocka_unit_test(test_checkpoint_waits_for_a_torn_push),
        cmocka_unit_test(test_checkpoint_not_held_by_a_dead_reader),
        cmocka_unit_test(test_torn_pushes_finished_by_a_live_server),
        cmocka_unit_test(test_lock_of_a_holder_dead_before_recording_itself),
        cmocka_unit_test(test_torn_row_kept_from_readers_until_finished),
        cmocka_unit_test(test_restarted_writer_maps_at_its_start),
        cmocka_unit_test(test_snapshot_over_half_written_spare),
        cmocka_unit_test(test_snapshot_spare_written_ahead),
        cmocka_unit_test(test_file_swap_in),
        cmocka_unit_test(test_one_checkpoint_per_long_log),
        cmocka_unit_test(test_recovery_memory_bounded),
        cmocka_unit_test(test_recovery_scan_stops_at_high_water_mark),
        cmocka_unit_test(test_appends_raise_high_water_mark),
        cmocka_unit_test(test_fuzzy_checkpoint_under_pushes),
        cmocka_unit_test(test_fuzzy_checkpoint_with_state),
        cmocka_unit_test(test_copy_lsn_of_another_log_refused),
        cmocka_unit_test(test_failed_sync_healed_only_by_a_later_switch),
        cmocka_unit_test(test_deleted_log_not_acknowledged),
        cmocka_unit_test(test_missing_log_is_an_io_error),
        cmocka_unit_test(test_log_truncated_at_every_byte),
        cmocka_unit_test(test_log_bit_flipped_at_every_byte),
        cmocka_unit_test(test_log_zeroed_blocks),
        cmocka_unit_test(test_log_lengths_and_order),
        cmocka_unit_test(test_log_not_a_file),
        cmocka_unit_test(test_spare_symlink_not_followed),
        cmocka_unit_test(test_retire_past_a_gap),
        cmocka_unit_test(test_failed_checkpoint_leaves_no_log_gap),
        cmocka_unit_test(test_dead_checkpoint_number_reused),
        cmocka_unit_test(test_damage_before_later_log_refused),
        cmocka_unit_test(test_torn_end_before_later_log_refused_again),
        cmocka_unit_test(test_own_log_missing_refused),
        cmocka_unit_test(test_log_gap_refused),
        cmocka_unit_test(test_logs_without_snapshot_refused),
        cmocka_unit_test(test_own_log_cut_below_copy_refused),
        cmocka_unit_test(test_log_cut_below_next_logs_durable_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

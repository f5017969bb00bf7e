/* Durable files where the file system says no: a directory that is not
 * there or is a file, a path too long, a rename onto a directory, a read of
 * something that is not a file, a symlink in a file's place. Each fails
 * with the step and the path, and leaves no temp file behind; what works
 * round-trips. */
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

#include "port/port_file.h"
#include "rkv.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/rkv-port-file-%d", (int)getpid());
    rkv_file_remove_dir(dir);
    return mkdir(dir, 0755);
}

static int teardown(void **state)
{
    (void)state;
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/taken/inside", dir);
    unlink(sub);
    snprintf(sub, sizeof(sub), "%s/taken", dir);
    rmdir(sub);
    rkv_file_remove_dir(dir);
    return 0;
}

static int exists(const char *d, const char *name)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", d, name);
    struct stat st;
    return stat(p, &st) == 0;
}

static void test_replace_and_read(void **state)
{
    (void)state;
    uint32_t fsyncs = 0;
    char err[256];
    assert_int_equal(rkv_file_replace(dir, "f", "f.tmp", "hello", 5, &fsyncs, err, sizeof(err)), 0);
    assert_int_equal(fsyncs, 2); /* the file, then the directory */
    assert_int_equal(rkv_file_replace(dir, "f", "f.tmp", "", 0, NULL, err, sizeof(err)), 0);
    char p[128];
    snprintf(p, sizeof(p), "%s/f", dir);
    uint8_t *buf = NULL;
    size_t len = 7;
    assert_int_equal(rkv_file_read(p, &buf, &len, err, sizeof(err)), 0);
    assert_int_equal(len, 0);
    free(buf);
    assert_false(exists(dir, "f.tmp"));
}

static void test_replace_errors(void **state)
{
    (void)state;
    char err[512], want[256];
    assert_int_equal(
        rkv_file_replace("/nonexistent/dir", "f", "f.tmp", "x", 1, NULL, err, sizeof(err)),
        -RKV_EIO);
    assert_non_null(strstr(err, "cannot create /nonexistent/dir/f.tmp: No such file"));
    static char long_dir[4200]; /* past PATH_MAX */
    memset(long_dir, 'd', sizeof(long_dir) - 1);
    long_dir[0] = '/';
    assert_int_equal(rkv_file_replace(long_dir, "f", "f.tmp", "x", 1, NULL, err, sizeof(err)),
                     -RKV_EINVAL);
    assert_non_null(strstr(err, "durable dir path too long"));
    /* A directory where the file should go: the rename fails, the temp file
     * goes, the directory stays. */
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/taken", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof(sub), "%s/taken/inside", dir);
    FILE *f = fopen(sub, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(rkv_file_replace(dir, "taken", "taken.tmp", "x", 1, NULL, err, sizeof(err)),
                     -RKV_EIO);
    snprintf(want, sizeof(want), "rename of %s/taken.tmp failed: ", dir);
    if (!strstr(err, want))
        fail_msg("expected \"%s\", got \"%s\"", want, err);
    assert_false(exists(dir, "taken.tmp"));
    assert_true(exists(dir, "taken/inside"));
}

static void test_read_errors(void **state)
{
    (void)state;
    char err[512], p[128];
    uint8_t *buf = NULL;
    size_t len = 0;
    snprintf(p, sizeof(p), "%s/missing", dir);
    assert_int_equal(rkv_file_read(p, &buf, &len, err, sizeof(err)), -RKV_ENOTENSOR);
    /* A directory opens, but is refused. */
    assert_int_equal(rkv_file_read(dir, &buf, &len, err, sizeof(err)), -RKV_EIO);
    char want[160];
    snprintf(want, sizeof(want), "%s is not a regular file (a directory)", dir);
    if (!strstr(err, want))
        fail_msg("expected \"%s\", got \"%s\"", want, err);
    assert_null(buf);
    /* A FIFO in a file's place (a snapshot's, the coordination record's)
     * is refused at once: the open blocked until a writer came, and a
     * restart hung forever. */
    snprintf(p, sizeof(p), "%s/fifo", dir);
    assert_int_equal(mkfifo(p, 0644), 0);
    assert_int_equal(rkv_file_read(p, &buf, &len, err, sizeof(err)), -RKV_EIO);
    snprintf(want, sizeof(want), "%s is not a regular file (a FIFO)", p);
    if (!strstr(err, want))
        fail_msg("expected \"%s\", got \"%s\"", want, err);
    assert_null(buf);
    unlink(p);
}

/* A durable file's name held by a symlink, a FIFO or a directory: opened
 * for writing, created, replaced or read, each is refused by name, and
 * the link's target is neither written nor made. rkv renames its files
 * into each other's places (a log to a spare and back, a snapshot and its
 * temp file), and a link in one of them had its target written over. */
static void test_not_regular_refused(void **state)
{
    (void)state;
    char err[512], target[128], link[128], fifo[128], want[200];
    snprintf(target, sizeof(target), "%s/target", dir);
    snprintf(link, sizeof(link), "%s/link", dir);
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    FILE *f = fopen(target, "w");
    assert_non_null(f);
    assert_int_equal(fputs("theirs", f), 1);
    fclose(f);
    assert_int_equal(symlink(target, link), 0);
    snprintf(want, sizeof(want), "%s is not a regular file (a symbolic link, not followed)", link);
    int fd = -1;
    for (int create = 0; create <= 1; create++) {
        assert_int_equal(rkv_file_open(link, create, &fd, err, sizeof(err)), -RKV_EIO);
        if (!strstr(err, want))
            fail_msg("open (create %d): expected \"%s\", got \"%s\"", create, want, err);
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(rkv_file_read(link, &buf, &len, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, want));
    assert_null(buf);
    assert_int_equal(rkv_file_replace(dir, "f", "link", "mine", 4, NULL, err, sizeof(err)),
                     -RKV_EIO);
    assert_non_null(strstr(err, want));
    assert_false(exists(dir, "f"));
    /* The target is as it was; a dangling link's target is not made. */
    assert_int_equal(rkv_file_read(target, &buf, &len, err, sizeof(err)), 0);
    assert_int_equal(len, 6);
    assert_memory_equal(buf, "theirs", 6);
    free(buf);
    assert_int_equal(unlink(target), 0);
    assert_int_equal(rkv_file_open(link, 1, &fd, err, sizeof(err)), -RKV_EIO);
    assert_false(exists(dir, "target"));
    /* A FIFO, opened for writing or replaced: refused at once, no hang. */
    assert_int_equal(mkfifo(fifo, 0644), 0);
    snprintf(want, sizeof(want), "%s is not a regular file (a FIFO)", fifo);
    for (int create = 0; create <= 1; create++) {
        assert_int_equal(rkv_file_open(fifo, create, &fd, err, sizeof(err)), -RKV_EIO);
        if (!strstr(err, want))
            fail_msg("open (create %d): expected \"%s\", got \"%s\"", create, want, err);
    }
    assert_int_equal(rkv_file_replace(dir, "f", "fifo", "mine", 4, NULL, err, sizeof(err)),
                     -RKV_EIO);
    assert_non_null(strstr(err, want));
    /* A directory, opened for writing. */
    snprintf(want, sizeof(want), "%s is not a regular file (a directory)", dir);
    assert_int_equal(rkv_file_open(dir, 0, &fd, err, sizeof(err)), -RKV_EIO);
    assert_non_null(strstr(err, want));
    /* A regular file opens, and writes. */
    assert_int_equal(rkv_file_open(target, 1, &fd, err, sizeof(err)), 0);
    assert_int_equal(rkv_file_pwrite(fd, "ok", 2, 0, target, err, sizeof(err)), 0);
    rkv_file_close(fd);
    unlink(link);
    unlink(fifo);
    unlink(target);
}

static void test_check_dir(void **state)
{
    (void)state;
    char err[256], p[128];
    assert_int_equal(rkv_file_check_dir(dir, err, sizeof(err)), 0);
    snprintf(p, sizeof(p), "%s/plain", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(rkv_file_check_dir(p, err, sizeof(err)), -RKV_ECONFIG);
    assert_non_null(strstr(err, "plain: not a directory"));
    assert_int_equal(rkv_file_check_dir("/nonexistent/d", err, sizeof(err)), -RKV_ECONFIG);
    assert_string_equal(err, "durable_dir /nonexistent/d: No such file or directory");
    char utc[64];
    rkv_file_format_utc(0, utc, sizeof(utc));
    assert_string_equal(utc, "1970-01-01T00:00:00Z");
    rkv_file_format_utc(1700000000ull * 1000000000ull, utc, sizeof(utc));
    assert_string_equal(utc, "2023-11-14T22:13:20Z");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replace_and_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_regular_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_dir, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Durable files over POSIX: write-temp, fsync, rename, fsync-directory. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sync_file_range */
#endif
#include "port/port_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

static int file_write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* What a file in a durable file's place is, when it is not a regular file. */
static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISLNK(mode)  ? "a symbolic link, not followed"
                            : "a device or socket";
}

/* Opens path (flags: access and O_CREAT, O_TRUNC) as a durable file, which
 * is a regular file or refused. Never through a symbolic link
 * (O_NOFOLLOW): rkv renames its files into each other's places (a log to a
 * spare and back, a snapshot and its temp file), and a link in one of them
 * had its target written over, wherever it pointed. Never blocking on a
 * FIFO or a device either (O_NONBLOCK, dropped once the file is known to be
 * regular). verb names the step in an error. -RKV_ENOTENSOR when absent
 * (without O_CREAT), else -RKV_EIO naming the path. */
static int file_open_regular(const char *path, int flags, const char *verb, int *fd_p, char *err,
                             size_t err_len)
{
    struct stat st;
    int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    int e = errno;
    if (fd < 0 && (e == ELOOP || e == EISDIR || e == ENXIO) && lstat(path, &st) == 0 &&
        !S_ISREG(st.st_mode))
        return rkv_errf(err, err_len, -RKV_EIO, "%s is not a regular file (%s)", path,
                        file_kind(st.st_mode));
    if (fd < 0)
        return rkv_errf(err, err_len, e == ENOENT && !(flags & O_CREAT) ? -RKV_ENOTENSOR : -RKV_EIO,
                        "cannot %s %s: %s", verb, path, strerror(e));
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = rkv_errf(err, err_len, -RKV_EIO, "cannot stat %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = rkv_errf(err, err_len, -RKV_EIO, "%s is not a regular file (%s)", path,
                      file_kind(st.st_mode));
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        rc = rkv_errf(err, err_len, -RKV_EIO, "cannot set %s blocking: %s", path, strerror(errno));
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *fd_p = fd;
    return 0;
}

/* The directory entry of a rename is durable only once the directory is. */
static int file_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int rkv_file_replace(const char *dir, const char *name, const char *tmp_name, const void *buf,
                     size_t len, uint32_t *fsyncs_p, char *err, size_t err_len)
{
    char path[4096], tmp[4096];
    uint32_t fsyncs = 0;
    int saved;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path) ||
        (size_t)snprintf(tmp, sizeof(tmp), "%s/%s", dir, tmp_name) >= sizeof(tmp))
        return rkv_errf(err, err_len, -RKV_EINVAL, "durable dir path too long: %s", dir);
    int fd;
    int rc = file_open_regular(tmp, O_WRONLY | O_CREAT | O_TRUNC, "create", &fd, err, err_len);
    if (rc < 0)
        return rc;
    const char *step = "write";
    if (file_write_all(fd, buf, len) < 0)
        goto close_file;
    step = "fsync";
    fsyncs++;
    if (fsync(fd) != 0)
        goto close_file;
    step = "close";
    if (close(fd) != 0) {
        fd = -1;
        goto unlink_tmp;
    }
    fd = -1;
    step = "rename";
    if (rename(tmp, path) != 0)
        goto unlink_tmp;
    fsyncs++;
    if (file_sync_dir(dir) != 0)
        return rkv_errf(err, err_len, -RKV_EIO, "fsync of directory %s failed: %s", dir,
                        strerror(errno));
    if (fsyncs_p)
        *fsyncs_p = fsyncs;
    return 0;
close_file:
    saved = errno;
    close(fd);
    errno = saved;
unlink_tmp:
    saved = errno;
    unlink(tmp);
    return rkv_errf(err, err_len, -RKV_EIO, "%s of %s failed: %s", step, tmp, strerror(saved));
}

int rkv_file_read(const char *path, uint8_t **buf_p, size_t *len_p, char *err, size_t err_len)
{
    /* A FIFO in the file's place would block the open until a writer came,
     * i.e. a restart hung forever: file_open_regular refuses it at once. */
    int fd;
    int rc = file_open_regular(path, O_RDONLY, "open", &fd, err, err_len);
    if (rc < 0)
        return rc;
    struct stat st;
    uint8_t *buf = NULL;
    rc = -RKV_EIO;
    if (fstat(fd, &st) != 0) {
        rkv_errf(err, err_len, rc, "cannot stat %s: %s", path, strerror(errno));
        goto close_file;
    }
    size_t len = (size_t)st.st_size;
    buf = malloc(len ? len : 1);
    if (!buf) {
        rc = rkv_errf(err, err_len, -RKV_ENOMEM, "%s: no memory for %zu bytes", path, len);
        goto close_file;
    }
    for (size_t off = 0; off < len;) {
        ssize_t n = read(fd, buf + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rkv_errf(err, err_len, rc, "read of %s failed at byte %zu: %s", path, off,
                     n < 0 ? strerror(errno) : "file shrank");
            goto free_buf;
        }
        off += (size_t)n;
    }
    close(fd);
    *buf_p = buf;
    *len_p = len;
    return 0;
free_buf:
    free(buf);
close_file:
    close(fd);
    return rc;
}

int rkv_file_check_dir(const char *dir, char *err, size_t err_len)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "durable_dir %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return rkv_errf(err, err_len, -RKV_ECONFIG, "durable_dir %s: not a directory", dir);
    return 0;
}

/* A claim's file holds "<identity>\n" then "process <pid> claimed it\n";
 * only the first line is compared. */
static int file_claim_read(int fd, char *buf, size_t len)
{
    ssize_t r = pread(fd, buf, len - 1, 0);
    if (r < 0)
        return -1;
    buf[r] = 0;
    return 0;
}

static int file_claim_is(const char *got, const char *identity, size_t idlen)
{
    return strncmp(got, identity, idlen) == 0 && got[idlen] == '\n';
}

/* flock's errors of a filesystem that has no such locks (Lustre without
 * -o flock, some FUSE ones): a claim cannot be made there, which is said
 * and lived with, not a reason to refuse durable mode. */
static int file_no_flock(int e)
{
    return e == ENOSYS || e == ENOLCK || e == EOPNOTSUPP || e == EINVAL;
}

static int file_flock(int fd, int op)
{
    int rc;
    while ((rc = flock(fd, op)) < 0 && errno == EINTR)
        ;
    return rc;
}

/* Opens dir/name for a claim: the fd, or an error. */
static int file_claim_open(const char *dir, const char *name, char *path, size_t path_len,
                           int *fd_p, char *err, size_t err_len)
{
    snprintf(path, path_len, "%s/%s", dir, name);
    *fd_p = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*fd_p >= 0)
        return 0;
    return rkv_errf(err, err_len, errno == EROFS || errno == EACCES ? -RKV_ECONFIG : -RKV_EIO,
                    "cannot create %s: %s (the durable directory must be writable)", path,
                    strerror(errno));
}

/* The end of a claim that flock could not make: 1 (no claim) where the
 * filesystem has no such locks, with err saying so; else an error. */
static int file_claim_failed(int fd, int e, const char *path, char *err, size_t err_len)
{
    close(fd);
    if (file_no_flock(e)) {
        rkv_errf(err, err_len, 0,
                 "%s cannot be locked on this filesystem (%s): nothing keeps another cluster, "
                 "or a second process of this server, from writing this directory too",
                 path, strerror(e));
        return 1;
    }
    return rkv_errf(err, err_len, -RKV_EIO, "cannot lock %s: %s", path, strerror(e));
}

int rkv_file_claim(const char *dir, const char *name, const char *identity, int *fd_p,
                   int *before_p, char *err, size_t err_len)
{
    char path[1100], got[512];
    int fd, rc;
    *fd_p = -1;
    if ((rc = file_claim_open(dir, name, path, sizeof(path), &fd, err, err_len)) < 0)
        return rc;
    size_t idlen = strlen(identity);
    int before = 0;
    for (int tries = 0;; tries++) {
        if (tries > 2000) /* a file kept empty or changing while held: not ours to wait on */
            break;
        if (file_flock(fd, LOCK_EX | LOCK_NB) == 0) {
            /* Nobody holds it: ours now, whoever held it before. Only this
             * path can tell that it was this identity's before: a process
             * that shares it later joined a live holder. */
            before =
                file_claim_read(fd, got, sizeof(got)) == 0 && file_claim_is(got, identity, idlen);
            char line[640];
            int n = snprintf(line, sizeof(line), "%s\nprocess %d claimed it\n", identity,
                             (int)getpid());
            if (ftruncate(fd, 0) < 0 || pwrite(fd, line, (size_t)n, 0) != n) {
                int e = errno;
                close(fd);
                return rkv_errf(err, err_len, -RKV_EIO, "cannot write %s: %s", path, strerror(e));
            }
            /* Shared from here, for the others of this identity. The
             * conversion is not atomic: another process may claim it in
             * between, which the read below sees. */
            if (file_flock(fd, LOCK_SH) < 0)
                return file_claim_failed(fd, errno, path, err, err_len);
        } else if (errno != EWOULDBLOCK) {
            return file_claim_failed(fd, errno, path, err, err_len);
        } else if (file_flock(fd, LOCK_SH | LOCK_NB) < 0) {
            if (errno != EWOULDBLOCK)
                return file_claim_failed(fd, errno, path, err, err_len);
            /* Another process is writing its identity (it holds it alone
             * for that long only). */
            usleep(1000);
            continue;
        }
        if (file_claim_read(fd, got, sizeof(got)) < 0)
            break;
        if (got[0] == 0) { /* a claimer that died before writing: again */
            file_flock(fd, LOCK_UN);
            usleep(1000);
            continue;
        }
        if (file_claim_is(got, identity, idlen)) {
            *fd_p = fd;
            if (before_p)
                *before_p = before;
            return 0;
        }
        close(fd);
        got[strcspn(got, "\n")] = ' ';
        got[strcspn(got, "\n")] = 0;
        return rkv_errf(err, err_len, -RKV_EEXIST,
                        "%s is held by a running process of another cluster (a server, or a "
                        "process forked from one: %s); two clusters cannot share a durable "
                        "directory: give this one its own",
                        path, got);
    }
    int e = errno;
    close(fd);
    return rkv_errf(err, err_len, -RKV_EIO, "cannot claim %s: %s", path,
                    e ? strerror(e) : "it stayed empty or kept changing");
}

int rkv_file_claim_alone(const char *dir, const char *name, int *fd_p, char *err, size_t err_len)
{
    char path[1100], got[128];
    int fd, rc;
    *fd_p = -1;
    if ((rc = file_claim_open(dir, name, path, sizeof(path), &fd, err, err_len)) < 0)
        return rc;
    /* A sibling's probe (rkv_file_claim_held) holds it for a moment: look
     * again for up to 50 ms before calling it a running process. */
    int held = 1;
    for (int i = 0; i < 6 && held; i++) {
        held = file_flock(fd, LOCK_EX | LOCK_NB) < 0;
        if (held && (errno != EWOULDBLOCK || i == 5))
            break;
        if (held) {
            struct timespec ts = {.tv_nsec = 10000000};
            nanosleep(&ts, NULL);
        }
    }
    if (held) {
        int e = errno;
        if (e != EWOULDBLOCK)
            return file_claim_failed(fd, e, path, err, err_len);
        if (file_claim_read(fd, got, sizeof(got)) < 0)
            got[0] = 0;
        close(fd);
        got[strcspn(got, "\n")] = 0;
        return rkv_errf(err, err_len, -RKV_EEXIST,
                        "%s is held by a running %s (or a process forked from it)", path,
                        got[0] ? got : "process");
    }
    char line[64];
    int n = snprintf(line, sizeof(line), "process %d\n", (int)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, line, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return rkv_errf(err, err_len, -RKV_EIO, "cannot write %s: %s", path, strerror(e));
    }
    *fd_p = fd;
    return 0;
}

int rkv_file_claim_held(const char *dir, const char *name, char *who, size_t who_len)
{
    char path[1100], err[64];
    int fd;
    if (who_len)
        who[0] = 0;
    if (file_claim_open(dir, name, path, sizeof(path), &fd, err, sizeof(err)) < 0)
        return 0; /* no such claim can be made: nobody holds it */
    int held = file_flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    if (held && who_len) {
        if (file_claim_read(fd, who, who_len) < 0)
            who[0] = 0;
        who[strcspn(who, "\n")] = 0;
    }
    close(fd); /* and with it the shared lock, if taken */
    return held;
}

int rkv_file_maps_deleted_shm(int pid, const char *shm_name)
{
    char path[64], line[1200], want[600];
    snprintf(path, sizeof(path), "/proc/%d/maps", pid);
    snprintf(want, sizeof(want), "/dev/shm%s (deleted)", shm_name);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        size_t n = strlen(line), w = strlen(want);
        found = n >= w && strcmp(line + n - w, want) == 0;
    }
    fclose(f);
    return found;
}

void rkv_file_format_utc(uint64_t wall_ns, char *buf, size_t len)
{
    time_t t = (time_t)(wall_ns / 1000000000ull);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "%llu s after the epoch", (unsigned long long)t);
}

int rkv_file_swap_in(const char *from, const char *to, char *err, size_t err_len)
{
#ifdef RENAME_EXCHANGE
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE) == 0)
        return 0;
    /* ENOENT: `to` is not there yet (or `from` is not: the rename says);
     * EINVAL, ENOSYS: no swapping here. */
    if (errno != ENOENT && errno != EINVAL && errno != ENOSYS)
        return rkv_errf(err, err_len, -RKV_EIO, "cannot swap %s and %s: %s", from, to,
                        strerror(errno));
#endif
    int rc = rkv_file_rename(from, to, err, err_len);
    return rc == -RKV_ENOTENSOR ? rkv_errf(err, err_len, -RKV_EIO, "cannot rename %s to %s: %s",
                                           from, to, strerror(ENOENT))
                                : rc;
}

uint64_t rkv_file_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int rkv_file_list(const char *dir, int (*fn)(void *arg, const char *name), void *arg, char *err,
                  size_t err_len)
{
    DIR *d = opendir(dir);
    if (!d)
        return rkv_errf(err, err_len, -RKV_EIO, "cannot list directory %s: %s", dir,
                        strerror(errno));
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno != 0)
                rc = rkv_errf(err, err_len, -RKV_EIO, "cannot list directory %s: %s", dir,
                              strerror(errno));
            break;
        }
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && fn(arg, e->d_name))
            break;
    }
    closedir(d);
    return rc;
}

void rkv_file_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *path = malloc(strlen(dir) + strlen(e->d_name) + 2);
        if (path) {
            sprintf(path, "%s/%s", dir, e->d_name);
            unlink(path);
            free(path);
        }
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

int rkv_file_open(const char *path, int create, int *fd_p, char *err, size_t err_len)
{
    return file_open_regular(path, O_RDWR | (create ? O_CREAT : 0), "open", fd_p, err, err_len);
}

void rkv_file_close(int fd)
{
    if (fd >= 0)
        close(fd);
}

int rkv_file_pwritev(int fd, const void *const *bufs, const size_t *lens, int n, uint64_t off,
                     const char *path, char *err, size_t err_len)
{
    struct iovec iov[8];
    if (n < 1 || n > 8)
        return rkv_errf(err, err_len, -RKV_EINVAL, "write of %s: %d buffers", path, n);
    for (int i = 0; i < n; i++)
        iov[i] = (struct iovec){.iov_base = (void *)(uintptr_t)bufs[i], .iov_len = lens[i]};
    struct iovec *v = iov;
    while (n > 0) {
        ssize_t got = pwritev(fd, v, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return rkv_errf(err, err_len, -RKV_EIO, "write of %s at byte %llu failed: %s", path,
                            (unsigned long long)off, got < 0 ? strerror(errno) : "no progress");
        off += (uint64_t)got;
        /* A short write: skip what went, go on with the rest. */
        while (n > 0 && (size_t)got >= v->iov_len) {
            got -= (ssize_t)v->iov_len;
            v++;
            n--;
        }
        if (n > 0) {
            v->iov_base = (uint8_t *)v->iov_base + got;
            v->iov_len -= (size_t)got;
        }
    }
    return 0;
}

int rkv_file_pwrite(int fd, const void *buf, size_t len, uint64_t off, const char *path, char *err,
                    size_t err_len)
{
    if (len == 0) /* nothing to write: pwritev's no-progress check would fail it */
        return 0;
    return rkv_file_pwritev(fd, &buf, &len, 1, off, path, err, err_len);
}

int rkv_file_pread(int fd, void *buf, size_t len, uint64_t off, const char *path, char *err,
                   size_t err_len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return rkv_errf(err, err_len, -RKV_EIO, "read of %s at byte %llu failed: %s", path,
                            (unsigned long long)off, n < 0 ? strerror(errno) : "end of file");
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

int rkv_file_datasync(int fd, const char *path, char *err, size_t err_len)
{
    if (fdatasync(fd) != 0)
        return rkv_errf(err, err_len, -RKV_EIO, "fdatasync of %s failed: %s", path,
                        strerror(errno));
    return 0;
}

void rkv_file_writeback(int fd, uint64_t off, uint64_t len)
{
#ifdef SYNC_FILE_RANGE_WRITE
    /* Best effort: a failure here only means the later fdatasync writes it. */
    (void)sync_file_range(fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd, (void)off, (void)len;
#endif
}

void rkv_file_writeback_wait(int fd, uint64_t off, uint64_t len)
{
#ifdef SYNC_FILE_RANGE_WRITE
    (void)sync_file_range(fd, (off_t)off, (off_t)len,
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                              SYNC_FILE_RANGE_WAIT_AFTER);
#else
    (void)fd, (void)off, (void)len;
#endif
}

int rkv_file_truncate(int fd, uint64_t len, const char *path, char *err, size_t err_len)
{
    if (ftruncate(fd, (off_t)len) != 0)
        return rkv_errf(err, err_len, -RKV_EIO, "truncate of %s to %llu bytes failed: %s", path,
                        (unsigned long long)len, strerror(errno));
    return 0;
}

int rkv_file_size(int fd, uint64_t *len_p, const char *path, char *err, size_t err_len)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return rkv_errf(err, err_len, -RKV_EIO, "cannot stat %s: %s", path, strerror(errno));
    *len_p = (uint64_t)st.st_size;
    return 0;
}

int rkv_file_linked(int fd, const char *path, char *err, size_t err_len)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return rkv_errf(err, err_len, -RKV_EIO, "cannot stat %s: %s", path, strerror(errno));
    if (st.st_nlink == 0)
        return rkv_errf(err, err_len, -RKV_EIO,
                        "%s was deleted while open (its directory removed?): what is written "
                        "there is lost at the next restart",
                        path);
    return 0;
}

int rkv_file_sync_dir(const char *dir, char *err, size_t err_len)
{
    if (file_sync_dir(dir) != 0)
        return rkv_errf(err, err_len, -RKV_EIO, "fsync of directory %s failed: %s", dir,
                        strerror(errno));
    return 0;
}

int rkv_file_unlink(const char *path)
{
    if (unlink(path) == 0)
        return 0;
    return errno == ENOENT ? -RKV_ENOTENSOR : -RKV_EIO;
}

int rkv_file_rename(const char *from, const char *to, char *err, size_t err_len)
{
    if (rename(from, to) == 0)
        return 0;
    if (errno == ENOENT)
        return -RKV_ENOTENSOR;
    return rkv_errf(err, err_len, -RKV_EIO, "cannot rename %s to %s: %s", from, to,
                    strerror(errno));
}

/* Durable files: the only file-system surface of the store (snapshots).
 *
 * Plain functions, not port ops: file I/O neither blocks a simulated clock
 * nor deadlocks an actor, so the twin uses the host's files as they are (it
 * charges no simulated time for an fsync). No globals.
 *
 * Every file opened here is a regular file: a symbolic link in its place
 * is not followed, and it, a directory, a FIFO or a device is refused
 * (-RKV_EIO, "<path> is not a regular file (...)"), never blocked on.
 */
#ifndef RKV_PORT_FILE_H
#define RKV_PORT_FILE_H

#include <stddef.h>
#include <stdint.h>

/* Replaces dir/name with buf[0..len) so that a crash at any moment leaves
 * either the previous file or the new one, never a mix: writes dir/tmp_name,
 * fsyncs it, renames it over dir/name and fsyncs dir. *fsyncs_p (if not NULL)
 * gets the number of fsync calls made. -RKV_EIO with the failing step and
 * path in err. */
int rkv_file_replace(const char *dir, const char *name, const char *tmp_name, const void *buf,
                     size_t len, uint32_t *fsyncs_p, char *err, size_t err_len);
/* Reads a whole file into a malloc'd buffer (*buf_p, freed by the caller).
 * -RKV_ENOTENSOR when the file does not exist, -RKV_EIO otherwise. */
int rkv_file_read(const char *path, uint8_t **buf_p, size_t *len_p, char *err, size_t err_len);
/* 0 when dir is an existing directory, -RKV_ECONFIG naming it otherwise. */
int rkv_file_check_dir(const char *dir, char *err, size_t err_len);
/* Claims dir/name for the holders of one identity (a text line) at a time:
 * the first process to take it writes its identity there; every later one
 * of the same identity shares it, one of another identity is refused
 * (-RKV_EEXIST, err naming what holds it) while any holder lives. The
 * claim is a lock on the open file (flock), so it goes with the process;
 * *fd_p holds it until rkv_file_close. *before_p (may be NULL): the file
 * named this identity already when this process found nobody holding it
 * (an earlier process of it claimed it). Returns 1, *fd_p -1 and err
 * saying why, where the filesystem has no flock: no claim was made. */
int rkv_file_claim(const char *dir, const char *name, const char *identity, int *fd_p,
                   int *before_p, char *err, size_t err_len);
/* Claims dir/name for this process alone while it lives (flock): another
 * process holding it is -RKV_EEXIST, err naming it (the file says which);
 * 1 as rkv_file_claim's without flock. */
int rkv_file_claim_alone(const char *dir, const char *name, int *fd_p, char *err, size_t err_len);
/* Whether a running process holds dir/name as rkv_file_claim_alone takes it
 * (1, its "process PID" text in who), or not (0). Looks without keeping
 * anything: a claim a moment's look delays is waited for by its taker. */
int rkv_file_claim_held(const char *dir, const char *name, char *who, size_t who_len);
/* Whether process pid maps the shared-memory segment shm_name ("/name")
 * after it was removed from /dev/shm (Linux's /proc/PID/maps says
 * "(deleted)"); 0 when it does not, or that cannot be read. */
int rkv_file_maps_deleted_shm(int pid, const char *shm_name);
/* Calls fn(arg, name) for each entry of dir but "." and "..", in the
 * directory's order, until fn returns non-zero. fn may rename or remove
 * entries (such an entry may still be named once after). -RKV_EIO naming
 * dir when it cannot be read. */
int rkv_file_list(const char *dir, int (*fn)(void *arg, const char *name), void *arg, char *err,
                  size_t err_len);
/* Removes the files directly in dir, then dir (a run's scratch snapshot
 * directory); best effort, silent. */
void rkv_file_remove_dir(const char *dir);
/* Append-only logs (the write-ahead log): an open file is an int handle.
 * rkv_file_open creates it when create is set (-RKV_ENOTENSOR when absent
 * and create is 0). Every failure is -RKV_EIO naming the path and step. */
int rkv_file_open(const char *path, int create, int *fd_p, char *err, size_t err_len);
void rkv_file_close(int fd);
/* Writes all of buf at offset off (the caller serializes writers). */
int rkv_file_pwrite(int fd, const void *buf, size_t len, uint64_t off, const char *path, char *err,
                    size_t err_len);
/* Writes n buffers back to back at offset off, in one system call when
 * the kernel takes them all (pwritev). n <= 8. */
int rkv_file_pwritev(int fd, const void *const *bufs, const size_t *lens, int n, uint64_t off,
                     const char *path, char *err, size_t err_len);
/* Reads exactly len bytes at off; -RKV_EIO when the file is shorter. */
int rkv_file_pread(int fd, void *buf, size_t len, uint64_t off, const char *path, char *err,
                   size_t err_len);
/* fdatasync: what a write-ahead log's group commit waits for. */
int rkv_file_datasync(int fd, const char *path, char *err, size_t err_len);
/* Starts writing [off, off+len) to the disk without waiting (Linux's
 * sync_file_range; elsewhere nothing): the fdatasync that follows then
 * finds most of it written, so the disk works while more is appended. */
void rkv_file_writeback(int fd, uint64_t off, uint64_t len);
/* Waits until [off, off+len) is written to the disk (starting it if it was
 * not): bounds how much a long write has queued ahead of the disk. Not a
 * durability point (no metadata, no cache flush): an fdatasync is. */
void rkv_file_writeback_wait(int fd, uint64_t off, uint64_t len);
int rkv_file_truncate(int fd, uint64_t len, const char *path, char *err, size_t err_len);
/* -RKV_EIO when fd's file has no name left (unlinked, or its directory
 * removed): data synced there is out of reach of anyone who opens by name. */
int rkv_file_linked(int fd, const char *path, char *err, size_t err_len);
int rkv_file_size(int fd, uint64_t *len_p, const char *path, char *err, size_t err_len);
/* fsync of a directory: a created or removed entry is durable after it. */
int rkv_file_sync_dir(const char *dir, char *err, size_t err_len);
/* 0, or -RKV_ENOTENSOR when path does not exist (not an error to remove). */
int rkv_file_unlink(const char *path);
/* rename(2) (replacing to when it exists); -RKV_ENOTENSOR when from does not
 * exist, -RKV_EIO naming both otherwise. */
int rkv_file_rename(const char *from, const char *to, char *err, size_t err_len);
/* Puts `from` in place of `to` atomically, as rkv_file_rename, but leaves
 * to's previous file under the name `from` (Linux's renameat2 with
 * RENAME_EXCHANGE), so that a file replaced this way keeps its blocks for
 * the next writer to overwrite rather than allocate. Where the system or
 * file system cannot swap, or `to` did not exist, a plain rename (`from`
 * is then gone). -RKV_EIO naming both on failure. */
int rkv_file_swap_in(const char *from, const char *to, char *err, size_t err_len);
/* Wall-clock time (ns since the Unix epoch), for humans reading logs. */
uint64_t rkv_file_wall_ns(void);
/* wall_ns as "YYYY-MM-DDTHH:MM:SSZ". */
void rkv_file_format_utc(uint64_t wall_ns, char *buf, size_t len);

#endif

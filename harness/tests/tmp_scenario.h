/* Tests that write a scenario of their own to /tmp (include after <cmocka.h>). */
#ifndef RKV_TEST_TMP_SCENARIO_H
#define RKV_TEST_TMP_SCENARIO_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Writes text to /tmp/rkv-<tag>-<pid>.yaml and leaves that name in path (of
 * len bytes); a name that does not fit or a file not written fails the test. */
static inline void tmp_scenario(char *path, size_t len, const char *tag, const char *text)
{
    int n = snprintf(path, len, "/tmp/rkv-%s-%d.yaml", tag, (int)getpid());
    if (n < 0 || (size_t)n >= len)
        fail_msg("/tmp/rkv-%s-%d.yaml: longer than the %zu bytes for it", tag, (int)getpid(), len);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fail_msg("%s: cannot be opened to write: %s", path, strerror(errno));
        return; /* not reached: fail_msg ends the test */
    }
    int put = fputs(text, f);
    int closed = fclose(f);
    if (put == EOF || closed != 0)
        fail_msg("%s: cannot be written: %s", path, strerror(errno));
}

#endif

/* Tests that drive the rkv binary: its output lands in `out`. */
#ifndef RKV_TEST_RKV_RUN_H
#define RKV_TEST_RKV_RUN_H

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "tmp_scenario.h"

static char out[1 << 20];

/* Runs a shell command; keeps its output in out, returns its exit code. */
/* How many times needle occurs in the last command's output. */
static inline int out_count(const char *needle)
{
    int n = 0;
    for (const char *s = out; (s = strstr(s, needle)) != NULL; s++)
        n++;
    return n;
}

static inline int sh(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs `env RKV_BIN args` with stderr folded into out. */
static inline int run_rkv(const char *env, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s %s %s 2>&1", env, RKV_BIN, args);
    return sh(cmd);
}

#endif

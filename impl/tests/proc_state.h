/* The state letter of a process or thread from its /proc stat file ("pid
 * (comm) S ..."; 'S' asleep, 'T' stopped, 'Z' a zombie), or 0 when the
 * file cannot be read. For tests that wait for another task's state. */
#ifndef RKV_TEST_PROC_STATE_H
#define RKV_TEST_PROC_STATE_H

#include <stdio.h>
#include <string.h>

static inline char proc_stat_state(const char *stat_path)
{
    char buf[512];
    FILE *f = fopen(stat_path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *st = strrchr(buf, ')');
    return st && st[1] == ' ' ? st[2] : 0;
}

#endif

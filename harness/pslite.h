/* ps-lite's launch conventions (harness/pslite.c): under DMLC_ROLE and
 * without a cluster file, servers and workers register with the scheduler
 * (DMLC_ROLE=scheduler at DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT), which gives
 * each its place and the cluster. */
#ifndef RKV_PSLITE_H
#define RKV_PSLITE_H

#include <stddef.h>

#include "api/config.h"

/* 1 when s launches this node the ps-lite way (DMLC_ROLE, no cluster file). */
int rkv_pslite_mode(const struct cmd_settings *s);
/* The scheduler: exits 0 once every node has its place (or at once, saying
 * it is not needed, when a cluster file fixes every address). Returns an
 * RKV_EXIT_* code. */
int rkv_pslite_scheduler(const struct cmd_settings *s);
/* A server's or worker's registration: RKV_EXIT_OK with the scheduler's
 * answer in *ans_p ("OK ID MACHINE N" and N 'host port servers' lines; the
 * caller frees it) and the host this node announced; else an RKV_EXIT_*
 * code, said on stderr. */
int rkv_pslite_place(const struct cmd_settings *s, int is_server, char **ans_p, char *host,
                     size_t host_len);

#endif

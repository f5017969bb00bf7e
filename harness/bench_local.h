/* `rkv bench local` (bench_local.c). */
#ifndef RKV_HARNESS_BENCH_LOCAL_H
#define RKV_HARNESS_BENCH_LOCAL_H

/* argv: what follows "bench local". Returns an rkv exit code. */
int rkv_bench_local(int argc, char **argv);

#endif

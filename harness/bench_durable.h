/* `rkv bench durable` (bench_durable.c). */
#ifndef RKV_CLI_BENCH_DURABLE_H
#define RKV_CLI_BENCH_DURABLE_H

/* argv: what follows "bench durable". Returns an rkv exit code. */
int rkv_bench_durable(int argc, char **argv);

#endif

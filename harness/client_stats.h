/* The client's counters (rkv_client_stats) in reports: a worker process
 * prints them as one "STATS {json}" line beside its PHASE lines, and the
 * report sums them over workers into report.json's "stats". */
#ifndef RKV_CLIENT_STATS_H
#define RKV_CLIENT_STATS_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "rkv.h"

/* One line: "STATS {"worker":N,"ops":{...},"servers":[...]}". Operations
 * and servers without a count are left out; histograms are sparse, a list
 * of [bucket, count] (bucket b: latencies in [2^b, 2^(b+1)) ns). */
int rkv_stats_print(FILE *out, struct rkv_client *cli);
/* The same with per-server entries only when the cluster has at most
 * max_servers servers (the twin's thousands of nodes would print millions). */
int rkv_stats_print_capped(FILE *out, struct rkv_client *cli, uint32_t max_servers);

/* The "stats" object of report.json from the workers' parsed lines:
 * {"ops": {...}, "servers": [...]} summed over workers (with mean, p50,
 * p99 and max in microseconds), and "workers": the lines themselves.
 * Takes a reference to workers. NULL when out of memory. */
json_t *rkv_stats_report(json_t *workers);

/* Percentile q (0..1) of a sparse histogram, in microseconds: the upper
 * edge of the bucket that holds it, never above max_ns. */
double rkv_stats_percentile_us(json_t *hist, double q, double max_ns);

#endif

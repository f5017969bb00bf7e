/* Client counters as JSON (harness/client_stats.h). */
#include <stdlib.h>
#include <string.h>

#include "harness/client_stats.h"

static json_t *cs_u64(uint64_t v)
{
    return json_integer((json_int_t)(v > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : v));
}

static json_t *cs_op_json(const struct rkv_op_stats *st)
{
    json_t *hist = json_array();
    for (uint32_t b = 0; hist && b < RKV_STATS_BUCKETS; b++)
        if (st->hist[b])
            json_array_append_new(hist, json_pack("[I, o]", (json_int_t)b, cs_u64(st->hist[b])));
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "count", cs_u64(st->count),
                     "errors", cs_u64(st->errors), "rows", cs_u64(st->rows), "bytes",
                     cs_u64(st->bytes), "timed", cs_u64(st->timed), "total_ns",
                     cs_u64(st->total_ns), "max_ns", cs_u64(st->max_ns), "hist", hist);
}

int rkv_stats_print(FILE *out, struct rkv_client *cli)
{
    return rkv_stats_print_capped(out, cli, UINT32_MAX);
}

int rkv_stats_print_capped(FILE *out, struct rkv_client *cli, uint32_t max_servers)
{
    json_t *ops = json_object(), *servers = json_array();
    int bad = !ops || !servers;
    for (int op = 0; !bad && op < RKV_STATS_OPS; op++) {
        struct rkv_op_stats st;
        if (rkv_client_stats(cli, op, &st) == 0 && st.count)
            bad |= json_object_set_new(ops, rkv_stats_op_name(op), cs_op_json(&st));
    }
    uint32_t n_servers = rkv_client_n_servers(cli);
    for (uint32_t s = 0; !bad && n_servers <= max_servers && s < n_servers; s++) {
        json_t *one = NULL;
        for (int op = 0; !bad && op < RKV_STATS_OPS; op++) {
            struct rkv_op_stats st;
            if (rkv_client_peer_stats(cli, s, op, &st) < 0 || !st.count)
                continue;
            if (!one && !(one = json_pack("{s:I}", "server", (json_int_t)s)))
                bad = 1;
            else
                bad |= json_object_set_new(one, rkv_stats_op_name(op), cs_op_json(&st));
        }
        if (one)
            bad |= json_array_append_new(servers, one);
    }
    json_t *doc = bad ? NULL
                      : json_pack("{s:I, s:o, s:o}", "worker", (json_int_t)rkv_client_id(cli),
                                  "ops", ops, "servers", servers);
    if (!doc) {
        if (bad) { /* else json_pack took (and dropped) them */
            json_decref(ops);
            json_decref(servers);
        }
        return -RKV_ENOMEM;
    }
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!text)
        return -RKV_ENOMEM;
    fprintf(out, "STATS %s\n", text);
    free(text);
    return 0;
}

double rkv_stats_percentile_us(json_t *hist, double q, double max_ns)
{
    uint64_t total = 0, acc = 0;
    size_t i;
    json_t *e;
    json_array_foreach(hist, i, e) total += (uint64_t)json_integer_value(json_array_get(e, 1));
    if (!total)
        return 0;
    json_array_foreach(hist, i, e)
    {
        acc += (uint64_t)json_integer_value(json_array_get(e, 1));
        if ((double)acc >= q * (double)total) {
            double edge = (double)(2ull << json_integer_value(json_array_get(e, 0)));
            return (edge < max_ns ? edge : max_ns) / 1e3;
        }
    }
    return max_ns / 1e3;
}

/* Adds one operation's counters (from a STATS line) into sum (fields by
 * name; the histogram bucket by bucket). */
static int cs_add(json_t *sum, json_t *one)
{
    static const char *const fields[] = {"count", "errors", "rows", "bytes", "timed", "total_ns"};
    for (size_t k = 0; k < sizeof(fields) / sizeof(fields[0]); k++) {
        json_int_t v = json_integer_value(json_object_get(sum, fields[k])) +
                       json_integer_value(json_object_get(one, fields[k]));
        if (json_object_set_new(sum, fields[k], json_integer(v)) < 0)
            return -RKV_ENOMEM;
    }
    json_int_t mx = json_integer_value(json_object_get(sum, "max_ns")),
               m1 = json_integer_value(json_object_get(one, "max_ns"));
    json_object_set_new(sum, "max_ns", json_integer(m1 > mx ? m1 : mx));
    json_int_t buckets[RKV_STATS_BUCKETS] = {0};
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(sum, "hist"), i, e)
    {
        json_int_t b = json_integer_value(json_array_get(e, 0));
        if (b >= 0 && b < RKV_STATS_BUCKETS)
            buckets[b] += json_integer_value(json_array_get(e, 1));
    }
    json_array_foreach(json_object_get(one, "hist"), i, e)
    {
        json_int_t b = json_integer_value(json_array_get(e, 0));
        if (b >= 0 && b < RKV_STATS_BUCKETS)
            buckets[b] += json_integer_value(json_array_get(e, 1));
    }
    json_t *hist = json_array();
    for (json_int_t b = 0; hist && b < RKV_STATS_BUCKETS; b++)
        if (buckets[b])
            json_array_append_new(hist, json_pack("[I, I]", b, buckets[b]));
    return hist && json_object_set_new(sum, "hist", hist) == 0 ? 0 : -RKV_ENOMEM;
}

/* Every operation of src (an object of operation name -> counters) into dst. */
static int cs_add_ops(json_t *dst, json_t *src)
{
    const char *name;
    json_t *one;
    json_object_foreach(src, name, one)
    {
        if (!json_is_object(one) || !json_object_get(one, "count"))
            continue; /* "server": the id, not an operation */
        json_t *sum = json_object_get(dst, name);
        if (!sum && (json_object_set_new(dst, name, json_object()) < 0 ||
                     !(sum = json_object_get(dst, name))))
            return -RKV_ENOMEM;
        if (cs_add(sum, one) < 0)
            return -RKV_ENOMEM;
    }
    return 0;
}

/* mean, p50, p99 and max in microseconds beside each sum's raw fields. */
static void cs_derive(json_t *ops)
{
    const char *name;
    json_t *one;
    json_object_foreach(ops, name, one)
    {
        if (!json_is_object(one) || !json_object_get(one, "count"))
            continue;
        /* total_ns sums the timed calls only (rkv.h, rkv_op_stats) */
        double n = (double)json_integer_value(json_object_get(one, "timed"));
        double mx = (double)json_integer_value(json_object_get(one, "max_ns"));
        json_t *hist = json_object_get(one, "hist");
        json_object_set_new(
            one, "mean_us",
            json_real(n ? (double)json_integer_value(json_object_get(one, "total_ns")) / n / 1e3
                        : 0));
        json_object_set_new(one, "p50_us", json_real(rkv_stats_percentile_us(hist, 0.5, mx)));
        json_object_set_new(one, "p99_us", json_real(rkv_stats_percentile_us(hist, 0.99, mx)));
        json_object_set_new(one, "max_us", json_real(mx / 1e3));
    }
}

json_t *rkv_stats_report(json_t *workers)
{
    json_t *ops = json_object(), *by_server = json_object(), *servers = json_array();
    int bad = !ops || !by_server || !servers;
    size_t i, k;
    json_t *w, *s;
    json_array_foreach(workers, i, w)
    {
        bad |= !bad && cs_add_ops(ops, json_object_get(w, "ops")) < 0;
        json_array_foreach(json_object_get(w, "servers"), k, s)
        {
            char key[16];
            snprintf(key, sizeof(key), "%lld",
                     (long long)json_integer_value(json_object_get(s, "server")));
            json_t *dst = json_object_get(by_server, key);
            if (!dst && !bad) {
                bad |= json_object_set_new(
                    by_server, key, json_pack("{s:O}", "server", json_object_get(s, "server")));
                dst = json_object_get(by_server, key);
            }
            bad |= !dst || cs_add_ops(dst, s) < 0;
        }
    }
    cs_derive(ops);
    /* Servers by id, as an array. */
    for (json_int_t id = 0;
         !bad && id < 65536 && json_object_size(by_server) > json_array_size(servers); id++) {
        char key[16];
        snprintf(key, sizeof(key), "%lld", (long long)id);
        json_t *one = json_object_get(by_server, key);
        if (!one)
            continue;
        cs_derive(one);
        bad |= json_array_append(servers, one);
    }
    json_decref(by_server);
    json_t *doc = bad ? NULL
                      : json_pack("{s:s, s:o, s:o, s:O}", "hist",
                                  "[bucket, count]: latencies in [2^bucket, 2^(bucket+1)) ns",
                                  "ops", ops, "servers", servers, "workers", workers);
    if (bad) { /* else json_pack took (and, failing, dropped) them */
        json_decref(ops);
        json_decref(servers);
    }
    return doc;
}

/* libFuzzer target: the cluster-file parser (DGL's ip_config.txt form) must
 * turn any file into machines or a file:line error, never a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "api/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/rkv-fuzz-cluster-%d", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    struct rkv_machine *m = NULL;
    uint32_t n = 0;
    char err[512];
    if (rkv_cmd_cluster_parse(path, 2, &m, &n, err, sizeof(err)) == 0)
        free(m);
    unlink(path);
    return 0;
}

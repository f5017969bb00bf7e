/* libFuzzer target: the scenario loader must turn any file into a scenario
 * that passes its own checks or a file:line:col error, never a crash or a
 * leak (ci/fuzz; corpus harness/tests/corpus/scenario). */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "harness/oracle.h"
#include "harness/scenario.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/rkv-fuzz-scenario-%d.yaml", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    struct rkv_scenario *sc;
    char err[512];
    if (rkv_scenario_load(path, &sc, err, sizeof(err)) == 0) {
        rkv_oracle_check_scenario(sc, err, sizeof(err));
        rkv_scenario_free(sc);
    }
    unlink(path);
    return 0;
}

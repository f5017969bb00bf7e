#include <string.h>

#include "nic/nic.h"

const struct rkv_nic_ops *rkv_nic_find(const char *name)
{
#if RKV_WITH_TCP
    if (strcmp(name, "tcp") == 0)
        return &rkv_nic_tcp_ops;
#endif
#if RKV_WITH_VERBS
    if (strcmp(name, "verbs") == 0)
        return &rkv_nic_verbs_ops;
#endif
    (void)name;
    return NULL;
}

/* rkv_port_pid (port.h): the process's id, cached and refreshed at fork. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "port/port.h"

/* Process-wide by nature (the process is what a fork copies); 0 until the
 * first call. */
static atomic_int port_pid;
static pthread_once_t port_pid_once = PTHREAD_ONCE_INIT;

static void port_pid_refresh(void)
{
    atomic_store_explicit(&port_pid, (int)getpid(), memory_order_relaxed);
}

static void port_pid_init(void)
{
    /* Registered before the first read: a fork after it refreshes the
     * child's copy before the child's code runs again. */
    (void)pthread_atfork(NULL, NULL, port_pid_refresh);
    port_pid_refresh();
}

int rkv_port_pid(void)
{
    int pid = atomic_load_explicit(&port_pid, memory_order_relaxed);
    if (pid)
        return pid;
    pthread_once(&port_pid_once, port_pid_init);
    return atomic_load_explicit(&port_pid, memory_order_relaxed);
}

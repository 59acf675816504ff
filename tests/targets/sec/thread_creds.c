/* A root process with one thread under another user's ids (raw setresuid/setresgid: glibc's wrappers change
 * every thread). `thread_creds leader UID GID`: the leader takes UID/GID and a worker stays root, spinning
 * in root_worker_spin; `thread_creds worker UID GID`: a worker takes them (and spins) while the leader
 * stays root. The process is made dumpable again after the change (a uid change clears it), so that only
 * the threads' credentials differ. Prints "ready <pid> <tid of the worker>". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned long sink;
static volatile int worker_tid;
static uid_t uid;
static gid_t gid;
static int worker_changes;

static void take_ids(void) {
    if (syscall(SYS_setresgid, gid, gid, gid) || syscall(SYS_setresuid, uid, uid, uid)) {
        perror("setresuid");
        exit(1);
    }
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

__attribute__((noinline)) void root_worker_spin(void) {
    for (;;)
        for (int i = 0; i < 100000; i++)
            sink += i * 5;
}

static void *worker(void *arg) {
    (void)arg;
    if (worker_changes)
        take_ids();
    worker_tid = (int)syscall(SYS_gettid);
    root_worker_spin();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: thread_creds leader|worker UID GID\n");
        return 2;
    }
    worker_changes = strcmp(argv[1], "worker") == 0;
    uid = (uid_t)atoi(argv[2]);
    gid = (gid_t)atoi(argv[3]);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    while (!worker_tid)
        usleep(1000);
    if (!worker_changes)
        take_ids();
    printf("ready %d %d\n", getpid(), worker_tid);
    fflush(stdout);
    for (;;)
        pause();
}

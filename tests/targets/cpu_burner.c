/* Known native stacks: main -> outer -> hot_loop burns CPU while a second thread sleeps.
 * Built with frame pointers. Prints "ready <pid>" once both threads run, then runs for argv[1] seconds. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void hot_loop(double until) {
    while (now() < until)
        for (int i = 0; i < 100000; i++)
            sink += i * 7;
}

__attribute__((noinline)) void outer(double until) {
    hot_loop(until);
    sink++;
}

static void *sleeper(void *arg) {
    (void)arg;
    for (;;)
        sleep(60);
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 30.0;
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    printf("ready %d\n", getpid());
    fflush(stdout);
    outer(now() + seconds);
    return 0;
}

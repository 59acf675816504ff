/* Known native stacks: main -> outer -> hot_loop burns CPU while a second thread sleeps.
 * Built with frame pointers. Prints "ready <pid>" once both threads run, then runs for argv[1] seconds.
 * `cpu_burner work N`: prints "ready <pid>", waits for a line on stdin, does a fixed amount of work (N rounds)
 * and prints "done <seconds>" (bench/). */
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

__attribute__((noinline)) void fixed_work(long rounds) {
    for (long r = 0; r < rounds; r++)
        for (int i = 0; i < 100000; i++)
            sink += i * 7;
}

int main(int argc, char **argv) {
    if (argc > 2 && argv[1][0] == 'w') {
        printf("ready %d\n", getpid());
        fflush(stdout);
        int c;
        while ((c = getchar()) != EOF && c != '\n')
            ;
        double t0 = now();
        fixed_work(atol(argv[2]));
        printf("done %.6f\n", now() - t0);
        return 0;
    }
    double seconds = argc > 1 ? atof(argv[1]) : 30.0;
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    printf("ready %d\n", getpid());
    fflush(stdout);
    outer(now() + seconds);
    return 0;
}

/* A setuid-root test program (the security tests install a copy mode 4755, owned by root): it spins in a
 * known function for argv[1] seconds at euid 0. Prints "spinning <euid>" once running. */
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

__attribute__((noinline)) void setuid_spin_loop(double until) {
    while (now() < until)
        for (int i = 0; i < 100000; i++)
            sink += i * 3;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 30;
    printf("spinning %d\n", (int)geteuid());
    fflush(stdout);
    setuid_spin_loop(now() + seconds);
    return 0;
}

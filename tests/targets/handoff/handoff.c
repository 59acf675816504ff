/* A thread pool that launches "kernels" through the real CUDA runtime from its worker threads, after a
 * hand-off from the caller of handoff_run (which blocks until the work is done, like PyTorch's
 * backward). For the cross-thread tests: the workers' launches belong to handoff_run's caller. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef int (*launch_fn)(const void *, uint64_t, uint32_t, uint64_t, uint32_t, void **, size_t, void *);

static launch_fn launch;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static int queued, finished;

__attribute__((noinline)) void handoff_kernel_stub(void) { __asm__ volatile(""); }

__attribute__((noinline)) static void run_task(void) {
    uint64_t one = 1 | (1ull << 32);
    launch((const void *)handoff_kernel_stub, one, 1, one, 1, NULL, 0, NULL);
}

static void *worker(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "handoff-wk");
    for (;;) {
        pthread_mutex_lock(&mu);
        while (queued == 0)
            pthread_cond_wait(&work_cv, &mu);
        queued--;
        pthread_mutex_unlock(&mu);
        run_task();
        pthread_mutex_lock(&mu);
        finished++;
        pthread_cond_broadcast(&done_cv);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

int handoff_init(const char *cudart, int nthreads) {
    void *lib = dlopen(cudart, RTLD_NOW);
    if (!lib || !(launch = (launch_fn)dlsym(lib, "cudaLaunchKernel")))
        return -1;
    for (int i = 0; i < nthreads; i++) {
        pthread_t t;
        pthread_create(&t, NULL, worker, NULL);
    }
    return 0;
}

/* Hands n launches to the pool and waits for them. */
__attribute__((noinline)) int handoff_run(int n) {
    pthread_mutex_lock(&mu);
    int target = finished + n;
    queued += n;
    pthread_cond_broadcast(&work_cv);
    while (finished < target)
        pthread_cond_wait(&done_cv, &mu);
    pthread_mutex_unlock(&mu);
    return 0;
}

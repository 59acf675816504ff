// One lost point reached from two native caller chains at the same stack depth, for the memoized
// continuation's test (tests/integration/test_continue_memo.py): memo_lost uses rbp for data, so the
// frame-pointer walk from its launch is lost there with the same registers whichever chain called it, and the
// .eh_frame walk taken over from it (gpu_native_continue) reads return addresses that differ only above
// memo_mid: into memo_via_a or memo_via_b, whose frames are alike (memo_run calls both from one frame).
#include <dlfcn.h>
#include <stdint.h>

typedef int (*launch_fn)(const void *, uint64_t, uint32_t, uint64_t, uint32_t, void **, size_t, void *);
static launch_fn launch;

__attribute__((noinline)) void memo_kernel(void) { __asm__ volatile(""); }

__attribute__((noinline, optimize("omit-frame-pointer"))) long memo_lost(long n) {
    long r = 0;
    uint64_t one = 1 | (1ull << 32);
    for (long i = 0; i < n; i++) {
        __asm__ volatile("mov $0x7, %%rbp" ::: "rbp");  // not a frame pointer: odd, below the stack
        launch((const void *)memo_kernel, one, 1, one, 1, 0, 0, 0);
        r++;
    }
    return r;
}

__attribute__((noinline)) long memo_mid(long n) {
    long r = memo_lost(n);
    __asm__ volatile("" ::: "memory");
    return r;
}

// alike but for their results (identical functions would be folded into one)
__attribute__((noinline)) long memo_via_a(long n) {
    long r = memo_mid(n);
    __asm__ volatile("" ::: "memory");
    return r;
}

__attribute__((noinline)) long memo_via_b(long n) {
    long r = memo_mid(n);
    __asm__ volatile("" ::: "memory");
    return r + 1;
}

// n launches through chain a (which 0) or b (1), from this one frame
__attribute__((noinline, visibility("default"))) long memo_run(int which, long n) {
    long r = which ? memo_via_b(n) : memo_via_a(n);
    __asm__ volatile("" ::: "memory");
    return r;
}

// dlopens the CUDA runtime at path; 0 on success
__attribute__((visibility("default"))) int memo_init(const char *cudart) {
    void *h = dlopen(cudart, RTLD_NOW | RTLD_GLOBAL);
    if (!h) return -1;
    launch = (launch_fn)dlsym(h, "cudaLaunchKernel");
    return launch ? 0 : -2;
}

// A miniature of libtorch_cuda.so (see torch_cpu.cc): the kernel registered for mul.Tensor on the CUDA key,
// named as torchgen names a structured kernel's wrapper (wrapper_<key>_<op>_<overload>), built without a
// frame pointer like the rest of the library, launching through the real CUDA runtime.
#include <dlfcn.h>

#include <cstdint>

typedef int (*launch_fn)(const void *, uint64_t, uint32_t, uint64_t, uint32_t, void **, size_t, void *);

extern "C" __attribute__((noinline)) void mul_kernel(void) { __asm__ volatile(""); }

// with a frame: the walk starts from it
__attribute__((noinline)) static void launch_mul(launch_fn launch) {
    uint64_t one = 1 | (1ull << 32);
    launch((const void *)mul_kernel, one, 1, one, 1, nullptr, 0, nullptr);
    __asm__ volatile("" ::: "memory");
}

namespace at {
__attribute__((noinline, optimize("omit-frame-pointer"), visibility("default"))) long wrapper_CUDA_mul_Tensor(long n) {
    static launch_fn launch;
    if (!launch) launch = (launch_fn)dlsym(RTLD_DEFAULT, "cudaLaunchKernel");
    for (long i = 0; i < n; i++) launch_mul(launch);
    return n;
}
}  // namespace at

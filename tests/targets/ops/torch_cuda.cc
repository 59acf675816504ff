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

// relu as PyTorch's CUDA side runs it: the DispatchStub kernel clamp_min registered (clamp_min_scalar_kernel_impl,
// with a frame) launches, called from code without frame pointers that uses rbp for data: the walk from the
// launch keeps the stub's frame and is lost above it, so no entry, wrapper or binding names the operator (relu's
// kernel on an H100, 2026-12-06); the stub's name does (aten::clamp_min)
extern "C" __attribute__((noinline)) void relu_kernel(void) { __asm__ volatile(""); }

namespace at {
namespace native {
namespace {
__attribute__((noinline)) long clamp_min_scalar_kernel_impl(long n) {
    static launch_fn launch;
    if (!launch) launch = (launch_fn)dlsym(RTLD_DEFAULT, "cudaLaunchKernel");
    uint64_t one = 1 | (1ull << 32);
    for (long i = 0; i < n; i++) launch((const void *)relu_kernel, one, 1, one, 1, nullptr, 0, nullptr);
    __asm__ volatile("" ::: "memory");
    return n;
}
}  // namespace
__attribute__((noinline, optimize("omit-frame-pointer"), visibility("default"))) long relu_cuda(long n) {
    __asm__ volatile("mov $0x7, %%rbp" ::: "rbp");  // not a frame pointer: odd, below the stack
    return clamp_min_scalar_kernel_impl(n) + 1;
}
}  // namespace native
}  // namespace at

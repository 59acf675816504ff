// A miniature of libtorch_cpu.so's operator entry points, for the operator-node tests: structs named as
// torchgen names them (at::_ops::<op>_<overload>) whose call() enters the "dispatcher" and whose redispatch()
// passes the call on, and the operators' schema strings in .rodata. matmul calls mm, which launches through
// the real CUDA runtime; sum.dim_IntList launches by itself; addmm's schema is only the tail of another
// string (the linker merges such strings). mul.Tensor goes to the kernel libtorch_cuda.so (torch_cuda.cc)
// registered for it, through entry points built without frame pointers, as PyTorch's are: a frame-pointer
// walk from the launch skips them and finds the registered kernel's wrapper only. conv2d's Python binding
// (torch::autograd::THPVariable_conv2d, in libtorch_python.so in PyTorch) calls its entry point, which goes to
// a cuDNN-like launch, all without frame pointers below the binding's dispatch: the walk from the launch finds
// no entry and no wrapper, only the binding.
#include <dlfcn.h>

#include <cstdint>

typedef int (*launch_fn)(const void *, uint64_t, uint32_t, uint64_t, uint32_t, void **, size_t, void *);
static launch_fn launch;

extern "C" __attribute__((noinline)) void gemm_kernel(void) { __asm__ volatile(""); }
extern "C" __attribute__((noinline)) void reduce_kernel(void) { __asm__ volatile(""); }
extern "C" __attribute__((noinline)) void conv_kernel(void) { __asm__ volatile(""); }

__attribute__((used)) static const char *const schemas[] = {
    "mm(Tensor self, Tensor mat2) -> Tensor",
    "mul.Tensor(Tensor self, Tensor other) -> Tensor",
    "matmul(Tensor self, Tensor other) -> Tensor",
    "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "sum_to_size(Tensor(a) self, SymInt[] size) -> Tensor(a)",
    "sparse_sampled_addmm(Tensor self, Tensor mat1, Tensor mat2) -> Tensor",
    "conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1) -> Tensor",
    "bmm(Tensor self, Tensor mat2) -> Tensor",
    "relu(Tensor self) -> Tensor",
    "clamp_min(Tensor self, Scalar min) -> Tensor",
};

static void launch_stub(void (*stub)(void)) {
    uint64_t one = 1 | (1ull << 32);
    launch((const void *)stub, one, 1, one, 1, nullptr, 0, nullptr);
}

extern "C" int cublasLtMatmul(const void *kernel);  // cublaslt.cc

namespace at {
long wrapper_CUDA_mul_Tensor(long n);  // torch_cuda.cc
namespace native {
long relu_cuda(long n);  // torch_cuda.cc
}  // namespace native
namespace _ops {
struct relu {
    static long call(long n);
};
// without a frame: the walk, lost below it in relu_cuda, would not find it anyway
__attribute__((noinline, optimize("omit-frame-pointer"))) long relu::call(long n) {
    return at::native::relu_cuda(n) + 1;
}
}  // namespace _ops
namespace native {
__attribute__((noinline)) void mm_cuda(long n) {
    for (long i = 0; i < n; i++) launch_stub(gemm_kernel);
}
}  // namespace native
namespace _ops {
struct mm {
    static long call(long n);
    static long redispatch(int keys, long n);
};
struct matmul {
    static long call(long n);
};
struct sum_dim_IntList {
    static long call(long n);
};
struct addmm {
    static long call(long n);
};
struct mul_Tensor {
    static long call(long n);
    static long redispatch(int keys, long n);
};
// the autograd key's kernel passes the call on to the CUDA key's
__attribute__((noinline)) long mm::redispatch(int keys, long n) {
    at::native::mm_cuda(n);
    __asm__ volatile("" ::: "memory");
    return keys;
}
__attribute__((noinline)) long mm::call(long n) {
    long r = mm::redispatch(1, n);
    __asm__ volatile("" ::: "memory");
    return r;
}
__attribute__((noinline)) long matmul::call(long n) {
    long r = mm::call(n);
    __asm__ volatile("" ::: "memory");
    return r;
}
__attribute__((noinline)) long sum_dim_IntList::call(long n) {
    for (long i = 0; i < n; i++) launch_stub(reduce_kernel);
    __asm__ volatile("" ::: "memory");
    return n;
}
__attribute__((noinline)) long addmm::call(long n) {
    for (long i = 0; i < n; i++) launch_stub(gemm_kernel);
    __asm__ volatile("" ::: "memory");
    return n;
}
// no frame of their own: rbp still holds the binding's frame when the CUDA kernel's wrapper runs
__attribute__((noinline, optimize("omit-frame-pointer"))) long mul_Tensor::redispatch(int keys, long n) {
    return wrapper_CUDA_mul_Tensor(n) + keys;
}
__attribute__((noinline, optimize("omit-frame-pointer"))) long mul_Tensor::call(long n) {
    return mul_Tensor::redispatch(1, n) + 1;
}
struct conv2d {
    static long call(long n);
};
}  // namespace _ops
namespace native {
// cuDNN's side: no frame pointer, as the library's code has none
__attribute__((noinline, optimize("omit-frame-pointer"))) long cudnn_conv_launch(long n) {
    for (long i = 0; i < n; i++) launch_stub(conv_kernel);
    __asm__ volatile("" ::: "memory");
    return n;
}
}  // namespace native
__attribute__((noinline, optimize("omit-frame-pointer"))) long _ops::conv2d::call(long n) {
    return at::native::cudnn_conv_launch(n) + 1;
}
}  // namespace at

// bmm: its CUDA side uses rbp for data, as code built without frame pointers may (libtorch_cuda's GEMM path
// did on the H100), and has cuBLASLt launch: a frame-pointer walk from the launch stops there, lost, and only
// the .eh_frame walk taken over from that frame (gpu_native_continue) reaches the operator's entry above it
namespace at {
namespace native {
__attribute__((noinline, optimize("omit-frame-pointer"))) long bmm_cuda(long n) {
    long r = 0;
    for (long i = 0; i < n; i++) {
        __asm__ volatile("mov $0x7, %%rbp" ::: "rbp");  // not a frame pointer: odd, below the stack
        cublasLtMatmul((const void *)gemm_kernel);
        r++;
    }
    return r;
}
}  // namespace native
namespace _ops {
struct bmm {
    static long call(long n);
};
__attribute__((noinline)) long bmm::call(long n) {
    long r = at::native::bmm_cuda(n);
    __asm__ volatile("" ::: "memory");
    return r;
}
}  // namespace _ops
}  // namespace at

namespace torch {
namespace autograd {
// the binding's dispatch lambda, with a frame (so the walk finds the binding above it) that calls the entry
__attribute__((noinline)) static long dispatch_conv2d(long n) {
    long r = at::_ops::conv2d::call(n);
    __asm__ volatile("" ::: "memory");
    return r;
}
__attribute__((noinline)) long THPVariable_conv2d(long n) {
    long r = dispatch_conv2d(n);
    __asm__ volatile("" ::: "memory");
    return r;
}
}  // namespace autograd
}  // namespace torch

extern "C" {

// dlopens the CUDA runtime at path; 0 on success
__attribute__((visibility("default"))) int ops_init(const char *cudart) {
    void *h = dlopen(cudart, RTLD_NOW | RTLD_GLOBAL);
    if (!h) return -1;
    launch = (launch_fn)dlsym(h, "cudaLaunchKernel");
    return launch ? 0 : -2;
}

// the Python bindings (THPVariable_matmul and the others in torch); not tail calls, so each stays on the stack
#define BINDING(name, op)                                                   \
    __attribute__((noinline, visibility("default"))) long name(long n) {   \
        long r = op::call(n);                                               \
        __asm__ volatile("" ::: "memory");                                  \
        return r;                                                           \
    }
BINDING(ops_matmul, at::_ops::matmul)
BINDING(ops_sum, at::_ops::sum_dim_IntList)
BINDING(ops_addmm, at::_ops::addmm)
BINDING(ops_mul, at::_ops::mul_Tensor)
BINDING(ops_bmm, at::_ops::bmm)
BINDING(ops_relu, at::_ops::relu)
__attribute__((noinline, visibility("default"))) long ops_conv2d(long n) {
    long r = torch::autograd::THPVariable_conv2d(n);
    __asm__ volatile("" ::: "memory");
    return r;
}
}

/* Native stacks of a known shape for the frame-pointer walk, launching through a CUDA runtime (the real
 * one, or the mock of tests/mocks):
 * - launch_below_stack & co call cudaLaunchKernel with the frame pointer register holding a value that is
 *   no frame of the thread's stack, as a function built without frame pointers leaves it when it uses
 *   the register for data: the native stack of that call must end at its caller
 *   (launch_with_frame_pointer), with no frame read from where the value points. x86-64 only (the call
 *   is made by hand, to choose the register).
 * - launches_at_depth launches from under a chain of frames that keep frame pointers: a deep native
 *   stack, as PyTorch's dispatcher under a CPython built with frame pointers makes one
 *   (bench/probe_cost.py --workload mock_launch_deep). */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

typedef int (*launch_fn)(void);
typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_kernel_fn)(const void *, dim3, dim3, void **, size_t, void *);
static launch_fn launch;

int frames_init(const char *cudart) {
    void *lib = dlopen(cudart, RTLD_NOW);
    return lib && (launch = (launch_fn)dlsym(lib, "cudaLaunchKernel")) ? 0 : -1;
}

/* cudaLaunchKernel(NULL, dim3(1,1,1), dim3(1,1,1), NULL, 0, NULL) with rbp = fp_value; the runtime
 * finds no GPU and returns an error. */
__attribute__((noinline)) int launch_with_frame_pointer(uint64_t fp_value) {
    register uint64_t fpv __asm__("r13") = fp_value;
    uint64_t rc;
    __asm__ volatile(
        "mov %%rsp, %%r12\n\t"
        "and $-16, %%rsp\n\t"
        "push %%rbp\n\t"
        "push %%r12\n\t"
        "mov %%r13, %%rbp\n\t"
        "push $0\n\t"                 /* stream */
        "push $0\n\t"                 /* sharedMem */
        "xor %%edi, %%edi\n\t"        /* func */
        "movabs $0x100000001, %%rsi\n\t" /* gridDim x, y */
        "mov $1, %%edx\n\t"           /* gridDim z */
        "movabs $0x100000001, %%rcx\n\t" /* blockDim x, y */
        "mov $1, %%r8d\n\t"           /* blockDim z */
        "xor %%r9d, %%r9d\n\t"        /* args */
        "call *%%rbx\n\t"
        "add $16, %%rsp\n\t"
        "pop %%r12\n\t"
        "pop %%rbp\n\t"
        "mov %%r12, %%rsp\n\t"
        : "=a"(rc)
        : "b"(launch), "r"(fpv)
        : "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "memory", "cc", "xmm0", "xmm1", "xmm2",
          "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",
          "xmm15");
    return (int)rc;
}

/* Values no frame of this stack has: below the stack pointer (memory that is mapped and readable,
 * holding what deeper calls left there), above it but not 8-aligned, and a small integer. */
int launch_below_stack(void) {
    return launch_with_frame_pointer((uint64_t)__builtin_frame_address(0) - 4096);
}

int launch_misaligned(void) {
    return launch_with_frame_pointer((uint64_t)__builtin_frame_address(0) + 4);
}

int launch_small_integer(void) {
    return launch_with_frame_pointer(64);
}

/* n launches of func from depth frames below the caller; each frame keeps its frame pointer and a
 * little stack of its own (no tail call: the result is used after the call). */
__attribute__((noinline)) int launches_at_depth(int depth, const void *func, int n) {
    volatile char pad[48];
    pad[0] = (char)depth;
    if (depth > 0)
        return launches_at_depth(depth - 1, func, n) + pad[0] - (char)depth;
    dim3 one = {1, 1, 1};
    int rc = 0;
    for (int i = 0; i < n; i++)
        rc |= ((launch_kernel_fn)launch)(func, one, one, NULL, 0, NULL);
    return rc;
}

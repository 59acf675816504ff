/* Hooks between the mock CUDA libraries and the mock CUPTI (tests/mocks). */
#ifndef DEEPCTX_MOCK_H
#define DEEPCTX_MOCK_H
#include <stddef.h>
#include <stdint.h>

uint64_t mockcupti_now(void);
void mockcupti_spin_env(const char *name, long long *cache);
uint32_t mockcupti_api_enter(int domain, uint32_t cbid, const char *fn, const char *symbol);
void mockcupti_api_exit(int domain, uint32_t cbid, uint32_t corr, const char *fn);
void mockcupti_kernel(uint32_t corr, const char *name, uint64_t start, uint64_t end, uint32_t stream,
                      uint64_t graph_node, const uint32_t *shape);
void mockcupti_memcpy(uint32_t corr, uint64_t bytes, uint8_t copy_kind, uint64_t start, uint64_t end,
                      uint32_t stream);
void mockcupti_memset(uint32_t corr, uint64_t bytes, uint64_t start, uint64_t end, uint32_t stream);
void mockcupti_sync(uint32_t corr, uint32_t type, uint64_t start, uint64_t end);
void mockcupti_resource(uint32_t cbid, void *data);  /* a CUpti_ResourceData */
void mockcupti_pcs_module(const void *cubin, size_t size);  /* the loaded module's cubin */

/* libcuda.so.1 (mock); cuInit and cuLaunchKernel as cuda.h declares them */
uint64_t mock_device_run(uint64_t duration);
uint64_t mock_device_idle_at(void);
int mock_run_kernel(const void *handle, uint32_t corr, uint32_t stream, uint64_t graph_node);

/* The simulated device's state, shared through MOCK_GPU_DIR/<pid> with the mock NVML: the work it ran by a
 * time t on its clock (mockcupti_now: CLOCK_MONOTONIC + clock_offset_ns) at or after the last launch is
 * committed_ns - max(0, free_at_ns - t), since the work still queued runs back to back. seq is odd while a
 * write is in progress. */
struct mock_gpu_state {
    uint64_t seq;
    uint64_t committed_ns;
    uint64_t free_at_ns;
    int64_t clock_offset_ns;
};

#endif

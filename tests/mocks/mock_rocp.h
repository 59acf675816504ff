/* Hooks between the mock HIP runtime (mock_hip.c) and the mock rocprofiler-sdk (mock_rocprofiler.c). */
#ifndef DEEPCTX_MOCK_ROCP_H
#define DEEPCTX_MOCK_ROCP_H
#include <stdint.h>

/* HIP runtime API operation ids of rocprofiler-sdk 0.5.0 (hip/runtime_api_id.h at the commit
 * native/rocprofiler_abi.h names; test_rocprof_layout.py checks them against the real header). */
#define MOCK_HIP_OP_hipDeviceSynchronize 66
#define MOCK_HIP_OP_hipFree 90
#define MOCK_HIP_OP_hipLaunchKernel 214
#define MOCK_HIP_OP_hipMalloc 215
#define MOCK_HIP_OP_hipMemcpy 259
#define MOCK_HIP_OP_hipMemset 288
#define MOCK_HIP_OP_hipModuleLaunchKernel 308
#define MOCK_HIP_OP_hipStreamSynchronize 346

void mockrocp_init(void);                   /* first HIP call: configure and initialize the tools */
uint64_t mockrocp_now(void);                /* the SDK's clock */
uint64_t mockrocp_api_enter(int32_t op);    /* a new correlation id; ENTER callbacks in this thread */
void mockrocp_api_exit(int32_t op, uint64_t corr);
void mockrocp_register_kernel(uint64_t kernel_id, const char *name);  /* a code object's kernel symbol */
void mockrocp_kernel(uint64_t corr, uint64_t kernel_id, uint64_t start, uint64_t end, uint64_t queue);
void mockrocp_copy(uint64_t corr, int32_t direction, uint64_t bytes, uint64_t start, uint64_t end);
uint64_t mockrocp_gpu_agent(void);          /* the one GPU's agent handle */

#endif

/* The part of rocprofiler-sdk's C ABI that the deepctx rocprofiler agent (deepctx_rocprof.c) uses, declared
 * here so the agent builds everywhere with no SDK installed; the SDK itself is found at run time (it is the
 * library that loads the agent).
 *
 * Written from the public headers of ROCm/rocprofiler-sdk at commit 8ab1ed78d8c2afb25fedddb7684aff08d1233c5c
 * (2024-10-10, VERSION 0.5.0, the ROCm 6.3 series): fwd.h, registration.h, context.h, buffer.h,
 * buffer_tracing.h, callback_tracing.h, agent.h and rocprofiler.h. Only facts are carried over (enum values,
 * struct layouts on LP64, signatures); the names carry an rp_ / RP_ prefix so that this header and the SDK's
 * can be compiled together: tests/integration/device/test_rocprof_layout.py does exactly that, with
 * _Static_assert on every size, offset and value below, when DEEPCTX_ROCPROFILER_INCLUDE names the SDK's
 * include directory.
 *
 * ABI rules the agent relies on: enums are int-sized; every handle is a struct of one uint64_t passed by
 * value; records start with a uint64_t size, so a newer SDK may append fields but not move these. */
#ifndef DEEPCTX_ROCPROFILER_ABI_H
#define DEEPCTX_ROCPROFILER_ABI_H

#include <stddef.h>
#include <stdint.h>

/* --- status (fwd.h: rocprofiler_status_t) --------------------------------------------------------- */
typedef int rp_status_t;
#define RP_STATUS_SUCCESS 0
#define RP_STATUS_ERROR 1
#define RP_STATUS_ERROR_CONTEXT_NOT_FOUND 2
#define RP_STATUS_ERROR_BUFFER_NOT_FOUND 3
#define RP_STATUS_ERROR_KIND_NOT_FOUND 4
#define RP_STATUS_ERROR_OPERATION_NOT_FOUND 5
#define RP_STATUS_ERROR_BUFFER_BUSY 13
#define RP_STATUS_ERROR_CONFIGURATION_LOCKED 15   /* configuration after the tool's initialize */
#define RP_STATUS_ERROR_NOT_IMPLEMENTED 16
#define RP_STATUS_ERROR_INCOMPATIBLE_ABI 17
#define RP_STATUS_ERROR_INVALID_ARGUMENT 18

/* --- enums (fwd.h, agent.h) --------------------------------------------------------------------------- */
/* rocprofiler_buffer_category_t */
#define RP_BUFFER_CATEGORY_TRACING 1
/* rocprofiler_agent_type_t */
#define RP_AGENT_TYPE_CPU 1
#define RP_AGENT_TYPE_GPU 2
/* rocprofiler_agent_version_t */
#define RP_AGENT_INFO_VERSION_0 1
/* rocprofiler_callback_phase_t (code objects: LOAD = ENTER, UNLOAD = EXIT) */
#define RP_CALLBACK_PHASE_ENTER 1
#define RP_CALLBACK_PHASE_EXIT 2
/* rocprofiler_callback_tracing_kind_t */
#define RP_CALLBACK_TRACING_HIP_RUNTIME_API 5
#define RP_CALLBACK_TRACING_CODE_OBJECT 10
/* rocprofiler_buffer_tracing_kind_t: no memset or synchronization kinds in this SDK (HIP runs memsets as
 * fill kernels, which arrive as kernel dispatches) */
#define RP_BUFFER_TRACING_MEMORY_COPY 10
#define RP_BUFFER_TRACING_KERNEL_DISPATCH 11
/* rocprofiler_code_object_operation_t */
#define RP_CODE_OBJECT_LOAD 1
#define RP_CODE_OBJECT_DEVICE_KERNEL_SYMBOL_REGISTER 2
/* rocprofiler_memory_copy_operation_t: the copy's direction */
#define RP_MEMORY_COPY_NONE 0
#define RP_MEMORY_COPY_HOST_TO_HOST 1
#define RP_MEMORY_COPY_HOST_TO_DEVICE 2
#define RP_MEMORY_COPY_DEVICE_TO_HOST 3
#define RP_MEMORY_COPY_DEVICE_TO_DEVICE 4
/* rocprofiler_buffer_policy_t */
#define RP_BUFFER_POLICY_DISCARD 1
#define RP_BUFFER_POLICY_LOSSLESS 2

/* --- scalar types and handles (fwd.h) ---------------------------------------------------------------- */
typedef uint64_t rp_timestamp_t;         /* nanoseconds; the SDK reads CLOCK_BOOTTIME */
typedef uint64_t rp_thread_id_t;
typedef int32_t rp_tracing_operation_t;  /* an operation of a tracing kind (HIP: the API function) */
typedef uint64_t rp_kernel_id_t;
typedef uint64_t rp_dispatch_id_t;

typedef union {
    uint64_t value;
    void *ptr;
} rp_user_data_t;

typedef struct { uint64_t handle; } rp_context_id_t;
typedef struct { uint64_t handle; } rp_queue_id_t;
typedef struct { uint64_t handle; } rp_buffer_id_t;
typedef struct { uint64_t handle; } rp_agent_id_t;

typedef struct {
    uint64_t internal;        /* the SDK's own id: unique per API call, carried by its device records */
    rp_user_data_t external;  /* a tool's id, if one pushed it */
} rp_correlation_id_t;

typedef struct {
    uint32_t x, y, z;
} rp_dim3_t;

/* rocprofiler_callback_tracing_record_t: what a callback-tracing callback receives (by value) */
typedef struct {
    rp_context_id_t context_id;
    rp_thread_id_t thread_id;
    rp_correlation_id_t correlation_id;
    int32_t kind;                     /* RP_CALLBACK_TRACING_* */
    rp_tracing_operation_t operation;
    int32_t phase;                    /* RP_CALLBACK_PHASE_* */
    void *payload;
} rp_callback_tracing_record_t;

/* rocprofiler_record_header_t: one entry of a buffer */
typedef struct {
    union {
        struct {
            uint32_t category;        /* RP_BUFFER_CATEGORY_* */
            uint32_t kind;            /* RP_BUFFER_TRACING_* */
        };
        uint64_t hash;
    };
    void *payload;
} rp_record_header_t;

/* rocprofiler_kernel_dispatch_info_t */
typedef struct {
    uint64_t size;
    rp_agent_id_t agent_id;
    rp_queue_id_t queue_id;
    rp_kernel_id_t kernel_id;         /* the id the kernel-symbol registration announced */
    rp_dispatch_id_t dispatch_id;
    uint32_t private_segment_size;
    uint32_t group_segment_size;
    rp_dim3_t workgroup_size;
    rp_dim3_t grid_size;
    uint8_t reserved_padding[56];
} rp_kernel_dispatch_info_t;

/* --- buffer records (buffer_tracing.h) ----------------------------------------------------------------- */
/* rocprofiler_buffer_tracing_kernel_dispatch_record_t */
typedef struct {
    uint64_t size;
    int32_t kind;                     /* RP_BUFFER_TRACING_KERNEL_DISPATCH */
    int32_t operation;                /* rocprofiler_kernel_dispatch_operation_t (COMPLETE) */
    rp_correlation_id_t correlation_id;
    rp_thread_id_t thread_id;
    rp_timestamp_t start_timestamp;
    rp_timestamp_t end_timestamp;
    rp_kernel_dispatch_info_t dispatch_info;
} rp_kernel_dispatch_record_t;

/* rocprofiler_buffer_tracing_memory_copy_record_t */
typedef struct {
    uint64_t size;
    int32_t kind;                     /* RP_BUFFER_TRACING_MEMORY_COPY */
    int32_t operation;                /* RP_MEMORY_COPY_*: the direction */
    rp_correlation_id_t correlation_id;
    rp_thread_id_t thread_id;
    rp_timestamp_t start_timestamp;
    rp_timestamp_t end_timestamp;
    rp_agent_id_t dst_agent_id;
    rp_agent_id_t src_agent_id;
    uint64_t bytes;
} rp_memory_copy_record_t;

/* --- callback payloads (callback_tracing.h) -------------------------------------------------------------- */
/* rocprofiler_callback_tracing_code_object_kernel_symbol_register_data_t (the SDK may free kernel_name when
 * the code object unloads: copy it) */
typedef struct {
    uint64_t size;
    uint64_t kernel_id;
    uint64_t code_object_id;
    const char *kernel_name;
    uint64_t kernel_object;
    uint32_t kernarg_segment_size;
    uint32_t kernarg_segment_alignment;
    uint32_t group_segment_size;
    uint32_t private_segment_size;
    uint32_t sgpr_count;
    uint32_t arch_vgpr_count;
    uint32_t accum_vgpr_count;
} rp_kernel_symbol_data_t;

/* The first fields of rocprofiler_agent_v0_t (agent.h); the agent reads no further. */
typedef struct {
    uint64_t size;
    rp_agent_id_t id;
    int32_t type;                     /* RP_AGENT_TYPE_* */
} rp_agent_head_t;

/* --- registration (registration.h) ---------------------------------------------------------------------- */
typedef struct {
    const char *name;                 /* the tool sets it */
    const uint32_t handle;
} rp_client_id_t;

typedef void (*rp_client_finalize_t)(rp_client_id_t);
typedef int (*rp_tool_initialize_t)(rp_client_finalize_t finalize, void *tool_data);  /* 0: success */
typedef void (*rp_tool_finalize_t)(void *tool_data);

typedef struct {
    size_t size;                      /* sizeof this struct */
    rp_tool_initialize_t initialize;
    rp_tool_finalize_t finalize;
    void *tool_data;
} rp_tool_configure_result_t;

/* The tool's entry point, which the SDK looks up in each library ROCP_TOOL_LIBRARIES names. version is
 * 10000 * major + 100 * minor + patch; priority: how many tools were configured before this one. */
typedef rp_tool_configure_result_t *(*rp_configure_func_t)(uint32_t version, const char *runtime_version,
                                                           uint32_t priority, rp_client_id_t *client_id);

/* --- callbacks ------------------------------------------------------------------------------------------- */
typedef void (*rp_buffer_tracing_cb_t)(rp_context_id_t context, rp_buffer_id_t buffer,
                                       rp_record_header_t **headers, size_t num_headers, void *data,
                                       uint64_t drop_count);
typedef void (*rp_callback_tracing_cb_t)(rp_callback_tracing_record_t record, rp_user_data_t *user_data,
                                         void *callback_data);
typedef int (*rp_callback_tracing_kind_operation_cb_t)(int32_t kind, rp_tracing_operation_t operation,
                                                       void *data);
typedef rp_status_t (*rp_query_available_agents_cb_t)(int32_t version, const void **agents, size_t num_agents,
                                                      void *user_data);

/* --- the functions the agent calls (looked up with dlsym; rocprofiler_<name> in the SDK) ------------------ */
typedef rp_status_t (*rp_create_context_fn)(rp_context_id_t *context_id);
typedef rp_status_t (*rp_start_context_fn)(rp_context_id_t context_id);
typedef rp_status_t (*rp_stop_context_fn)(rp_context_id_t context_id);
typedef rp_status_t (*rp_create_buffer_fn)(rp_context_id_t context, size_t size, size_t watermark, int32_t policy,
                                           rp_buffer_tracing_cb_t callback, void *callback_data,
                                           rp_buffer_id_t *buffer_id);
typedef rp_status_t (*rp_flush_buffer_fn)(rp_buffer_id_t buffer_id);  /* waits for the buffer's callback */
typedef rp_status_t (*rp_configure_buffer_tracing_service_fn)(rp_context_id_t context_id, int32_t kind,
                                                              const rp_tracing_operation_t *operations,
                                                              size_t operations_count, rp_buffer_id_t buffer_id);
typedef rp_status_t (*rp_configure_callback_tracing_service_fn)(rp_context_id_t context_id, int32_t kind,
                                                                const rp_tracing_operation_t *operations,
                                                                size_t operations_count,
                                                                rp_callback_tracing_cb_t callback,
                                                                void *callback_args);
typedef rp_status_t (*rp_query_callback_tracing_kind_operation_name_fn)(int32_t kind,
                                                                        rp_tracing_operation_t operation,
                                                                        const char **name, uint64_t *name_len);
typedef rp_status_t (*rp_iterate_callback_tracing_kind_operations_fn)(
    int32_t kind, rp_callback_tracing_kind_operation_cb_t callback, void *data);
typedef rp_status_t (*rp_query_available_agents_fn)(int32_t version, rp_query_available_agents_cb_t callback,
                                                    size_t agent_size, void *user_data);
typedef rp_status_t (*rp_get_timestamp_fn)(rp_timestamp_t *ts);
typedef const char *(*rp_get_status_string_fn)(rp_status_t status);
/* Registers a tool late (attach). The SDK refuses with RP_STATUS_ERROR_CONFIGURATION_LOCKED once it has been
 * configured, which happens when the process first initializes HIP or HSA. */
typedef rp_status_t (*rp_force_configure_fn)(rp_configure_func_t configure_func);

#endif

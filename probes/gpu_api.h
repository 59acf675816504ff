/* Structs shared by gpu_api.bpf.c and probes/gpu_api.py (checked by tests/unit/test_probe_layouts.py). */
#ifndef DEEPCTX_GPU_API_H
#define DEEPCTX_GPU_API_H

#include <linux/types.h>

/* What an API call is, for aggregation and for the tree. */
enum gpu_api_class {
    GPU_CLASS_LAUNCH = 1,     /* kernel launch: object = host stub or function handle */
    GPU_CLASS_GRAPH = 2,      /* graph launch: object = graph exec handle */
    GPU_CLASS_MEMCPY = 3,
    GPU_CLASS_MEMSET = 4,
    GPU_CLASS_ALLOC = 5,
    GPU_CLASS_FREE = 6,
    GPU_CLASS_SYNC = 7,
    GPU_CLASS_COLLECTIVE = 8, /* NCCL / RCCL */
    GPU_CLASS_GETFUNC = 9,    /* cuModuleGetFunction & co: learns function handle -> kernel name */
    GPU_CLASS_OTHER = 10,     /* counted, no payload (group start/end, stream wait) */
    GPU_CLASS_FUNC_ALIAS = 11,/* cuKernelGetFunction: a second handle for an already named kernel */
    GPU_CLASS_HANDOFF = 12,   /* a call that hands GPU work to other threads (autograd backward ...): its
                                 call path becomes the origin of what those threads launch meanwhile */
    GPU_CLASS_NODE_CREATED = 13, /* returns the sequence number of a work item being created (PyTorch's
                                    at::sequence_number::get_and_increment for an autograd node): the
                                    creating thread's call path is kept under that number */
    GPU_CLASS_NODE_RUN = 14,  /* runs one work item (Engine::evaluate_function): the object_slot argument
                                 points at it, its sequence number at node_off; what the thread launches
                                 meanwhile is charged to the path that created the item */
};

/* How to read the arguments, by x86-64 SysV "eightbyte" slot: slots 0-5 are rdi rsi rdx rcx r8 r9,
 * slot 6 and up are on the stack at entry (rsp + 8 * (slot - 5)). A struct passed by value takes as
 * many slots as it has eightbytes (dim3: two). GPU_NO_SLOT = not present. */
#define GPU_NO_SLOT 0xff
enum gpu_arg_layout {
    GPU_LAYOUT_NONE = 0,
    GPU_LAYOUT_LAUNCH_DIM3 = 1,    /* cudaLaunchKernel, hipLaunchKernel: f, dim3 grid, dim3 block, args, smem, stream */
    GPU_LAYOUT_LAUNCH_SCALARS = 2, /* cuLaunchKernel, hipModuleLaunchKernel: f, gx, gy, gz, bx, by, bz, smem, stream */
    GPU_LAYOUT_LAUNCH_CU_EX = 3,   /* cuLaunchKernelEx(const CUlaunchConfig *, f, ...) */
    GPU_LAYOUT_LAUNCH_RT_EX = 4,   /* cudaLaunchKernelExC(const cudaLaunchConfig_t *, f, ...) */
};

struct gpu_api_spec {
    __u16 api_id;        /* index into the user-space API table */
    __u8 cls;            /* enum gpu_api_class */
    __u8 layout;         /* enum gpu_arg_layout (launches) */
    __u8 object_slot;    /* kernel handle / stub, graph exec, or (GETFUNC) the output pointer */
    __u8 bytes_slot;     /* byte count (or element count, see bytes_scale) */
    __u8 kind_slot;      /* cudaMemcpyKind / hipMemcpyKind argument */
    __u8 stream_slot;
    __u8 name_slot;      /* GETFUNC: the const char * name */
    __u8 dtype_slot;     /* collectives: ncclDataType_t, turns a count into bytes */
    __u8 bytes_mul_slot; /* a second factor of the byte count (2D copies: width x height) */
    __u8 bytes_scale;    /* multiplier for bytes_slot (memsetD16: 2, D32: 4) */
    __u8 fixed_kind;     /* copy direction implied by the API's name (GPU_COPY_*) */
    __u8 flags;          /* GPU_SPEC_F_* */
    __u8 node_off;       /* NODE_RUN: offset of the sequence number in the work item */
    __u16 proc_slot;     /* the process's slot in gpu_ranges (an array: no hash look-up per call) */
};

/* Counted at entry, with no return probe: what sampled mode does for calls that return at once
 * (launches, async copies): a return probe costs as much again as the entry probe. */
#define GPU_SPEC_F_ENTRY_ONLY (1u << 0)
/* A driver entry point: most of its calls come from the runtime (nested, left at once), so its entry reads
 * just the words it needs, not the native walk's first window as well (gpu_read_entry_words). */
#define GPU_SPEC_F_DRIVER (1u << 1)

/* The executable ranges of one process's GPU libraries: a call whose caller is in one of them was
 * made by the runtime itself (cudaLaunchKernel calling cuLaunchKernel) and is not counted twice. In the
 * slot its specs name (gpu_api_spec.proc_slot), one of GPU_PROCS_MAX per program. */
#define GPU_PROCS_MAX 1024
#define GPU_MAX_RANGES 8
#define GPU_CONT_RANGES 8
#define GPU_NO_CONTINUE 0xffffffffu  /* gpu_capture_path's slot where no walk is continued */
struct gpu_ranges {
    __u64 start[GPU_MAX_RANGES];
    __u64 end[GPU_MAX_RANGES];
    /* Sampled mode: when the process's next call gets its call path (BPF's clock). The process's own, not
     * the CPU's: processes on one program (probes/program_share.py) do not take each other's samples. */
    __u64 next_sample_ns;
    /* The executable ranges of the process's GEMM and convolution libraries (cuBLAS, cuDNN, ...:
     * host/gpu_runtimes.CONTINUED_LIBRARY): a probed call made from one of them whose frame-pointer walk is lost
     * goes on with .eh_frame (GPU_FP_CONTINUE); the other calls (PyTorch's elementwise launches) keep the
     * frame-pointer walk. */
    __u64 cont_start[GPU_CONT_RANGES];
    __u64 cont_end[GPU_CONT_RANGES];
};

enum gpu_copy_kind {
    GPU_COPY_H2H = 0, GPU_COPY_H2D = 1, GPU_COPY_D2H = 2, GPU_COPY_D2D = 3, GPU_COPY_DEFAULT = 4,
    GPU_COPY_PEER = 5, GPU_COPY_UNKNOWN = 255,
};

/* Where an API's entry point sits in one process: what the entry probe looks up by its address. */
struct gpu_addr_key {
    __u32 pid;
    __u32 pad;
    __u64 addr;
};

/* One aggregation bucket. */
struct gpu_key {
    __u32 pid;
    __u32 tid;
    __u64 user_stack;      /* native stack id (0: not sampled) */
    __u64 py_stack;        /* Python stack id (0: none or not sampled) */
    __u64 object;          /* kernel stub / function handle / graph exec / collective comm */
    __u64 stream;
    __u32 grid[3];
    __u32 block[3];
    __u32 shared_mem;
    __u16 api_id;
    __u8 kind;             /* copy direction for memcpy */
    __u8 flags;            /* GPU_KEY_F_* */
    /* Work launched by another thread while this process's hand-off call ran (0: none) */
    __u64 origin_user_stack;
    __u64 origin_py_stack;
    __u32 origin_tid;
    __u16 origin_label;    /* the hand-off point's index in the user-space label table */
    __u16 pad;
    __u64 origin_node;     /* NODE_RUN: the work item's type (its C++ vtable pointer; 0: none) */
};

/* The last entry-only call of a thread (sampled mode), for a join that runs inside it (GPU_LAST_CALL). */
struct gpu_last_call {
    struct gpu_key key;
    __u64 entry_ns;
};

/* A correlation id CUPTI gave a call the API probes do not see (a runtime linked statically into cuDNN or
 * cuBLAS), parked per thread until the probed driver call that this runtime call makes (GPU_LAST_CALL). */
/* How long after a call's entry a CUPTI callback on the same thread is taken to belong to it. */
#define GPU_JOIN_WINDOW_NS 1000000

struct gpu_orphan {
    __u32 pid;
    __u32 correlation;
    __u64 time_ns;
};
struct gpu_corr_key {
    __u32 pid;
    __u32 correlation;
};

/* The hand-off call running in a process (one at a time per process; a later one replaces it). */
struct gpu_origin {
    __u64 user_stack;
    __u64 py_stack;
    __u64 entry_sp;
    __u32 tid;
    __u16 label;
    __u16 pad;
};

/* A work item's creation (GPU_CLASS_NODE_CREATED), by process and sequence number. Sequence numbers
 * count per creating thread; one process creating items on two threads at once may mix them up. */
struct gpu_node_key {
    __u32 pid;
    __u32 pad;
    __u64 seq;
};
struct gpu_node_origin {
    __u64 user_stack;
    __u64 py_stack;
    __u32 tid;
    __u32 pad;
};

/* The work item a thread is running (GPU_CLASS_NODE_RUN), from entry to return. */
struct gpu_node_run {
    __u64 user_stack;      /* the creating thread's call path */
    __u64 py_stack;
    __u64 node_type;       /* vtable pointer */
    __u64 entry_sp;
    __u32 tid;             /* the creating thread */
    __u16 label;
    __u16 pad;
};

/* Type names of work items, read through the C++ ABI's type_info (vtable[-1] -> name) at first sight. */
#define GPU_TYPE_NAME_LEN 128
struct gpu_type_name {
    char name[GPU_TYPE_NAME_LEN];
};

/* The name of a thread that made a GPU call, kept at its first call with a captured path: threads that
 * live shorter than the daemon's periodic look at /proc (autograd's per-call workers) keep their names. */
#define GPU_COMM_LEN 16
struct gpu_comm {
    char comm[GPU_COMM_LEN];
};

/* A native stack by frame pointers, kept by its hash (the stack's id) in gpu_stacks: the ip at the probe,
 * then one return address per frame. The walk stops at a frame pointer that cannot be one of this stack's
 * frames (not above the last frame, not 8-aligned, or more than GPU_FP_SPAN above the stack pointer):
 * such a value is a register that a function built without frame pointers used for data, and reading
 * it would fault, which costs more than the rest of the walk (the kernel's own walk reads it: about
 * 0.5 us a stack). */
#define GPU_FP_DEPTH 128              /* frames kept (a power of two: indexes are masked with it) */
#define GPU_FP_SPAN (64ULL << 20)     /* bytes of stack a walk may cover */
#define GPU_FP_F_TRUNCATED (1u << 0) /* the walk's bound ended it: the outermost frames are missing */
struct gpu_fp_stack {
    __u32 depth;                      /* ips kept */
    __u32 flags;                      /* GPU_FP_F_* */
    __u64 cont;                       /* GPU_FP_CONTINUE: the .eh_frame walk from where this one was lost (its
                                         id in native_stacks, whose first ip is this one's last); 0: none */
    __u64 ip[GPU_FP_DEPTH];
};

#define GPU_KEY_F_SAMPLED   (1u << 0)  /* the call path was captured for this call */
#define GPU_KEY_F_STACK_LOST (1u << 1) /* capture asked for, but the native stack could not be recorded */

struct gpu_val {
    __u64 calls;
    __u64 time_ns;         /* time inside the API call, of the calls timed but the first */
    __u64 bytes;
    __u64 timed;           /* calls whose time is in time_ns (all but launches left untimed: gpu_config) */
    __u64 first_ns;        /* the first timed call's time, apart: a path's first call is often its slowest (the
                            * runtime's lazy loading), and scaled with 1 launch in 8 it would count 8 times */
};

/* A call in flight on one thread, from its entry probe to its return probe. */
struct gpu_inflight {
    struct gpu_key key;
    __u64 start_ns;
    __u64 entry_sp;        /* stack pointer at entry: tells nested and stale entries apart */
    __u64 bytes;
    __u64 out_ptr;         /* GETFUNC: where the handle will be written */
    __u64 name_ptr;        /* GETFUNC: the kernel name; FUNC_ALIAS: the handle that has a name */
    __u8 cls;
    __u8 pad[7];
};

#define GPU_NAME_LEN 256
struct gpu_fn_key {
    __u32 pid;
    __u32 pad;
    __u64 handle;
};
struct gpu_fn_name {
    char name[GPU_NAME_LEN];
};

/* The first words of a kernel handle and the strings they point to, copied when the handle is first
 * launched: runtimes keep the kernel's (mangled) name next to the handle (the CUDA 13 runtime: a
 * pointer at +8), and the copy names it even if the process is gone by the time the profile is built. */
#define GPU_OBJ_WORDS 4
#define GPU_OBJ_STR 256  /* a prefix of long names: user space reads them whole while the process lives */
struct gpu_obj_info {
    __u64 words[GPU_OBJ_WORDS];
    char strs[GPU_OBJ_WORDS * GPU_OBJ_STR];  /* flat: bcc's Python side misreads 2D arrays */
};

enum gpu_stat {
    GPU_STAT_CALLS = 0,        /* API calls of target processes seen by the entry probe */
    GPU_STAT_NESTED,           /* calls made inside another probed call (not counted twice) */
    GPU_STAT_STALE_INFLIGHT,   /* an entry without its return (longjmp, thread killed): replaced */
    GPU_STAT_NO_RETURN,        /* a return with no matching entry */
    GPU_STAT_MAP_FULL,         /* aggregation map full: call dropped */
    GPU_STAT_STACK_LOST,       /* call path asked for but the native stack was not recorded */
    GPU_STAT_SAMPLED,          /* calls whose call path was captured */
    GPU_STAT_NAMES_LEARNED,    /* function handle -> name pairs recorded */
    GPU_STAT_OBJECTS,          /* distinct kernel handles seen (their first words copied) */
    GPU_STAT_HANDOFFS,         /* hand-off calls (autograd backward ...) entered */
    GPU_STAT_HANDED_OFF,       /* calls made by worker threads while a hand-off call ran */
    GPU_STAT_NODES_CREATED,    /* work items whose creating call path was kept */
    GPU_STAT_NODES_RUN,        /* work items run whose creation was seen */
    GPU_STAT_NODES_UNKNOWN,    /* work items run whose creation was not seen (before attach, evicted, none) */
    GPU_STAT_NODE_CALLS,       /* calls charged to the call path that created the running work item */
    GPU_STAT_ADOPTED,          /* device-activity ids of unprobed runtime calls joined to their driver call */
    GPU_STAT_UNTIMED,          /* launches counted at entry with their return left alone (api_time_every) */
    GPU_STAT__COUNT,
};

/* Per-capture settings, written by user space into gpu_config[0]. */
struct gpu_config {
    __u64 sample_interval_ns;  /* per process, capture the call path of the first call after each interval
                                  (0: every call, "exact" mode) */
    __u64 api_time_every;      /* under uprobe sessions: time the first launch of each call path and every
                                  this-many-th after it (a power of two); the others skip their return probe.
                                  0 or 1: every call is timed */
};

#endif

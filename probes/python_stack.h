/* Structs shared between the CPython stack walker (python_stack.bpf.h) and its loader
 * (python_stack.py, which mirrors them with ctypes; tests/unit/python/test_abi.py checks the two
 * agree). Compiles in user space too: only <linux/types.h> types. */
#ifndef DEEPCTX_PYTHON_STACK_H
#define DEEPCTX_PYTHON_STACK_H

#include <linux/types.h>

#ifndef PY_MAX_DEPTH
#define PY_MAX_DEPTH 128 /* Python frames kept per stack (innermost ones) */
#endif
#ifndef PY_RETRY_NS
#define PY_RETRY_NS 500000000ull /* a thread without a thread state is looked for again this often */
#endif
#ifndef PY_SEARCH_RETRY_NS
/* ... where the walker looks for it itself (py_proc.threads_head set): a thread caught before its state was
 * bound to it gets its Python frames this soon after */
#define PY_SEARCH_RETRY_NS 10000000ull
#endif
#ifndef PY_SEARCH_MAX
#define PY_SEARCH_MAX 32 /* thread states a search looks at, newest first (new threads are pushed at the head) */
#endif

/* The thread state's id and frame fields are read in one go, fewer bytes than this from the first to the
 * end of the last (host/python/layouts.py: TSTATE_READ_MAX, PyLayout.check refuses a layout past it). */
#define PY_TSTATE_SPAN 256

/* py_proc.cframe_current of versions whose thread state points at the frame itself. */
#define PY_NO_OFFSET 0xffffffffu

/* py_stack.flags */
#define PYSTACK_F_TRUNCATED (1u << 0)   /* more than PY_MAX_DEPTH frames (or PY_MAX_WALK steps): the outermost are missing */
#define PYSTACK_F_TSTATE_MISS (1u << 1) /* thread not in py_threads (or its entry was stale) */
#define PYSTACK_F_READ_ERROR (1u << 2)  /* a user memory read failed: the outer part is missing */
#define PYSTACK_F_MAP_FULL (1u << 3)    /* py_stacks is full: the stack was not stored */

/* py_stack.frame_flags[i] */
#define PYFRAME_F_ENTRY (1u << 0)     /* first frame of a native _PyEval_EvalFrameDefault activation */
#define PYFRAME_F_GENERATOR (1u << 1) /* frame owned by a generator/coroutine (never "incomplete") */

/* Per-cpu counters in py_stats (indices). */
#define PYSTACK_STAT_CAPTURES 0    /* captures for a pid with an entry in py_procs */
#define PYSTACK_STAT_STACKS 1      /* captures that returned a stack id */
#define PYSTACK_STAT_TSTATE_MISS 2 /* thread without (valid) thread state: user space refreshes */
#define PYSTACK_STAT_TRUNCATED 3
#define PYSTACK_STAT_READ_ERROR 4
#define PYSTACK_STAT_MAP_FULL 5
#define PYSTACK_STAT_NEW_LOST 6 /* new stack ids that did not fit in py_new_stacks */
#define PYSTACK_STAT_FOUND 7    /* threads whose state the walker found itself, in the interpreter's list */
#define PYSTACK_STAT_FOUND_LOST 8 /* entries the walker wrote that py_found could not announce (it was full) */
#define PYSTACK_STAT_RAW_HITS 9 /* captures whose raw frames were this CPU's last walk's (GPU calls) */
#define PYSTACK_STAT_COUNT 10

/* Everything the walker needs to know about one process's interpreter (py_procs value, in the slot its
 * threads' entries name).
 * Per-version differences are data (offsets and masks), not branches: the walk loop stays
 * branch-free on them, which keeps it cheap for the verifier at any depth. */
struct py_proc {
	__u32 version;          /* (major << 8) | minor, e.g. 0x030b */
	__u32 tstate_ident;     /* PyThreadState field compared with py_thread.ident (native_thread_id; 3.10: thread_id) */
	__u32 tstate_frame;     /* PyThreadState: cframe (3.11, 3.12), current_frame (3.13+), frame (3.10) */
	__u32 cframe_current;   /* _PyCFrame.current_frame, PY_NO_OFFSET when tstate_frame is the frame itself */
	__u32 frame_code;       /* f_code / f_executable */
	__u32 frame_previous;   /* previous / f_back */
	__u32 frame_instr;      /* prev_instr / instr_ptr (pointer), or f_lasti (int, 3.10) */
	__u32 frame_size;       /* bytes read per frame: covers every frame_* field (8 bytes at frame_instr), <= 128 */
	__u32 instr_is_pointer; /* 1: frame_instr points into the code object's instructions; 0: it is an index */
	__u32 frame_owner;      /* owner (char); read through owner_mask */
	__u32 owner_mask;       /* 0xff, or 0 where frames have no owner (3.10) */
	__u32 owner_shim;       /* owner values >= this are C-stack shim frames (3.12+: 3), else 256 */
	__u32 owner_generator;  /* FRAME_OWNED_BY_GENERATOR, or 256 */
	__u32 frame_is_entry;   /* is_entry (bool, 3.11); read through entry_mask */
	__u32 entry_mask;       /* 0xff on 3.11, else 0 */
	__u32 entry_always;     /* 1 where every frame has its own eval activation (3.10), else 0 */
	__u32 code_adaptive;    /* offset of co_code_adaptive (3.11+): instructions start there */
	__u32 code_read;        /* code object bytes [code_read, code_read + code_read_size) hold the tag fields */
	__u32 code_read_size;   /* <= 128 */
	__u32 code_firstlineno; /* offset of co_firstlineno (int) relative to code_read */
	__u32 code_name;        /* offset of co_name (pointer) relative to code_read */
	__u32 pid;              /* the process the entry is for (0: a free slot) */
	__u32 tstate_next;      /* PyThreadState.next */
	__u32 ident_tid;        /* PY_NO_OFFSET: the ident is the thread's id; else where the struct pthread the ident
	                         * points at holds the thread's id (3.10: glibc's tid) */
	__u64 threads_head;     /* address of the main interpreter's thread list head; 0: the walker does not search */
	__u64 pidns_dev;        /* the process's pid namespace (stat of /proc/PID/ns/pid): thread ids in the */
	__u64 pidns_ino;        /* interpreter's list are as it sees them; 0: the initial namespace's */
};

/* py_threads value: the PyThreadState of a native thread id (host tid). */
struct py_thread {
	__u64 tstate; /* 0: no thread state when last looked (a native thread, or one not started yet) */
	__u64 ident;  /* tstate != 0: the u64 expected at tstate + tstate_ident (detects a freed tstate);
	               * tstate == 0: bpf_ktime_get_ns() after which a sample looks for it again */
	__u32 proc_slot; /* its process's entry in py_procs */
	__u32 searches;  /* tstate == 0: the walker's searches that did not find it (a miss is reported at 1, 2, 4 ...) */
};

/* py_found value: a thread the walker wrote an entry for, and its OS name then (the thread may be gone before
 * deepctxd reads /proc). */
struct py_found_thread {
	__u32 pid;
	char comm[16];
};

/* One Python frame as the walker saw it. */
struct py_frame {
	__u64 code;  /* PyCodeObject address */
	__u32 tag;   /* py_code_tag(co_firstlineno, co_name): a reused address gets a different tag */
	__s32 lasti; /* index (in code units) of the instruction being executed; -1 before the first */
};

/* An interned Python stack (py_stacks value), innermost frame first. */
struct py_stack {
	__u32 depth;
	__u32 flags; /* PYSTACK_F_* */
	struct py_frame frames[PY_MAX_DEPTH];
	__u8 frame_flags[PY_MAX_DEPTH]; /* PYFRAME_F_* */
};

/* py_new_stacks element: a stack id stored for the first time, and who it was taken from. */
struct py_new_stack {
	__u64 id;
	__u32 pid;
	__u32 tid;
};

/* The validation tag: user space computes the same from the code object it reads. */
static inline __attribute__((always_inline)) __u32 py_code_tag(__u32 firstlineno, __u64 name)
{
	return (firstlineno * 0x9E3779B1u) ^ (__u32)(name >> 4) ^ (__u32)(name >> 36);
}

#endif /* DEEPCTX_PYTHON_STACK_H */

/* Native unwinder: structs shared by the BPF walker (native_unwind.bpf.h) and its loader
 * (native_unwind.py, whose ctypes mirrors a test checks against this file).
 *
 * Unwind tables come from .eh_frame / .debug_frame, compiled in user space (deepctx.host.unwind)
 * into rows {pc, info}: a row holds from its pc up to the next row's pc, and `info` indexes a small
 * deduplicated array of rules (x86-64 code has a few hundred distinct ones: rsp+8, rsp+16, rbp+16 ...),
 * so a row costs 8 bytes. Rows of every loaded file sit in one array map, each file a sorted range.
 * A page index per file (native_pages: for each 2^NATIVE_PAGE_SHIFT bytes of the file's code, the row
 * covering the page's first byte) narrows each lookup to the few adjacent rows of one page.
 *
 * Architecture: the rules name the stack pointer, the frame pointer (rbp / x29) and the return address
 * generically. arm64 would add the link register to native_regs (RA rule NATIVE_RA_LR at function
 * entry), strip pointer authentication bits from return addresses, and use x29 as the frame pointer.
 */
#ifndef DEEPCTX_NATIVE_UNWIND_H
#define DEEPCTX_NATIVE_UNWIND_H

#include <linux/types.h>

#ifndef NATIVE_MAX_DEPTH
#define NATIVE_MAX_DEPTH 127 /* frames kept per stack */
#endif
#ifndef NATIVE_MAX_MAPPINGS
#define NATIVE_MAX_MAPPINGS 1024 /* executable file mappings per process */
#endif
#ifndef NATIVE_PAGE_SHIFT
#define NATIVE_PAGE_SHIFT 9 /* granule of the page index */
#endif

/* CFA (canonical frame address: the caller's stack pointer) rules. */
#define NATIVE_CFA_NONE 0        /* no unwind info for this pc: fall back to frame pointers */
#define NATIVE_CFA_SP 1          /* CFA = sp + cfa_off */
#define NATIVE_CFA_FP 2          /* CFA = fp + cfa_off */
#define NATIVE_CFA_PLT 3         /* x86-64 PLT: CFA = sp + cfa_off + ((pc & 15) >= cfa_param ? 8 : 0) */
#define NATIVE_CFA_DEREF_FP 4    /* CFA = *(fp + cfa_off): stack realignment (gcc's DRAP) */
#define NATIVE_CFA_END 5         /* outermost frame: the return address is undefined */
#define NATIVE_CFA_UNSUPPORTED 6 /* another register or expression: the walk stops here */

/* Frame pointer rules: how to restore the caller's fp. */
#define NATIVE_FP_SAME 0  /* unchanged */
#define NATIVE_FP_CFA 1   /* saved at CFA + fp_off */
#define NATIVE_FP_FP 2    /* saved at fp + fp_off (DW_CFA_expression breg(fp), with DRAP) */
#define NATIVE_FP_LOST 3  /* undefined or not expressible: unknown (0) in the caller */

/* Return address rules. */
#define NATIVE_RA_CFA 0   /* saved at CFA + ra_off (x86-64: always CFA - 8) */
#define NATIVE_RA_LR 1    /* still in the link register (arm64, not walked yet) */

/* Flags of a captured stack. */
#define NATIVE_F_TRUNCATED (1u << 0)   /* NATIVE_MAX_DEPTH reached with frames left */
#define NATIVE_F_NO_TABLE (1u << 1)    /* a frame had no table row: frame pointers were used for it */
#define NATIVE_F_READ_ERROR (1u << 2)  /* reading the stack failed: the walk stopped there */
#define NATIVE_F_UNSUPPORTED (1u << 3) /* a rule the walker cannot evaluate: the walk stopped there */
#define NATIVE_F_NO_PROC (1u << 4)     /* the pid has no mapping table: frame pointers only */
#define NATIVE_F_COMPLETE (1u << 5)    /* reached the outermost frame */
#define NATIVE_F_BAD_FRAME (1u << 6)   /* the stack pointer did not grow: stopped to avoid garbage */
#define NATIVE_F_KERNEL_REGS (1u << 7) /* sampled in kernel mode: started from the task's user registers */

/* Per-cpu counters: native_unwind_stats[0].v[NATIVE_STAT_*]. */
#define NATIVE_STAT_CALLS 0        /* native_stack_capture calls */
#define NATIVE_STAT_STORED 1       /* stacks returned with a non-zero id */
#define NATIVE_STAT_FRAMES 2       /* frames in those stacks */
#define NATIVE_STAT_COMPLETE 3     /* stacks that reached the outermost frame */
#define NATIVE_STAT_TRUNCATED 4
#define NATIVE_STAT_NO_PROC 5
#define NATIVE_STAT_FP_FRAMES 6    /* frames unwound with frame pointers (no table row) */
#define NATIVE_STAT_READ_ERROR 7
#define NATIVE_STAT_UNSUPPORTED 8
#define NATIVE_STAT_BAD_FRAME 9
#define NATIVE_STAT_STORE_FAILED 10 /* native_stacks full */
#define NATIVE_STAT_MEMO_HITS 11   /* memoized walks (native_stack_capture_memo) reused, every word read again equal */
#define NATIVE_STAT_MEMO_MISSES 12 /* memoized walks walked: no memo for the registers, or a word or the tables changed */
#define NATIVE_STAT_COUNT 13

struct native_unwind_counters {
	__u64 v[NATIVE_STAT_COUNT];
};

struct native_unwind_row {
	__u32 pc;   /* relative to the file's table base (native_mapping.bias) */
	__u32 info; /* index into native_infos */
};

struct native_unwind_info {
	__u8 cfa_rule;  /* NATIVE_CFA_* */
	__u8 fp_rule;   /* NATIVE_FP_* */
	__u8 ra_rule;   /* NATIVE_RA_* */
	__u8 cfa_param; /* NATIVE_CFA_PLT: the pc & 15 threshold */
	__s32 cfa_off;
	__s16 fp_off;
	__s16 ra_off;
};

/* One executable file mapping of a process. */
struct native_mapping {
	__u64 start; /* runtime addresses [start, end) */
	__u64 end;
	__u64 bias;        /* row pc = runtime pc - bias */
	__u32 pages_start; /* first entry of the file's page index in native_pages */
	__u32 pages_len;   /* pages + 1 (the last entry bounds the last page); 0: no table (frame pointers) */
};

/* A process's executable mappings, sorted by start. */
struct native_proc {
	__u32 len;
	__u32 generation; /* bumped by user space on every rewrite (debugging aid) */
	struct native_mapping maps[NATIVE_MAX_MAPPINGS];
};

/* User-mode registers the walk starts from. */
struct native_regs {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u64 from_return; /* ip is a return address (a walk taken over from another): its call is at ip - 1 */
};

/* A memoized walk (native_stack_capture_memo; BPF only, user space never reads it). A walk's result is a
 * function of its start registers, of the tables (native_tables_gen names their state) and of the words it
 * read: the memo keeps the words' addresses and values, and a later walk from the same registers in the same
 * generation whose words all read back equal is the same walk, its id reused without walking. */
#ifndef NATIVE_MEMO_WORDS
#define NATIVE_MEMO_WORDS 64  /* words a memoized walk may read (a power of two); a walk that reads more is not kept */
#endif
#ifndef NATIVE_MEMO_WIN
#define NATIVE_MEMO_WIN 8192  /* bytes they may span (a power of two): read back in one copy */
#endif
#ifndef NATIVE_MEMO_WAYS
#define NATIVE_MEMO_WAYS 8    /* memos per CPU (a power of two), by a hash of the start registers */
#endif
struct native_memo {
	__u64 stamp; /* 0: unusable (being written, or the walk was not kept); else the token of the walk that wrote it */
	__u32 pid;
	__u32 n;     /* words read (the walk logs each: addr, val) */
	__u64 ip;    /* the start registers */
	__u64 sp;
	__u64 bp;
	__u64 gen;   /* native_tables_gen when the walk began */
	__u64 cont;  /* the walk's id in native_stacks */
	__u64 base;  /* the words span [base, base + len) */
	__u64 len;
	__u64 addr[NATIVE_MEMO_WORDS];
	__u64 val[NATIVE_MEMO_WORDS];
};

/* A CPU's copy of a memo's words read back, and the token of the last memoized walk it began. */
struct native_memo_win {
	__u64 seq;
	__u8 b[NATIVE_MEMO_WIN + 8];
};

/* A captured stack, stored in native_stacks under its id (a hash of the IPs, length and flags). */
struct native_stack {
	__u32 len;
	__u32 flags; /* NATIVE_F_* */
	__u64 ips[NATIVE_MAX_DEPTH]; /* leaf first; ips[0] is the exact pc, the others return addresses */
};

#endif

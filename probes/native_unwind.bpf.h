/* Native stack walker for code built without frame pointers (bcc; pasted into the composed program).
 *
 *   __u32 flags;
 *   __u64 id = native_stack_capture(regs, pid, &flags, slot);   regs: &ctx->regs of a perf event, or a
 *                                                                uprobe's ctx (user registers)
 *   __u64 id = native_stack_capture_regs(&native_regs, pid, &flags, max_depth, slot);
 *
 * slot: the caller's context, WALK_SLOT_TASK or WALK_SLOT_IRQ (walk_slots.bpf.h), a constant at each call.
 *
 * walks the user stack of the current task with the unwind tables user space (native_unwind.py) wrote
 * for the pid's executable mappings, stores the IPs (leaf first) in native_stacks under id, a hash of
 * the stack, and returns id (0 on failure); flags get NATIVE_F_*. Pcs with no table (JIT code, files
 * without CFI) are unwound with frame pointers. A sample taken in kernel mode starts from the task's
 * saved user registers (bpf_task_pt_regs). Every loop is bounded: no tail calls (bcc 0.26 cannot
 * relocate bpf_loop callbacks), and the verifier walks about 2.6k instructions per frame of
 * NATIVE_MAX_DEPTH (127 frames: ~330k of the 1M limit; 256 frames: ~690k).
 *
 * Settings (-D): NATIVE_MAX_DEPTH, NATIVE_MAX_MAPPINGS, NATIVE_PAGE_SHIFT (native_unwind.h), and the
 * map sizes below, which the loader derives from the tables it built.
 */
#ifndef DEEPCTX_NATIVE_UNWIND_BPF_H
#define DEEPCTX_NATIVE_UNWIND_BPF_H

#include <uapi/linux/ptrace.h>

#include "native_unwind.h"
#include "walk_slots.bpf.h"

#if NATIVE_MAX_MAPPINGS & (NATIVE_MAX_MAPPINGS - 1)
#error "NATIVE_MAX_MAPPINGS must be a power of two (indices are masked for the verifier)"
#endif

#ifndef NATIVE_MAX_ROWS
#define NATIVE_MAX_ROWS (1 << 20)
#endif
#ifndef NATIVE_MAX_INFOS
#define NATIVE_MAX_INFOS 8192
#endif
#ifndef NATIVE_MAX_PROCS
#define NATIVE_MAX_PROCS 64
#endif
#ifndef NATIVE_MAX_STACKS
#define NATIVE_MAX_STACKS 16384
#endif
#ifndef NATIVE_MAX_PAGES
#define NATIVE_MAX_PAGES (1 << 18)
#endif
/* Binary search steps: rows are at least a byte apart, so a page holds at most 2^NATIVE_PAGE_SHIFT + 1
 * candidate rows; mappings: enough for NATIVE_MAX_MAPPINGS. */
#define NATIVE_ROW_SEARCH_STEPS (NATIVE_PAGE_SHIFT + 1)
#ifndef NATIVE_MAP_SEARCH_STEPS
#define NATIVE_MAP_SEARCH_STEPS 11
#endif

/* Mappable: the daemon writes a file's rows and page index with a memory copy, not map updates.
 * NATIVE_SHARED_TABLES: the three arrays are the daemon's, exported once by probes/unwind_maps.py
 * (native_unwind_maps.bpf.h) and shared by every program it loads, so a file's rows go into the kernel
 * once per daemon and the 144 MiB they take are held once, not by each loaded program. */
#ifdef NATIVE_SHARED_TABLES
BPF_TABLE("extern", int, struct native_unwind_row, native_rows, NATIVE_MAX_ROWS);
BPF_TABLE("extern", int, __u32, native_pages, NATIVE_MAX_PAGES);
BPF_TABLE("extern", int, struct native_unwind_info, native_infos, NATIVE_MAX_INFOS);
#else
BPF_F_TABLE("array", int, struct native_unwind_row, native_rows, NATIVE_MAX_ROWS, BPF_F_MMAPABLE);
BPF_F_TABLE("array", int, __u32, native_pages, NATIVE_MAX_PAGES, BPF_F_MMAPABLE);
BPF_ARRAY(native_infos, struct native_unwind_info, NATIVE_MAX_INFOS);
#endif
BPF_HASH(native_procs, __u32, struct native_proc, NATIVE_MAX_PROCS);
BPF_HASH(native_stacks, __u64, struct native_stack, NATIVE_MAX_STACKS);
BPF_PERCPU_ARRAY(native_scratch, struct native_stack, WALK_SLOTS); /* walk_slots.bpf.h */
BPF_PERCPU_ARRAY(native_unwind_stats, struct native_unwind_counters, 1);

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
static __always_inline void native_stat_add(__u32 idx, __u64 n)
{
	__u32 zero = 0;
	struct native_unwind_counters *c = native_unwind_stats.lookup(&zero);
	if (c && idx < NATIVE_STAT_COUNT)
		c->v[idx] += n;
}

/* Last mapping starting at or below pc (branch-free lower bound: the verifier walks one path). */
static __always_inline struct native_mapping *native_find_mapping(struct native_proc *proc, __u64 pc)
{
	__u32 len = proc->len;
	__u32 base = 0;
	if (len == 0 || len > NATIVE_MAX_MAPPINGS)
		return NULL;
	for (int i = 0; i < NATIVE_MAP_SEARCH_STEPS; i++) {
		if (len <= 1)
			break;
		__u32 half = len >> 1;
		__u32 mid = (base + half) & (NATIVE_MAX_MAPPINGS - 1); /* base + half < len <= max */
		/* user addresses are < 2^63: the sign of the difference says pc < start */
		__u64 below = (pc - proc->maps[mid].start) >> 63;
		base += (__u32)((below - 1) & half);
		len -= half;
	}
	struct native_mapping *m = &proc->maps[base & (NATIVE_MAX_MAPPINGS - 1)];
	if (pc < m->start || pc >= m->end)
		return NULL;
	return m;
}

/* The rule for pc in mapping m, or NULL when the file has no row covering it. */
static __always_inline struct native_unwind_info *native_find_info(struct native_mapping *m, __u64 pc)
{
	__u64 x = pc - m->bias;
	__u64 page = x >> NATIVE_PAGE_SHIFT;
	if (page + 1 >= m->pages_len) /* also x < 0 (wrapped) and no table */
		return NULL;
	__u32 pi = m->pages_start + (__u32)page;
	__u32 *first = native_pages.lookup(&pi);
	pi++;
	__u32 *last = native_pages.lookup(&pi);
	if (!first || !last || *last < *first)
		return NULL;
	/* the answer is in rows [*first, *last]: the rows covering the page's first and the next page's first byte */
	__u32 base = *first;
	__u32 len = *last - *first + 1;
	for (int i = 0; i < NATIVE_ROW_SEARCH_STEPS; i++) {
		if (len <= 1)
			break;
		__u32 half = len >> 1;
		__u32 mid = base + half;
		struct native_unwind_row *r = native_rows.lookup(&mid);
		if (!r)
			return NULL;
		__u64 below = (x - (__u64)r->pc) >> 63; /* both < 2^32 */
		base += (__u32)((below - 1) & half);
		len -= half;
	}
	struct native_unwind_row *row = native_rows.lookup(&base);
	if (!row || row->pc > x)
		return NULL;
	__u32 ii = row->info;
	struct native_unwind_info *info = native_infos.lookup(&ii);
	if (!info || info->cfa_rule == NATIVE_CFA_NONE)
		return NULL;
	return info;
}

static __always_inline __u64 native_mix(__u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* Walks from user registers r; see the top of this file. */
static __always_inline __u64 native_stack_capture_regs(struct native_regs *r, __u32 pid, __u32 *flags,
						      const int max_depth, const __u32 walk_slot)
{
	__u32 zero = 0, scratch_slot = walk_slot;
	__u32 n = 0;
	__u64 fp_frames = 0;
	__u64 h = 0x9e3779b97f4a7c15ULL;

	native_stat_add(NATIVE_STAT_CALLS, 1);
	struct native_stack *st = native_scratch.lookup(&scratch_slot);
	if (!st)
		return 0;
	/* Flags live in the scratch map value, not in a register: the verifier does not track values in
	 * map memory, so a caller branching on them cannot make it tell apart (and re-verify) every
	 * combination of flags that the loop's exits produce. */
	st->flags = *flags & NATIVE_F_KERNEL_REGS;
	struct native_proc *proc = native_procs.lookup(&pid);
	if (!proc)
		st->flags |= NATIVE_F_NO_PROC;

	__u64 ip = r->ip, sp = r->sp, bp = r->bp;
	struct native_mapping *m = NULL; /* the previous frame's: callers are often in the same file */
	int depth;
	/* max_depth: a constant at each call site (NATIVE_MAX_DEPTH, or less for a walk taken over from another),
	 * which the compiler folds into the bound the verifier sees */
	for (depth = 0; depth < NATIVE_MAX_DEPTH && depth < max_depth; depth++) {
		st->ips[depth] = ip;
		n = depth + 1;
		h = (h ^ ip) * 0x100000001b3ULL;

		/* A return address may point past a noreturn call at the end of its function: look up the call. */
		__u64 pc = depth || r->from_return ? ip - 1 : ip;
		struct native_unwind_info *info = NULL;
		if (proc) {
			if (!m || pc < m->start || pc >= m->end)
				m = native_find_mapping(proc, pc);
			if (m)
				info = native_find_info(m, pc);
		}

		__u64 cfa, ra = 0, nbp = bp;
		if (!info) {
			/* frame pointers: [bp] = caller's bp, [bp + 8] = return address */
			st->flags |= NATIVE_F_NO_TABLE;
			fp_frames++;
			if (bp == 0) {
				st->flags |= NATIVE_F_COMPLETE;
				break;
			}
			cfa = bp + 16;
			if (bpf_probe_read_user(&nbp, sizeof(nbp), (void *)bp) ||
			    bpf_probe_read_user(&ra, sizeof(ra), (void *)(bp + 8))) {
				st->flags |= NATIVE_F_READ_ERROR;
				break;
			}
		} else {
			__u8 rule = info->cfa_rule;
			if (rule == NATIVE_CFA_SP) {
				cfa = sp + info->cfa_off;
			} else if (rule == NATIVE_CFA_FP) {
				cfa = bp + info->cfa_off;
			} else if (rule == NATIVE_CFA_PLT) {
				cfa = sp + info->cfa_off + ((ip & 15) >= info->cfa_param ? 8 : 0);
			} else if (rule == NATIVE_CFA_DEREF_FP) {
				if (bpf_probe_read_user(&cfa, sizeof(cfa), (void *)(bp + info->cfa_off))) {
					st->flags |= NATIVE_F_READ_ERROR;
					break;
				}
			} else if (rule == NATIVE_CFA_END) {
				st->flags |= NATIVE_F_COMPLETE;
				break;
			} else {
				st->flags |= NATIVE_F_UNSUPPORTED;
				break;
			}
			if (info->ra_rule != NATIVE_RA_CFA) {
				st->flags |= NATIVE_F_UNSUPPORTED;
				break;
			}
			__u8 fr = info->fp_rule;
			__s64 ra_off = info->ra_off, fp_off = info->fp_off;
			__s64 lo = ra_off < fp_off ? ra_off : fp_off;
			__s64 span = (ra_off < fp_off ? fp_off : ra_off) - lo;
			if (fr == NATIVE_FP_CFA && span < 64 && !(span & 7)) {
				/* both saved words in one read: each bpf_probe_read_user costs ~100 ns. The words
				 * lie in the frame being popped, [sp, cfa), so the read never touches other pages. */
				__u64 win[8] = {};
				__u32 size = (__u32)span + 8;
				if (size > sizeof(win))
					size = sizeof(win);
				if (bpf_probe_read_user(win, size, (void *)(cfa + lo))) {
					st->flags |= NATIVE_F_READ_ERROR;
					break;
				}
				ra = win[((ra_off - lo) >> 3) & 7];
				nbp = win[((fp_off - lo) >> 3) & 7];
			} else {
				if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa + ra_off))) {
					st->flags |= NATIVE_F_READ_ERROR;
					break;
				}
				if (fr == NATIVE_FP_CFA || fr == NATIVE_FP_FP) {
					__u64 at = (fr == NATIVE_FP_CFA ? cfa : bp) + fp_off;
					if (bpf_probe_read_user(&nbp, sizeof(nbp), (void *)at)) {
						st->flags |= NATIVE_F_READ_ERROR;
						break;
					}
				} else if (fr == NATIVE_FP_LOST) {
					nbp = 0;
				}
			}
		}
		if (ra == 0) {
			st->flags |= NATIVE_F_COMPLETE;
			break;
		}
		if (cfa <= sp) {
			st->flags |= NATIVE_F_BAD_FRAME;
			break;
		}
		ip = ra;
		sp = cfa;
		bp = nbp;
	}
	if (depth >= NATIVE_MAX_DEPTH || depth >= max_depth)
		st->flags |= NATIVE_F_TRUNCATED;
	__u32 f = st->flags;

	*flags = f;
	st->len = n;
	__u64 id = native_mix(h ^ ((__u64)n << 32 | f));
	if (id == 0)
		id = 1;
	int err = native_stacks.insert(&id, st);
	int stored = !err || err == -17 /* EEXIST: the same stack was stored before */;

	/* The flags are counted without branching: a branch on a value the verifier knows exactly makes it
	 * keep every value apart, and fp_frames differs on every path through the loop. */
	struct native_unwind_counters *c = native_unwind_stats.lookup(&zero);
	if (c) {
		c->v[NATIVE_STAT_NO_PROC] += (f / NATIVE_F_NO_PROC) & 1;
		c->v[NATIVE_STAT_TRUNCATED] += (f / NATIVE_F_TRUNCATED) & 1;
		c->v[NATIVE_STAT_READ_ERROR] += (f / NATIVE_F_READ_ERROR) & 1;
		c->v[NATIVE_STAT_UNSUPPORTED] += (f / NATIVE_F_UNSUPPORTED) & 1;
		c->v[NATIVE_STAT_BAD_FRAME] += (f / NATIVE_F_BAD_FRAME) & 1;
		c->v[NATIVE_STAT_COMPLETE] += (f / NATIVE_F_COMPLETE) & 1;
		c->v[NATIVE_STAT_FP_FRAMES] += fp_frames;
		if (stored) {
			c->v[NATIVE_STAT_STORED] += 1;
			c->v[NATIVE_STAT_FRAMES] += n;
		} else {
			c->v[NATIVE_STAT_STORE_FAILED] += 1;
		}
	}
	return stored ? id : 0;
}

/* regs: user-mode registers, or a perf event's registers (&ctx->regs) which may be kernel-mode: then the
 * walk starts from the task's saved user registers (pt_regs is ABI-stable on x86-64). */
static __always_inline __u64 native_stack_capture(struct pt_regs *regs, __u32 pid, __u32 *flags, const __u32 walk_slot)
{
	struct native_regs r = {};
	*flags = 0;
	if ((regs->cs & 3) == 3) {
		r.ip = regs->ip;
		r.sp = regs->sp;
		r.bp = regs->bp;
	} else {
		struct pt_regs *u = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		if (bpf_probe_read_kernel(&r.ip, sizeof(r.ip), &u->ip) ||
		    bpf_probe_read_kernel(&r.sp, sizeof(r.sp), &u->sp) ||
		    bpf_probe_read_kernel(&r.bp, sizeof(r.bp), &u->bp))
			return 0;
		*flags = NATIVE_F_KERNEL_REGS;
	}
	return native_stack_capture_regs(&r, pid, flags, NATIVE_MAX_DEPTH, walk_slot);
}
#endif

#endif

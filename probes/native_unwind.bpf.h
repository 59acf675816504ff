/* Native stack walker for code built without frame pointers (bcc; pasted into the composed program).
 *
 *   __u32 flags;
 *   __u64 id = native_stack_capture(regs, pid, &flags, slot);   regs: &ctx->regs of a perf event, or a
 *                                                                uprobe's ctx (user registers)
 *   __u64 id = native_stack_capture_regs(&native_regs, pid, &flags, max_depth, slot, NULL);
 *   __u64 id = native_stack_capture_memo(&native_regs, pid, max_depth, slot);   (NATIVE_MEMO: see there)
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
/* The tables' state: user space (native_unwind.py) writes a value never written before after each change to
 * native_procs, the rows, pages or rules, and after emptying native_stacks; a memo is good in its own only. */
BPF_ARRAY(native_tables_gen, __u64, 1);
#ifdef NATIVE_MEMO
/* Per CPU, not per thread: a thread that moves to another CPU, or two threads interleaving on one, only miss
 * (every memo is checked against the words it read), and the lookups are array indexing, no hash. */
BPF_PERCPU_ARRAY(native_memos, struct native_memo, NATIVE_MEMO_WAYS);
BPF_PERCPU_ARRAY(native_memo_wins, struct native_memo_win, 1);
#endif

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

/* A word the walk read at addr, into the memo being written (lg: NULL, a constant, where no memo is kept).
 * Past NATIVE_MEMO_WORDS the log wraps; n then says the walk is not to be kept. */
#define NATIVE_LOG(lg, a, v)                                                     \
	do {                                                                     \
		if (lg) {                                                        \
			__u32 k_ = (lg)->n;                                      \
			(lg)->addr[k_ & (NATIVE_MEMO_WORDS - 1)] = (a);          \
			(lg)->val[k_ & (NATIVE_MEMO_WORDS - 1)] = (v);           \
			(lg)->n = k_ + 1;                                        \
		}                                                                \
	} while (0)

/* A read failed: whether it fails again depends on more than the words read (a page not present then may be
 * later), so the walk is not to be kept. */
#define NATIVE_LOG_FAILED(lg)                                                    \
	do {                                                                     \
		if (lg)                                                          \
			(lg)->n = NATIVE_MEMO_WORDS + 1;                         \
	} while (0)

#ifndef NATIVE_MIN_ADDR
#define NATIVE_MIN_ADDR 0 /* /proc/sys/vm/mmap_min_addr, set by the loader: no user mapping starts below it */
#endif

/* Walks from user registers r; see the top of this file. lg: where the words read are logged, or NULL. */
static __always_inline __u64 native_stack_capture_regs(struct native_regs *r, __u32 pid, __u32 *flags,
						      const int max_depth, const __u32 walk_slot,
						      struct native_memo *lg)
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
			/* below mmap_min_addr nothing is ever mapped: the read would fail, after a fault that costs
			 * more than the walk (a register holding data, not a frame pointer); and the failure is
			 * a function of bp, which a memo may keep */
			if (bp < NATIVE_MIN_ADDR) {
				st->flags |= NATIVE_F_READ_ERROR;
				break;
			}
			if (bpf_probe_read_user(&nbp, sizeof(nbp), (void *)bp) ||
			    bpf_probe_read_user(&ra, sizeof(ra), (void *)(bp + 8))) {
				st->flags |= NATIVE_F_READ_ERROR;
				NATIVE_LOG_FAILED(lg);
				break;
			}
			NATIVE_LOG(lg, bp, nbp);
			NATIVE_LOG(lg, bp + 8, ra);
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
					NATIVE_LOG_FAILED(lg);
					break;
				}
				NATIVE_LOG(lg, bp + info->cfa_off, cfa);
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
					NATIVE_LOG_FAILED(lg);
					break;
				}
				ra = win[((ra_off - lo) >> 3) & 7];
				nbp = win[((fp_off - lo) >> 3) & 7];
				/* the words are the read's first and last: where both read back, all of it does */
				NATIVE_LOG(lg, cfa + ra_off, ra);
				NATIVE_LOG(lg, cfa + fp_off, nbp);
			} else {
				if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa + ra_off))) {
					st->flags |= NATIVE_F_READ_ERROR;
					NATIVE_LOG_FAILED(lg);
					break;
				}
				NATIVE_LOG(lg, cfa + ra_off, ra);
				if (fr == NATIVE_FP_CFA || fr == NATIVE_FP_FP) {
					__u64 at = (fr == NATIVE_FP_CFA ? cfa : bp) + fp_off;
					if (bpf_probe_read_user(&nbp, sizeof(nbp), (void *)at)) {
						st->flags |= NATIVE_F_READ_ERROR;
						NATIVE_LOG_FAILED(lg);
						break;
					}
					NATIVE_LOG(lg, at, nbp);
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
	return native_stack_capture_regs(&r, pid, flags, NATIVE_MAX_DEPTH, walk_slot, NULL);
}

#ifdef NATIVE_MEMO
/* Index i of a memo's words, masked where the compiler cannot drop the mask: knowing i < n <= NATIVE_MEMO_WORDS,
 * it would walk the words with a moving pointer whose bound the verifier cannot see. */
static __always_inline __u32 native_memo_idx(int i)
{
	__u32 j = i;
	asm volatile("" : "+r"(j));
	return j & (NATIVE_MEMO_WORDS - 1);
}

/* The id of memo m's walk if it is the walk from r now: same process, registers and tables, and every word it
 * read reads back equal (one copy of the span they lie in); 0 otherwise. */
static __always_inline __u64 native_memo_find(struct native_memo *m, struct native_memo_win *w, __u32 way,
					      struct native_regs *r, __u32 pid, __u64 gen)
{
	__u64 stamp = m->stamp;
	if (!stamp || m->pid != pid || m->ip != r->ip || m->sp != r->sp || m->bp != r->bp || m->gen != gen)
		return 0;
	__u64 base = m->base, len = m->len;
	__u32 n = m->n;
	if (len > NATIVE_MEMO_WIN || n > NATIVE_MEMO_WORDS)
		return 0;
	if (len && bpf_probe_read_user(w->b, len, (void *)base))
		return 0;
	__u64 diff = 0;
	for (int i = 0; i < NATIVE_MEMO_WORDS; i++) {
		if (i >= n)
			break;
		__u32 j = native_memo_idx(i);
		__u64 off = (m->addr[j] - base) & (NATIVE_MEMO_WIN - 1);
		diff |= *(__u64 *)(w->b + off) ^ m->val[j];
	}
	m = native_memos.lookup(&way); /* the same value: the loop's moving pointer leaves the verifier no bounds */
	if (!m)
		return 0;
	__u64 cont = m->cont;
	/* another walk on this CPU (a preempted program) may have rewritten the memo meanwhile: its stamp changed */
	asm volatile("" ::: "memory");
	if (diff || m->stamp != stamp)
		return 0;
	return cont;
}

/* Keeps the walk just logged in m (token: its own) when it can be replayed: stored, no read failed but below
 * mmap_min_addr (NATIVE_LOG_FAILED), every word logged, no other walk begun on this CPU meanwhile, and the
 * words within NATIVE_MEMO_WIN bytes. */
static __always_inline void native_memo_keep(struct native_memo *m, struct native_memo_win *w, __u32 way,
					     __u64 token, __u64 cont, __u32 flags)
{
	__u32 n = m->n;
	if (!cont || n > NATIVE_MEMO_WORDS || w->seq != token)
		return;
	__u64 lo = ~0ULL, hi = 0;
	for (int i = 0; i < NATIVE_MEMO_WORDS; i++) {
		if (i >= n)
			break;
		__u64 a = m->addr[native_memo_idx(i)];
		if (a < lo)
			lo = a;
		if (a > hi)
			hi = a;
	}
	if (!n)
		lo = hi = 0;
	else if (hi - lo > NATIVE_MEMO_WIN - 8)
		return;
	m = native_memos.lookup(&way); /* as in native_memo_find */
	if (!m)
		return;
	m->base = lo;
	m->len = n ? hi + 8 - lo : 0;
	m->cont = cont;
	asm volatile("" ::: "memory");
	m->stamp = token;
}

/* native_stack_capture_regs from r (r->from_return as given), memoized per CPU: a walk from the registers of
 * a memo kept on this CPU, in the same tables, whose words all read back equal, is that memo's walk, and its
 * id comes back without walking (see struct native_memo); otherwise the walk is taken and kept. */
static __always_inline __u64 native_stack_capture_memo(struct native_regs *r, __u32 pid, const int max_depth,
						       const __u32 walk_slot)
{
	__u32 zero = 0;
	__u64 *genp = native_tables_gen.lookup(&zero);
	__u64 gen = genp ? *genp : 0;
	__u32 way = (__u32)((r->ip ^ r->sp ^ (r->sp >> 12)) * 0x9e3779b97f4a7c15ULL >> 32) & (NATIVE_MEMO_WAYS - 1);
	struct native_memo *m = native_memos.lookup(&way);
	struct native_memo_win *w = native_memo_wins.lookup(&zero);
	if (!m || !w)
		return 0;
	__u64 cont = native_memo_find(m, w, way, r, pid, gen);
	if (cont) {
		native_stat_add(NATIVE_STAT_MEMO_HITS, 1);
		return cont;
	}
	native_stat_add(NATIVE_STAT_MEMO_MISSES, 1);
	__u64 token = w->seq + 1;
	w->seq = token;
	m->stamp = 0;
	asm volatile("" ::: "memory");
	m->n = 0;
	m->pid = pid;
	m->ip = r->ip;
	m->sp = r->sp;
	m->bp = r->bp;
	m->gen = gen;
	__u32 flags = 0;
	cont = native_stack_capture_regs(r, pid, &flags, max_depth, walk_slot, m);
	native_memo_keep(m, w, way, token, cont, flags);
	return cont;
}
#endif
#endif

#endif

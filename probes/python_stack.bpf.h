/* CPython stack walker: maps and python_stack_capture(), for composed BPF programs (the CPU
 * sampler, the GPU API probes); its text is inlined there (bcc rewrites map calls in the main file
 * only). Reads user memory only (bpf_probe_read_user). The per-cpu scratch and tag cache have a slot for
 * each context a walk runs in (walk_slots.bpf.h: a sample's interrupt can come during a uprobe's walk).
 *
 * User space (python_stack.py) fills py_procs (per-process layout, in a slot), py_proc_slots (pid ->
 * slot) and py_threads (native tid -> PyThreadState and its process's slot); the walker follows the
 * thread's current frame outwards and interns the frames in py_stacks. A thread it has no state for is
 * looked for in the interpreter's thread list at once (py_search_thread: a new thread has its Python frames
 * from its first sample, not from user space's next refresh) and the entry it writes is announced in
 * py_found with the thread's OS name (user space deletes the entry when the thread goes). New stack ids go
 * to the py_new_stacks queue so user space names their code objects while the process is alive; threads
 * still without a (valid) state go to py_misses for a refresh. */
#ifndef DEEPCTX_PYTHON_STACK_BPF_H
#define DEEPCTX_PYTHON_STACK_BPF_H

#include "python_stack.h"
#include "walk_slots.bpf.h"

#ifndef PY_PROCS_MAX
#define PY_PROCS_MAX 256
#endif
#ifndef PY_THREADS_MAX
#define PY_THREADS_MAX 16384
#endif
#ifndef PY_STACKS_MAX
#define PY_STACKS_MAX 16384
#endif
#ifndef PY_MISSES_MAX
#define PY_MISSES_MAX 1024
#endif
#ifndef PY_NEW_STACKS_MAX
#define PY_NEW_STACKS_MAX 8192
#endif
/* Frames visited per capture, counting the C-stack shim frames (3.12+) that are not kept. */
#ifndef PY_MAX_WALK
#define PY_MAX_WALK (PY_MAX_DEPTH + PY_MAX_DEPTH / 2)
#endif

/* Masks that keep variable sizes and offsets provably inside the read buffers (user space keeps
 * offsets + 8 and sizes within 128 bytes). */
#define PY_OFF_MASK 0x7f
#define PY_SIZE_MASK 0xff

#define PY_FNV_PRIME 0x100000001b3ULL
/* Hides a value's origin from the compiler, so arithmetic on it is not turned back into branches
 * (BPF has no conditional move: the compiler would branch, and the verifier would fork). */
#define PY_OPAQUE(x) asm volatile("" : "+r"(x))
/* 1 if x != 0 else 0, without a branch. */
#define PY_NONZERO(x) ({ __u64 __v = (__u64)(x); __v |= 0 - __v; PY_OPAQUE(__v); __v >> 63; })
/* Hashed where a C-stack shim frame sits: above user space, so no code object's address (its flags in the low
 * bits, which alignment leaves zero) is it. */
#define PY_SHIM_MARK 0x9E3779B97F4A7C15ULL

/* Frames are read a window at a time: the bytes that end with a frame, back to at most PY_WIN before it and
 * never before its page (so a window cannot fault where the frame would not). A thread's frames sit in
 * contiguous chunks (3.11+), a caller below its callee, so the window usually holds the next frames too:
 * one helper call for several frames (a call costs more than the copy). */
#define PY_WIN 4096
struct py_scratch {
	struct py_stack stack;
	__u64 hash;      /* FNV-1a over (code and flags, tag, lasti) of the frames so far, and shims' marks */
	__u64 wbase;     /* the user address win[0] was read from */
	__u64 wlen;      /* bytes of win read there (0: none) */
	__u64 raw_hash;  /* raw_cache: the last walk's raw hash on this CPU, and the stack id and flags it gave */
	__u64 raw_next;  /* ... the raw hash of the walk under way, kept here (not in a register) across the walk */
	__u64 raw_id;
	__u64 raw_gen;   /* py_stacks_gen when raw_id was kept */
	__u32 raw_flags;
	__u32 raw_pad;
	__u8 win[PY_WIN + PY_SIZE_MASK + 1 + 8];
	__u8 code[PY_SIZE_MASK + 1 + 8];
	__u8 tstate[PY_TSTATE_SPAN + 8];
};

/* Layouts by slot (user space gives each process one: probes/program_share.py), which its threads' entries
 * name: a sample looks up its thread and reads an array, one hash look-up, not two; py_proc_slots tells a
 * Python process's thread not known yet (a miss, for a refresh) from another process's. */
BPF_ARRAY(py_procs, struct py_proc, PY_PROCS_MAX);
BPF_HASH(py_proc_slots, __u32, __u32, PY_PROCS_MAX); /* pid -> slot */
BPF_HASH(py_threads, __u32, struct py_thread, PY_THREADS_MAX);
BPF_F_TABLE("hash", __u64, struct py_stack, py_stacks, PY_STACKS_MAX, BPF_F_NO_PREALLOC);
BPF_HASH(py_misses, __u32, __u32, PY_MISSES_MAX); /* tid -> pid */
BPF_HASH(py_found, __u32, struct py_found_thread, PY_MISSES_MAX); /* tid -> py_threads entries the walker wrote */
BPF_QUEUE(py_new_stacks, struct py_new_stack, PY_NEW_STACKS_MAX);
BPF_PERCPU_ARRAY(py_stats, __u64, PYSTACK_STAT_COUNT);
BPF_PERCPU_ARRAY(py_scratch, struct py_scratch, WALK_SLOTS);
/* Raised by user space before it empties py_stacks (python_stack.py, clear_window): a stack id this CPU kept
 * from an earlier generation may be gone, and is not used again (py_scratch.raw_gen). */
BPF_ARRAY(py_stacks_gen, __u64, 1);

/* Code objects' tags by address, per CPU and direct-mapped: a frame whose code this CPU has tagged before
 * costs one read (the frame), not two. Code objects live as long as their functions, so an address keeps
 * its object; one freed and another made at its address while its slot holds it keeps the old tag,
 * which user space then finds does not match (the frame shows as unknown, counted). The cache is zeroed
 * between captures (probes/programs.py: a loaded program serves one capture after another). */
#ifndef PY_TAG_SLOTS
#define PY_TAG_SLOTS 1024
#endif
struct py_tag_slot {
	__u64 code;
	__u32 pid;
	__u32 tag;
};
BPF_PERCPU_ARRAY(py_tag_cache, struct py_tag_slot, PY_TAG_SLOTS * WALK_SLOTS); /* a run of slots per context */

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
static __always_inline void py_stat_inc(__u32 idx)
{
	__u64 *v = py_stats.lookup(&idx);
	if (v)
		*v += 1; /* per-cpu slot: no atomic needed */
}

static __always_inline void py_note_miss(__u32 pid, __u32 tid, __u32 *flags)
{
	py_misses.update(&tid, &pid);
	py_stat_inc(PYSTACK_STAT_TSTATE_MISS);
	*flags |= PYSTACK_F_TSTATE_MISS;
}

static __always_inline __u64 py_read_u64(__u64 addr, int *err)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		*err = 1;
	return v;
}

/* Looks for the current thread's state in the main interpreter's thread list, newest first: its id there is
 * the thread's id as its pid namespace sees it (3.11+), or (3.10) a pthread_t whose struct holds that id at
 * ident_tid. Returns 1 with the state and the ident to check it by. */
static __always_inline int py_search_thread(struct py_proc *proc, __u32 tid, __u64 *tstate, __u64 *ident)
{
	__u64 head = proc->threads_head;
	if (!head)
		return 0;
	__u64 want = tid;
	if (proc->pidns_ino) {
		struct bpf_pidns_info ns = {};
		if (bpf_get_ns_current_pid_tgid(proc->pidns_dev, proc->pidns_ino, &ns, sizeof(ns)))
			return 0;
		want = ns.pid; /* the thread's id there (tgid is the process's) */
	}
	__u64 off_ident = proc->tstate_ident, off_next = proc->tstate_next, off_tid = proc->ident_tid;
	int err = 0;
	__u64 ts = py_read_u64(head, &err);
	for (int i = 0; i < PY_SEARCH_MAX; i++) {
		if (!ts || err)
			break;
		__u64 id = py_read_u64(ts + off_ident, &err);
		__u64 got = id;
		if (off_tid != PY_NO_OFFSET) {
			__u32 t = 0;
			got = bpf_probe_read_user(&t, sizeof(t), (void *)(id + off_tid)) ? 0 : t;
		}
		if (!err && id && got == want) {
			*tstate = ts;
			*ident = id;
			return 1;
		}
		ts = py_read_u64(ts + off_next, &err);
	}
	return 0;
}

/* A thread without a usable entry (none, or none found within its retry time): searches for its state and
 * writes what it finds, or when to look again. Returns 1 when it found the state. The entry for "not found"
 * is written before the search, so that nothing decided from the old entry is held across it: the verifier
 * walks the search's iterations once, not once for each way here. */
static __always_inline int py_learn_thread(struct py_proc *proc, __u32 slot, __u32 pid, __u32 tid,
                                           struct py_thread *old, __u32 *flags)
{
	int search = proc->threads_head != 0;
	struct py_thread entry = {.proc_slot = slot};
	entry.searches = old ? old->searches + 1 : 1;
	entry.ident = bpf_ktime_get_ns() + (search ? PY_SEARCH_RETRY_NS : PY_RETRY_NS);
	py_threads.update(&tid, &entry);
	if (!old) { /* user space deletes it when the thread goes, and has its OS name even if it has gone by then */
		struct py_found_thread found = {.pid = pid};
		bpf_get_current_comm(found.comm, sizeof(found.comm));
		if (py_found.update(&tid, &found))
			py_stat_inc(PYSTACK_STAT_FOUND_LOST); /* user space sweeps py_threads for its dead threads */
	}
	entry.searches = 0;
	if (py_search_thread(proc, tid, &entry.tstate, &entry.ident)) {
		py_threads.update(&tid, &entry);
		py_stat_inc(PYSTACK_STAT_FOUND);
		return 1;
	}
	/* not found: again soon (it may not be bound to its thread yet); a refresh is asked for at the 1st, 2nd,
	 * 4th ... failure only (native threads never have a state), and without a search at every retry */
	struct py_thread *th = py_threads.lookup(&tid);
	__u32 n = th ? th->searches : 1;
	if (!proc->threads_head || !(n & (n - 1)))
		py_note_miss(pid, tid, flags);
	else
		*flags |= PYSTACK_F_TSTATE_MISS;
	return 0;
}

/* A thread whose entry has no state (none yet, or none found within its retry time): looks for it now and then.
 * Returns 1 when its entry has a state now. */
static __always_inline int py_thread_missing(__u32 pid, __u32 tid, struct py_thread *th, __u32 *flags)
{
	__u32 slot;
	if (th) {
		slot = th->proc_slot;
	} else {
		__u32 *known = py_proc_slots.lookup(&pid);
		if (!known)
			return 0; /* not a Python process */
		slot = *known; /* a thread of a Python process, not known yet */
	}
	struct py_proc *proc = py_procs.lookup(&slot);
	if (!proc || proc->pid != pid) /* the thread id of a process gone, taken by another */
		return 0;
	if (th && bpf_ktime_get_ns() < th->ident) { /* looked for not long ago */
		py_stat_inc(PYSTACK_STAT_CAPTURES);
		*flags |= PYSTACK_F_TSTATE_MISS;
		return 0;
	}
	int found = py_learn_thread(proc, slot, pid, tid, th, flags);
	if (!found)
		py_stat_inc(PYSTACK_STAT_CAPTURES); /* else counted with the walk */
	return found;
}

/* A frame's bytes in the window, reading the window that ends with it where it is not there (frame_size
 * already masked); NULL where the read failed. */
static __always_inline __u8 *py_frame_bytes(struct py_scratch *s, __u64 frame, __u64 frame_size)
{
	__u64 off = frame - s->wbase;
	if (off > PY_WIN || off + frame_size > s->wlen) { /* not in the window: read the one ending here */
		__u64 end = frame + frame_size;
		__u64 start = frame & ~4095ULL;
		if (end - start > PY_WIN)
			start = end - PY_WIN;
		__u64 len = end - start;
		if (len > PY_WIN)
			len = PY_WIN;
		PY_OPAQUE(len); /* the bounded register itself, not end - start again */
		if (bpf_probe_read_user(s->win, len, (void *)start))
			return 0;
		s->wbase = start;
		s->wlen = len;
		off = frame - start;
	}
	return s->win + (off & (PY_WIN - 1));
}

/* Interns the current thread's Python stack; returns its id in py_stacks, 0 when there is none. raw_cache (a
 * constant at each call site, so the compiler keeps one walk or the other): first see whether the raw frames
 * are this CPU's last walk's (below). The GPU probes, called again and again from one place, use it; the CPU
 * sampler, whose samples rarely repeat a stack back to back, does not pay for it (nor its verifier bound). */
static __always_inline __u64 python_stack_capture(__u32 pid, __u32 tid, __u32 *flags, int raw_cache, const __u32 walk_slot)
{
	struct py_thread *th = py_threads.lookup(&tid);
	if (!th || !th->tstate) {
		if (!py_thread_missing(pid, tid, th, flags))
			return 0;
		th = py_threads.lookup(&tid);
		if (!th)
			return 0;
	}
	/* the layout looked up here whichever way the entry came: the search's way held its own pointer to it, which
	 * made the walk's verifier state differ, and the walk was verified twice */
	__u32 slot = th->proc_slot;
	struct py_proc *proc = py_procs.lookup(&slot);
	if (!proc || proc->pid != pid) /* the thread id of a process gone, taken by another */
		return 0;
	py_stat_inc(PYSTACK_STAT_CAPTURES);
	__u64 tstate = th->tstate;
	__u32 zero = 0, scratch_slot = walk_slot;
	struct py_scratch *s = py_scratch.lookup(&scratch_slot);
	if (!s)
		return 0;
	/* The thread's id and its frame (or cframe) pointer, in one read: user space keeps the two fields
	 * within PY_TSTATE_SPAN bytes (PyLayout.check), and a helper call costs more than the bytes between */
	__u64 off_ident = proc->tstate_ident, off_frame = proc->tstate_frame;
	/* lo = min(off_ident, off_frame) and the length without branches: a branch here would have the
	 * verifier walk all that follows once per side */
	__u64 below = 0 - ((off_frame - off_ident) >> 63); /* all ones where off_frame < off_ident */
	PY_OPAQUE(below);
	__u64 lo = (off_ident & ~below) | (off_frame & below);
	__u64 len = (off_ident ^ off_frame ^ lo) - lo + 8; /* the other offset, less lo, and its 8 bytes */
	PY_OPAQUE(len); /* the masked register itself bounds the read (0 only past a span check() refuses) */
	len &= PY_TSTATE_SPAN - 1;
	int err = bpf_probe_read_user(s->tstate, len, (void *)(tstate + lo));
	__u64 ident = *(__u64 *)(s->tstate + ((off_ident - lo) & (PY_TSTATE_SPAN - 1)));
	__u64 frame = *(__u64 *)(s->tstate + ((off_frame - lo) & (PY_TSTATE_SPAN - 1)));
	if (err || ident != th->ident) { /* the thread state was freed or belongs to another thread */
		th->tstate = 0;
		th->ident = 0; /* searched for at its next sample */
		th->searches = 0;
		py_note_miss(pid, tid, flags);
		return 0;
	}
	if (!err && frame && proc->cframe_current != PY_NO_OFFSET)
		frame = py_read_u64(frame + proc->cframe_current, &err);
	if (err) {
		py_stat_inc(PYSTACK_STAT_READ_ERROR);
		*flags |= PYSTACK_F_READ_ERROR;
		return 0;
	}
	if (!frame)
		return 0; /* the thread is not running Python code */

	struct py_stack *st = &s->stack;

	/* Copy the layout into locals once; masks keep offsets inside the read buffers. */
	__u32 frame_size = proc->frame_size;
	__u32 code_size = proc->code_read_size;
	__u32 off_code = proc->frame_code & PY_OFF_MASK;
	__u32 off_prev = proc->frame_previous & PY_OFF_MASK;
	__u32 off_instr = proc->frame_instr & PY_OFF_MASK;
	__u32 off_owner = proc->frame_owner & PY_OFF_MASK;
	__u32 off_entry = proc->frame_is_entry & PY_OFF_MASK;
	__u64 owner_mask = proc->owner_mask;
	__u64 entry_mask = proc->entry_mask;
	__u64 entry_always = proc->entry_always;
	__u64 owner_shim = proc->owner_shim;
	__u64 owner_gen = proc->owner_generator;
	__u64 code_adaptive = proc->code_adaptive;
	__u64 code_read = proc->code_read;
	__u32 off_first = proc->code_firstlineno & PY_OFF_MASK;
	__u32 off_name = proc->code_name & PY_OFF_MASK;
	__u64 ptr_mask = 0 - (__u64)(proc->instr_is_pointer & 1); /* all ones: frame_instr is a pointer */
	PY_OPAQUE(ptr_mask);

	/* depth, flags and the running hash live in the map value, not in registers, and the
	 * per-version choices above are masks, not branches: every path through an iteration ends
	 * in the same verifier state, so the loop costs the verifier the same at any depth. The id
	 * hashes the frames in order (FNV-1a), each with its flags, and a mark where a shim frame sits
	 * (which makes its caller an entry frame afterwards). */
	s->wlen = 0;
	frame_size &= PY_SIZE_MASK;
	/* A thread that calls again from where it called last (a launch loop) has the same frames at the same
	 * addresses, each at the same instruction of the same code object: a first pass hashes just those raw
	 * words (frame address, instruction word, code object, owner and entry bytes), and where they are
	 * this CPU's last walk's, for the same thread, the stack is that walk's, still interned. Exactly the
	 * frames the walk below would convert: it converts, tags and hashes them only when they changed. */
	if (raw_cache) {
		__u64 raw = 0xcbf29ce484222325ULL ^ (((__u64)pid << 32) | tid);
		__u64 rf = frame;
		for (int i = 0; i < PY_MAX_WALK; i++) {
			if (!rf)
				break;
			__u8 *fr = py_frame_bytes(s, rf, frame_size);
			if (!fr) {
				raw = 0;
				break;
			}
			__u64 ip = *(__u64 *)(fr + off_instr);
			__u64 marks = ((__u64)fr[off_owner] << 56) | ((__u64)fr[off_entry] << 48); /* above user addresses */
			raw = (raw ^ rf ^ ((ip << 32) | (ip >> 32))) * PY_FNV_PRIME;
			raw = (raw ^ *(__u64 *)(fr + off_code) ^ marks) * PY_FNV_PRIME;
			rf = *(__u64 *)(fr + off_prev);
		}
		if (rf) /* the bound ended it, or a read failed: the full walk decides */
			raw = 0;
		__u64 *gen = py_stacks_gen.lookup(&zero);
		__u64 g = gen ? *gen : 1;
		if (raw && raw == s->raw_hash && g == s->raw_gen) {
			*flags |= s->raw_flags;
			py_stat_inc(PYSTACK_STAT_RAW_HITS);
			py_stat_inc(PYSTACK_STAT_STACKS);
			return s->raw_id;
		}
		s->raw_hash = 0; /* kept again below, once this walk's stack is interned */
		s->raw_next = raw;
		s->raw_gen = g;
	}
	st->depth = 0;
	st->flags = 0;
	s->hash = 0xcbf29ce484222325ULL;
	for (int i = 0; i < PY_MAX_WALK; i++) {
		if (!frame)
			break;
		__u8 *fr = py_frame_bytes(s, frame, frame_size);
		if (!fr) {
			st->flags |= PYSTACK_F_READ_ERROR;
			break;
		}
		__u64 code = *(__u64 *)(fr + off_code) & ~7ULL; /* 3.14 tags the low bits */
		__u64 prev = *(__u64 *)(fr + off_prev);
		__u64 owner = fr[off_owner] & owner_mask;
		__u32 depth = st->depth;
		if (owner >= owner_shim) {
			/* A C-stack shim sits below the first frame of each eval activation (3.12+): it makes the
			 * frame before it an entry frame, and the id says so by hashing a mark where it sits */
			if (depth > 0 && depth <= PY_MAX_DEPTH)
				st->frame_flags[depth - 1] |= PYFRAME_F_ENTRY;
			s->hash = (s->hash ^ PY_SHIM_MARK) * PY_FNV_PRIME;
			frame = prev;
			continue;
		}
		if (depth >= PY_MAX_DEPTH) {
			st->flags |= PYSTACK_F_TRUNCATED;
			break;
		}
		/* prev_instr / instr_ptr -> instruction index, or f_lasti as it is */
		__u64 ip = *(__u64 *)(fr + off_instr);
		__s64 from_ptr = (__s64)(ip - code - code_adaptive) >> 1;
		__s64 from_int = (__s32)ip;
		__s32 lasti = (__s32)((from_ptr & ptr_mask) | (from_int & ~ptr_mask));
		__u64 entry = PY_NONZERO((fr[off_entry] & entry_mask) | entry_always);
		__u64 gen = PY_NONZERO(owner ^ owner_gen) ^ 1;
		__u8 fflags = (__u8)(entry * PYFRAME_F_ENTRY | gen * PYFRAME_F_GENERATOR);
		__u32 slot = ((__u32)(code >> 4) & (PY_TAG_SLOTS - 1)) + walk_slot * PY_TAG_SLOTS;
		struct py_tag_slot *ts = py_tag_cache.lookup(&slot);
		if (!code || !ts) {
			st->flags |= PYSTACK_F_READ_ERROR;
			break;
		}
		__u32 tag = ts->tag;
		if (ts->code != code || ts->pid != pid) {
			if (bpf_probe_read_user(s->code, code_size & PY_SIZE_MASK, (void *)(code + code_read))) {
				st->flags |= PYSTACK_F_READ_ERROR;
				break;
			}
			tag = py_code_tag(*(__u32 *)(s->code + off_first), *(__u64 *)(s->code + off_name));
			ts->code = code;
			ts->pid = pid;
			ts->tag = tag;
		}
		st->frames[depth].code = code;
		st->frames[depth].tag = tag;
		st->frames[depth].lasti = lasti;
		st->frame_flags[depth] = fflags;
		/* the flags in the low bits of the code object's address, which alignment leaves zero */
		s->hash = (s->hash ^ code ^ fflags) * PY_FNV_PRIME;
		s->hash = (s->hash ^ (((__u64)tag << 32) | (__u32)lasti)) * PY_FNV_PRIME;
		st->depth = depth + 1;
		frame = prev;
	}
	if (frame && !(st->flags & (PYSTACK_F_TRUNCATED | PYSTACK_F_READ_ERROR)))
		st->flags |= PYSTACK_F_TRUNCATED; /* the walk bound ended it */

	__u32 depth = st->depth;
	__u32 sflags = st->flags;
	*flags |= sflags;
	if (sflags & PYSTACK_F_TRUNCATED)
		py_stat_inc(PYSTACK_STAT_TRUNCATED);
	if (sflags & PYSTACK_F_READ_ERROR)
		py_stat_inc(PYSTACK_STAT_READ_ERROR);
	if (depth == 0)
		return 0;

	__u64 h = (s->hash ^ depth ^ ((__u64)sflags << 32)) * PY_FNV_PRIME;
	if (h == 0)
		h = 1;
	if (py_stacks.lookup(&h)) { /* a stack seen before: no bucket lock, no copy */
		py_stat_inc(PYSTACK_STAT_STACKS);
		return h;
	}
	int rc = py_stacks.insert(&h, st);
	if (rc == 0) {
		struct py_new_stack fresh = {.id = h, .pid = pid, .tid = tid};
		if (py_new_stacks.push(&fresh, 0))
			py_stat_inc(PYSTACK_STAT_NEW_LOST);
	} else if (rc != -17 /* EEXIST */) {
		py_stat_inc(PYSTACK_STAT_MAP_FULL);
		*flags |= PYSTACK_F_MAP_FULL;
		return 0;
	}
	py_stat_inc(PYSTACK_STAT_STACKS);
	if (raw_cache) {
		s->raw_hash = s->raw_next;
		s->raw_id = h;
		s->raw_flags = sflags;
	}
	return h;
}
#endif

#endif /* DEEPCTX_PYTHON_STACK_BPF_H */

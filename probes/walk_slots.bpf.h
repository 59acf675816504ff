/* Which per-CPU scratch slot a stack walk (Python: python_stack.bpf.h; native: native_unwind.bpf.h) uses, by
 * the context it runs in. A probe of the task (uprobe, uprobe_multi, uprobe session) takes slot 0; the CPU
 * sampler's perf event, which runs in the timer's interrupt, takes slot 1. The interrupt can come while a
 * uprobe_multi program is walking on the same CPU: the kernel keeps kprobes and plain uprobes from nesting
 * under a perf program (bpf_prog_active) but not uprobe_multi's programs, so with one slot a sample's walk
 * overwrote a launch's half-built stack (its Python frames twice: tests/integration/test_walk_slots.py). Each
 * context runs to its end before the one it interrupted goes on, so one slot each is enough. */
#ifndef DEEPCTX_WALK_SLOTS_BPF_H
#define DEEPCTX_WALK_SLOTS_BPF_H

#define WALK_SLOT_TASK 0
#define WALK_SLOT_IRQ 1
#define WALK_SLOTS 2

#endif

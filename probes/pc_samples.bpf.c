/* PC sampling: the CUPTI agent's pcs probe (pc_samples.h), copied as it comes into the ring buffer
 * dev_pcs; probes/pc_sampling.py decodes it. Composed after device_activity.bpf.c (its dev_site and
 * usdt_arg), only into captures that sample PCs. Settings (-D): PCS_RINGBUF_PAGES. */
#include "pc_samples.h"

BPF_RINGBUF_OUTPUT(dev_pcs, PCS_RINGBUF_PAGES);
BPF_ARRAY(dev_pcs_lost, __u64, 1); /* messages the full ring buffer refused */

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
int on_dev_pcs(struct pt_regs *ctx) {
    __u32 pid = bpf_get_current_pid_tgid() >> 32;
    DEV_USDT_OPEN(ctx, pid, s, u);
    __u32 kind = (__u32)usdt_arg(&u, s, 0);
    __u64 data = usdt_arg(&u, s, 1);
    __u32 len = (__u32)usdt_arg(&u, s, 2);
    struct pcs_event *e = dev_pcs.ringbuf_reserve(sizeof(struct pcs_event));
    if (!e) {
        int zero = 0;
        __u64 *lost = dev_pcs_lost.lookup(&zero);
        if (lost)
            __sync_fetch_and_add(lost, 1);
        return 0;
    }
    e->pid = pid;
    e->kind = kind;
    e->cut = len > PCS_CHUNK;
    __u32 n = len > PCS_CHUNK ? PCS_CHUNK : len;
    asm volatile("" : "+r"(n));  /* hidden from clang, which would drop the mask the verifier needs */
    n &= PCS_DATA - 1;
    e->len = n;
    if (bpf_probe_read_user(e->data, n, (void *)data) != 0)
        e->len = 0;
    dev_pcs.ringbuf_submit(e, 0);
    return 0;
}
#endif

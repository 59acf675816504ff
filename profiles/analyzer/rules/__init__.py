"""The analyzer's rules, one module each; importing this package registers them."""

from deepctx.profiles.analyzer.rules import (  # noqa: F401
    alloc_churn,
    blocking_copy,
    collectives,
    compiled_hot_kernel,
    dataloader,
    elementwise_chain,
    fp32_gemm,
    graph_breaks,
    host_bound,
    launch_bound,
    pc_bank_conflicts,
    pc_divergence,
    pc_fp32_fma,
    pc_long_scoreboard,
    pc_occupancy,
    pc_uncoalesced,
    recompiles,
    small_grid,
    sync_in_loop,
    unfused_optimizer,
)

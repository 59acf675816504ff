"""Native unwind tables: .eh_frame / .debug_frame compiled into compact rows for the BPF walker."""

"""bench_sac_compile.py and its measurement: what the bug costs at a realistic size."""

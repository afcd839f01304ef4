"""Compiling for a target that is not here, and reading what the compiler says.

`target` (a TPU slice's or GPU machine's abstract devices and the bytes a program may use),
`executable` (a jitted function with its abstract, sharded arguments, lowered), `compiled`
(one compile: per-device bytes, FLOPs, its `buffers`), `assigned` (the bytes at buffer
assignment, cheaper than a whole compile), `workload_bytes` (a workload's bytes from its
executables), `cache_entries` and `sources` (the plan cache on disk and the source it keys on),
`host_memory` (how many compiles this machine holds at once), `timing` (where a verdict's
seconds go), `layer_probe` and `cut_depth` (what a few layers say about the whole model).
"""

"""Benchmarks and acceptance scripts, run from the repository root.

The acceptance scripts of issue 11 (not run in CI; exit status 0 when every check held):

- ``python -m benchmarks.fuzz_frames [--frames 1000000]``: random and mutated request
  frames of every command from several unprivileged processes;
- ``python -m benchmarks.soak [--seconds 600]``: four clients mixing jobs and allocations
  while clients, chip cores and the chip's main process are killed.

The helpers they share with the test suite (which imports them as ``benchmarks.<module>``;
``tests/kmd_fuse/test_chaos.py`` is the CI-sized run): ``scratch_device`` (a device of one's
own under a temporary devroot, its processes, the resources to check for leaks),
``frames`` (the frame generator and the documented errnos), ``chaos`` and
``chaos_client`` (the chaos workload, its kills and its checks).
"""

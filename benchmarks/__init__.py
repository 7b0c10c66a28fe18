"""Benchmarks and acceptance scripts, run from the repository root.

The acceptance scripts of issue 11 (not run in CI) and the helpers they share with the
test suite (which imports them as ``benchmarks.<module>``):

- ``python -m benchmarks.fuzz_frames [--frames N]``: random and mutated request frames;
- ``python -m benchmarks.soak [--seconds S]``: clients, jobs, allocations and kills;
- ``scratch_device``: a device of one's own under a temporary devroot, its processes
  and the resources to check for leaks; ``frames``: the frame generator; ``chaos``: the
  chaos workload and its checks (also ``tests/spine/test_chaos.py``).
"""

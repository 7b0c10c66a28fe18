"""The tools built on libnpu: the ``npu`` command line and what its commands run.

Nothing in the library (``libnpu`` outside this package) imports from here
(tests/test_layers.py), so a program that imports libnpu never loads a tool.

- ``cli``: the ``npu`` command (one parser, one table of commands, exit codes 0/1/2).
- ``compile``, ``run``, ``models``: compile with progress and a memory-plan report; run a
  model with timings; model names and calibration data from files; LiteRT reference runs.
- ``faces``, ``classify``, ``vision/``: the face detector and the image classifier.
- ``bench``, ``ops_bench``, ``ops_bench_ort``, ``model_bench``: ``npu bench nop|ops|model``.
- ``smi``, ``npu_sysfs``: ``npu smi`` / ``npu top`` over the driver's attribute tree.
- ``demo``: the spine end to end; ``model_zoo``: model files from PyPI wheels, sha256-checked.
"""

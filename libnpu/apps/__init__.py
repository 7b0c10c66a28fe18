"""User-facing programs on top of the runtime: the CLI's ``compile``, ``run`` and the
main job's face detector (BlazeFace) and image classifier (ResNet-8 CIFAR-10).

- ``models``: model names/paths, calibration data from files, LiteRT reference runs.
- ``compile``: compile with a progress bar and a memory-plan report, through the cache.
- ``run``: ``npu run`` (random or .npy inputs, timings, ``--save``).
- ``faces``: BlazeFace pre/post-processing and the face-detection program.
- ``classify``: the ResNet-8 classifier program.
"""

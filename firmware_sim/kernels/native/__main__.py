"""``python -m firmware_sim.kernels.native``: build the C kernels ahead of time."""
from firmware_sim.kernels.native import build

print(build())

"""``python -m firmware_sim.kernels.native``: build the C kernels ahead of time; prints the
library's path, then whether convolutions run on oneDNN (``npu doctor`` reads both)."""
from firmware_sim.kernels.native import build, dnnl_missing

print(build())
missing = dnnl_missing()
print("oneDNN: convolutions run on oneDNN's int8 GEMM" if missing is None
      else f"oneDNN: missing ({missing}); convolutions run on the numpy path (slower)")

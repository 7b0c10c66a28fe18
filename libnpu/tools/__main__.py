"""``python -m libnpu.tools ARGS`` is ``npu ARGS`` (for a venv whose scripts are not on PATH)."""
import sys

from npu_console import npu

sys.exit(npu())

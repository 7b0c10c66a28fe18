"""``python -m libnpu.tools ARGS`` is ``npu ARGS`` (for a venv whose scripts are not on PATH)."""
import sys

from libnpu.tools.cli import main

sys.exit(main())

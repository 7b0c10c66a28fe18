"""A LiteRT / TFLite external delegate that runs what the chip can of a model on the NPU.

``library_path()`` builds (once, cached by content and Python version) and returns
``libnpu_delegate.so``, which exports ``tflite_plugin_create_delegate`` /
``tflite_plugin_destroy_delegate``: load it with
``ai_edge_litert.interpreter.load_delegate(path, {"devroot": ..., "ops": "CONV_2D"})`` or any
TFLite program's ``--external_delegate_path``. The library's C functions run the Python of
:mod:`libnpu.delegate.plugin` (cffi embedding, :mod:`libnpu.capi.embedding`). See
docs/delegate.md.
"""
from __future__ import annotations

from pathlib import Path

from .tflite_c import C_TYPES, CDEF

__all__ = ["library_path", "LIBRARY_NAME"]

LIBRARY_NAME = "libnpu_delegate"

_API = """
TfLiteDelegate* npu_delegate_create_py(const char* const* keys, const char* const* values, size_t count,
                                       void (*report_error)(const char*));
void npu_delegate_destroy_py(TfLiteDelegate* delegate);
"""

# The two symbols TFLite's external-delegate loader looks up.
_C_SOURCE = "#include <stddef.h>\n#include <stdint.h>\n" + C_TYPES + _API + """
TfLiteDelegate* tflite_plugin_create_delegate(const char* const* keys, const char* const* values, size_t count,
                                              void (*report_error)(const char*))
{
    /* LiteRT's Python loader passes the count as a C int: only its low 32 bits are meaningful. */
    embedded_python_start();
    return npu_delegate_create_py(keys, values, (size_t)(uint32_t)count, report_error);
}

void tflite_plugin_destroy_delegate(TfLiteDelegate* delegate)
{
    if (delegate == NULL)
        return;
    embedded_python_start();
    npu_delegate_destroy_py(delegate);
}
"""

_INIT = """
from libnpu.delegate.plugin import install
install(ffi, lib)
"""


def library_path() -> Path:
    """The delegate's shared library, built if the cache lacks it (EmbeddingBuildError if it cannot be)."""
    from libnpu.capi.embedding import build_embedded
    return build_embedded(LIBRARY_NAME, api=_API, cdef=CDEF, c_source=_C_SOURCE, init_code=_INIT)

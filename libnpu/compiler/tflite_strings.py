"""The text of a TFLite flatbuffer's strings (tensor names, custom codes, shared names), read
whatever bytes the file holds.

The schema declares them UTF-8, but converters write what they were given: a float mel
spectrogram front end whose names held bytes that are not UTF-8 failed to compile with
"unexpected UnicodeDecodeError". Invalid bytes are kept readable as ``\\xNN`` escapes
(``errors="backslashreplace"``): two names that differ in their bytes stay different, and
the importer makes a name unique where an escape collides with a literal one.
"""
from __future__ import annotations

__all__ = ["flatbuffer_text"]


def flatbuffer_text(raw: bytes | None) -> str:
    """A flatbuffer string as text ("" for a missing one), invalid UTF-8 bytes as ``\\xNN``."""
    return (raw or b"").decode("utf-8", errors="backslashreplace")

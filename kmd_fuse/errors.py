"""The driver's error type: a request that fails with a precise errno."""


class KmdError(OSError):
    """A request failed with ``errno``; its reply carries -errno and the message is logged."""

    def __init__(self, err: int, message: str):
        super().__init__(err, message)

"""The kernel-mode driver: a FUSE daemon serving the device node, its contexts, memory, jobs and interrupts."""

"""The hardware interface of the emulated NPU (its "TRM").

The KMD programs the chip through what is defined here; the compiler in libnpu
emits task descriptors in these formats; firmware_sim implements them.  Nothing
here runs anything: these modules are layouts, numbers and naming conventions.

- ``regs``: the register file (MMIO) and its bits.
- ``ring``: command-ring entries and completion-queue entries.
- ``iommu``: the per-context page-table format and the IOVA space.
- ``tasks``: the command-buffer format and its task descriptors.
- ``memory``: where the chip finds its memories (the "physical bus": tmpfs files).
"""

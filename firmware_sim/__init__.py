"""The chip: register file, rings, DMA behind an IOMMU, compute cores, watchdog and fault
injection, in processes of their own."""

"""`python -m firmware_sim`: power the chip on (the KMD starts it so; see chip.main).

Before its own imports (which may build the C kernels) the chip holds its power-on if a
test asks (``firmware_sim.startup``)."""
import sys

from firmware_sim.startup import hold_power_on

hold_power_on(sys.argv[1:])

from firmware_sim.chip import main  # noqa: E402  (after the hold: it stands for these imports)

sys.exit(main())

"""`python -m firmware_sim`: power the chip on (the KMD starts it so; see chip.main).

Before its own imports (which may build the C kernels for tens of seconds) the chip asks
to die with its driver, then holds its power-on if a test asks (``firmware_sim.startup``)."""
import sys

from firmware_sim.startup import die_with_parent, hold_power_on, parent_argument

die_with_parent(parent_argument(sys.argv[1:]))
hold_power_on(sys.argv[1:])

from firmware_sim.chip import main  # noqa: E402  (after the request above: see firmware_sim.startup)

sys.exit(main())

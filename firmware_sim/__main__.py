"""`python -m firmware_sim`: power the chip on (the KMD starts it so; see chip.main)."""
import sys

from firmware_sim.chip import main

sys.exit(main())

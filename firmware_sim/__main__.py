import sys

from firmware_sim.chip import main

sys.exit(main())

"""The udev side of the driver, as one component: uevents and the rule engine.

    uevent.py    uevent records, the devroot's event log, `udevadm monitor`-style following
    outcome.py   what the rules decided for one event; the engine's errors
    rules.py     the rules parser and evaluator (RuleSet), `udevadm test`-style reports
    apply.py     carrying an outcome out: node owner/group/mode, symlinks, the udev db
    hotplug.py   a device's presence: mounts, "add"/"change"/"remove" events, rules applied
    udevadm.py   the shell face: `python -m kmd_fuse.udev.udevadm test|apply|udevd|monitor|emit`

Imports run one way: uevent <- outcome <- apply <- rules <- hotplug, udevadm.
"""

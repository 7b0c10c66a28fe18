"""`python -m kmd_fuse.udev.udevadm`: the shell face of the uevent log and the rules engine.

    monitor RUNROOT        print events as they are logged (udevadm monitor --property)
    emit RUNROOT ...       append one event (what a driver does; handy in scripts)
    test DEVPATH ...       what the rules would do to an event (udevadm test)
    apply DEVPATH ...      apply the rules to an event's node now
    udevd RUNROOT          apply the rules to every event logged in RUNROOT (a tiny udevd)
"""
from __future__ import annotations

import argparse
import os
import sys

from kmd_fuse.udev.apply import MISSING_GROUP_POLICIES
from kmd_fuse.udev.rules import UdevRulesError, load_rules
from kmd_fuse.udev.uevent import ACTIONS, Uevent, UeventError, UeventMonitor, emit


def _props(ap: argparse.ArgumentParser, items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _devnum(ap: argparse.ArgumentParser, text: str | None) -> tuple[int | None, int | None]:
    if not text:
        return None, None
    major, sep, minor = text.partition(":")
    if not (sep and major.isdigit() and minor.isdigit()):
        ap.error(f"--devnum must be MAJOR:MINOR, got {text!r}")
    return int(major), int(minor)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m kmd_fuse.udev.udevadm", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mon = sub.add_parser("monitor", help="print events as they are logged")
    mon.add_argument("runroot")
    mon.add_argument("--all", action="store_true", help="start at the beginning of the log, not now")
    mon.add_argument("--since-seqnum", type=int, help="print events with a larger SEQNUM")
    mon.add_argument("-s", "--subsystem-match", help="only events of this subsystem")
    mon.add_argument("--timeout", type=float, help="stop after this many seconds without an event")
    mon.add_argument("-n", "--count", type=int, help="stop after this many events")
    em = sub.add_parser("emit", help="append one event to a runroot's log")
    em.add_argument("runroot")
    em.add_argument("action", choices=ACTIONS)
    em.add_argument("devpath")
    em.add_argument("subsystem")
    for name in ("test", "apply"):
        p = sub.add_parser(name, help=("print what the rules do to an event" if name == "test"
                                       else "apply the rules to an event's node"))
        p.add_argument("devpath")
        p.add_argument("subsystem", nargs="?", default="npu")
        p.add_argument("--action", choices=ACTIONS, default="add")
    for p in (em, sub.choices["test"], sub.choices["apply"]):
        p.add_argument("--devname", help="node name relative to the devroot (default: last DEVPATH part)")
        p.add_argument("--devnum", help="MAJOR:MINOR")
        p.add_argument("-p", "--property", action="append", default=[], dest="props", metavar="KEY=VALUE",
                       help="an extra property (repeatable)")
    ud = sub.add_parser("udevd", help="apply the rules to every event logged in a runroot")
    ud.add_argument("runroot")
    ud.add_argument("--all", action="store_true", help="also the events already in the log")
    ud.add_argument("--timeout", type=float, help="stop after this many seconds without an event")
    for p in (sub.choices["test"], sub.choices["apply"], ud):
        p.add_argument("--rules", action="append", default=[], help="rules file or directory (repeatable)")
        p.add_argument("--devroot", default=os.environ.get("NPU_DEVROOT", "/dev"))
        p.add_argument("--sysroot", default=os.environ.get("NPU_SYSROOT"))
    for p in (sub.choices["apply"], ud):
        p.add_argument("--dbdir", help="udev database directory (default <devroot>/.udev/db)")
        p.add_argument("--missing-group", choices=MISSING_GROUP_POLICIES, default="error")
    return ap


def print_events(runroot, *, count: int | None = None, **monitor_options) -> int:
    """Print uevents as they arrive, like `udevadm monitor --kernel --property`."""
    print("monitor will print the received events for:\nKERNEL - the kernel uevent\n", flush=True)
    seen = 0
    with UeventMonitor(runroot, **monitor_options) as events:
        for event in events:
            sys.stdout.write(event.format())
            sys.stdout.flush()
            seen += 1
            if count is not None and seen >= count:
                break
    return 0


def _monitor(args: argparse.Namespace) -> int:
    return print_events(args.runroot, count=args.count, from_start=args.all, since_seqnum=args.since_seqnum,
                        subsystem=args.subsystem_match, timeout=args.timeout)


def _udevd(args: argparse.Namespace) -> int:
    rules = load_rules(*args.rules)
    with UeventMonitor(args.runroot, from_start=args.all, timeout=args.timeout) as events:
        for event in events:
            try:
                rules.apply(event, args.devroot, sysroot=args.sysroot, dbdir=args.dbdir,
                            missing_group=args.missing_group)
                print(f"{event.seqnum} {event.action} {event.kernel}: applied", flush=True)
            except UdevRulesError as exc:  # one bad event must not stop the others
                print(f"{event.seqnum} {event.action} {event.kernel}: {exc}", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one udevadm-like command; returns the exit status."""
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        if args.cmd == "monitor":
            return _monitor(args)
        if args.cmd == "udevd":
            return _udevd(args)
        extra = _props(ap, args.props)
        major, minor = _devnum(ap, args.devnum)
        if args.cmd == "emit":  # DEVNAME only when given: not every device has a node
            print(emit(args.runroot, args.action, args.devpath, args.subsystem, devname=args.devname,
                       major=major, minor=minor, extra=extra).seqnum)
            return 0
        devname = args.devname or args.devpath.rsplit("/", 1)[-1]
        event = Uevent(args.action, args.devpath, args.subsystem, devname, major, minor, None, extra)
        rules = load_rules(*args.rules)
        if args.cmd == "test":
            sys.stdout.write(rules.explain(event, devroot=args.devroot, sysroot=args.sysroot))
        else:
            rules.apply(event, args.devroot, sysroot=args.sysroot, dbdir=args.dbdir,
                        missing_group=args.missing_group)
        return 0
    except (UdevRulesError, UeventError) as exc:
        print(f"udevadm: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"udevadm: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())

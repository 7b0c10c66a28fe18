"""A parser and evaluator for the subset of udev rules syntax the NPU rules use.

Supported (see udev(7)): one rule per line, `#` comments, blank lines, lines joined by
a trailing backslash; comma-separated `KEY[{name}] OP "value"` pairs, values in double
quotes with \\" and \\\\ escapes.

    match keys   ACTION DEVPATH KERNEL SUBSYSTEM ENV{key} ATTR{file}   (== !=)
                 patterns are shell globs (* ? [..]) with `|` alternatives
    assign keys  MODE OWNER GROUP SYMLINK (= :=, SYMLINK also +=)  ENV{key} (= +=)
                 LABEL GOTO (=), GOTO only forward to a LABEL of the same file
    substitutions in assigned values: $kernel %k, $number %n, $devpath %p, $major %M,
                 $minor %m, $env{KEY} %E{KEY}, $attr{file} %s{file}, $devnode %N,
                 $name, $links, $root %r, $sys %S, $$, %%

Like systemd-udevd, all match keys of a rule are checked before any of its
assignments run; `:=` makes a value final. Anything else is a RulesSyntaxError
naming the file and line. Evaluation is pure; `RuleSet.apply` (through
kmd_fuse.udev.apply) changes the device node and its symlinks. Shell:
`python -m kmd_fuse.udev.udevadm test|apply|udevd ...`.
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kmd_fuse.udev.apply import apply_outcome, describe_outcome
from kmd_fuse.udev.outcome import Outcome, UdevRulesError
from kmd_fuse.udev.uevent import Uevent

MATCH_KEYS = {"ACTION", "DEVPATH", "KERNEL", "SUBSYSTEM", "ENV", "ATTR"}
ASSIGN_OPS = {
    "MODE": ("=", ":="), "OWNER": ("=", ":="), "GROUP": ("=", ":="),
    # As systemd-udevd 252 (Debian 12): no SYMLINK-=, and ENV has no final form.
    "SYMLINK": ("=", "+=", ":="), "ENV": ("=", "+="),
    "LABEL": ("=",), "GOTO": ("=",),
}
NAMED_KEYS = {"ENV", "ATTR"}  # keys that take {name}
# Real udev keys we deliberately do not implement: a precise error beats silent ignoring.
UNSUPPORTED_KEYS = {
    "RUN", "PROGRAM", "IMPORT", "NAME", "OPTIONS", "TAG", "TAGS", "KERNELS", "SUBSYSTEMS",
    "DRIVERS", "ATTRS", "DRIVER", "TEST", "CONST", "SYSCTL", "SECLABEL", "RESULT", "WAIT_FOR",
    "SYMLINK_MATCH",
}
_OPS = ("==", "!=", "+=", "-=", ":=", "=")
_KEY_RE = re.compile(r"([A-Za-z_]+)(?:\{([^}]*)\})?")
_SUBST_LONG = {"kernel": "k", "number": "n", "devpath": "p", "major": "M", "minor": "m",
               "env": "E", "attr": "s", "devnode": "N", "name": "name", "links": "links",
               "root": "r", "sys": "S"}
_SUBST_SHORT = {"k", "n", "p", "M", "m", "E", "s", "N", "r", "S"}
# udev takes the longest known name that prefixes the text after '$' ("$kernelX" is $kernel + "X").
_SUBST_NAMES = sorted(_SUBST_LONG, key=len, reverse=True)
_UNSUPPORTED_SUBST = {"id", "driver", "result", "parent", "tempnode", "sysfs"}
_WITH_ARG = {"E", "s"}


class RulesSyntaxError(UdevRulesError):
    """A rules file uses syntax outside the supported subset, or is malformed."""

    def __init__(self, file: str, line: int, message: str) -> None:
        super().__init__(f"{file}:{line}: {message}")
        self.file, self.line, self.message = file, line, message


class RuleEvalError(UdevRulesError):
    """A rule produced an invalid value for an event (e.g. MODE is not octal)."""


Part = str | tuple[str, str]  # literal text, or (substitution code, argument)


@dataclass(frozen=True)
class Token:
    """One KEY{name} OP "value" pair; `parts` is the value split into substitutions."""

    key: str
    name: str | None
    op: str
    value: str
    parts: tuple[Part, ...] = ()

    def __str__(self) -> str:
        key = f"{self.key}{{{self.name}}}" if self.name else self.key
        return f'{key}{self.op}"{self.value}"'


@dataclass(frozen=True)
class Rule:
    """One logical rule line; `goto_index` is the index of the rule GOTO jumps to."""

    file: str
    line: int
    matches: tuple[Token, ...]
    assigns: tuple[Token, ...]
    label: str | None = None
    goto: str | None = None
    goto_index: int | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


# ---------------------------------------------------------------- parsing

def _logical_lines(text: str, file: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = lineno
            stripped = raw.strip()
            if not stripped or stripped.startswith("#"):
                continue
        if raw.endswith("\\"):
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        out.append((start, " ".join(p.strip() for p in pending)))
        pending = []
    if pending:
        raise RulesSyntaxError(file, start, "line continuation at end of file")
    return out


def _parse_value_parts(value: str, file: str, line: int) -> tuple[Part, ...]:
    parts: list[Part] = []
    lit: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch not in "$%":
            lit.append(ch)
            i += 1
            continue
        if i + 1 < len(value) and value[i + 1] == ch:  # $$ or %%
            lit.append(ch)
            i += 2
            continue
        if ch == "$":
            rest = value[i + 1:]
            word = next((n for n in _SUBST_NAMES if rest.startswith(n)), None)
            unsupported = next((n for n in _UNSUPPORTED_SUBST if rest.startswith(n)), None)
            if unsupported and len(unsupported) > len(word or ""):  # e.g. $sysfs, not $sys + "fs"
                raise RulesSyntaxError(file, line, f"substitution ${unsupported} is not supported")
            if word is None:
                m = re.match(r"[a-z]*", rest)
                bad = m.group(0) if m and m.group(0) else rest[:1]
                if bad in _UNSUPPORTED_SUBST:
                    raise RulesSyntaxError(file, line, f"substitution ${bad} is not supported")
                raise RulesSyntaxError(file, line, f"unknown substitution ${bad}")
            code, i = _SUBST_LONG[word], i + 1 + len(word)
        else:
            code = value[i + 1:i + 2]
            if code not in _SUBST_SHORT:
                raise RulesSyntaxError(file, line, f"unknown or unsupported substitution %{code}")
            i += 2
        arg = ""
        if code in _WITH_ARG:
            m = re.match(r"\{([^}]+)\}", value[i:])
            if not m:
                raise RulesSyntaxError(file, line, f"substitution {ch}{code} needs {{name}}")
            arg, i = m.group(1), i + m.end()
            if code == "s":
                _check_attr_name(arg, file, line)
        if lit:
            parts.append("".join(lit))
            lit = []
        parts.append((code, arg))
    if lit:
        parts.append("".join(lit))
    return tuple(parts)


def _check_attr_name(name: str, file: str, line: int) -> None:
    if name.startswith("/") or ".." in name.split("/") or not re.fullmatch(r"[A-Za-z0-9_./-]+", name):
        raise RulesSyntaxError(file, line, f"bad attribute name {name!r}")


def _scan_tokens(text: str, file: str, line: int) -> list[Token]:
    tokens: list[Token] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in " \t":
            pos += 1
        m = _KEY_RE.match(text, pos)
        if not m:
            raise RulesSyntaxError(file, line, f"expected a key at column {pos + 1}: {text[pos:pos + 20]!r}")
        key, name = m.group(1), m.group(2)
        pos = m.end()
        while pos < n and text[pos] in " \t":
            pos += 1
        op = next((o for o in _OPS if text.startswith(o, pos)), None)
        if op is None:
            raise RulesSyntaxError(file, line, f"expected an operator after {key} at column {pos + 1}")
        pos += len(op)
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n or text[pos] != '"':
            raise RulesSyntaxError(file, line, f"value of {key} must be in double quotes")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= n:
                raise RulesSyntaxError(file, line, f"unterminated value of {key}")
            ch = text[pos]
            if ch == "\\" and pos + 1 < n and text[pos + 1] in '"\\':
                chars.append(text[pos + 1])
                pos += 2
            elif ch == '"':
                pos += 1
                break
            else:
                chars.append(ch)
                pos += 1
        tokens.append(_make_token(key, name, op, "".join(chars), file, line))
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n:
            return tokens
        if text[pos] != ",":
            raise RulesSyntaxError(file, line, f"expected ',' between keys at column {pos + 1}")
        pos += 1
        if not text[pos:].strip():
            raise RulesSyntaxError(file, line, "trailing ',' at end of rule")


def _make_token(key: str, name: str | None, op: str, value: str, file: str, line: int) -> Token:
    if key in UNSUPPORTED_KEYS:
        raise RulesSyntaxError(file, line, f"key {key} is valid udev but not supported here")
    if key not in MATCH_KEYS and key not in ASSIGN_OPS:
        raise RulesSyntaxError(file, line, f"unknown key {key}")
    if key in NAMED_KEYS:
        if not name:
            raise RulesSyntaxError(file, line, f"{key} needs a {{name}}")
        if key == "ATTR":
            _check_attr_name(name, file, line)
        elif not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise RulesSyntaxError(file, line, f"bad ENV key name {name!r}")
    elif name is not None:
        raise RulesSyntaxError(file, line, f"{key} takes no {{name}}")
    if op in ("==", "!="):
        if key not in MATCH_KEYS:
            raise RulesSyntaxError(file, line, f"{key} cannot be matched (only assigned)")
        return Token(key, name, op, value)
    if key not in ASSIGN_OPS:
        raise RulesSyntaxError(file, line, f"{key} can only be matched (== or !=), not assigned with {op}")
    if op not in ASSIGN_OPS[key]:
        raise RulesSyntaxError(file, line, f"operator {op} is not valid for {key} "
                                           f"(use {' or '.join(ASSIGN_OPS[key])})")
    if key in ("LABEL", "GOTO"):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            raise RulesSyntaxError(file, line, f"bad {key} name {value!r}")
        return Token(key, name, op, value)
    parts = _parse_value_parts(value, file, line)
    if key == "MODE" and all(isinstance(p, str) for p in parts) and not re.fullmatch(r"[0-7]{1,4}", value):
        raise RulesSyntaxError(file, line, f"MODE must be octal, got {value!r}")
    return Token(key, name, op, value, parts)


def parse_rules(text: str, file: str = "<rules>") -> list[Rule]:
    """Parse the text of one rules file; raises RulesSyntaxError naming file and line."""
    rules: list[Rule] = []
    labels: dict[str, int] = {}
    for line, logical in _logical_lines(text, file):
        label = goto = None
        matches: list[Token] = []
        assigns: list[Token] = []
        for tok in _scan_tokens(logical, file, line):
            if tok.key == "LABEL":
                if label is not None:
                    raise RulesSyntaxError(file, line, "more than one LABEL in a rule")
                if tok.value in labels:
                    raise RulesSyntaxError(file, line, f"LABEL {tok.value!r} already defined "
                                                       f"at line {rules[labels[tok.value]].line}")
                label = tok.value
            elif tok.key == "GOTO":
                if goto is not None:
                    raise RulesSyntaxError(file, line, "more than one GOTO in a rule")
                goto = tok.value
            elif tok.op in ("==", "!="):
                matches.append(tok)
            else:
                assigns.append(tok)
        if label is not None:
            labels[label] = len(rules)
        rules.append(Rule(file, line, tuple(matches), tuple(assigns), label, goto))
    # GOTO jumps forward only, to a label of the same file (as udev does).
    resolved: list[Rule] = []
    for idx, rule in enumerate(rules):
        if rule.goto is not None:
            target = labels.get(rule.goto)
            if target is None:
                raise RulesSyntaxError(file, rule.line, f"GOTO {rule.goto!r} has no matching LABEL")
            if target <= idx:
                raise RulesSyntaxError(file, rule.line, f"GOTO {rule.goto!r} jumps backwards "
                                                        f"(LABEL at line {rules[target].line})")
            rule = Rule(rule.file, rule.line, rule.matches, rule.assigns, rule.label, rule.goto, target)
        resolved.append(rule)
    return resolved


# ---------------------------------------------------------------- evaluation

def glob_match(pattern: str, value: str) -> bool:
    """udev pattern match: shell glob with `|` separating alternatives."""
    return any(fnmatch.fnmatchcase(value, alt) for alt in pattern.split("|"))


def _attr_dir(event: Uevent, sysroot: str | None) -> str | None:
    if sysroot is None:
        return None
    direct = os.path.join(sysroot, event.devpath.lstrip("/"))
    if os.path.isdir(direct):
        return direct
    return os.path.join(sysroot, "class", event.subsystem, event.kernel)


def read_attr(event: Uevent, sysroot: str | None, name: str) -> str | None:
    """An attribute value with trailing whitespace stripped, or None if absent."""
    base = _attr_dir(event, sysroot)
    if base is None:
        return None
    try:
        with open(os.path.join(base, name), encoding="utf-8", errors="replace") as f:
            return f.read().rstrip()
    except OSError:  # absent or unreadable: udev treats both as no value
        return None


class _Eval:
    def __init__(self, event: Uevent, devroot: str, sysroot: str | None) -> None:
        self.event, self.devroot, self.sysroot = event, devroot, sysroot
        self.props = event.properties()
        self.values: dict[str, str] = {}
        self.final: set[str] = set()
        self.links: list[str] = []
        self.out = Outcome(event, devroot, 0, "root", "root", self.links, self.props)

    def subst(self, tok: Token, for_symlink: bool = False) -> str:
        out: list[str] = []
        ev = self.event
        for part in tok.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            code, arg = part
            if code == "k":
                out.append(ev.kernel)
            elif code == "n":
                m = re.search(r"(\d+)$", ev.kernel)
                out.append(m.group(1) if m else "")
            elif code == "p":
                out.append(ev.devpath)
            elif code == "M":
                out.append("" if ev.major is None else str(ev.major))
            elif code == "m":
                out.append("" if ev.minor is None else str(ev.minor))
            elif code == "E":
                out.append(self.props.get(arg, ""))
            elif code == "s":
                val = read_attr(ev, self.sysroot, arg) or ""
                # As udev does for attribute values: no whitespace or '/' inside a link name.
                out.append(re.sub(r"[\s/]+", "_", val) if for_symlink else val)
            elif code == "N":
                out.append(os.path.join(self.devroot, ev.devname) if ev.devname else "")
            elif code == "name":
                out.append(ev.devname or "")
            elif code == "links":
                out.append(" ".join(self.links))
            elif code == "r":
                out.append(self.devroot)
            elif code == "S":
                out.append(self.sysroot or "")
        return "".join(out)

    def matches(self, tok: Token) -> bool:
        ev = self.event
        if tok.key == "ACTION":
            value: str | None = ev.action
        elif tok.key == "DEVPATH":
            value = ev.devpath
        elif tok.key == "KERNEL":
            value = ev.kernel
        elif tok.key == "SUBSYSTEM":
            value = ev.subsystem
        elif tok.key == "ENV":
            value = self.props.get(tok.name or "")
        else:  # ATTR: a missing attribute never matches, whatever the operator
            value = read_attr(ev, self.sysroot, tok.name or "")
            if value is None:
                return False
        hit = glob_match(tok.value, value or "")
        return hit if tok.op == "==" else not hit

    def assign(self, tok: Token, rule: Rule) -> None:
        kernel = self.event.kernel
        key = f"ENV{{{tok.name}}}" if tok.key == "ENV" else tok.key
        if key in self.final:
            self.out.trace.append(f"{kernel}: {rule.where} {key} ignored, final value set at "
                                  f"{self.out.origin[key]}")
            return
        value = self.subst(tok, for_symlink=tok.key == "SYMLINK")
        if tok.key == "MODE":
            if not re.fullmatch(r"[0-7]{1,4}", value):
                raise RuleEvalError(f"{rule.where}: MODE must be octal, got {value!r}")
            self.values["MODE"] = value
        elif tok.key in ("OWNER", "GROUP"):
            if not value or not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*\$?", value):
                raise RuleEvalError(f"{rule.where}: bad {tok.key} {value!r}")
            self.values[tok.key] = value
        elif tok.key == "SYMLINK":
            links = value.split()
            for link in links:
                parts = link.split("/")
                if link.startswith("/") or any(p in ("", ".", "..") for p in parts):
                    raise RuleEvalError(f"{rule.where}: SYMLINK {link!r} must be a plain relative path")
            if tok.op in ("=", ":="):
                self.links.clear()
            self.links.extend(lnk for lnk in links if lnk not in self.links)
        else:  # ENV
            name = tok.name or ""
            if tok.op == "+=" and self.props.get(name):
                value = f"{self.props[name]} {value}" if value else self.props[name]
            if value:
                self.props[name] = value
            else:
                self.props.pop(name, None)
        if tok.op == ":=":
            self.final.add(key)
        self.out.origin[key] = rule.where
        shown = {"SYMLINK": "LINK"}.get(tok.key, key)
        self.out.trace.append(f"{kernel}: {rule.where} {shown}{'' if tok.op == '=' else ' ' + tok.op} '{value}'")


class RuleSet:
    """Rules loaded from one or more files, in order."""

    def __init__(self, rules: list[Rule], files: list[str]) -> None:
        self.rules = tuple(rules)
        self.files = tuple(files)

    @classmethod
    def from_text(cls, text: str, file: str = "<rules>") -> RuleSet:
        """Parse rules text (for tests and tools)."""
        return cls(parse_rules(text, file), [file])

    @classmethod
    def load(cls, *paths: str | os.PathLike[str]) -> RuleSet:
        """Load rules files; a directory contributes its *.rules files sorted by name."""
        files: list[str] = []
        for p in map(Path, paths):
            files += [str(f) for f in sorted(p.glob("*.rules"))] if p.is_dir() else [str(p)]
        rules: list[Rule] = []
        for f in files:
            try:
                text = Path(f).read_text(encoding="utf-8")
            except OSError as exc:
                raise UdevRulesError(f"{f}: cannot read rules file: {exc.strerror}") from None
            except UnicodeDecodeError as exc:
                raise UdevRulesError(f"{f}: not UTF-8 text ({exc.reason})") from None
            offset = len(rules)
            for r in parse_rules(text, f):
                gi = None if r.goto_index is None else r.goto_index + offset
                rules.append(Rule(r.file, r.line, r.matches, r.assigns, r.label, r.goto, gi))
        return cls(rules, files)

    def evaluate(self, event: Uevent, *, devroot: str = "/dev", sysroot: str | None = None) -> Outcome:
        """Run the rules on an event without touching anything."""
        ev = _Eval(event, str(devroot), None if sysroot is None else str(sysroot))
        idx = 0
        while idx < len(self.rules):
            rule = self.rules[idx]
            idx += 1
            if not all(ev.matches(tok) for tok in rule.matches):
                continue
            if rule.matches or rule.assigns or rule.goto:
                ev.out.matched.append(rule)
                conds = ", ".join(map(str, rule.matches)) or "(no match keys)"
                ev.out.trace.append(f"{event.kernel}: {rule.where} matched {conds}")
            for tok in rule.assigns:
                ev.assign(tok, rule)
            if rule.goto_index is not None:
                ev.out.trace.append(f"{event.kernel}: {rule.where} GOTO '{rule.goto}'")
                idx = rule.goto_index
        out = ev.out
        out.owner = ev.values.get("OWNER", "root")
        out.group = ev.values.get("GROUP", "root")
        # udev's default: 0660 when a group was given, else 0600.
        out.mode = int(ev.values["MODE"], 8) if "MODE" in ev.values else (0o660 if "GROUP" in ev.values else 0o600)
        return out

    def explain(self, event: Uevent, *, devroot: str = "/dev", sysroot: str | None = None) -> str:
        """What `udevadm test` would print for this event: rules applied and the result."""
        out = self.evaluate(event, devroot=devroot, sysroot=sysroot)
        lines = [f"Reading rules file: {f}" for f in self.files]
        lines.append(f"{event.kernel}: {len(out.matched)} of {len(self.rules)} rules matched")
        lines += out.trace
        lines += describe_outcome(out)
        return "\n".join(lines) + "\n"

    def apply(self, event: Uevent, devroot: str | os.PathLike[str], *, sysroot: str | None = None,
              dbdir: str | os.PathLike[str] | None = None, missing_group: str = "error") -> Outcome:
        """Evaluate and carry out: chown/chmod the node, create/remove symlinks.

        missing_group: "error" (raise MissingGroupError), "create" (groupadd --system),
        or "ignore" (leave the node's group alone, as udevd does after a warning).
        """
        out = self.evaluate(event, devroot=str(devroot), sysroot=sysroot)
        apply_outcome(out, dbdir=dbdir, missing_group=missing_group)
        return out


def default_rules_path() -> Path:
    """$NPU_UDEV_RULES, else the repository's udev/70-npu.rules, else /etc/udev/rules.d/."""
    env = os.environ.get("NPU_UDEV_RULES")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2] / "udev" / "70-npu.rules"
    return repo if repo.exists() else Path("/etc/udev/rules.d/70-npu.rules")


def load_rules(*paths: str | os.PathLike[str]) -> RuleSet:
    """Load the given rules files/directories, or the default NPU rules file."""
    return RuleSet.load(*(paths or (default_rules_path(),)))


def apply(event: Uevent, devroot: str | os.PathLike[str], **kwargs: object) -> Outcome:
    """Apply the default NPU rules to a device node under devroot (see RuleSet.apply)."""
    return load_rules().apply(event, devroot, **kwargs)  # type: ignore[arg-type]


def explain(event: Uevent, **kwargs: object) -> str:
    """`udevadm test`-style report of the default NPU rules for an event."""
    return load_rules().explain(event, **kwargs)  # type: ignore[arg-type]
